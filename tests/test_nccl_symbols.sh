#!/bin/bash
# libnccl.so.2 exports what NVIDIA's does for the API of its nccl.h, and
# nothing else: every function as a weak ncclX and a strong pncclX at the
# same address (so a profiler can interpose ncclX and call on to pncclX),
# no other defined dynamic symbol, soname libnccl.so.2. The list of
# functions comes from the vendor header ($CUDA_HOME/include/nccl.h), read
# as tests/nccl_abi_gen.sh reads it. BUILD names the build directory;
# LIBNCCL may name another library to check (the vendor's fails: it exports
# more). test_exports.sh checks the library against shoal's own
# include/nccl.h.
set -u
cd "$(dirname "$0")/.." || exit 1
BUILD=${BUILD:-build}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
LIBNCCL=${LIBNCCL:-$BUILD/libnccl.so.2}
HEADER=$CUDA_HOME/include/nccl.h
NFUNCS=41 # functions of NCCL 2.28's nccl.h

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

# The header's functions: ncclX, one a line.
expected_functions() {
    bash tests/nccl_abi_gen.sh --functions "$HEADER" >"$TMP/funcs" || return 1
    local count
    count=$(wc -l <"$TMP/funcs")
    [ "$count" -eq "$NFUNCS" ] || { echo "$count functions, not $NFUNCS"; return 1; }
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
    sed 's/^/p/' "$TMP/funcs" | cat "$TMP/funcs" - | sort >"$TMP/wanted"
    cut -d' ' -f3 "$TMP/syms" | sort >"$TMP/have"
    local extra
    extra=$(comm -13 "$TMP/wanted" "$TMP/have")
    [ -z "$extra" ] || { echo "also defined:" "${extra//$'\n'/ }"; return 1; }
}

REST=("soname libnccl.so.2" "every ncclX is weak (W)" "every pncclX is strong (T)"
      "each ncclX has its pncclX's address" "no other defined dynamic symbol")
fail_rest() {
    echo "# $1"
    for what in "${REST[@]}"; do
        n=$((n + 1))
        echo "not ok $n - $what"
    done
    exit 0
}

echo "1..$((1 + ${#REST[@]}))"
check "the vendor header declares $NFUNCS functions, each with its pncclX" expected_functions
[ -s "$TMP/funcs" ] || fail_rest "no list of functions from $HEADER"
if [ ! -r "$LIBNCCL" ] || ! defined_symbols; then
    fail_rest "cannot read the dynamic symbols of $LIBNCCL"
fi
check "${REST[0]}" soname
check "${REST[1]}" all_of_type "" W
check "${REST[2]}" all_of_type p T
check "${REST[3]}" same_address
check "${REST[4]}" nothing_else
