#!/bin/bash
# The shared libraries export exactly what the public headers declare:
# every function of include/shoal.h is a defined function symbol of
# $BUILD/libshoal.so, and every function of include/nccl.h (each ncclX
# and pncclX) one of $BUILD/libnccl.so.2; neither library exports any
# other function or object. The declared names come from the headers
# themselves, preprocessed by the compiler (tests/symbols.sh), so a
# function added to a header and forgotten in src/shoal.map, or a symbol
# that leaks through the version script, fails here. BUILD names the build
# directory. test_nccl_symbols.sh checks libnccl.so.2 against NVIDIA's own
# headers and library (weak and strong twins, the vendor's list of
# functions); what NVIDIA's library exports beyond nccl.h (the device API's
# host halves, declared by the toolkit's C++ nccl_device headers, and
# ncclResetDebugInitInternal) is NCCL_EXTRA here.
set -u
cd "$(dirname "$0")/.." || exit 1
BUILD=${BUILD:-build}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/shoal_exports.XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT INT TERM

# shellcheck source=tests/tap.sh
. tests/tap.sh
# shellcheck source=tests/symbols.sh
. tests/symbols.sh

# The pairs checked: a header and the library that implements it.
HEADERS=(include/shoal.h include/nccl.h)
LIBS=("$BUILD/libshoal.so" "$BUILD/libnccl.so.2")
NCCL_EXTRA=(ncclDevCommCreate ncclDevCommDestroy ncclTeamWorld ncclTeamLsa ncclTeamRail
            ncclTeamRankToWorld ncclTeamRankToLsa ncclLsaBarrierCreateRequirement
            ncclGinBarrierCreateRequirement ncclLLA2ACalcSlots ncclLLA2ACreateRequirement)

# nm's letters for defined functions (text, weak, indirect) and objects
# (data, bss, read-only, weak object, small data and bss, unique global).
FUNC_TYPES=TWi
OBJ_TYPES=DBRVGSu

# Every name of DECLARED ("F name" / "O name") is a symbol of SYMS
# ("ADDRESS TYPE NAME") of the matching kind.
all_exported() {
    awk -v ft="$FUNC_TYPES" -v ot="$OBJ_TYPES" '
        FILENAME == ARGV[1] { type[$3] = $2; next }
        { want = $1 == "F" ? ft : ot
          what = $1 == "F" ? "function" : "object"
          if (!($2 in type)) { print $2 " (" what ") is not exported"; bad = 1 }
          else if (index(want, type[$2]) == 0) {
              print $2 " (" what ") is exported with type " type[$2]; bad = 1 } }
        END { exit bad }' "$2" "$1"
}

# SYMS holds no symbol, function, object or other, that DECLARED does not
# name.
nothing_else() {
    awk '
        FILENAME == ARGV[1] { declared[$2] = 1; next }
        !($3 in declared) { print $3 " (type " $2 ") is exported but not declared"; bad = 1 }
        END { exit bad }' "$1" "$2"
}

echo "1..$((3 * ${#HEADERS[@]}))"
for i in "${!HEADERS[@]}"; do
    header=${HEADERS[$i]}
    lib=${LIBS[$i]}
    tag=$(basename "$header" .h)
    if declared_names "$header" >"$TMP/$tag.declared" 2>"$TMP/$tag.err" &&
        [ -s "$TMP/$tag.declared" ]; then
        pass "$header declares $(wc -l <"$TMP/$tag.declared") functions and objects"
    else
        fail "$header declares functions (read through ${CC:-cc} -E)"
        show "$TMP/$tag.err"
    fi
    if [ "$tag" = nccl ]; then
        for f in "${NCCL_EXTRA[@]}"; do
            printf 'F %s\nF p%s\n' "$f" "$f"
        done >>"$TMP/$tag.declared"
        echo "F ncclResetDebugInitInternal" >>"$TMP/$tag.declared"
    fi
    if [ ! -r "$lib" ] || ! dynamic_symbols "$lib" >"$TMP/$tag.syms" 2>"$TMP/$tag.err"; then
        fail "the dynamic symbols of $lib can be read"
        show "$TMP/$tag.err"
        fail "$lib exports nothing else"
        continue
    fi
    if all_exported "$TMP/$tag.declared" "$TMP/$tag.syms" >"$TMP/$tag.out"; then
        pass "every function $header declares is exported by $lib"
    else
        fail "every function $header declares is exported by $lib"
        show "$TMP/$tag.out"
    fi
    if [ -s "$TMP/$tag.declared" ] &&
        nothing_else "$TMP/$tag.declared" "$TMP/$tag.syms" >"$TMP/$tag.out"; then
        pass "$lib exports nothing that $header does not declare"
    else
        fail "$lib exports nothing that $header does not declare"
        show "$TMP/$tag.out"
    fi
done
