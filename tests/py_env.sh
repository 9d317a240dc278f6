# Shared by the Python door's test scripts (tests/test_py_*.sh), sourced
# after tests/tap.sh from the repository root.
#
#   PY: Debian's interpreter, which finds Debian's numpy and torch (another
#     python3 first on PATH may have neither); sourcing fails the whole
#     script (missing_all) without it or without its numpy.
#   py_need_torch: missing_all unless torch, its C++ headers (libtorch-dev),
#     libshoal and the c10d extension are there; then the environment the
#     ranks need: the package and libshoal of this build, shoal's deadline
#     (SHOAL_TIMEOUT, 60 s unless set: a rank that hangs must not hold the
#     run) and one OpenMP thread per rank.

BUILD=${BUILD:-build}
PY=/usr/bin/python3
[ -x "$PY" ] || missing_all "$PY is not installed"
"$PY" -c 'import numpy' 2>/dev/null || missing_all "numpy is not installed for $PY (python3-numpy)"

py_need_torch() {
    ext_dir=python/shoal/torch
    "$PY" -c 'import torch.distributed' 2>/dev/null ||
        missing_all "torch is not installed for $PY (python3-torch)"
    [ -f /usr/include/torch/csrc/distributed/c10d/ProcessGroup.hpp ] ||
        missing_all "torch's C++ headers are not installed (libtorch-dev), so the extension is not built"
    [ -f "$BUILD/libshoal.so.0" ] || missing_all "$BUILD/libshoal.so.0 is not built"
    ls "$ext_dir"/_c10d*.so >/dev/null 2>&1 ||
        missing_all "the extension $ext_dir/_c10d.so is not built (make builds it in the plain build)"
    PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH}
    SHOAL_LIBRARY=$PWD/$BUILD/libshoal.so.0
    SHOAL_TIMEOUT=${SHOAL_TIMEOUT:-60s}
    OMP_NUM_THREADS=1
    export PYTHONPATH SHOAL_LIBRARY SHOAL_TIMEOUT OMP_NUM_THREADS
}
