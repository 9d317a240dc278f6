#!/bin/bash
# The NCCL door's compression settings, through the conformance program
# (build/tests/nccl_vendor_test, run by tests/test_nccl_vendor.sh with
# shoal's libnccl.so.2 preloaded), each run one TAP line here:
#
# - SHOAL_COMPRESS=int8: the program's all-reduce case alone
#   (tests/nccl/vendor_compress.c), at 1 to 4 ranks, with the default
#   SHOAL_COMPRESS_MIN (1 MiB). Large float sums and averages must come back
#   within int8's error and, on two ranks or more, not exact; small ones,
#   integers and other ops exact.
# - SHOAL_COMPRESS_ALLGATHER and SHOAL_COMPRESS_REDUCESCATTER: the
#   all-gather and reduce-scatter case (tests/nccl/vendor_compress_colls.c)
#   at the rank counts its filter picks: int8 and int8 at 1 to 3 ranks,
#   int4 and sign at 2 and 3, a value the door does not take ("bogus") and
#   int4 at 2. The program checks the results:
#   within the error the settings' documentation states, most float32
#   values not exact (the path was lossy), the all-gather's output bitwise
#   the same on every rank, a repeated call bitwise the same; one rank,
#   small buffers, int32, ncclMax and calls in a group exact.
# - The drop-in's log (SHOAL_DEBUG=debug, COMP and INIT) must show that
#   the compressed path ran: the door writes one debug line per compressed
#   all-gather or reduce-scatter ("ncclAllGather compressed (int8): count
#   262144 float, 2 ranks: sent ... bytes"), and every rank of every run
#   must have written one for each float type and for the threshold's
#   count, none for the calls that must stay plain (their counts are the
#   program's own: 1031 small, 262145 int32, 262146 ncclMax, 262147 in a
#   group, and the threshold's count less one), none on one rank, none of
#   a setting that is off; and for "bogus", the warning that says what the
#   setting takes.
#
# tests/test_nccl_vendor.sh runs every case of the program, these two too,
# without these settings, where everything is exact.
set -u
cd "$(dirname "$0")/.." || exit 1
BUILD=${BUILD:-build}
if [ ! -x "$BUILD/tests/nccl_vendor_test" ] || [ ! -f "$BUILD/libnccl.so.2" ]; then
    # The conformance script says why (no vendor NCCL: a skip; in CI a
    # failure).
    exec bash tests/test_nccl_vendor.sh
fi
# shellcheck source=tests/tap.sh
. tests/tap.sh
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
unset SHOAL_COMPRESS SHOAL_COMPRESS_MIN SHOAL_COMPRESS_ALLGATHER SHOAL_COMPRESS_REDUCESCATTER \
    SHOAL_DEBUG SHOAL_DEBUG_SUBSYS NCCL_DEBUG NCCL_DEBUG_SUBSYS

BIG=262144 # the program's per-rank count of the large calls
# The program's all-gather and reduce-scatter case, less its rank count.
COLLS='SHOAL_COMPRESS_ALLGATHER and _REDUCESCATTER: compressed or exact as they say,'
PLAIN_COUNTS="1031 262145 262146 262147"

# run NAME VAR=VALUE...: the conformance program under the settings given,
# its output in $TMP/NAME.out and the drop-in's log in $TMP/NAME.log.
run() {
    name=$1
    shift
    # shellcheck disable=SC2086 # LIMIT is a command and its argument
    env "$@" SHOAL_DEBUG_FILE="$TMP/$name.log" $LIMIT bash tests/test_nccl_vendor.sh \
        >"$TMP/$name.out" 2>&1
}

# pids LOG PATTERN: how many processes wrote a line with PATTERN (fixed
# text) in LOG.
pids() {
    grep -F -- "$2" "$1" 2>/dev/null | sed 's/^[^:]*:\([0-9]*\) .*/\1/' | sort -u | wc -l
}

# The failures a log check found, "; " before each.
problems=
problem() { problems="$problems; $*"; }

# expect LOG COLL KIND N: every rank of the N-rank run wrote the line of a
# compressed call for each float type (count BIG) and for the threshold's
# count, and none for that count less one.
expect() {
    log=$1 coll=$2 kind=$3 nr=$4
    for dt in float bfloat16 half; do
        got=$(pids "$log" "$coll compressed ($kind): count $BIG $dt, $nr ranks:")
        [ "$got" = "$nr" ] ||
            problem "$nr ranks: $got of $nr ranks logged a $kind-compressed $coll of $BIG $dt"
    done
    at=$(( (1048576 + 4 * nr - 1) / (4 * nr) ))
    got=$(pids "$log" "$coll compressed ($kind): count $at float, $nr ranks:")
    [ "$got" = "$nr" ] ||
        problem "$nr ranks: $got of $nr ranks logged a compressed $coll at the threshold ($at)"
    if grep -qF -- "compressed ($kind): count $((at - 1)) float, $nr ranks:" "$log"; then
        problem "$nr ranks: a call below SHOAL_COMPRESS_MIN ($((at - 1)) values) went compressed"
    fi
}

