#!/bin/bash
# make test-gpu: the CUDA tests on the real driver and GPU. The same test
# binaries that make test runs on the CPU stand-in of the driver run here
# on libcuda.so.1, so every device path they cover runs on a GPU. Where
# there is no GPU this says so and runs nothing: the GPU path has then not
# been executed.
#
# Usage: tests/gpu/run.sh TEST... (the Makefile passes the test_cuda_*
# binaries; SHOAL_CUDA_MODULE names the module).
set -u
cd "$(dirname "$0")/../.." || exit 1

# Whether the driver loads and sees a device, asked the way the tests do.
probe=$(python3 - <<'PY'
import ctypes, sys
try:
    cu = ctypes.CDLL("libcuda.so.1")
except OSError as e:
    print("no CUDA driver (libcuda.so.1: %s)" % e); sys.exit(1)
if cu.cuInit(0) != 0:
    print("the CUDA driver does not initialise (no GPU, or no kernel module)"); sys.exit(1)
n = ctypes.c_int(0)
cu.cuDeviceGetCount(ctypes.byref(n))
if n.value < 1:
    print("the CUDA driver sees no device"); sys.exit(1)
print("%d device(s)" % n.value)
PY
)
status=$?
if [ $status -ne 0 ]; then
    echo "make test-gpu: no GPU here: $probe. The GPU path has not been executed."
    exit 0
fi
if [ -z "${SHOAL_CUDA_MODULE:-}" ] || [ ! -r "${SHOAL_CUDA_MODULE}" ]; then
    echo "make test-gpu: the CUDA module is missing (${SHOAL_CUDA_MODULE:-unset}): build with nvcc on the PATH"
    exit 1
fi
echo "make test-gpu: $probe; module $SHOAL_CUDA_MODULE"
command -v nvidia-smi >/dev/null && nvidia-smi -L
# The real driver: nothing names the stand-in.
unset SHOAL_CUDA_DRIVER
export CMOCKA_MESSAGE_OUTPUT=TAP SHOAL_CUDA_MODULE
exec prove -f "$@"
