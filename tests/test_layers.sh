#!/bin/bash
# check-layers: the tree's include and call arrows point down the layers of
# docs/architecture.md (with scripts/layers_allow.txt); and the checker
# itself fails on a planted upward include and a planted upward call, and
# names them.
set -u
cd "$(dirname "$0")/.."
. tests/tap.sh
BUILD=${BUILD:-build}
CC=${CC:-cc}
CHECK="python3 scripts/check_layers.py"

if ! command -v python3 >/dev/null 2>&1 || ! command -v nm >/dev/null 2>&1; then
    missing_all "python3 or nm missing"
fi
echo "1..6"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

if $CHECK --build "$BUILD" >"$tmp/tree.out" 2>&1; then
    pass "the tree's includes and calls point down"
else
    fail "the tree's includes and calls point down"
    show "$tmp/tree.out"
fi

# A copy of the sources with an upward include planted in base/.
mkdir -p "$tmp/copy/scripts"
cp -r src include docs "$tmp/copy/"
cp scripts/layers_allow.txt "$tmp/copy/scripts/"
printf '#include "algos/algo.h"\n' >"$tmp/copy/src/base/planted.c"
if $CHECK --root "$tmp/copy" >"$tmp/plant.out" 2>&1; then
    fail "a planted upward include fails the check"
else
    pass "a planted upward include fails the check"
fi
check "the check names the planted include and its layers" \
    grep -q '^src/base/planted.c: includes src/algos/algo.h (layer base -> layer algos)' \
    "$tmp/plant.out" || show "$tmp/plant.out"

# A mini tree whose base object calls a function that core defines.
mini=$tmp/mini
mkdir -p "$mini/docs" "$mini/src/base" "$mini/src/core" "$mini/build/src/base" \
    "$mini/build/src/core"
printf '```layers\nbase: src/base\ncore: src/core\n```\n' >"$mini/docs/architecture.md"
printf 'int up(void);\nint down(void) { return up(); }\n' >"$mini/src/base/low.c"
printf 'int down(void);\nint up(void) { return 1; }\nint top(void) { return down(); }\n' \
    >"$mini/src/core/high.c"
$CC -c "$mini/src/base/low.c" -o "$mini/build/src/base/low.o" &&
    $CC -c "$mini/src/core/high.c" -o "$mini/build/src/core/high.o"
if $CHECK --root "$mini" --build "$mini/build" >"$tmp/mini.out" 2>&1; then
    fail "a planted upward call fails the check"
else
    pass "a planted upward call fails the check"
fi
check "the check names the upward call, not the downward one" \
    bash -c "grep -q '^src/base/low.c: calls up (layer base -> layer core' '$tmp/mini.out' &&
             ! grep -q 'calls down' '$tmp/mini.out'" || show "$tmp/mini.out"

# The allow-list lets a known arrow through, so work in flight can land.
echo "src/base/low.c: calls up" >"$mini/allow.txt"
if $CHECK --root "$mini" --build "$mini/build" --allow "$mini/allow.txt" >"$tmp/allow.out" 2>&1
then
    pass "an allow-listed arrow passes"
else
    fail "an allow-listed arrow passes"
    show "$tmp/allow.out"
fi
