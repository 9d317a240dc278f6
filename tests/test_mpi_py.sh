#!/bin/sh
# The MPI door under mpi4py, as TAP for prove: tests/mpi/door_check.py,
# an unchanged Python program (Debian's python3-mpi4py and python3-numpy
# with /usr/bin/python3), run at 1 to 4 ranks under Open MPI, the MPI
# Debian's mpi4py is built for. With the door preloaded (SHOAL_DEBUG=debug)
# its buffer-based Allreduce, Reduce_scatter_block, Allgather and Alltoall
# on numpy arrays, in place and not, must give numpy's results and the
# door's log must say that it took every one of them; on MPI alone the
# same program gives the same results. Run from the repository root (make
# test does).

TMP=$(mktemp -d "${TMPDIR:-/tmp}/shoal_mpi_py.XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT INT TERM

TAP_LIMIT_S=60
# shellcheck source=tests/tap.sh
. tests/tap.sh
# shellcheck source=tests/mpi_env.sh
. tests/mpi_env.sh
mpi_need ompi
# Debian's interpreter, which finds Debian's mpi4py and numpy by itself
# (another python3 first on PATH may have neither).
PY=/usr/bin/python3
[ -x "$PY" ] || missing_all "$PY is not installed"
"$PY" -c 'import numpy' 2>/dev/null || missing_all "numpy is not installed for $PY (python3-numpy)"
# The MPI that mpi4py is built for, asked without starting MPI.
lib=$("$PY" -c 'import mpi4py; mpi4py.rc.initialize = False
from mpi4py import MPI; print(MPI.Get_library_version())' 2>/dev/null) ||
    missing_all "mpi4py is not installed for $PY (python3-mpi4py)"
case $lib in
*"Open MPI"*) ;;
*) missing_all "mpi4py is built for another MPI than Open MPI: $lib" ;;
esac
SHOAL_DEBUG=debug

# occurs PATTERN OUT: how often PATTERN occurs in OUT, also where the
# launcher put two ranks' lines on one.
occurs() {
    grep -o "$1" "$2" | grep -c .
}

# took_all OUT NP: every rank's count at finalize says that it took all
# the calls the program counted and passed none; the door logged taking
# each of the four collectives and passing nothing.
took_all() {
    calls=$(sed -n 's/.*door_check.py: rank 0 ok, \([0-9]*\) calls.*/\1/p' "$1")
    [ -n "$calls" ] || return 1
    [ "$(occurs "MPI door: $calls calls taken, 0 passed to MPI" "$1")" = "$2" ] || return 1
    for call in MPI_Allreduce MPI_Reduce_scatter_block MPI_Allgather MPI_Alltoall; do
        grep -q "MPI door: $call taken" "$1" || return 1
    done
    ! grep -q "MPI door: MPI_[A-Za-z_]* passed to MPI" "$1"
}

# all_ok OUT NP RC: the run succeeded and every rank said so.
all_ok() {
    [ "$3" = 0 ] && [ "$(occurs "door_check.py: rank [0-9]* ok" "$1")" = "$2" ]
}

echo "1..12"
for np in 1 2 3 4; do
    out=$TMP/door_$np.txt
    mpi_run ompi "$np" 1 "$PY" tests/mpi/door_check.py >"$out" 2>&1
    rc=$?
    if all_ok "$out" "$np" "$rc"; then
        pass "mpi4py, $np ranks through the door: numpy's results, in place and not"
    else
        fail "mpi4py, $np ranks through the door: results (exit $rc)"
        show "$out"
    fi
    if took_all "$out" "$np"; then
        pass "mpi4py, $np ranks through the door: every rank took all $calls calls"
    else
        fail "mpi4py, $np ranks through the door: the log does not say that every call was taken"
        show "$out"
    fi
    plain=$TMP/plain_$np.txt
    mpi_run ompi "$np" 0 "$PY" tests/mpi/door_check.py >"$plain" 2>&1
    rc=$?
    if all_ok "$plain" "$np" "$rc" && ! grep -q "MPI door" "$plain"; then
        pass "mpi4py, $np ranks on MPI alone: the same program, the same results"
    else
        fail "mpi4py, $np ranks on MPI alone (exit $rc)"
        show "$plain"
    fi
done
