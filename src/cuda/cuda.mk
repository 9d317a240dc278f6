# The CUDA module (libshoal_cuda.so) and, for the tests, the CPU stand-in
# of the CUDA driver (tests/cuda/). Both need the toolkit's headers; the
# module also needs nvcc for its kernels. Without them nothing here is
# built and libshoal reports device pointers as unsupported.
#
# CUDA_HOME: the folder above the nvcc on the PATH, else /usr/local/cuda
# (the Makefile's default, which a CUDA_HOME given to make overrides).
NVCC        ?= $(CUDA_HOME)/bin/nvcc
CUDA_H      := $(wildcard $(CUDA_HOME)/include/cuda.h)
HAVE_NVCC   := $(if $(CUDA_H),$(wildcard $(NVCC)))
CUDA_LIB    := $(if $(HAVE_NVCC),$(BUILD)/libshoal_cuda.so)
# SASS for each listed architecture and PTX for the newest, which the
# driver compiles for anything newer.
CUDA_ARCHS  ?= 80 90 100
CUDA_NEWEST := $(lastword $(CUDA_ARCHS))
CUDA_GENCODE := $(foreach a,$(CUDA_ARCHS),-gencode arch=compute_$(a),code=sm_$(a)) \
                -gencode arch=compute_$(CUDA_NEWEST),code=compute_$(CUDA_NEWEST)
NVCC_FLAGS  := -std=c++17 -O3 -Werror all-warnings -Xcompiler -Wall,-Wextra,-Werror \
               -Iinclude -Isrc
