#!/bin/bash
# NCCL drop-in conformance: a program built against the vendor's nccl.h and
# libnccl.so.2 runs unchanged on shoal's libnccl.so.2 through LD_PRELOAD; the
# program itself proves (dladdr) that every nccl* call it makes lands in
# shoal's library, then checks every function of the header. Quiet when it
# passes; shoal's log follows a failure.
#
# BUILD names the build directory (default build): the program is
# $BUILD/tests/nccl_vendor_test and the library $BUILD/libnccl.so.2.
set -u
cd "$(dirname "$0")/.." || exit 1
BUILD=${BUILD:-build}
BIN=$BUILD/tests/nccl_vendor_test
LIB=$BUILD/libnccl.so.2
HEADER=${CUDA_HOME:-/usr/local/cuda}/include/nccl.h

missing=
[ -x "$BIN" ] || missing="$missing $BIN"
[ -f "$LIB" ] || missing="$missing $LIB"
if [ -n "$missing" ]; then
    # Without the vendor's NCCL there is nothing to build the program
    # against; in CI that is a broken runner, not a reason to pass.
    if [ "${CI:-}" != true ] && [ ! -f "$HEADER" ]; then
        echo "1..0 # SKIP $HEADER is absent: no vendor NCCL to build the program against"
        exit 0
    fi
    echo "1..1"
    echo "not ok 1 - NCCL drop-in conformance: missing:$missing"
    exit 1
fi

LIB=$(realpath "$LIB")
PRELOAD=$LIB
# A sanitizer build needs its runtime first in the initial library list,
# ahead of the preloaded library.
for rt in libasan libtsan; do
    so=$( { ldd "$BIN"; ldd "$LIB"; } 2>/dev/null |
        awk -v rt="$rt" 'index($1, rt ".so") == 1 { print $3; exit }')
    if [ -n "$so" ]; then
        PRELOAD=$so:$PRELOAD
    fi
done

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
# A rank that fails a check leaves its peers waiting: shoal's deadline ends
# that well before the program's own (60 s per case).
export SHOAL_TIMEOUT=${SHOAL_TIMEOUT:-20s}
# Bad-input cases make shoal log on purpose; keep that out of a passing run.
export SHOAL_DEBUG_FILE=${SHOAL_DEBUG_FILE:-$TMP/shoal.log}
export SHOAL_NCCL_LIB=$LIB
export CMOCKA_MESSAGE_OUTPUT=TAP
# Compression changes results that the other cases check bitwise: it stays
# off unless one case is picked (tests/test_nccl_compress.sh picks its own).
if [ -z "${NCCL_VENDOR_TEST_FILTER:-}" ]; then
    unset SHOAL_COMPRESS SHOAL_COMPRESS_MIN SHOAL_COMPRESS_ALLGATHER SHOAL_COMPRESS_REDUCESCATTER
fi

LD_PRELOAD=$PRELOAD${LD_PRELOAD:+:$LD_PRELOAD} "$BIN"
rc=$?
if [ "$rc" -ne 0 ] && [ -s "$TMP/shoal.log" ]; then
    echo "# shoal's log of the failed run:" >&2
    sed 's/^/#   /' "$TMP/shoal.log" | tail -n 400 >&2
fi
exit "$rc"
