#!/bin/bash
# libnccl.so.2 exports what NVIDIA's 2.28.9 does plus NCCL 2.30's functions
# that shoal's include/nccl.h declares, and nothing else: every function of
# its nccl.h, the host halves of its device API (nccl_device/*.h's __host__
# functions) and the 2.30 ones, each as a weak ncclX and a strong
# pncclX at the same address (so a profiler can interpose ncclX and call
# on to pncclX), ncclResetDebugInitInternal strong and alone, no other
# defined dynamic symbol, soname libnccl.so.2; and, where the toolkit has
# NVIDIA's library ($CUDA_HOME/lib64/libnccl.so.2), the same names with the
# same types as it exports, with 2.30's beside them. The list of nccl.h's
# functions comes from the
# vendor header ($CUDA_HOME/include/nccl.h), read as tests/nccl_abi_gen.sh
# reads it. BUILD names the build directory; LIBNCCL may name another
# library to check. test_exports.sh checks the library against shoal's own
# include/nccl.h.
set -u
cd "$(dirname "$0")/.." || exit 1
BUILD=${BUILD:-build}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
LIBNCCL=${LIBNCCL:-$BUILD/libnccl.so.2}
HEADER=$CUDA_HOME/include/nccl.h
VENDOR_LIB=$CUDA_HOME/lib64/libnccl.so.2
NFUNCS=41 # functions of NCCL 2.28's nccl.h
NDEVFUNCS=11 # host functions of its device API
# Exported by NVIDIA's library without being declared, and without a twin.
LONE=ncclResetDebugInitInternal

if [ ! -r "$HEADER" ]; then
    echo "1..0 # SKIP no vendor header at $HEADER"
    exit 0
fi
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
# shellcheck source=tests/symbols.sh
. tests/symbols.sh

n=0
check() {
    local what=$1
    shift
    n=$((n + 1))
    if "$@" >"$TMP/check.out" 2>&1; then
        echo "ok $n - $what"
    else
        echo "not ok $n - $what"
        sed 's/^/# /' "$TMP/check.out"
    fi
}

# The header's functions, then the device API's: ncclX, one a line.
expected_functions() {
    bash tests/nccl_abi_gen.sh --functions "$HEADER" >"$TMP/funcs" || return 1
    local count
    count=$(wc -l <"$TMP/funcs")
    [ "$count" -eq "$NFUNCS" ] || { echo "$count functions, not $NFUNCS"; return 1; }
    grep -h 'NCCL_EXTERN_C[[:space:]]\+__host__' "$CUDA_HOME"/include/nccl_device/*.h |
        sed -n 's/^.*[[:space:]*]\([A-Za-z_][A-Za-z0-9_]*\)[[:space:]]*(.*$/\1/p' |
        sort -u >"$TMP/devfuncs"
    count=$(wc -l <"$TMP/devfuncs")
    [ "$count" -eq "$NDEVFUNCS" ] || { echo "$count device API functions, not $NDEVFUNCS"; return 1; }
    cat "$TMP/devfuncs" >>"$TMP/funcs"
    # 2.30's: what shoal's header declares beyond the vendor's.
    declared_names include/nccl.h | awk '$1 == "F" && $2 !~ /^p/ { print $2 }' | sort \
        >"$TMP/ours" || return 1
    sort "$TMP/funcs" | comm -23 "$TMP/ours" - >"$TMP/funcs230"
    [ -s "$TMP/funcs230" ] || { echo "include/nccl.h declares no 2.30 function"; return 1; }
    echo "2.30's:" $(cat "$TMP/funcs230")
    cat "$TMP/funcs230" >>"$TMP/funcs"
}

lone_symbol() {
    awk -v s="$LONE" '$3 == s { found = 1; if ($2 != "T") { print s " has type " $2; exit 1 } }
                      END { if (!found) { print s " is not defined"; exit 1 } }' "$TMP/syms"
}

# The names and types of the defined dynamic symbols are the vendor
# library's.
same_as_vendor() {
    { dynamic_symbols "$VENDOR_LIB" | awk '{ print $3, $2 }' &&
        awk '{ print $1, "W"; print "p" $1, "T" }' "$TMP/funcs230"; } | sort >"$TMP/vendor" ||
        return 1
    awk '{ print $3, $2 }' "$TMP/syms" | sort >"$TMP/ours"
    diff "$TMP/vendor" "$TMP/ours" >"$TMP/diff" && return 0
    sed 's/^</vendor only:/; s/^>/door only:/' "$TMP/diff" | grep 'only:'
    return 1
}

soname() {
    local name
    name=$(readelf -d "$LIBNCCL" | sed -n 's/.*(SONAME).*\[\(.*\)\].*/\1/p')
    [ "$name" = libnccl.so.2 ] || { echo "soname is '$name'"; return 1; }
}

