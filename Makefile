# shoal: make builds the libraries, tools and tests; make test runs the tests.
CC       ?= cc
PREFIX   ?= /usr/local
BUILD    ?= build
SANITIZE ?=
# NVIDIA's CUDA toolkit: the folder above the nvcc on the PATH, else
# /usr/local/cuda. Its nvcc and headers build the CUDA module
# (src/cuda/cuda.mk); its nccl.h and libnccl.so.2 are what the NCCL door's
# tests are built against (never linked into shoal).
NVCC_ON_PATH := $(shell command -v nvcc 2>/dev/null)
CUDA_HOME ?= $(if $(NVCC_ON_PATH),$(patsubst %/bin/nvcc,%,$(realpath $(NVCC_ON_PATH))),/usr/local/cuda)

PKGS     := libcrypto pmix hwloc
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS))
PKG_LIBS   := $(shell pkg-config --libs $(PKGS))

VERSION  := 0.1.0
SONAME   := libshoal.so.0

WARN     := -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wno-unused-parameter
CFLAGS   ?= -O2 -g
ifeq ($(SANITIZE),address)
CFLAGS   += -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
LDFLAGS  += -fsanitize=address,undefined
endif
ifeq ($(SANITIZE),thread)
CFLAGS   += -fsanitize=thread
LDFLAGS  += -fsanitize=thread
endif
# Sanitizer runtimes resolve in the executable, not in the shared library.
NO_UNDEF := $(if $(SANITIZE),,-Wl,--no-undefined)
# rdma-core's headers (libibverbs-dev) build the ib transport's verbs
# side; libibverbs itself is loaded at run time (transport/ib_verbs.c), so
# the library runs where rdma-core is absent. Without the headers, ib
# reports that it was built without them.
IBVERBS_H := $(wildcard /usr/include/infiniband/verbs.h)
ALL_CFLAGS := -std=c11 -D_GNU_SOURCE -fPIC $(WARN) $(CFLAGS) -Iinclude -Isrc $(PKG_CFLAGS) \
              $(if $(IBVERBS_H),-DSHOAL_HAVE_IBVERBS=1)
LIBS     := $(PKG_LIBS) -lopenblas -lpthread -lm -lrt

