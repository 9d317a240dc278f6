#!/bin/sh
# The MPI door's failures, as TAP for prove, under Open MPI and under
# MPICH, with a short deadline (SHOAL_TIMEOUT=10s):
# - a mismatch (tests/mpi/error_check.c count|kind): ranks that call
#   all-reduces of different counts, or a broadcast against an all-reduce,
#   each get an error code back under MPI_ERRORS_RETURN and the program
#   ends cleanly; under MPI_ERRORS_ARE_FATAL the job ends in failure and
#   its output carries shoal's message naming the mismatch. Both with
#   every call on shoal's path (SHOAL_MPI_PATH=shoal) and under
#   SHOAL_MPI_PATH=auto, where the mismatched calls are each their size's
#   first, which would learn the size on both paths;
# - a dead rank (error_check dead): the others, in MPI_Allreduce, get an
#   error code back and their log names the rank that died, instead of
#   hanging (a hang ends at the run's time limit, a failure);
# - the wrong MPI: each MPI's build of door_check with the other MPI's
#   build of the door preloaded warns once per rank that the door was
#   built for another MPI, takes nothing, and gets MPI's right results.
# Run from the repository root (make test does).

TMP=$(mktemp -d "${TMPDIR:-/tmp}/shoal_mpi_err.XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT INT TERM

# Each run ends well within the deadline; a hang takes the whole limit.
TAP_LIMIT_S=40
# shellcheck source=tests/tap.sh
. tests/tap.sh
# shellcheck source=tests/mpi_env.sh
. tests/mpi_env.sh
mpi_need ompi
mpi_need mpich
PROG=$BUILD/tests/mpi/error_check
CHECK=$BUILD/tests/mpi/door_check
NP=3
MPI_RUN_ENV="SHOAL_TIMEOUT=10s"

# ended RC: the run ended by itself, not at the time limit.
ended() {
    [ "$1" != 124 ] && [ "$1" != 137 ]
}

# occurs PATTERN OUT: how often PATTERN occurs in OUT, also where the
# launcher put two ranks' lines on one.
occurs() {
    grep -o "$1" "$2" | grep -c .
}

# reported OUT CALL RANK...: each rank says that CALL gave it an error code.
reported() {
    out=$1 call=$2
    shift 2
    for r in "$@"; do
        grep -q "error_check: rank $r: $call failed after" "$out" || return 1
    done
    ! grep -q "returned MPI_SUCCESS" "$out"
}

echo "1..22"
for mpi in ompi mpich; do
    for run in "count shoal" "kind shoal" "count auto" "kind auto"; do
        set -- $run
        mode=$1 path=$2
        case $mode in
        count) what="all-reduces of 4 and 8 ints" ;;
        kind) what="a broadcast against an all-reduce" ;;
        esac
        what="$what, SHOAL_MPI_PATH=$path"
        SHOAL_MPI_PATH=$path # read by mpi_run
        out=$TMP/${mpi}_${mode}_${path}_return.txt
        mpi_run "$mpi" "$NP" 1 "$PROG" "$mode" return >"$out" 2>&1
        rc=$?
        if [ "$rc" = 0 ] && reported "$out" "MPI_[A-Za-z]*" 0 1 2; then
            pass "$mpi, $what under MPI_ERRORS_RETURN: each of $NP ranks got an error code, the program ended cleanly"
        else
            fail "$mpi, $what under MPI_ERRORS_RETURN (exit $rc)"
            show "$out"
        fi
        out=$TMP/${mpi}_${mode}_${path}_fatal.txt
        mpi_run "$mpi" "$NP" 1 "$PROG" "$mode" fatal >"$out" 2>&1
        rc=$?
        if [ "$rc" != 0 ] && ended "$rc" &&
            grep -q "MPI door: MPI_[A-Za-z]*: ranks called different collectives: .* runs .*, but rank [0-9]* sent data of" "$out"; then
            pass "$mpi, $what under MPI_ERRORS_ARE_FATAL: the job failed (exit $rc) with shoal's message naming the mismatch"
        else
            fail "$mpi, $what under MPI_ERRORS_ARE_FATAL (exit $rc)"
            show "$out"
        fi
    done
    unset SHOAL_MPI_PATH

    # A launcher ends the job when one of its processes leaves without
    # MPI_Finalize, killing the others: that races shoal's own finding,
    # so a survivor could be gone before it logs or reports anything.
    # --enable-recovery (Open MPI) and -disable-auto-cleanup (MPICH) keep
    # the survivors running, and what is checked is what shoal did: each
    # survivor's log names the dead rank, and its MPI_Allreduce returned an
    # error code. The job's exit status is the launcher's verdict on the
    # lost process and is not checked.
    for dead in 1 0; do
        out=$TMP/${mpi}_dead$dead.txt
        MPI_RUN_OPTS=--enable-recovery MPICH_RUN_OPTS=-disable-auto-cleanup
        mpi_run "$mpi" "$NP" 1 "$PROG" dead "$dead" >"$out" 2>&1
        rc=$?
        MPI_RUN_OPTS='' MPICH_RUN_OPTS=''
        ok=1
        ended "$rc" && grep -q "error_check: rank $dead exits now" "$out" || ok=0
        for r in 0 1 2; do
            [ "$r" = "$dead" ] && continue
            grep -q "rank $r: rank $dead exited, was killed or aborted" "$out" || ok=0
            reported "$out" MPI_Allreduce "$r" || ok=0
        done
        if [ "$ok" = 1 ]; then
            pass "$mpi, rank $dead of $NP exits during MPI_Allreduce: each survivor got an error code and logged that rank $dead exited"
        else
            fail "$mpi, rank $dead of $NP exits during MPI_Allreduce (exit $rc)"
            show "$out"
        fi
    done

    # The other MPI's door, preloaded by hand with the debug log on.
    if [ "$mpi" = ompi ]; then
        other=$DOOR_MPICH
        # As in test_mpi_door.sh: Open MPI's own 8-bit sums need its plain
        # reduction (open-mpi/ompi#8045).
        MPI_RUN_OPTS="--mca op ^avx"
    else
        other=$DOOR_OMPI
    fi
    out=$TMP/${mpi}_wrong.txt
    pre=$(mpi_preload "$other")
    MPI_RUN_ENV="LD_PRELOAD=$pre SHOAL_DEBUG=debug"
    # A sanitizer's runtime ahead of the door: as mpi_run does for it.
    [ "$pre" = "$other" ] ||
        MPI_RUN_ENV="$MPI_RUN_ENV ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0}"
    mpi_run "$mpi" 2 0 "$CHECK" >"$out" 2>&1
    rc=$?
    MPI_RUN_ENV="SHOAL_TIMEOUT=10s" MPI_RUN_OPTS=''
    if [ "$rc" = 0 ] && grep -q "door_check: ok" "$out" &&
        [ "$(occurs "not the one the door was built for" "$out")" = 2 ] &&
        ! grep -q "MPI door: MPI_[A-Za-z_]* taken" "$out"; then
        pass "$mpi with the other MPI's door: one warning per rank, every call to MPI, right results"
    else
        fail "$mpi with the other MPI's door (exit $rc)"
        show "$out"
    fi
done
