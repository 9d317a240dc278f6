#!/bin/sh
# The MPI door under MPI_THREAD_MULTIPLE, as TAP for prove:
# tests/mpi/thread_check.c, an unchanged MPI program with three threads
# per rank, each making its own communicators (MPI_Comm_split,
# MPI_Comm_dup, MPI_Comm_create) and running all-reduces and broadcasts
# on them at once, run at 2 to 4 ranks under Open MPI and under MPICH.
# Through the door its results must be right and every rank's count must
# say that the door took every call; on MPI alone the same program gives
# the same results. Run from the repository root (make test does).

TMP=$(mktemp -d "${TMPDIR:-/tmp}/shoal_mpi_thr.XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT INT TERM

TAP_LIMIT_S=60
# shellcheck source=tests/tap.sh
. tests/tap.sh
# shellcheck source=tests/mpi_env.sh
. tests/mpi_env.sh
mpi_need ompi
mpi_need mpich
PROG=$BUILD/tests/mpi/thread_check

# occurs PATTERN OUT: how often PATTERN occurs in OUT, also where the
# launcher put two ranks' lines on one.
occurs() {
    grep -o "$1" "$2" | grep -c .
}

# took_all OUT NP: every rank took all the calls the program counted.
took_all() {
    calls=$(sed -n 's/.*thread_check: ok, \([0-9]*\) collective calls.*/\1/p' "$1")
    [ -n "$calls" ] && [ "$(occurs "MPI door: $calls calls taken, 0 passed to MPI" "$1")" = "$2" ]
}

echo "1..18"
for mpi in ompi mpich; do
    for np in 2 3 4; do
        out=$TMP/door_$mpi$np.txt
        mpi_run "$mpi" "$np" 1 "$PROG" >"$out" 2>&1
        rc=$?
        if [ "$rc" = 0 ] && grep -q "thread_check: ok" "$out"; then
            pass "$mpi, $np ranks of 3 threads through the door: right results"
        else
            fail "$mpi, $np ranks of 3 threads through the door (exit $rc)"
            show "$out"
        fi
        if took_all "$out" "$np"; then
            pass "$mpi, $np ranks of 3 threads through the door: every rank took all $calls calls"
        else
            fail "$mpi, $np ranks of 3 threads through the door: not every call was taken"
            show "$out"
        fi
        plain=$TMP/plain_$mpi$np.txt
        mpi_run "$mpi" "$np" 0 "$PROG" >"$plain" 2>&1
        rc=$?
        if [ "$rc" = 0 ] && grep -q "thread_check: ok" "$plain" && ! grep -q "MPI door" "$plain"; then
            pass "$mpi, $np ranks of 3 threads on MPI alone: the same program, the same results"
        else
            fail "$mpi, $np ranks of 3 threads on MPI alone (exit $rc)"
            show "$plain"
        fi
    done
done
