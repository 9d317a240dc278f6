#!/bin/sh
# The MPI door's SHOAL_MPI_PATH=auto as TAP for prove: tests/mpi/rule_check.c
# calls each collective 10 times at each of three sizes, and an in-place
# all-reduce 10 times at a fourth, checking every result.
# SHOAL_TEST_MPI_SLOW makes rank 1's rule clock run on 1 s as each call
# enters the door on one path (in the door's own work, before shoal or
# MPI has the call: what the rule times must hold it): every rank must then
# choose the other path for every size (the slowest rank's time decides),
# which the counts each rank logs at
# MPI_Finalize show to the call. SHOAL_TEST_MPI_SLOW=near makes shoal's
# path on rank 1 faster by less than the gap between its own rounds: MPI's
# must then serve where a path had enough rounds to see that gap. A call that can run again (out of place)
# learns its whole size at its first call, which then takes the chosen
# path like the 9 after it; of the 10 in-place calls, the first 6 learn
# (3 on each path: one untimed, SHOAL_MPI_LEARN=2 timed) and the other 4
# take the chosen path. MPI_Iallreduce follows its blocking form's choice.
# A blocking call like the last that the rule passed to MPI passes at once
# (counted apart), but never the first call on a new communicator, which
# learns anew: 3 duplicates of MPI_COMM_WORLD, freed in turn, learn 3 times.
# Without the setting, whatever the timings choose, every rank must log
# the same counts; and threads on communicators of their own choose
# apart. Run from the repository root (make test does).

