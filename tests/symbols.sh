# Shared by the TAP scripts that compare a library's dynamic symbols with
# a header (test_exports.sh, test_nccl_symbols.sh), sourced from the
# repository root. CC (default cc) preprocesses headers.
# shellcheck shell=bash

# declared_names HEADER [CPPFLAGS...]: what HEADER itself declares with
# external linkage, one "F name" (function) or "O name" (object) a line.
# The compiler preprocesses the header, so macros, conditionals and the
# headers it includes are resolved as a user's program sees them; only the
# lines that come from HEADER itself are read. Those are cut into
# top-level declarations (string literals emptied, attributes and asm
# labels dropped), and each declarator is classified: a name followed by a
# parameter list is a function, "(*name)" and the declarators of an extern
# declaration without one are objects. typedefs, tag definitions and
# static (inline) functions declare no symbol and are left out.
declared_names() {
    local header=$1
    shift
    local dir base
    dir=$(dirname "$header")
    base=$(basename "$header")
    printf '#include "%s"\n' "$base" | ${CC:-cc} -E -std=c11 -I"$dir" "$@" -x c - |
        awk -v want="$dir/$base" '
        # Line markers: # LINE "FILE" FLAGS...
        /^# [0-9]+ "/ {
            f = $0; sub(/^# [0-9]+ "/, "", f); sub(/".*/, "", f)
            mine = f == want
            next
        }
        /^#/ { next }
        mine { text = text " " $0 }

        function trim(s) { gsub(/^[ \t]+|[ \t]+$/, "", s); return s }

        # s with every "KEYWORD(...)" (balanced) removed.
        function drop_calls(s, keyword,    out, i, j, depth, c) {
            out = ""
            while (match(s, "(^|[^A-Za-z0-9_])" keyword "[ \t]*[(]")) {
                i = RSTART + RLENGTH - 1 # the opening parenthesis
                depth = 0
                for (j = i; j <= length(s); j++) {
                    c = substr(s, j, 1)
                    if (c == "(") depth++
                    else if (c == ")" && --depth == 0) break
                }
                out = out substr(s, 1, RSTART) " "
                s = substr(s, j + 1)
            }
            return out s
        }

        # The name a declarator declares, and whether it is a function.
        function declarator(d,    pos, rest, name) {
            d = trim(d)
            sub(/=.*/, "", d) # an initializer
            pos = index(d, "(")
            if (pos == 0) {
                sub(/\[.*/, "", d)
                name = trim(d); sub(/.*[^A-Za-z0-9_]/, "", name)
                return "O " name
            }
            rest = substr(d, pos + 1)
            if (rest ~ /^[ \t]*\*/) {
                # (*name)...: a pointer object, unless a parameter list
                # follows the name (a function that returns a pointer to
                # a function or an array).
                sub(/^([ \t]*\*|[ \t]*(const|volatile|restrict)[^A-Za-z0-9_])+[ \t]*/, "", rest)
                name = rest; sub(/[^A-Za-z0-9_].*/, "", name)
                rest = trim(substr(rest, length(name) + 1))
                return (rest ~ /^\(/ ? "F " : "O ") name
            }
            name = trim(substr(d, 1, pos - 1)); sub(/.*[^A-Za-z0-9_]/, "", name)
            return "F " name
        }

        function statement(s, is_def,    n, parts, i, depth, c, cur, first, spec) {
            s = trim(s)
            if (s == "" || s ~ /^typedef[^A-Za-z0-9_]/ || s ~ /(^|[^A-Za-z0-9_])static[^A-Za-z0-9_]/)
                return
            if (is_def) {
                print declarator(s)
                return
            }
            # Split the declarators at the top-level commas.
            n = 0; depth = 0; cur = ""
            for (i = 1; i <= length(s); i++) {
                c = substr(s, i, 1)
                if (c == "(" || c == "[") depth++
                else if (c == ")" || c == "]") depth--
                if (c == "," && depth == 0) { parts[++n] = cur; cur = ""; continue }
                cur = cur c
            }
            parts[++n] = cur
            first = declarator(parts[1])
            # Without a parameter list, only an extern declaration declares
            # an object here; anything else would be a definition in a header.
            if (first ~ /^O / && s !~ /(^|[^A-Za-z0-9_])extern[^A-Za-z0-9_]/ && s !~ /\(/)
                return
            print first
            # Later declarators share the specifiers of the first.
            for (i = 2; i <= n; i++)
                print declarator(parts[i])
        }

        END {
            gsub(/"([^"\\]|\\.)*"/, "\"\"", text)
            gsub(/\047([^\047\\]|\\.)*\047/, "0", text)
            text = drop_calls(text, "__attribute__")
            text = drop_calls(text, "__asm__")
            text = drop_calls(text, "asm")
            gsub(/(^|[^A-Za-z0-9_])__extension__([^A-Za-z0-9_]|$)/, " ", text)
            depth = 0; cur = ""; braced = ""
            for (i = 1; i <= length(text); i++) {
                c = substr(text, i, 1)
                if (c == "{") {
                    if (depth == 0) braced = cur
                    depth++
                } else if (c == "}") {
                    depth--
                    if (depth == 0 && trim(braced) ~ /\)$/) {
                        # A function body: the definition ends here.
                        statement(braced, 1)
                        cur = ""; braced = ""
                        continue
                    }
                }
                if (c == ";" && depth == 0) { statement(cur, 0); cur = ""; continue }
                if (depth > 0 && c != "{" && c != "}") continue # tag bodies are not kept
                cur = cur c
            }
            if (trim(cur) != "") { print "declared_names: text after the last declaration: " cur > "/dev/stderr"; exit 1 }
        }' | sort -u
}

# dynamic_symbols LIB: "ADDRESS TYPE NAME" of every defined dynamic symbol
# of LIB, sorted by name, with any version suffix (name@@NODE) dropped;
# version nodes themselves (absolute symbols named as a version
# definition) are left out.
dynamic_symbols() {
    local lib=$1 nodes
    nodes=$(readelf -V "$lib" | sed -n '/\.gnu\.version_d/,/^$/s/.*Name: \([^ ]*\).*/\1/p' |
        sort -u) || return 1
    nm -D --defined-only "$lib" | awk -v nodes="$nodes" '
        BEGIN { n = split(nodes, list, "\n"); for (i = 1; i <= n; i++) node[list[i]] = 1 }
        NF == 3 { sub(/@.*/, "", $3); if (!($2 == "A" && $3 in node)) print $1, $2, $3 }' |
        sort -k3
    return "${PIPESTATUS[0]}"
}
