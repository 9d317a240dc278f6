# libFuzzer targets, included by the Makefile: `make fuzz` builds
# $(BUILD)/fuzz/fuzz_<name> from every tests/fuzz/fuzz_<name>.c, and
# tests/fuzz/run.sh runs them (make test does, through tests/test_fuzz.sh).
# Whatever CC and SANITIZE say, they are built with clang, ASan and UBSan,
# from library objects of their own under $(BUILD)/fuzz.
#
# A target reaches the static parsers of library sources by including
# them (#include "../../src/<dir>/<file>.c") and links every other library
# object, so that nothing is defined twice.
ifndef SHOAL_FUZZ_MK
SHOAL_FUZZ_MK := 1

FUZZ_CC      ?= clang
FUZZ_DIR     := $(BUILD)/fuzz
FUZZ_SAN     := -fsanitize=address,undefined -fno-sanitize-recover=undefined
FUZZ_CFLAGS  := -std=c11 -D_GNU_SOURCE -g -O1 -fno-omit-frame-pointer $(WARN) \
                -Iinclude -Isrc $(PKG_CFLAGS) -fsanitize=fuzzer-no-link $(FUZZ_SAN)
FUZZ_SRC     := $(sort $(wildcard tests/fuzz/fuzz_*.c))
FUZZERS      := $(FUZZ_SRC:tests/fuzz/%.c=$(FUZZ_DIR)/%)
FUZZ_LIB_OBJ := $(LIB_SRC:%.c=$(FUZZ_DIR)/%.o)

# The library sources that target $(1) includes: their objects are left out.
fuzz_unit = $(shell sed -n 's|^.include "\.\./\.\./\(src/.*\)\.c"$$|\1|p' tests/fuzz/$(1).c)

.PHONY: fuzz fuzz-corpus
fuzz: $(FUZZERS)

$(FUZZ_LIB_OBJ) $(FUZZ_SRC:%.c=$(FUZZ_DIR)/%.o): $(FUZZ_DIR)/%.o: %.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -MMD -MP -c $< -o $@

$(FUZZERS): $(FUZZ_DIR)/%: $(FUZZ_DIR)/tests/fuzz/%.o $(FUZZ_LIB_OBJ)
	$(FUZZ_CC) -fsanitize=fuzzer $(FUZZ_SAN) -o $@ $< \
	    $(filter-out $(patsubst %,$(FUZZ_DIR)/%.o,$(call fuzz_unit,$*)),$(FUZZ_LIB_OBJ)) $(LIBS)

# Writes each target's seeds into tests/fuzz/corpus/<name>/ as seed-*
# files, replacing the old seeds; other files there (inputs that once
# crashed) stay.
fuzz-corpus: $(FUZZERS)
	@set -e; for f in $(FUZZERS); do \
	    dir=tests/fuzz/corpus/$${f##*/fuzz_}; mkdir -p $$dir; rm -f $$dir/seed-*; \
	    SHOAL_FUZZ_SEEDS=$$dir $$f; echo "$$dir: `ls $$dir | wc -l` files"; \
	done

endif