# none LOG TEXT WHAT: no line with TEXT.
none() {
    if grep -qF -- "$2" "$1"; then
        problem "$3: $(grep -F -m1 -- "$2" "$1")"
    fi
}

# report DESCRIPTION NAME: one TAP line from $problems, with run NAME's
# log for a failure.
report() {
    desc=$1 name=$2
    if [ -z "$problems" ]; then
        pass "$desc"
    else
        fail "$desc"
        echo "# ${problems#; }" >&2
        show "$TMP/$name.log"
    fi
}

# 1. The all-reduce (the program's own TAP is kept for a failure).
if run allreduce SHOAL_COMPRESS=int8 NCCL_VENDOR_TEST_FILTER='SHOAL_COMPRESS:*'; then
    pass "SHOAL_COMPRESS=int8: float all-reduces compressed or exact as it says, 1 to 4 ranks"
else
    fail "SHOAL_COMPRESS=int8: float all-reduces compressed or exact as it says, 1 to 4 ranks"
    show "$TMP/allreduce.out"
fi

# 2. to 4. The all-gather and the reduce-scatter.
# colls NAME RANKS GLOB AG RS: the case at the rank counts RANKS, which
# GLOB (the end of the case's name: "*ranks" is 2 and 3) picks; it passes
# when exactly those passed.
colls() {
    name=$1 ranks=$2 glob=$3 ag=$4 rs=$5
    run "$name" SHOAL_COMPRESS_ALLGATHER="$ag" SHOAL_COMPRESS_REDUCESCATTER="$rs" \
        SHOAL_DEBUG=debug SHOAL_DEBUG_SUBSYS=COMP,INIT NCCL_VENDOR_TEST_FILTER="$COLLS $glob"
    rc=$?
    passed=$(grep -F -- "- $COLLS " "$TMP/$name.out" | sed -n 's/^ok .*, \([0-9]*\) ranks*$/\1/p' |
        paste -sd,)
    desc="SHOAL_COMPRESS_ALLGATHER=$ag SHOAL_COMPRESS_REDUCESCATTER=$rs: results within the"
    desc="$desc stated error, bitwise the same on every rank, plain calls exact ($ranks ranks)"
    if [ "$rc" -eq 0 ] && [ "$passed" = "$ranks" ]; then
        pass "$desc"
    else
        fail "$desc"
        show "$TMP/$name.out"
    fi
}

# log_colls NAME RANKS AG RS: the log check of run NAME.
log_colls() {
    name=$1 ranks=$2 ag=$3 rs=$4
    log=$TMP/$name.log
    problems=
    [ -s "$log" ] || problem "no log"
    for count in $PLAIN_COUNTS; do
        line=$(grep -E -m1 -- "compressed \([a-z0-9]+\): count $count " "$log")
        [ -z "$line" ] || problem "a call that must stay plain went compressed: $line"
    done
    none "$log" ", 1 ranks:" "a call on one rank went compressed"
    for nr in ${ranks//,/ }; do
        [ "$nr" -ge 2 ] || continue
        for pair in "ncclAllGather:$ag" "ncclReduceScatter:$rs"; do
            coll=${pair%%:*} kind=${pair#*:}
            case $kind in
            int8 | int4 | sign) expect "$log" "$coll" "$kind" "$nr" ;;
            *) none "$log" "$coll compressed (" "$coll compressed with $kind" ;;
            esac
        done
    done
    report "SHOAL_COMPRESS_ALLGATHER=$ag SHOAL_COMPRESS_REDUCESCATTER=$rs: the log shows every compressed call on every rank, and no other ($ranks ranks)" "$name"
}

colls int8 1,2,3 '*' int8 int8
log_colls int8 1,2,3 int8 int8
colls int4_sign 2,3 '*ranks' int4 sign
log_colls int4_sign 2,3 int4 sign
colls bogus 2 '2 ranks' bogus int4
log_colls bogus 2 bogus int4
problems=
for line in 'cannot parse SHOAL_COMPRESS_ALLGATHER="bogus"; using its default' \
    'SHOAL_COMPRESS_ALLGATHER="bogus" is not off, int8 or int4: the NCCL door'"'"'s all-gathers stay uncompressed'
do
    grep -qF -- "$line" "$TMP/bogus.log" || problem "no line: $line"
done
report "SHOAL_COMPRESS_ALLGATHER=bogus: a warning that names the value and what the setting takes" \
    bogus

echo "1..$n"
