#!/bin/sh
# The MPI door's Fortran entry points (src/mpi/fortran.c) as TAP for
# prove: tests/mpi/fortran_check.f90 (use mpi) and fortran_f08_check.f90
# (use mpi_f08), unchanged Fortran MPI programs, run at 1 to 3 ranks under
# Open MPI and under MPICH. With the door preloaded, each run must give
# the right results (the programs check them), and every rank's door must
# count all K of the program's collective calls (K, printed by the
# program, against the door's "MPI door: N calls taken, M passed to MPI"
# at finalize): seen (N + M = K: the Fortran calls reached the door, which
# under Open MPI they only do through fortran.c, Open MPI's Fortran
# bindings calling PMPI_*) and taken (N = K: shoal served them, which for
# the reductions needs the door's type table to know MPI_INTEGER and
# MPI_DOUBLE_PRECISION). Without the door, the same program on MPI alone
# gives the same results. Both bindings are intercepted under both MPIs.
# Run from the repository root (make test does).

TMP=$(mktemp -d "${TMPDIR:-/tmp}/shoal_mpi_fortran.XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT INT TERM

TAP_LIMIT_S=180
# shellcheck source=tests/tap.sh
. tests/tap.sh
# shellcheck source=tests/mpi_env.sh
. tests/mpi_env.sh
mpi_need ompi
mpi_need mpich

PROGS="fortran_check fortran_f08_check"

# The door's counts in OUT, "TAKEN PASSED" a line, one line a rank.
door_counts() {
    sed -n 's/.*MPI door: \([0-9]*\) calls taken, \([0-9]*\) passed to MPI.*/\1 \2/p' "$1"
}

# Every one of NP ranks of OUT counted K calls: with WHAT "seen",
# taken + passed; with WHAT "taken", taken alone.
all_counted() {
    door_counts "$1" | awk -v np="$2" -v k="$3" -v what="$4" '
        { n++; c = what == "taken" ? $1 : $1 + $2; if (c != k) bad = 1 }
        END { exit !(n == np && !bad) }'
}

echo "1..48"
for mpi in ompi mpich; do
    for name in $PROGS; do
        bin=$BUILD/tests/mpi/$name
        [ "$mpi" = ompi ] || bin=$bin.mpich
        if [ ! -x "$bin" ]; then
            for np in 1 2 3; do
                for what in "the door's results" "the door saw every call" \
                    "the door took every call" "MPI alone"; do
                    missing "$mpi, $name, $np ranks: $what" "$bin not built (no Fortran compiler?)"
                done
            done
            continue
        fi
        for np in 1 2 3; do
            out=$TMP/${mpi}_${name}_$np.txt
            mpi_run "$mpi" "$np" 1 "$BUILD/tests/mpi/$name" >"$out" 2>&1
            rc=$?
            k=$(sed -n "s/^ *$name: ok (\([0-9]*\) calls).*/\1/p" "$out" | head -n 1)
            what="$mpi, $name, $np ranks through the door"
            if [ "$rc" = 0 ] && [ -n "$k" ]; then
                pass "$what: right results ($k collective calls a rank)"
            else
                fail "$what: right results (exit $rc)"
                show "$out"
            fi
            if [ -n "$k" ] && all_counted "$out" "$np" "$k" seen; then
                pass "$what: every rank's door saw all $k Fortran calls"
            else
                fail "$what: every rank's door saw all ${k:-its} Fortran calls"
                door_counts "$out" | sed 's/^/# taken, passed: /' >&2
            fi
            if [ -n "$k" ] && all_counted "$out" "$np" "$k" taken; then
                pass "$what: every rank's door took all $k calls"
            else
                fail "$what: every rank's door took all ${k:-its} calls"
                door_counts "$out" | sed 's/^/# taken, passed: /' >&2
            fi
            plain=$TMP/${mpi}_${name}_${np}_plain.txt
            mpi_run "$mpi" "$np" 0 "$BUILD/tests/mpi/$name" >"$plain" 2>&1
            rc=$?
            if [ "$rc" = 0 ] && grep -q "$name: ok" "$plain" && ! grep -q "MPI door" "$plain"; then
                pass "$mpi, $name, $np ranks on MPI alone: the same results"
            else
                fail "$mpi, $name, $np ranks on MPI alone (exit $rc)"
                show "$plain"
            fi
        done
    done
done
