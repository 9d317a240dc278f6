#!/bin/bash
# nccl_abi_gen.sh VENDOR_NCCL_H OUT_H
# nccl_abi_gen.sh --functions VENDOR_NCCL_H
#
# Writes OUT_H: the ABI of NVIDIA's nccl.h (VENDOR_NCCL_H) as checks that a
# program including shoal's nccl.h and then OUT_H must pass to compile:
#   - _Static_assert on every enumerator, every numeric macro (value and
#     type), NCCL_VERSION at a few versions, sizeof/_Alignof of every struct
#     and enum, offsetof and type of every struct field, and the types that
#     the typedefs name;
#   - every function prototype of the vendor header, declared again, so a
#     declaration of shoal's that differs is a "conflicting types" error;
#   - shoal_nccl_abi_check_values(), for what C cannot compare at compile
#     time (floating, string and null-pointer macros, the fields of the
#     *_INITIALIZER macros): it prints "# ..." for each difference and
#     returns their number.
# The numbers come from a probe program compiled against the vendor header
# (with CC, default cc, and the header's directory on the include path);
# the names, field types and prototypes from the header's text. A form of
# declaration or macro the script does not know is an error, so a newer
# vendor header cannot pass unchecked.
#
# With --functions it prints the names of the header's ncclX functions
# instead, one a line (each has a pncclX twin, or the script fails), for
# tests that need the list (test_nccl_symbols.sh).
set -euo pipefail