LIB_SRC  := $(sort $(wildcard src/base/*.c src/core/*.c src/api/*.c src/algos/*.c src/transport/*.c src/topo/*.c \
                              src/compress/*.c))
LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/%.o)
# The simulator runs the product's schedules with dry kernels over a
# simulated transport: a library of its own for tools/shoal_sim and the
# tests, never linked into libshoal or libnccl.
SIM_SRC  := $(sort $(wildcard src/sim/*.c))
SIM_OBJ  := $(SIM_SRC:%.c=$(BUILD)/%.o)
SIM_LIB  := $(BUILD)/libshoal_sim.a
# The NCCL door: libnccl.so.2 = the door's files + shoal, exporting only nccl*/pnccl*.
NCCL_SRC := $(sort $(wildcard src/nccl/*.c))
NCCL_OBJ := $(NCCL_SRC:%.c=$(BUILD)/%.o)
NCCL_LIB := $(BUILD)/libnccl.so.2
# The MPI door, built twice: $(BUILD)/libshoal_mpi.so against Open MPI
# (pkg-config ompi-c) and $(BUILD)/mpich/libshoal_mpi.so against MPICH
# (pkg-config mpich); each is the door's files + shoal, exporting only the
# MPI entry points (src/mpi/mpi.map). tests/mpi/ holds ordinary MPI
# programs, built by each MPI's compiler wrappers: NAME for Open MPI,
# NAME.mpich for MPICH.
OMPI_CFLAGS  := $(shell pkg-config --cflags ompi-c 2>/dev/null)
MPICH_CFLAGS := $(shell pkg-config --cflags mpich 2>/dev/null)
MPI_SRC  := $(sort $(wildcard src/mpi/*.c))
MPI_OBJ  := $(MPI_SRC:%.c=$(BUILD)/%.o)
MPICH_OBJ := $(MPI_SRC:%.c=$(BUILD)/mpich/%.o)
MPI_PROGS := $(patsubst tests/mpi/%.c,$(BUILD)/tests/mpi/%,$(wildcard tests/mpi/*.c)) \
             $(patsubst tests/mpi/%.f90,$(BUILD)/tests/mpi/%,$(wildcard tests/mpi/*.f90))
MPI_LIB  := $(if $(OMPI_CFLAGS),$(BUILD)/libshoal_mpi.so $(MPI_PROGS)) \
            $(if $(MPICH_CFLAGS),$(BUILD)/mpich/libshoal_mpi.so $(MPI_PROGS:%=%.mpich))
# The default build puts the tools where the README runs them; another
# BUILD directory (a sanitizer or clang variant) keeps its own copies.
TOOLS_DIR := $(if $(filter build,$(BUILD)),tools,$(BUILD)/bin)
TOOLS    := $(TOOLS_DIR)/allreduce_bench $(TOOLS_DIR)/shoal_info $(TOOLS_DIR)/shoal_sim \
            $(TOOLS_DIR)/codec_bench $(TOOLS_DIR)/init_bench
TEST_SRC := $(sort $(wildcard tests/test_*.c))
TESTS    := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
TEST_LIB := $(BUILD)/tests/harness.o
TEST_SCRIPTS := $(sort $(wildcard tests/test_*.sh))
# The scripts that time or compare (the benchmark's tables, the MPI door's
# rule and its comparison columns) run in the plain build only: under
# SHOAL_TEST_QUICK=1 (CI's clang and sanitizer variants) the test binaries
# and the doors' scripts check the same code. The long runs (fuzzing,
# training, the RDMA guest) skip themselves there; the soak runs its
# default 10 s. The Python package's script loads libshoal into python,
# which a sanitizer build's library (its runtime not preloaded) cannot.
PLAIN_ONLY := tests/test_bench.sh tests/test_compare.sh tests/test_mpi_rule.sh tests/test_py_package.sh \
              tests/test_py_torch.sh tests/test_py_ddp.sh
# TSan reports races between the threads of a process; a rank's blocking
# collectives run on its one thread, so the TSan build runs the tests whose
# processes run more: the progress thread (non-blocking calls, groups,
# faults met there), their own threads, the CUDA stand-in's stream workers
# and the NCCL door's job thread (test_nccl_compress.sh; the conformance
# run of every NCCL function, test_nccl_vendor.sh, takes minutes under TSan
# and is left to the other builds). The MPI door's scripts run MPI itself,
# which TSan's runtime cannot carry: MPICH 4.0 crashes with libtsan
# preloaded and no door, and TSan reports Open MPI's own lock order
# (btl/tcp); the door's threads are checked by the ASan and plain runs of
# test_mpi_threads.sh.
TSAN_RUN := $(addprefix $(BUILD)/tests/,test_bad_input test_bootstrap test_bounds test_comm \
              test_compressor test_fault test_flight test_group_nb test_handles test_ib_coll \
              test_grow test_rma test_shrink test_soak) \
            $(filter $(BUILD)/tests/test_cuda_%,$(TESTS)) tests/test_nccl_compress.sh
TEST_RUN := $(if $(filter thread,$(SANITIZE)),$(TSAN_RUN),\
              $(filter-out $(if $(filter 1,$(SHOAL_TEST_QUICK)),$(PLAIN_ONLY)),\
                $(TESTS) $(TEST_SCRIPTS)))

.PHONY: all test test-rdma install clean check-layers
all: $(BUILD)/libshoal.a $(BUILD)/libshoal.so $(NCCL_LIB) $(MPI_LIB) $(TOOLS) $(TESTS)

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -MMD -MP -c $< -o $@

# No code references a component's settings table (config.c finds them in a
# linker section), so a static link would leave them out: the archive holds
# them and config.o as one relocatable object, which comes with
# shoal_config_get.
CONFIG_OBJ := $(filter $(BUILD)/src/base/config.o %_config.o,$(LIB_OBJ))
$(BUILD)/config_tables.o: $(CONFIG_OBJ)
	$(CC) -r -nostdlib -o $@ $^

$(BUILD)/libshoal.a: $(filter-out $(CONFIG_OBJ),$(LIB_OBJ)) $(BUILD)/config_tables.o
	rm -f $@ && ar rcs $@ $^

$(BUILD)/libshoal.so.$(VERSION): $(LIB_OBJ) src/shoal.map
	$(CC) -shared -Wl,-soname,$(SONAME) -Wl,--version-script=src/shoal.map \
	    $(NO_UNDEF) $(LDFLAGS) -o $@ $(LIB_OBJ) $(LIBS)

$(BUILD)/libshoal.so: $(BUILD)/libshoal.so.$(VERSION)
	ln -sf libshoal.so.$(VERSION) $(BUILD)/$(SONAME)
	ln -sf libshoal.so.$(VERSION) $@

$(NCCL_LIB): $(NCCL_OBJ) $(LIB_OBJ) src/nccl/nccl.map
	$(CC) -shared -Wl,-soname,libnccl.so.2 -Wl,--version-script=src/nccl/nccl.map \
	    $(NO_UNDEF) $(LDFLAGS) -o $@ $(NCCL_OBJ) $(LIB_OBJ) $(LIBS)
	ln -sf libnccl.so.2 $(BUILD)/libnccl.so

$(MPI_OBJ): ALL_CFLAGS += $(OMPI_CFLAGS)

$(BUILD)/mpich/src/mpi/%.o: src/mpi/%.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(MPICH_CFLAGS) -MMD -MP -c $< -o $@

# The door is preloaded into an MPI program, and needs the library of the
# MPI it was built for, so that it loads before a program that opens MPI
# later (mpi4py's Python). The doors' settings (SHOAL_COMPRESS) come with it.
$(BUILD)/libshoal_mpi.so: $(MPI_OBJ) $(LIB_OBJ) $(BUILD)/src/nccl/nccl_config.o src/mpi/mpi.map
	$(CC) -shared -Wl,-soname,libshoal_mpi.so -Wl,--version-script=src/mpi/mpi.map \
	    $(NO_UNDEF) $(LDFLAGS) -o $@ $(MPI_OBJ) $(LIB_OBJ) $(BUILD)/src/nccl/nccl_config.o \
	    $(LIBS) $(shell pkg-config --libs ompi-c)

$(BUILD)/mpich/libshoal_mpi.so: $(MPICH_OBJ) $(LIB_OBJ) $(BUILD)/src/nccl/nccl_config.o \
                                src/mpi/mpi.map
	$(CC) -shared -Wl,-soname,libshoal_mpi.so -Wl,--version-script=src/mpi/mpi.map \
	    $(NO_UNDEF) $(LDFLAGS) -o $@ $(MPICH_OBJ) $(LIB_OBJ) $(BUILD)/src/nccl/nccl_config.o \
	    $(LIBS) -lmpich

# The door's test programs (tests/test_mpi_*.sh): unchanged MPI programs.
MPI_PROG_FLAGS := -O2 -Wall -Wextra -Werror
$(BUILD)/tests/mpi/%: tests/mpi/%.c
	@mkdir -p $(dir $@)
	mpicc.openmpi $(MPI_PROG_FLAGS) -o $@ $< -lpthread
$(BUILD)/tests/mpi/%.mpich: tests/mpi/%.c
	@mkdir -p $(dir $@)
	mpicc.mpich $(MPI_PROG_FLAGS) -o $@ $< -lpthread
# bcast_check defines PMPI_Bcast for the door to find: exported.
$(BUILD)/tests/mpi/bcast_check $(BUILD)/tests/mpi/bcast_check.mpich: MPI_PROG_FLAGS += -rdynamic
$(BUILD)/tests/mpi/%: tests/mpi/%.f90
	@mkdir -p $(dir $@)
	mpif90.openmpi -O2 -Wall -Werror -J $(dir $@) -o $@ $<
# MPICH's `use mpi` declares no interface for the routines with choice
# buffers, so gfortran warns at each call that passes another type than
# an earlier one (mpif90.mpich adds -fallow-argument-mismatch); without
# -Werror here, the Open MPI rule above checks the same source with it.
$(BUILD)/tests/mpi/%.mpich: tests/mpi/%.f90
	@mkdir -p $(dir $@)mpich
	mpif90.mpich -O2 -Wall -J $(dir $@)mpich -o $@ $<

# The door's benchmark program, tools/mpi_allreduce.c, by each MPI's
# wrapper as above (tools/compare_mpi builds its own copy; these keep it
# compiling under -Werror and can be started by hand, with or without the
# door preloaded).
MPI_BENCH := $(if $(OMPI_CFLAGS),$(BUILD)/tools/mpi/mpi_allreduce) \
             $(if $(MPICH_CFLAGS),$(BUILD)/tools/mpi/mpi_allreduce.mpich)
all: $(MPI_BENCH)
$(BUILD)/tools/mpi/mpi_allreduce: tools/mpi_allreduce.c tools/bench_text.h
	@mkdir -p $(dir $@)
	mpicc.openmpi -std=c11 -D_GNU_SOURCE $(MPI_PROG_FLAGS) -pthread -o $@ $<
$(BUILD)/tools/mpi/mpi_allreduce.mpich: tools/mpi_allreduce.c tools/bench_text.h
	@mkdir -p $(dir $@)
	mpicc.mpich -std=c11 -D_GNU_SOURCE $(MPI_PROG_FLAGS) -pthread -o $@ $<

$(SIM_LIB): $(SIM_OBJ)
	rm -f $@ && ar rcs $@ $^

$(TOOLS_DIR)/%: $(BUILD)/tools/%.o $(BUILD)/libshoal.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(filter %_sim.a,$^) $(BUILD)/libshoal.a $(LIBS)

$(TOOLS_DIR)/shoal_sim: $(SIM_LIB)

# The NCCL door's settings ([compress]) and its NCCL_* alias translators:
# shoal_info -c prints them and test_config tests them.
DOOR_CONFIG_OBJ := $(BUILD)/src/nccl/nccl_config.o
$(TOOLS_DIR)/shoal_info: $(DOOR_CONFIG_OBJ)
$(BUILD)/tests/test_config: $(BUILD)/tests/test_config.o $(TEST_LIB) $(DOOR_CONFIG_OBJ) \
                            $(BUILD)/libshoal.a
	$(CC) $(LDFLAGS) -o $@ $< $(DOOR_CONFIG_OBJ) $(TEST_LIB) $(BUILD)/libshoal.a $(LIBS) -lcmocka

# allreduce_bench's parts, each in a file of its own: the command line, the
# collectives with their inputs and expected results, the buffers of each
# --mem, the header and JSON settings, and the compressed rows.
$(TOOLS_DIR)/allreduce_bench: $(BUILD)/tools/bench_args.o $(BUILD)/tools/bench_coll.o \
                              $(BUILD)/tools/bench_mem.o $(BUILD)/tools/bench_report.o \
                              $(BUILD)/tools/bench_compress.o

$(BUILD)/tests/%: $(BUILD)/tests/%.o $(TEST_LIB) $(BUILD)/libshoal.a
	$(CC) $(LDFLAGS) -o $@ $< $(TEST_LIB) $(filter %_sim.a,$^) $(BUILD)/libshoal.a $(LIBS) -lcmocka

$(BUILD)/tests/test_sim: $(SIM_LIB)

# Benchmarks that need the internal headers, as tests do; built, never run
# by make test.
BENCHES  := $(BUILD)/tests/bench_bootstrap $(BUILD)/tests/bench_rma
all: $(BENCHES)
$(BUILD)/tests/bench_%: $(BUILD)/tests/bench_%.o $(TEST_LIB) $(BUILD)/libshoal.a
	$(CC) $(LDFLAGS) -o $@ $< $(TEST_LIB) $(BUILD)/libshoal.a $(LIBS) -lcmocka

# The training test reads the digits data set (python3-sklearn) through zlib.
$(BUILD)/tests/test_train_digits: LIBS += -lz

# test_nccl_abi checks include/nccl.h, as it declares NCCL 2.28.9's API,
# against a header generated from the vendor's (2.28.9); where there is no
# vendor nccl.h it skips itself. test_nccl_230 checks its 2.30 API against
# declarations of 2.30's (tests/nccl230/nccl_230.h).
NCCL_VENDOR_H := $(wildcard $(CUDA_HOME)/include/nccl.h)
$(BUILD)/tests/test_nccl_abi.o: ALL_CFLAGS += -I$(BUILD)/tests -DSHOAL_NCCL_API_VERSION=22809
$(BUILD)/tests/test_nccl_230: $(NCCL_LIB)
$(BUILD)/tests/test_nccl_230: LIBS += -L$(BUILD) -l:libnccl.so.2 -Wl,-rpath,$(CURDIR)/$(BUILD)
ifneq ($(NCCL_VENDOR_H),)
$(BUILD)/tests/test_nccl_abi.o: $(BUILD)/tests/nccl_abi_gen.h
$(BUILD)/tests/nccl_abi_gen.h: tests/nccl_abi_gen.sh $(NCCL_VENDOR_H)
	@mkdir -p $(dir $@)
	CC="$(CC)" bash tests/nccl_abi_gen.sh $(NCCL_VENDOR_H) $@
endif

# The NCCL door's conformance program: built against the vendor's nccl.h and
# libnccl.so.2 (never shoal's include/), run by tests/test_nccl_vendor.sh with
# shoal's libnccl.so.2 preloaded; built only where the vendor's NCCL is. PIE,
# since it checks the addresses that the dynamic linker bound; bound now, so
# that a symbol the drop-in lacks stops it at load.
VENDOR_SRC  := $(sort $(wildcard tests/nccl/*.c))
VENDOR_TEST := $(if $(wildcard $(CUDA_HOME)/include/nccl.h),$(BUILD)/tests/nccl_vendor_test)
all: $(VENDOR_TEST)
$(BUILD)/tests/nccl_vendor_test: $(VENDOR_SRC) tests/nccl/vendor.h
	@mkdir -p $(dir $@)
	$(CC) -std=c11 -D_GNU_SOURCE -fPIE $(WARN) $(CFLAGS) -I$(CUDA_HOME)/include \
	    -DVENDOR_LIB='"$(CUDA_HOME)/lib64/libnccl.so.2"' $(VENDOR_SRC) -pie -Wl,-z,now $(LDFLAGS) \
	    -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lnccl -lcmocka -ldl -lm -lpthread -o $@

include tests/fuzz/fuzz.mk
include src/cuda/cuda.mk
include python/shoal/torch/torch.mk

# Every test binary prints TAP; prove runs them and prints the summary,
# with each one's time.
# The fuzz targets are built unless SHOAL_FUZZ_SECONDS=0 turns them off.
test: all $(if $(filter 0,$(SHOAL_FUZZ_SECONDS)),,fuzz)
	CMOCKA_MESSAGE_OUTPUT=TAP LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp \
	TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
	BENCH=$(TOOLS_DIR)/allreduce_bench INFO=$(TOOLS_DIR)/shoal_info \
	BUILD=$(BUILD) CUDA_HOME=$(CUDA_HOME) FUZZ_DIR=$(FUZZ_DIR) \
	$(if $(CUDA_LIB),SHOAL_CUDA_MODULE=$(CURDIR)/$(CUDA_LIB)) \
	$(if $(STANDIN_LIB),SHOAL_CUDA_DRIVER=$(CURDIR)/$(STANDIN_LIB)) \
	$(if $(CUBLAS_STANDIN_LIB),SHOAL_CUBLAS=$(CURDIR)/$(CUBLAS_STANDIN_LIB)) \
	prove -f --timer $(TEST_RUN)

# The RDMA rig alone: a qemu guest with Soft-RoCE (tests/rdma/guest.sh;
# its kernel and initramfs are cached in /var/tmp/shoal-guest). make test
# runs it too, through tests/test_rdma_guest.sh.
test-rdma: all $(BUILD)/tests/test_ib_dev $(BUILD)/tests/test_ib_qp $(BUILD)/tests/test_ib_coll \
           $(BUILD)/tests/test_ib_select $(BUILD)/tests/test_ib_mem
	BUILD=$(BUILD) tests/rdma/guest.sh tests/rdma/verbs_check.sh

# No file includes or calls upward across the layers that
# docs/architecture.md lists (scripts/layers_allow.txt: the arrows still
# being removed). make test runs the same check through tests/test_layers.sh.
check-layers: $(LIB_OBJ) $(NCCL_OBJ) $(SIM_OBJ)
	python3 scripts/check_layers.py --build $(BUILD)

install: all
	install -d $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/bin
	install -m 644 include/shoal.h $(DESTDIR)$(PREFIX)/include/
	install -m 644 $(BUILD)/libshoal.a $(DESTDIR)$(PREFIX)/lib/
	install -m 755 $(BUILD)/libshoal.so.$(VERSION) $(DESTDIR)$(PREFIX)/lib/
	ln -sf libshoal.so.$(VERSION) $(DESTDIR)$(PREFIX)/lib/$(SONAME)
	ln -sf libshoal.so.$(VERSION) $(DESTDIR)$(PREFIX)/lib/libshoal.so
	install -m 755 $(TOOLS) $(DESTDIR)$(PREFIX)/bin/
	install -d $(DESTDIR)$(PREFIX)/include/shoal $(DESTDIR)$(PREFIX)/lib/shoal
	install -m 644 include/nccl.h $(DESTDIR)$(PREFIX)/include/shoal/
	install -m 755 $(NCCL_LIB) $(DESTDIR)$(PREFIX)/lib/shoal/
	ln -sf libnccl.so.2 $(DESTDIR)$(PREFIX)/lib/shoal/libnccl.so
	$(if $(CUDA_LIB),install -m 755 $(CUDA_LIB) $(DESTDIR)$(PREFIX)/lib/)
	$(if $(CUDA_LIB),ln -sf ../libshoal_cuda.so $(DESTDIR)$(PREFIX)/lib/shoal/libshoal_cuda.so)
	$(if $(OMPI_CFLAGS),install -m 755 $(BUILD)/libshoal_mpi.so $(DESTDIR)$(PREFIX)/lib/shoal/)
	$(if $(MPICH_CFLAGS),install -d $(DESTDIR)$(PREFIX)/lib/shoal/mpich)
	$(if $(MPICH_CFLAGS),install -m 755 $(BUILD)/mpich/libshoal_mpi.so $(DESTDIR)$(PREFIX)/lib/shoal/mpich/)
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@VERSION@|$(VERSION)|' \
	    -e 's|@PKGS@|$(PKGS)|' shoal.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/shoal.pc

clean:
	rm -rf $(BUILD) $(TOOLS)

.SECONDARY:
-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
