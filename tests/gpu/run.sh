#!/bin/bash
# make test-gpu: the CUDA tests on the real driver and GPU. The same test
# binaries that make test runs on the CPU stand-ins of the driver and of
# cuBLAS run here on libcuda.so.1 and libcublas.so.13, so every device
# path they cover runs on a GPU. Then allreduce_bench times the all-reduce
# on device buffers (--mem device), every result checked: one rank per
# device, and 2 and 4 ranks sharing one device by each path; then the
# compressed all-reduce of device tensors; then nccl_bench compares
# NVIDIA's libnccl.so.2 with shoal's on the same GPU(s). Where there is
# no GPU this says so and runs nothing: the GPU path has then not been
# executed.
#
# Usage: tests/gpu/run.sh TEST... (the Makefile passes the test_cuda_*
# binaries). Environment: SHOAL_CUDA_MODULE, the module; BENCH, the
# bench (default tools/allreduce_bench); NCCL_BENCH and SHOAL_NCCL,
# nccl_bench and shoal's libnccl.so.2; SHOAL_GPU_TEST_SECONDS, each
# program's deadline (default 300); SHOAL_GPU_JOBS, how many test
# programs prove runs at once (default 1).
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
# Each test binary under a deadline of its own (a hang is a failure, and
# the rest still run); prove summarises where it is installed.
limit=${SHOAL_GPU_TEST_SECONDS:-300}
status=0
if command -v prove >/dev/null; then
    prove -f -j "${SHOAL_GPU_JOBS:-1}" --exec "timeout $limit" "$@" || status=1
else
    for t in "$@"; do
        echo "make test-gpu: $t"
        timeout "$limit" "$t" || { echo "make test-gpu: $t FAILED"; status=1; }
    done
fi

# Then the bench on device buffers, -c 1 checking every element and the
# guard bytes after the results (a wrong one fails the bench, and this
# script): one rank per device, and several ranks sharing one device by
# each path (staged through pinned host memory; direct, device to device
# through CUDA IPC).
BENCH=${BENCH:-tools/allreduce_bench}
if [ ! -x "$BENCH" ]; then
    echo "make test-gpu: $BENCH is not built (make builds it)"
    exit 1
fi
bench() {
    echo "make test-gpu: $*"
    timeout "$limit" "$@" || status=1
}
ndev=${probe%% *}
bench "$BENCH" -np "$ndev" --mem device -b 8 -e 256M -f 4 -c 1
for path in staged direct; do
    for np in 2 4; do
        SHOAL_CUDA_PATH=$path bench "$BENCH" -np "$np" --mem device -b 8 -e 64M -f 8 -c 1
    done
done
# The compressed all-reduce of device tensors, each kind: the relerr
# column says how far each row is from the exact sum.
for kind in int8 ternary powersgd:4; do
    bench "$BENCH" -np 2 --mem device --compress "$kind" -b 1M -e 256M -f 4
done

# NVIDIA's NCCL and shoal's NCCL door on the same GPU(s): one program
# (nccl_bench, built against the vendor's nccl.h), once on the vendor's
# libnccl.so.2 and once with shoal's preloaded, five interleaved runs
# each; the summary gives each size's median time and their ratio.
vendor=""
for d in "${CUDA_HOME:-/usr/local/cuda}/lib64" $(python3 -c 'import nvidia, os
for p in nvidia.__path__: print(p)' 2>/dev/null); do
    vendor=$(find "$d/" -name 'libnccl.so.2' 2>/dev/null | head -n 1)
    [ -n "$vendor" ] && break
done
if [ -z "${NCCL_BENCH:-}" ] || [ ! -x "$NCCL_BENCH" ] || [ -z "$vendor" ] || [ ! -r "${SHOAL_NCCL:-}" ]; then
    echo "make test-gpu: no comparison with NVIDIA's NCCL (nccl_bench: ${NCCL_BENCH:-unset}," \
         "vendor libnccl.so.2: ${vendor:-not found}, shoal's: ${SHOAL_NCCL:-unset})"
    exit "$status"
fi
echo "make test-gpu: nccl_bench, NVIDIA's $vendor against shoal's $SHOAL_NCCL"
libs=$(dirname "$vendor")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
tables=$(mktemp -d)
for run in 1 2 3 4 5; do
    LD_LIBRARY_PATH=$libs timeout "$limit" "$NCCL_BENCH" -b 8 -e 256M -f 4 \
        >"$tables/nvidia.$run" || { echo "make test-gpu: nccl_bench on NVIDIA's NCCL failed"; status=1; }
    LD_PRELOAD=$SHOAL_NCCL LD_LIBRARY_PATH=$libs timeout "$limit" "$NCCL_BENCH" \
        -b 8 -e 256M -f 4 >"$tables/shoal.$run" || { echo "make test-gpu: nccl_bench on shoal failed"; status=1; }
done
cat "$tables/nvidia.1" "$tables/shoal.1"
python3 - "$tables" <<'PY'
import glob, statistics, sys
def medians(lib):
    rows = {}
    for f in sorted(glob.glob("%s/%s.*" % (sys.argv[1], lib))):
        for line in open(f):
            w = line.split()
            if w and not w[0].startswith("#"):
                rows.setdefault(int(w[0]), []).append(float(w[2]))
    return {k: statistics.median(v) for k, v in rows.items()}
nv, sh = medians("nvidia"), medians("shoal")
print("# medians of 5 interleaved runs, time per call (us)")
print("# %12s %12s %12s %14s" % ("size(B)", "nvidia", "shoal", "shoal/nvidia"))
for k in sorted(set(nv) & set(sh)):
    print("  %12d %12.2f %12.2f %14.2f" % (k, nv[k], sh[k], sh[k] / nv[k]))
PY
rm -rf "$tables"
exit "$status"
