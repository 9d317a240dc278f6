#!/bin/bash
# The libFuzzer targets of tests/fuzz/, each for SHOAL_FUZZ_SECONDS (default
# 5; 0 skips them, and make test then does not build them).
set -u
cd "$(dirname "$0")/.."
if [ "${SHOAL_FUZZ_SECONDS:-5}" = 0 ]; then
    echo "1..0 # SKIP SHOAL_FUZZ_SECONDS=0"
    exit 0
fi
exec tests/fuzz/run.sh "${SHOAL_FUZZ_SECONDS:-5}"
