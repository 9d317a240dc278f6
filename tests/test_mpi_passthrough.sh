#!/bin/sh
# What the MPI door must leave to MPI, as TAP for prove:
# tests/mpi/passthrough_check.c, an unchanged MPI program whose every
# collective call has a derived datatype, a user-defined op, MPI_MINLOC or
# MPI_MAXLOC, or an intercommunicator, run at 1 to 4 ranks under Open MPI
# and under MPICH. Through the door (SHOAL_DEBUG=debug) its results must be
# right and the door's log must say that it passed every one of those
# calls to MPI and took none; on MPI alone the same program gives the same
# results. Run from the repository root (make test does).

TMP=$(mktemp -d "${TMPDIR:-/tmp}/shoal_mpi_pass.XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT INT TERM

TAP_LIMIT_S=60
# shellcheck source=tests/tap.sh
. tests/tap.sh
# shellcheck source=tests/mpi_env.sh
. tests/mpi_env.sh
mpi_need ompi
mpi_need mpich
PROG=$BUILD/tests/mpi/passthrough_check
# The door logs each call it sees, taken or passed.
SHOAL_DEBUG=debug

# occurs PATTERN OUT: how often PATTERN occurs in OUT, also where the
# launcher put two ranks' lines on one.
occurs() {
    grep -o "$1" "$2" | grep -c .
}

# passed_all OUT NP: the program's count of collective calls, and every
# rank's count at finalize, say that all of them went to MPI; the door
# logged a pass for each collective the program uses and took nothing.
passed_all() {
    calls=$(sed -n 's/.*passthrough_check: ok, \([0-9]*\) collective calls.*/\1/p' "$1")
    [ -n "$calls" ] || return 1
    [ "$(occurs "MPI door: 0 calls taken, $calls passed to MPI" "$1")" = "$2" ] || return 1
    for call in MPI_Allreduce MPI_Bcast MPI_Allgather MPI_Reduce; do
        grep -q "MPI door: $call passed to MPI" "$1" || return 1
    done
    ! grep -q "MPI door: MPI_[A-Za-z_]* taken" "$1"
}

echo "1..24"
for mpi in ompi mpich; do
    for np in 1 2 3 4; do
        out=$TMP/door_$mpi$np.txt
        mpi_run "$mpi" "$np" 1 "$PROG" >"$out" 2>&1
        rc=$?
        if [ "$rc" = 0 ] && grep -q "passthrough_check: ok" "$out"; then
            pass "$mpi, $np ranks through the door: derived types, user ops, MINLOC/MAXLOC and intercommunicators give MPI's results"
        else
            fail "$mpi, $np ranks through the door: results (exit $rc)"
            show "$out"
        fi
        if passed_all "$out" "$np"; then
            pass "$mpi, $np ranks through the door: every rank passed all $calls calls to MPI and took none"
        else
            fail "$mpi, $np ranks through the door: the log does not say that every call was passed to MPI"
            show "$out"
        fi
        plain=$TMP/plain_$mpi$np.txt
        mpi_run "$mpi" "$np" 0 "$PROG" >"$plain" 2>&1
        rc=$?
        if [ "$rc" = 0 ] && grep -q "passthrough_check: ok" "$plain" && ! grep -q "MPI door" "$plain"; then
            pass "$mpi, $np ranks on MPI alone: the same program, the same results"
        else
            fail "$mpi, $np ranks on MPI alone (exit $rc)"
            show "$plain"
        fi
    done
done
