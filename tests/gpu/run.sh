#!/bin/bash
# make test-gpu: the CUDA tests on the real driver and GPU. The same test
# binaries that make test runs on the CPU stand-ins of the driver and of
# cuBLAS run here on libcuda.so.1 and libcublas.so.13, so every device
# path they cover runs on a GPU. Then
# allreduce_bench times the all-reduce on device buffers (--mem device)
# with every result checked, on one rank and, with several devices, on one
# rank per device, and prints its tables. Where there is no GPU this says
# so and runs nothing: the GPU path has then not been executed.
#
# Usage: tests/gpu/run.sh TEST... (the Makefile passes the test_cuda_*
# binaries; SHOAL_CUDA_MODULE names the module; BENCH the bench, by
# default tools/allreduce_bench of the default build).
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
# The real driver and cuBLAS: nothing names a stand-in. cuBLAS is the
# module's default, libcublas.so.13, wherever the loader finds it, else
# the toolkit's own copy.
unset SHOAL_CUDA_DRIVER SHOAL_CUBLAS
cublas=${CUDA_HOME:-/usr/local/cuda}/lib64/libcublas.so.13
if ! ldconfig -p 2>/dev/null | grep -q 'libcublas\.so\.13 ' && [ -r "$cublas" ]; then
    export SHOAL_CUBLAS=$cublas
fi
export CMOCKA_MESSAGE_OUTPUT=TAP SHOAL_CUDA_MODULE
prove -f "$@"
status=$?

# Then the bench on device buffers: one rank and, where there are several
# devices, one rank per device. -c 1 checks every element and the guard
# bytes after the results; a wrong one fails the bench, and this script.
BENCH=${BENCH:-tools/allreduce_bench}
if [ ! -x "$BENCH" ]; then
    echo "make test-gpu: $BENCH is not built (make builds it)"
    exit 1
fi
ndev=${probe%% *}
ranks=1
[ "$ndev" -gt 1 ] && ranks="1 $ndev"
for np in $ranks; do
    echo "make test-gpu: $BENCH --mem device, $np rank(s)"
    "$BENCH" -np "$np" --mem device -b 8 -e 256M -f 4 -c 1 || status=1
done
# The compressed all-reduce of device tensors, each kind: the relerr
# column says how far each row is from the exact sum.
for kind in int8 ternary powersgd:4; do
    echo "make test-gpu: $BENCH --mem device --compress $kind, 2 ranks"
    "$BENCH" -np 2 --mem device --compress "$kind" -b 1M -e 256M -f 4 || status=1
done
exit "$status"