# "ADDRESS TYPE NAME" of every defined dynamic symbol (tests/symbols.sh).
defined_symbols() {
    dynamic_symbols "$LIBNCCL" >"$TMP/syms"
}

# Every name of the list (with prefix $1) is a symbol of type $2.
all_of_type() {
    awk -v prefix="$1" -v type="$2" '
        FILENAME == ARGV[1] { t[$3] = $2; next }
        { s = prefix $1
          if (!(s in t)) { print s " is not defined"; bad = 1 }
          else if (t[s] != type) { print s " has type " t[s] ", not " type; bad = 1 } }
        END { exit bad }' "$TMP/syms" "$TMP/funcs"
}

same_address() {
    awk 'FILENAME == ARGV[1] { a[$3] = $1; next }
         { f = $1
           if (!(f in a) || !(("p" f) in a) || a[f] != a["p" f]) {
               print f " at " (f in a ? a[f] : "nowhere") ", p" f " at " \
                   (("p" f) in a ? a["p" f] : "nowhere")
               bad = 1
           } }
         END { exit bad }' "$TMP/syms" "$TMP/funcs"
}

nothing_else() {
    { sed 's/^/p/' "$TMP/funcs"; cat "$TMP/funcs"; echo "$LONE"; } | sort >"$TMP/wanted"
    cut -d' ' -f3 "$TMP/syms" | sort >"$TMP/have"
    local extra
    extra=$(comm -13 "$TMP/wanted" "$TMP/have")
    [ -z "$extra" ] || { echo "also defined:" "${extra//$'\n'/ }"; return 1; }
}

REST=("soname libnccl.so.2" "every ncclX is weak (W)" "every pncclX is strong (T)"
      "each ncclX has its pncclX's address" "$LONE is strong (T)"
      "no other defined dynamic symbol"
      "the same names and types as $VENDOR_LIB, and 2.30's functions")
fail_rest() {
    echo "# $1"
    for what in "${REST[@]}"; do
        n=$((n + 1))
        echo "not ok $n - $what"
    done
    exit 0
}

echo "1..$((1 + ${#REST[@]}))"
check "the vendor headers declare $NFUNCS + $NDEVFUNCS functions, shoal's nccl.h 2.30's more" \
    expected_functions
[ -s "$TMP/funcs" ] || fail_rest "no list of functions from $HEADER"
if [ ! -r "$LIBNCCL" ] || ! defined_symbols; then
    fail_rest "cannot read the dynamic symbols of $LIBNCCL"
fi
check "${REST[0]}" soname
check "${REST[1]}" all_of_type "" W
check "${REST[2]}" all_of_type p T
check "${REST[3]}" same_address
check "${REST[4]}" lone_symbol
check "${REST[5]}" nothing_else
if [ -r "$VENDOR_LIB" ]; then
    check "${REST[6]}" same_as_vendor
else
    n=$((n + 1))
    echo "ok $n - ${REST[6]} # SKIP no $VENDOR_LIB"
fi
