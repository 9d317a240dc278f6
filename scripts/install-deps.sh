#!/bin/sh
# Install the Debian 12 packages that shoal's build and tests need. MPICH,
# python3-torch (Gloo) and gnuplot serve tools/compare_mpi and
# tools/plot_bench (shoal against MPI and Gloo; tests/test_compare.sh);
# iperf3 serves tools/netns_bench.sh --iperf3 (the raw TCP baseline);
# python3-sklearn holds the digits data set of tests/test_train_digits;
# procps gives pgrep to tests/test_bench.sh. gfortran, python3-mpi4py and
# python3-numpy serve the MPI door's Fortran and Python tests. qemu-system-x86,
# busybox-static, kmod, cpio and xz-utils build and boot the RDMA test
# guest (tests/rdma/guest.sh), whose userspace is this machine's: rdma-core
# (the rdma tool), ibverbs-providers (rxe's), libibverbs-dev and
# ibverbs-utils (ibv_devices, ibv_rc_pingpong) serve it there. CI (.ci/run, SHOAL_CI=1) fails
# a test whose tool is missing, so every tool a test looks for is here.
# python3-torch is large (about 170 packages with its dependencies).
# libtorch-dev (torch's C++ headers), pybind11-dev and python3-dev build the c10d
# backend's extension (python/shoal/torch; tests/test_py_torch.sh).
# python3-pip and python3-venv install the Python package offline into a
# virtual environment (tests/test_py_package.sh: pip install ./python).
set -eu
PKGS="build-essential clang libclang-rt-14-dev pkg-config perl iproute2 procps libssl-dev libpmix-dev libcmocka-dev libhwloc-dev libopenblas-dev openmpi-bin libopenmpi-dev mpich libmpich-dev gfortran python3-mpi4py python3-numpy python3-dev python3-pip python3-venv gnuplot-nox iperf3 zlib1g-dev python3-sklearn python3-torch libtorch-dev pybind11-dev qemu-system-x86 busybox-static kmod cpio xz-utils rdma-core ibverbs-providers libibverbs-dev ibverbs-utils"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
    $SUDO apt-get update -qq
    # Through env: sudo would drop a DEBIAN_FRONTEND set before it, and
    # iperf3's debconf question (run it as a daemon?) would stop the install.
    # shellcheck disable=SC2086 # one word per package
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing
fi
# MPICH registers mpicc and mpirun as alternatives next to Open MPI's. The
# tests start ranks with plain `mpirun` and expect Open MPI's, whose PMIx
# server hands shoal the rank id. On Debian 12 Open MPI's priority (50) is
# above MPICH's (40), so auto mode keeps it; pinning it keeps `mpirun` Open
# MPI's whatever another package's priority or an earlier manual choice.
# tools/compare_mpi calls each MPI by its suffixed name (mpirun.mpich).
if command -v update-alternatives >/dev/null 2>&1; then
    [ ! -x /usr/bin/mpicc.openmpi ] || $SUDO update-alternatives --quiet --set mpi /usr/bin/mpicc.openmpi
    [ ! -x /usr/bin/mpirun.openmpi ] || $SUDO update-alternatives --quiet --set mpirun /usr/bin/mpirun.openmpi
fi