TMP=$(mktemp -d "${TMPDIR:-/tmp}/shoal_mpi_rule.XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT INT TERM

TAP_LIMIT_S=120
# shellcheck source=tests/tap.sh
. tests/tap.sh
# shellcheck source=tests/mpi_env.sh
. tests/mpi_env.sh
mpi_need ompi
mpi_need mpich
PROG=$BUILD/tests/mpi/rule_check
export SHOAL_MPI_PATH=auto

# counted OUT NP FORM TAKEN PASSED [AT_ONCE]: every rank logged FORM's
# counts as TAKEN taken and PASSED passed to MPI, all of those by the rule,
# AT_ONCE (default 0) of them at once.
counted() {
    [ "$(grep -c "MPI door: $3: $4 taken, $5 passed to MPI ($5 of them by SHOAL_MPI_PATH=auto, ${6:-0} at once)" "$1")" = "$2" ]
}

# expect OUT NP SLOW: the counts when SLOW's path is the slower one.
# MPI_Allreduce: 3 sizes of 10 out of place, the in-place size's 3 calls
# on the slower path and 7 on the other, 3 on each duplicate, and the
# last call's one int (a size of its own). Passed at once where MPI's path
# is chosen: 9 of each out-of-place size's 10, 3 of the in-place 4 after
# the choice, 2 of each duplicate's 3.
expect() {
    if [ "$3" = shoal ]; then
        counted "$1" "$2" MPI_Allreduce 3 47 36 && counted "$1" "$2" MPI_Iallreduce 0 30 &&
            counted "$1" "$2" MPI_Barrier 0 10 9 && w="MPI's path"
    else
        counted "$1" "$2" MPI_Allreduce 47 3 && counted "$1" "$2" MPI_Iallreduce 30 0 &&
            counted "$1" "$2" MPI_Barrier 10 0 && w="shoal's path"
    fi || return 1
    for form in MPI_Bcast MPI_Allgather MPI_Alltoall; do
        if [ "$3" = shoal ]; then counted "$1" "$2" $form 0 30 27; else counted "$1" "$2" $form 30 0; fi ||
            return 1
    done
    # Rank 0 logs each choice: 3 sizes of 4 collectives, the in-place
    # size, the barrier, each duplicate's size and the one int.
    [ "$(grep -c "(the slowest rank's [a-z]* of [28]; rounds [0-9.]*% apart): $w from now on" "$1")" = 18 ]
}

# near OUT: SHOAL_TEST_MPI_SLOW=near's choices (rank 0 logs them). Shoal's
# path is the faster on rank 1, by 1% (median) or 3% (best), but its two
# best rounds there are 2% apart. A class that learnt 8 rounds a path
# (those whose rounds were short: on 2 ranks, at least the 8-byte ones,
# 4 collectives, each duplicate's and the last call's 4 B, and the
# barrier) must go to MPI; one that learnt 2 (the in-place 256 B, one
# call a round; any whose rounds were long on a slow machine) to shoal.
near() {
    local eight two
    eight=$(grep -c "median of 8; rounds [0-9.]*% apart): MPI's path from now on" "$1")
    two=$(grep -c "best of 2; rounds 0.0% apart): shoal's path from now on" "$1")
    [ "$eight" -ge 9 ] && [ $((eight + two)) = 18 ] &&
        [ "$(grep -c "of 256..511 B .*best of 2; rounds 0.0% apart): shoal's path" "$1")" = 1 ]
}

echo "1..10"
for run in "ompi 3 shoal" "ompi 3 mpi" "mpich 2 shoal" "mpich 3 mpi"; do
    set -- $run
    mpi=$1 np=$2 slow=$3
    out=$TMP/${mpi}_${np}_$slow.txt
    MPI_RUN_ENV="SHOAL_TEST_MPI_SLOW=$slow SHOAL_MPI_LEARN=2" mpi_run "$mpi" "$np" 1 "$PROG" \
        >"$out" 2>&1
    rc=$?
    if [ "$rc" = 0 ] && grep -q "rule_check: ok" "$out" && expect "$out" "$np" "$slow"; then
        pass "$mpi, $np ranks, rank 1 slower on $slow's path: every rank chose the other path for every size at the same call, right results"
    else
        fail "$mpi, $np ranks, rank 1 slower on $slow's path (exit $rc)"
        show "$out"
    fi
done

# Two paths closer than the learning's own noise: MPI's, where it is known.
for mpi in ompi mpich; do
    out=$TMP/${mpi}_near.txt
    MPI_RUN_ENV="SHOAL_TEST_MPI_SLOW=near SHOAL_MPI_LEARN=2" mpi_run "$mpi" 2 1 "$PROG" >"$out" 2>&1
    rc=$?
    if [ "$rc" = 0 ] && grep -q "rule_check: ok" "$out" && near "$out"; then
        pass "$mpi, 2 ranks, shoal's path 1% faster with rounds 2% apart: MPI's path where 8 rounds show it, shoal's where 2 cannot"
    else
        fail "$mpi, 2 ranks, shoal's path within the rounds' noise (exit $rc)"
        show "$out"
    fi
done

# The machine's own timings: whatever they choose, every rank the same.
for mpi in ompi mpich; do
    out=$TMP/${mpi}_auto.txt
    MPI_RUN_ENV="SHOAL_MPI_LEARN=2" mpi_run "$mpi" 4 1 "$PROG" >"$out" 2>&1
    rc=$?
    # Each distinct count line must come from all 4 ranks.
    odd=$(grep -o "MPI door: MPI_[A-Za-z_]*: .*" "$out" | sort | uniq -c | awk '$1 != 4' | wc -l)
    chosen=$(grep -c "from now on" "$out")
    if [ "$rc" = 0 ] && grep -q "rule_check: ok" "$out" && [ "$odd" = 0 ] && [ "$chosen" = 18 ]; then
        pass "$mpi, 4 ranks, the machine's timings: 18 choices, the same counts on every rank, right results"
    else
        fail "$mpi, 4 ranks, the machine's timings (exit $rc; $odd count lines not on every rank; $chosen choices)"
        show "$out"
    fi
done

# Three threads, each on communicators of its own (split, dup, create):
# the choices of one communicator do not reach another's.
PROG=$BUILD/tests/mpi/thread_check
for mpi in ompi mpich; do
    out=$TMP/${mpi}_threads.txt
    MPI_RUN_ENV="SHOAL_MPI_LEARN=1" mpi_run "$mpi" 3 1 "$PROG" >"$out" 2>&1
    rc=$?
    if [ "$rc" = 0 ] && grep -q "thread_check: ok" "$out" && grep -q "from now on" "$out"; then
        pass "$mpi, 3 ranks of 3 threads, each size of each communicator choosing its path: right results"
    else
        fail "$mpi, 3 ranks of 3 threads choosing paths (exit $rc)"
        show "$out"
    fi
done