CUDA_SRC    := $(sort $(wildcard src/cuda/*.c))
CUDA_OBJ    := $(CUDA_SRC:%.c=$(BUILD)/%.o)
CUDA_FATBIN := $(BUILD)/src/cuda/kernels.fatbin

$(CUDA_OBJ): ALL_CFLAGS += -I$(CUDA_HOME)/include

# The kernels as one fat binary, which the module embeds (fatbin.c) and
# loads into each device's context with cuModuleLoadData.
$(CUDA_FATBIN): src/cuda/kernels.cu src/cuda/kern.h src/algos/reduce_elem.h src/base/dtype.h \
                src/base/dev_ops.h src/compress/codec.h src/compress/int8_elem.h \
                src/compress/ternary_elem.h src/compress/psgd_elem.h
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCC_FLAGS) $(CUDA_GENCODE) -fatbin -o $@ $<

$(BUILD)/src/cuda/fatbin.o: $(CUDA_FATBIN)
$(BUILD)/src/cuda/fatbin.o: ALL_CFLAGS += -DSHOAL_CUDA_FATBIN='"$(CUDA_FATBIN)"'

$(BUILD)/libshoal_cuda.so: $(CUDA_OBJ) src/cuda/cuda.map
	$(CC) -shared -Wl,-soname,libshoal_cuda.so -Wl,--version-script=src/cuda/cuda.map \
	    $(NO_UNDEF) $(LDFLAGS) -o $@ $(CUDA_OBJ) -ldl -lpthread

# The CPU stand-ins of the driver and of cuBLAS, for tests only: never
# installed.
CUBLAS_STANDIN_SRC := tests/cuda/standin_cublas.c
STANDIN_SRC := $(filter-out $(CUBLAS_STANDIN_SRC),$(sort $(wildcard tests/cuda/standin*.c)))
STANDIN_OBJ := $(STANDIN_SRC:%.c=$(BUILD)/%.o)
STANDIN_LIB := $(if $(CUDA_H),$(BUILD)/tests/libcuda_standin.so)
CUBLAS_STANDIN_OBJ := $(CUBLAS_STANDIN_SRC:%.c=$(BUILD)/%.o)
CUBLAS_STANDIN_LIB := $(if $(CUDA_H),$(BUILD)/tests/libcublas_standin.so)
$(STANDIN_OBJ) $(CUBLAS_STANDIN_OBJ): ALL_CFLAGS += -I$(CUDA_HOME)/include
# libm: the codec kernel's rounding (nearbyintf, floorf) where the CPU
# has no instruction for it.
$(BUILD)/tests/libcuda_standin.so: $(STANDIN_OBJ)
	$(CC) -shared $(NO_UNDEF) $(LDFLAGS) -o $@ $(STANDIN_OBJ) -lpthread -lrt -lm
# The cuBLAS stand-in queues its products through the driver stand-in's
# cuLaunchHostFunc: linked against it by file name and found beside it
# ($$ORIGIN), so that the loader hands it the instance the module and the
# tests already opened by path (one file, one instance).
$(BUILD)/tests/libcublas_standin.so: $(CUBLAS_STANDIN_OBJ) $(BUILD)/tests/libcuda_standin.so
	$(CC) -shared $(NO_UNDEF) $(LDFLAGS) -o $@ $(CUBLAS_STANDIN_OBJ) -L$(BUILD)/tests \
	    -l:libcuda_standin.so -Wl,-rpath,'$$ORIGIN' -lpthread

all: $(CUDA_LIB) $(STANDIN_LIB) $(CUBLAS_STANDIN_LIB)

# The CUDA tests act as an application: cuda_user.c reaches the driver the
# way a program does (through the library SHOAL_CUDA_DRIVER names).
CUDA_TESTS := $(filter $(BUILD)/tests/test_cuda_%,$(TESTS))
$(CUDA_TESTS:%=%.o) $(BUILD)/tests/cuda_user.o: ALL_CFLAGS += $(if $(CUDA_H),-I$(CUDA_HOME)/include)
$(CUDA_TESTS): $(BUILD)/tests/cuda_user.o
$(CUDA_TESTS): %: %.o $(TEST_LIB) $(BUILD)/libshoal.a
	$(CC) $(LDFLAGS) -o $@ $< $(BUILD)/tests/cuda_user.o $(TEST_LIB) $(BUILD)/libshoal.a \
	    $(LIBS) $(CUDA_TEST_LIBS) -lcmocka

# The NCCL door's CUDA tests call shoal's libnccl.so.2 as a program would.
CUDA_NCCL_TESTS := $(BUILD)/tests/test_cuda_nccl $(BUILD)/tests/test_cuda_nccl_compress
$(CUDA_NCCL_TESTS): $(NCCL_LIB)
$(CUDA_NCCL_TESTS): CUDA_TEST_LIBS = -L$(BUILD) -l:libnccl.so.2 -Wl,-rpath,$(CURDIR)/$(BUILD)

# make test-gpu's comparison with NVIDIA's NCCL (tests/gpu/nccl_bench.c):
# built against the vendor's nccl.h and libnccl.so.2, with the runtime
# linked statically, so that one binary runs on either library.
GPU_NCCL_BENCH := $(if $(and $(CUDA_H),$(wildcard $(CUDA_HOME)/include/nccl.h)),$(BUILD)/tests/nccl_bench)
all: $(GPU_NCCL_BENCH)
$(BUILD)/tests/nccl_bench: tests/gpu/nccl_bench.c
	@mkdir -p $(dir $@)
	$(CC) -std=c11 -D_GNU_SOURCE $(WARN) $(CFLAGS) -isystem $(CUDA_HOME)/include $< $(LDFLAGS) \
	    -L$(CUDA_HOME)/lib64 -lnccl -lcudart_static -ldl -lrt -lpthread -o $@

# make test-gpu: the CUDA tests on the real driver and cuBLAS
# (tests/gpu/run.sh says plainly when there is no GPU, and runs nothing
# then).
.PHONY: test-gpu
test-gpu: all
	SHOAL_CUDA_MODULE=$(CURDIR)/$(BUILD)/libshoal_cuda.so BENCH=$(TOOLS_DIR)/allreduce_bench \
	    NCCL_BENCH=$(GPU_NCCL_BENCH) SHOAL_NCCL=$(CURDIR)/$(NCCL_LIB) \
	    CUDA_HOME=$(CUDA_HOME) tests/gpu/run.sh $(CUDA_TESTS)
