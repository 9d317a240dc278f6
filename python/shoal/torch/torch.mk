# The c10d backend's extension, python/shoal/torch/_c10d.so: C++17 against
# Debian's libtorch-dev (torch 1.13), compiled with g++ and linked to
# libshoal.so.0, whose symbols bind to the copy that the Python package
# loaded (shoal/_lib.py), and to torch's libraries. Built in the plain
# build only (BUILD=build, no sanitizer, not CI's quick variants, which do
# not run tests/test_py_torch.sh) and only where torch's headers are.
# csrc/build_flags.py asks torch once per build for its include paths, its
# C++ ABI and the pybind11 ABI macros that make our classes share
# pybind11's registry with torch's.
TORCH_DIR   := python/shoal/torch
TORCH_H     := $(wildcard /usr/include/torch/csrc/distributed/c10d/ProcessGroup.hpp)
TORCH_PLAIN := $(if $(SANITIZE)$(filter 1,$(SHOAL_TEST_QUICK)),,$(filter build,$(BUILD)))
TORCH_EXT   := $(if $(and $(TORCH_H),$(TORCH_PLAIN)),$(TORCH_DIR)/_c10d.so)
# One object: csrc/extension.cpp includes the parts (see there why).
TORCH_OBJ   := $(BUILD)/$(TORCH_DIR)/csrc/extension.o
TORCH_FLAGS := $(BUILD)/$(TORCH_DIR)/flags
TORCH_CXXFLAGS := -std=c++17 -O2 -fPIC -Wall -Wextra -Werror -Wno-unused-parameter -Iinclude

all: $(TORCH_EXT)

$(TORCH_FLAGS)/cflags: $(TORCH_DIR)/csrc/build_flags.py
	/usr/bin/python3 $< $(dir $@)

$(BUILD)/$(TORCH_DIR)/csrc/%.o: $(TORCH_DIR)/csrc/%.cpp $(TORCH_FLAGS)/cflags
	@mkdir -p $(dir $@)
	g++ $(TORCH_CXXFLAGS) $$(cat $(TORCH_FLAGS)/cflags) -MMD -MP -c $< -o $@

$(TORCH_DIR)/_c10d.so: $(TORCH_OBJ) $(BUILD)/libshoal.so
	g++ -shared -o $@ $(TORCH_OBJ) -L$(BUILD) -lshoal $$(cat $(TORCH_FLAGS)/libs)

.PHONY: clean-torch
clean: clean-torch
clean-torch:
	rm -f $(TORCH_DIR)/_c10d.so
