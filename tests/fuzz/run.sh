#!/bin/bash
# Runs each libFuzzer target for SECONDS (default: $SHOAL_FUZZ_SECONDS, else
# 5) from its corpus in tests/fuzz/corpus/<name>/, and prints TAP: one test
# per target. New inputs go to a scratch directory, never into the kept
# corpus; an input that crashes, hangs, leaks or runs out of memory is kept
# in $FUZZ_ARTIFACTS (default: a scratch directory, named in the output),
# to be added to the corpus once fixed.
#   tests/fuzz/run.sh [SECONDS] [TARGET...]
set -u
cd "$(dirname "$0")/../.."
FUZZ_DIR=${FUZZ_DIR:-${BUILD:-build}/fuzz}
secs=${1:-${SHOAL_FUZZ_SECONDS:-5}}
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    for f in tests/fuzz/fuzz_*.c; do
        f=${f##*/fuzz_}
        targets+=("${f%.c}")
    done
fi
echo "1..${#targets[@]}"
scratch=$(mktemp -d /tmp/shoal-fuzz.XXXXXX)
artifacts=${FUZZ_ARTIFACTS:-$scratch/artifacts}
mkdir -p "$artifacts"
failed=0
n=0
for t in "${targets[@]}"; do
    n=$((n + 1))
    bin=$FUZZ_DIR/fuzz_$t
    if [ ! -x "$bin" ]; then
        echo "not ok $n - fuzz_$t: $bin not built (make fuzz)"
        failed=1
        continue
    fi
    mkdir -p "$scratch/new-$t"
    log=$scratch/$t.log
    # -timeout: one input may take 10 s (a target's own deadlines are 2 s);
    # -rss_limit_mb and -malloc_limit_mb: memory that grows is a failure.
    if "$bin" -max_total_time="$secs" -timeout=10 -rss_limit_mb=1024 -malloc_limit_mb=256 \
        -artifact_prefix="$artifacts/$t-" -print_final_stats=1 \
        "$scratch/new-$t" "tests/fuzz/corpus/$t" >"$log" 2>&1; then
        runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
        cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1)
        echo "ok $n - fuzz_$t: ${runs:-?} inputs in ${secs}s, $cov"
    else
        echo "not ok $n - fuzz_$t: see the input kept in $artifacts"
        tail -40 "$log" | sed 's/^/# /'
        failed=1
    fi
done
if [ $failed -eq 0 ] && [ -z "${FUZZ_ARTIFACTS:-}" ]; then
    rm -rf "$scratch"
fi
exit 0
