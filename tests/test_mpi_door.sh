#!/bin/sh
# The MPI door (libshoal_mpi.so) under Open MPI's mpirun, as TAP for
# prove: tests/mpi/door_check.c, an unchanged MPI program, run at 1 to 6
# ranks with the door preloaded (its results checked against a scalar
# reference, and its log saying the calls were taken) and without it (the
# same program on MPI alone). Run from the repository root (make test
# does).

BUILD=${BUILD:-build}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/shoal_mpi_door.XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT INT TERM

TAP_LIMIT_S=180
# shellcheck source=tests/tap.sh
. tests/tap.sh

DOOR=$PWD/$BUILD/libshoal_mpi.so
PROG=$BUILD/tests/mpi/door_check
command -v mpirun.openmpi >/dev/null 2>&1 || missing_all "Open MPI's mpirun.openmpi is not installed"
[ -f "$DOOR" ] && [ -x "$PROG" ] || missing_all "$DOOR or $PROG not built (no Open MPI headers?)"

# A door built with a sanitizer needs its runtime loaded first, ahead of
# the program's own libraries. MPI's own allocations outlive MPI_Finalize,
# which LeakSanitizer would report as the program's: leaks are checked by
# shoal's own tests, not here.
PRELOAD=$DOOR
for rt in asan tsan; do
    if nm -D "$DOOR" 2>/dev/null | grep -q "__${rt}_init"; then
        PRELOAD="$(${CC:-cc} -print-file-name=lib$rt.so) $DOOR"
        export ASAN_OPTIONS=detect_leaks=0
    fi
done

# As root Open MPI wants both of these.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

echo "1..12"
for np in 1 2 3 4 5 6; do
    out=$TMP/door_$np.txt
    $LIMIT mpirun.openmpi --oversubscribe -np "$np" -x LD_PRELOAD="$PRELOAD" -x SHOAL_DEBUG=info \
        ${ASAN_OPTIONS:+-x ASAN_OPTIONS} ${TSAN_OPTIONS:+-x TSAN_OPTIONS} \
        "$PROG" >"$out" 2>&1
    rc=$?
    taken=$(sed -n 's/.*MPI door: \([0-9]*\) calls taken.*/\1/p' "$out" | sort -n | head -n 1)
    if [ "$rc" = 0 ] && grep -q "door_check: ok" "$out" &&
        [ "$(grep -c 'MPI door: [0-9]* calls taken' "$out")" = "$np" ] && [ "${taken:-0}" -gt 0 ]; then
        pass "$np ranks through the door: right results, every rank took its calls ($taken or more)"
    else
        fail "$np ranks through the door (exit $rc)"
        show "$out"
    fi
    plain=$TMP/plain_$np.txt
    $LIMIT mpirun.openmpi --oversubscribe -np "$np" "$PROG" >"$plain" 2>&1
    rc=$?
    if [ "$rc" = 0 ] && grep -q "door_check: ok" "$plain" && ! grep -q "MPI door" "$plain"; then
        pass "$np ranks on MPI alone: the same program, the same results"
    else
        fail "$np ranks on MPI alone (exit $rc)"
        show "$plain"
    fi
done