if [ $# -eq 2 ] && [ "$1" = --functions ]; then
    vendor=$2
    out=
elif [ $# -eq 2 ] && [ "${1#-}" = "$1" ]; then
    vendor=$1
    out=$2
else
    echo "usage: $0 VENDOR_NCCL_H OUT_H | $0 --functions VENDOR_NCCL_H" >&2
    exit 2
fi
CC=${CC:-cc}
[ -r "$vendor" ] || { echo "$0: cannot read $vendor" >&2; exit 1; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# ---- 1. The header's declarations, one record per line ---------------------
# PROTO  name  prototype        (attributes dropped, "()" written "(void)")
# ENUM   type  enumerator...
# STRUCT type  tag  type|name;type|name;...
# TYPEDEF name type
# MACRO  name  (params) or -    value
# Comments go first; directives are joined across continuation lines;
# whatever sits under "#if...__cplusplus" is C++ only and skipped; the rest
# is cut into statements at the semicolons outside braces.
awk '
function trim(s) { gsub(/^[ \t]+|[ \t]+$/, "", s); return s }
function squeeze(s) { gsub(/[ \t]+/, " ", s); return trim(s) }
function fail(msg) { print "nccl_abi_gen: " msg > "/dev/stderr"; bad = 1 }

# Strips an __attribute__((...)) that starts s.
function drop_attribute(s,    i, depth, c) {
    if (s !~ /^__attribute__/)
        return s
    depth = 0
    for (i = 1; i <= length(s); i++) {
        c = substr(s, i, 1)
        if (c == "(") depth++
        else if (c == ")" && --depth == 0) return trim(substr(s, i + 1))
    }
    return s
}

function statement(s,    name, body, n, items, i, item, fields, decl, ftype, fname, rest) {
    s = squeeze(drop_attribute(squeeze(s)))
    if (s == "")
        return
    if (s ~ /^typedef enum/) {
        name = s; sub(/.*}[ ]*/, "", name)
        body = s; sub(/^[^{]*{/, "", body); sub(/}[^}]*$/, "", body)
        n = split(body, items, ",")
        rest = ""
        for (i = 1; i <= n; i++) {
            item = trim(items[i]); sub(/[ ]*=.*/, "", item)
            if (item != "") rest = rest " " item
        }
        print "ENUM\t" name "\t" trim(rest)
    } else if (s ~ /^typedef struct [A-Za-z0-9_]*[ ]*{/) {
        name = s; sub(/.*}[ ]*/, "", name)
        tag = s; sub(/^typedef struct[ ]*/, "", tag); sub(/[ ]*{.*/, "", tag)
        body = s; sub(/^[^{]*{/, "", body); sub(/}[^}]*$/, "", body)
        n = split(body, items, ";")
        fields = ""
        for (i = 1; i <= n; i++) {
            decl = trim(items[i])
            if (decl == "") continue
            if (decl ~ /,/) { fail("several fields in one declaration: " decl); continue }
            rest = ""
            if (match(decl, /\[[^]]*\]$/)) { rest = substr(decl, RSTART); decl = trim(substr(decl, 1, RSTART - 1)) }
            if (!match(decl, /[A-Za-z_][A-Za-z0-9_]*$/)) { fail("field: " decl); continue }
            fname = substr(decl, RSTART)
            ftype = trim(substr(decl, 1, RSTART - 1))
            fields = fields ftype rest "|" fname ";"
        }
        print "STRUCT\t" name "\t" (tag == "" ? "-" : tag) "\t" fields
    } else if (s ~ /^typedef /) {
        if (!match(s, /[A-Za-z_][A-Za-z0-9_]*$/)) { fail("typedef: " s); return }
        print "TYPEDEF\t" substr(s, RSTART) "\t" trim(substr(s, 9, RSTART - 9))
    } else if (match(s, /p?nccl[A-Za-z0-9_]*[ ]*\(/)) {
        name = substr(s, RSTART, RLENGTH); sub(/[ ]*\($/, "", name)
        gsub(/\([ ]*\)/, "(void)", s)
        print "PROTO\t" name "\t" s ";"
    } else {
        fail("unknown declaration: " s)
    }
}

function directive(d,    name, params, value) {
    d = squeeze(d)
    if (d ~ /^#[ ]*(if|ifdef|ifndef)/) {
        depth++
        if (skip_from == 0 && d ~ /__cplusplus/ && d !~ /^#[ ]*ifndef/ && d !~ /!/)
            skip_from = depth
        return
    }
    if (d ~ /^#[ ]*else/ || d ~ /^#[ ]*elif/) {
        if (skip_from == depth) skip_from = -depth   # the C side of a C++ test
        else if (skip_from == -depth) skip_from = depth
        return
    }
    if (d ~ /^#[ ]*endif/) {
        if (skip_from == depth || skip_from == -depth) skip_from = 0
        depth--
        return
    }
    if (skip_from > 0 || d !~ /^#[ ]*define /)
        return
    sub(/^#[ ]*define /, "", d)
    match(d, /^[A-Za-z_][A-Za-z0-9_]*/)
    name = substr(d, 1, RLENGTH)
    d = substr(d, RLENGTH + 1)
    params = "-"
    if (d ~ /^\(/) { params = d; sub(/\).*/, ")", params); sub(/^[^)]*\)/, "", d) }
    print "MACRO\t" name "\t" params "\t" trim(d)
}

{
    # Comments out, keeping a space where each was.
    line = $0; text = ""
    while (line != "") {
        if (in_comment) {
            i = index(line, "*/")
            if (!i) { line = ""; break }
            line = substr(line, i + 2); in_comment = 0; text = text " "
        } else {
            i = index(line, "/*"); j = index(line, "//")
            if (j && (!i || j < i)) { text = text substr(line, 1, j - 1); line = ""; break }
            if (!i) { text = text line; line = ""; break }
            text = text substr(line, 1, i - 1); line = substr(line, i + 2); in_comment = 1
        }
    }
    if (in_directive || text ~ /^[ \t]*#/) {
        cont = text ~ /\\[ \t]*$/
        if (cont) sub(/\\[ \t]*$/, "", text)
        dir = dir " " text
        in_directive = cont
        if (!cont) { directive(dir); dir = "" }
        next
    }
    if (skip_from > 0)
        next
    for (k = 1; k <= length(text); k++) {
        c = substr(text, k, 1)
        if (c == "{") braces++
        else if (c == "}") braces--
        if (c == ";" && braces == 0) { statement(stmt); stmt = "" }
        else stmt = stmt c
    }
    stmt = stmt " "
}
END {
    if (trim(stmt) != "") fail("text after the last declaration: " trim(stmt))
    exit bad
}
' "$vendor" >"$tmp/decls"


# Every ncclX needs its pncclX and the other way round.
grep '^PROTO' "$tmp/decls" | cut -f2 | sort >"$tmp/funcs"
grep -v '^p' "$tmp/funcs" >"$tmp/plain" || true
sed -n 's/^p//p' "$tmp/funcs" >"$tmp/profiled"
if ! cmp -s "$tmp/plain" "$tmp/profiled"; then
    echo "$0: nccl and pnccl functions of $vendor do not pair up:" >&2
    diff "$tmp/plain" "$tmp/profiled" >&2 || true
    exit 1
fi
nfuncs=$(wc -l <"$tmp/plain")
[ "$nfuncs" -gt 0 ] || { echo "$0: no functions found in $vendor" >&2; exit 1; }
if [ -z "$out" ]; then
    cat "$tmp/plain"
    exit 0
fi

# ---- 2. The probe: the vendor header's numbers, printed as C ---------------
# Static checks go to stdout with "S ", run-time checks with "R ".
{
    cat <<'HEAD'
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include VENDOR_NCCL_H

#define TYPE_NAME(x) _Generic((x), \
    int: "int", unsigned int: "unsigned int", long: "long", unsigned long: "unsigned long", \
    long long: "long long", unsigned long long: "unsigned long long", float: "float", \
    double: "double", default: NULL)

/* An integer constant: its value, and its type where it is not an enum's. */
static void num(const char *text, long long v, int is_unsigned, const char *type)
{
    if (is_unsigned)
        printf("S _Static_assert((%s) == %lluULL, \"%s must be %llu, as in NCCL\");\n", text,
               (unsigned long long)v, text, (unsigned long long)v);
    else
        printf("S _Static_assert((%s) == %lldLL, \"%s must be %lld, as in NCCL\");\n", text, v,
               text, v);
    if (type)
        printf("S _Static_assert(_Generic((%s), %s: 1, default: 0), \"%s must be of type %s, as "
               "in NCCL\");\n", text, type, text, type);
}
#define NUM(text, x, typed) num(text, (long long)(x), (x) > 0 && (long long)(x) < 0, \
                                (typed) ? TYPE_NAME(x) : NULL)

static void real(const char *text, double v, const char *type)
{
    printf("R SHOAL_ABI_EXPECT((%s) == %a, \"%s is %%a, NCCL's is %a\", (double)(%s));\n",
           text, v, text, v, text);
    printf("S _Static_assert(_Generic((%s), %s: 1, default: 0), \"%s must be of type %s, as in "
           "NCCL\");\n", text, type, text, type);
}

static void str(const char *text, const char *v)
{
    printf("R SHOAL_ABI_EXPECT(!strcmp(%s, \"", text);
    for (const char *p = v; *p; p++)
        printf(*p == '"' || *p == '\\' ? "\\%c" : "%c", *p);
    printf("\"), \"%s differs from NCCL's\");\n", text);
}

static void null(const char *text, const void *v)
{
    if (v)
        printf("S #error \"%s is not a null pointer in NCCL: unknown to nccl_abi_gen.sh\"\n", text);
    printf("R SHOAL_ABI_EXPECT((%s) == NULL, \"%s is not NULL as in NCCL\");\n", text, text);
}

/* A field of an initializer macro, by the kind of its type. */
#define INIT_FIELD(init, var, f) _Generic((var.f), \
    float: init_real, double: init_real, \
    const char *: init_ptr, char *: init_ptr, void *: init_ptr, const void *: init_ptr, \
    default: init_int)(init, #f, var.f)
static void init_real(const char *init, const char *f, double v)
{
    printf("R SHOAL_ABI_EXPECT(abi_init.%s == %a, \"%s: %s is %%a, NCCL's is %a\", "
           "(double)abi_init.%s);\n", f, v, init, f, v, f);
}
static void init_ptr(const char *init, const char *f, const void *v)
{
    if (v)
        printf("S #error \"%s: %s is not NULL in NCCL: unknown to nccl_abi_gen.sh\"\n", init, f);
    printf("R SHOAL_ABI_EXPECT(abi_init.%s == NULL, \"%s: %s is not NULL as in NCCL\");\n", f,
           init, f);
}
static void init_int(const char *init, const char *f, long long v)
{
    printf("R SHOAL_ABI_EXPECT((long long)abi_init.%s == %lldLL, \"%s: %s is %%lld, NCCL's is "
           "%lld\", (long long)abi_init.%s);\n", f, v, init, f, v, f);
}

int main(void)
{
HEAD

    while IFS=$'\t' read -r kind name a b; do
        case $kind in
        ENUM)
            echo "    NUM(\"sizeof($name)\", sizeof($name), 0);"
            echo "    NUM(\"_Alignof($name)\", _Alignof($name), 0);"
            echo "    NUM(\"($name)-1 > ($name)0\", ($name)-1 > ($name)0, 0);"
            for e in $a; do
                echo "    NUM(\"$e\", $e, 0);"
            done
            ;;
        STRUCT)
            echo "    NUM(\"sizeof($name)\", sizeof($name), 0);"
            echo "    NUM(\"_Alignof($name)\", _Alignof($name), 0);"
            IFS=';' read -r -a fields <<<"$b"
            for f in "${fields[@]}"; do
                [ -n "$f" ] || continue
                fname=${f#*|}
                echo "    NUM(\"offsetof($name, $fname)\", offsetof($name, $fname), 0);"
                echo "    NUM(\"sizeof((($name *)0)->$fname)\", sizeof((($name *)0)->$fname), 0);"
            done
            ;;
        MACRO)
            value=$b
            if [ "$a" != - ]; then
                if [ "$name" = NCCL_VERSION ]; then
                    for v in "2, 28, 9" "2, 8, 4" "2, 9, 0" "2, 10, 3" "3, 0, 1" "1, 9, 9"; do
                        echo "    NUM(\"NCCL_VERSION($v)\", NCCL_VERSION($v), 1);"
                    done
                else
                    echo "nccl_abi_gen: function-like macro $name$a is unknown to this script" >&2
                    exit 1
                fi
            elif [ -z "$value" ]; then
                : # the include guard
            elif [[ $value == '{'* ]]; then
                type=$(sed -n 's/^{ *sizeof *( *\([A-Za-z_0-9]*\) *).*/\1/p' <<<"$value")
                if [ -z "$type" ]; then
                    echo "nccl_abi_gen: $name does not start with sizeof(type)" >&2
                    exit 1
                fi
                echo "    { static const $type v = $name;"
                printf '      printf("R { const %s abi_init = %s;\\n");\n' "$type" "$name"
                init_fields=$(grep "^STRUCT"$'\t'"$type"$'\t' "$tmp/decls" | cut -f4)
                IFS=';' read -r -a flist <<<"$init_fields"
                for f in "${flist[@]}"; do
                    [ -n "$f" ] || continue
                    echo "      INIT_FIELD(\"$name\", v, ${f#*|});"
                done
                printf '%s\n' '      printf("R }\n"); }'
            elif [[ $value == '"'* ]]; then
                echo "    str(\"$name\", $name);"
            elif [ "$value" = NULL ]; then
                echo "    null(\"$name\", $name);"
            else
                echo "    _Generic(($name), float: real(\"$name\", (double)($name), \"float\"), double: real(\"$name\", (double)($name), \"double\"), default: NUM(\"$name\", $name, 1));"
            fi
            ;;
        esac
    done <"$tmp/decls"
    # The stream type is CUDA's: the prototypes hold it by name.
    echo '    if (__builtin_types_compatible_p(cudaStream_t, struct CUstream_st *))'
    printf '%s\n' '        printf("S _Static_assert(__builtin_types_compatible_p(cudaStream_t, struct CUstream_st *), \"cudaStream_t must be struct CUstream_st *, as in CUDA\");\n");'
    echo '    return 0;'
    echo '}'
} >"$tmp/probe.c"

# The probe's _Generic arms all compile for every macro; only one runs.
if ! "$CC" -std=gnu11 -w -I"$(dirname "$vendor")" -DVENDOR_NCCL_H="\"$(cd "$(dirname "$vendor")" && pwd)/$(basename "$vendor")\"" \
        "$tmp/probe.c" -o "$tmp/probe" 2>"$tmp/probe.err"; then
    echo "$0: the probe does not compile against $vendor:" >&2
    cat "$tmp/probe.err" >&2
    exit 1
fi
"$tmp/probe" >"$tmp/values"

# ---- 3. The header ---------------------------------------------------------
{
    cat <<EOF
/* Generated by tests/nccl_abi_gen.sh from $vendor: do not edit.
 * Include after the nccl.h under test: a difference from the vendor's ABI
 * is a compile error, or (shoal_nccl_abi_check_values) a line of output. */
#ifndef SHOAL_NCCL_ABI_GEN_H
#define SHOAL_NCCL_ABI_GEN_H

#include <stddef.h>
#include <stdio.h>
#include <string.h>

#define SHOAL_NCCL_ABI_FUNCTIONS $nfuncs /* ncclX functions, and as many pncclX */

/* ---- values ---- */
EOF
    sed -n 's/^S //p' "$tmp/values"

    echo
    echo "/* ---- the types that typedefs and fields name ---- */"
    while IFS=$'\t' read -r kind name a b; do
        case $kind in
        TYPEDEF)
            echo "_Static_assert(__builtin_types_compatible_p($name, $a), \"$name must be $a, as in NCCL\");"
            ;;
        STRUCT)
            if [ "$a" != - ]; then
                echo "_Static_assert(__builtin_types_compatible_p($name, struct $a), \"$name must be struct $a, as in NCCL\");"
            fi
            IFS=';' read -r -a fields <<<"$b"
            for f in "${fields[@]}"; do
                [ -n "$f" ] || continue
                ftype=${f%|*}
                fname=${f#*|}
                echo "_Static_assert(__builtin_types_compatible_p(__typeof__((($name *)0)->$fname), $ftype), \"$name.$fname must be $ftype, as in NCCL\");"
            done
            ;;
        esac
    done <"$tmp/decls"

    echo
    echo "/* ---- the functions ---- */"
    echo "/* Each must be declared already (by the nccl.h under test), with the"
    echo " * type of its pnccl twin; deprecated ones are named here too. */"
    echo "#pragma GCC diagnostic push"
    echo "#pragma GCC diagnostic ignored \"-Wdeprecated-declarations\""
    while read -r f; do
        echo "_Static_assert(__builtin_types_compatible_p(__typeof__($f), __typeof__(p$f)), \"$f and p$f must have one type\");"
    done <"$tmp/plain"
    echo "#pragma GCC diagnostic pop"
    echo "/* As the vendor declares them: a declaration that differs does not compile. */"
    grep '^PROTO' "$tmp/decls" | cut -f3
    cat <<'EOF'

/* ---- what only a running program can compare ---- */
#define SHOAL_ABI_EXPECT(cond, ...)                                          \
    do {                                                                     \
        if (!(cond)) {                                                       \
            printf("# ");                                                    \
            printf(__VA_ARGS__);                                             \
            printf("\n");                                                    \
            failures++;                                                      \
        }                                                                    \
    } while (0)

static inline int shoal_nccl_abi_check_values(void)
{
    int failures = 0;
EOF
    sed -n 's/^R /    /p' "$tmp/values"
    cat <<'EOF'
    return failures;
}

#endif
EOF
} >"$tmp/out.h"
mv "$tmp/out.h" "$out"
