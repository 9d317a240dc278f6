# Shared by the MPI door's test scripts (tests/test_mpi_*.sh), sourced
# after tests/tap.sh from the repository root: where the two builds of the
# door and the test programs are, and how to start ranks with and without
# the door under each MPI.
#
#   mpi_run MPI NP DOOR PROG [ARGS...]
#     MPI is ompi (Open MPI's mpirun.openmpi, the program built as PROG) or
#     mpich (MPICH's mpiexec.mpich, the program built as PROG.mpich); DOOR
#     is 1 to preload that MPI's door with SHOAL_DEBUG=info and
#     SHOAL_MPI_PATH=shoal (or the caller's SHOAL_MPI_PATH), 0 to run on
#     MPI alone. PROG is a path under $BUILD/tests/mpi without the suffix.
#     Extra launcher options go in MPI_RUN_OPTS (Open MPI's syntax: -x VAR
#     or --mca NAME VALUE; they are only passed to Open MPI),
#     MPICH_RUN_OPTS (mpiexec.mpich's options, only passed to MPICH) and
#     MPI_RUN_ENV (VAR=VALUE words, set for the ranks under either MPI).
#     With the door, each rank logs to a file of its own (SHOAL_DEBUG_FILE),
#     written to stderr whole once the run ends: a launcher that forwards
#     the ranks' output in pieces could otherwise cut a log line with
#     another rank's line or the program's own output.
#   mpi_need MPI: missing_all unless that MPI, its door and the program
#     builds are there.
# shellcheck shell=sh disable=SC2034

BUILD=${BUILD:-build}
DOOR_OMPI=$PWD/$BUILD/libshoal_mpi.so
DOOR_MPICH=$PWD/$BUILD/mpich/libshoal_mpi.so

# As root Open MPI wants both of these.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# A door built with a sanitizer needs its runtime loaded first, ahead of
# the program's own libraries. MPI's own allocations outlive MPI_Finalize,
# which LeakSanitizer would report as the program's: leaks are checked by
# shoal's own tests, not here.
mpi_preload() {
    pre=$1
    for rt in asan tsan; do
        if nm -D "$1" 2>/dev/null | grep -q "__${rt}_init"; then
            pre="$(${CC:-cc} -print-file-name=lib$rt.so):$1"
        fi
    done
    echo "$pre"
}
if nm -D "$DOOR_OMPI" 2>/dev/null | grep -q "__asan_init"; then
    ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
    export ASAN_OPTIONS
fi

mpi_need() {
    case $1 in
    ompi)
        command -v mpirun.openmpi >/dev/null 2>&1 ||
            missing_all "Open MPI's mpirun.openmpi is not installed"
        [ -f "$DOOR_OMPI" ] || missing_all "$DOOR_OMPI not built (no Open MPI headers?)"
        ;;
    mpich)
        command -v mpiexec.mpich >/dev/null 2>&1 ||
            missing_all "MPICH's mpiexec.mpich is not installed"
        [ -f "$DOOR_MPICH" ] || missing_all "$DOOR_MPICH not built (no MPICH headers?)"
        ;;
    esac
}

mpi_run() {
    mpi=$1 np=$2 door=$3 prog=$4
    shift 4
    env_words=$MPI_RUN_ENV
    logs=
    if [ "$door" = 1 ]; then
        if [ "$mpi" = ompi ]; then lib=$DOOR_OMPI; else lib=$DOOR_MPICH; fi
        # Under the script's scratch directory where it has one, removed with it.
        logs=$(mktemp -d "${TMP:-${TMPDIR:-/tmp}}/shoal_mpi_logs.XXXXXX") || return 1
        env_words="$env_words LD_PRELOAD=$(mpi_preload "$lib") SHOAL_DEBUG=${SHOAL_DEBUG:-info}"
        env_words="$env_words SHOAL_DEBUG_FILE=$logs/shoal.%p"
        # Every call the door can serve taken, unless a script asks for
        # SHOAL_MPI_PATH=auto (which passes the faster MPI's calls on).
        env_words="$env_words SHOAL_MPI_PATH=${SHOAL_MPI_PATH:-shoal}"
        # The sanitizers' settings, as one word each (':' separates them too).
        [ -z "${ASAN_OPTIONS:-}" ] ||
            env_words="$env_words ASAN_OPTIONS=$(echo "$ASAN_OPTIONS" | tr ' ' ':')"
        [ -z "${TSAN_OPTIONS:-}" ] ||
            env_words="$env_words TSAN_OPTIONS=$(echo "$TSAN_OPTIONS" | tr ' ' ':')"
    fi
    if [ "$mpi" = ompi ]; then
        xs=
        for w in $env_words; do xs="$xs -x $w"; done
        # shellcheck disable=SC2086 # the words are split on purpose
        $LIMIT mpirun.openmpi --oversubscribe -np "$np" $xs $MPI_RUN_OPTS "$prog" "$@"
    else
        gs=
        for w in $env_words; do gs="$gs -genv ${w%%=*} ${w#*=}"; done
        # shellcheck disable=SC2086
        $LIMIT mpiexec.mpich -np "$np" $gs $MPICH_RUN_OPTS "$prog.mpich" "$@"
    fi
    run_rc=$?
    if [ -n "$logs" ]; then
        for f in "$logs"/shoal.*; do
            [ -f "$f" ] && cat "$f" >&2
        done
        rm -rf "$logs"
    fi
    return $run_rc
}
