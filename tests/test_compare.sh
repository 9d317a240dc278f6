#!/bin/sh
# The tooling that sets shoal against MPI, as TAP for prove: allreduce_bench
# -J (the JSON parses, one result per size with nccl-tests' byte counts,
# none wrong), tools/compare_mpi on tiny sizes (a row per size with shoal's,
# Open MPI's and Gloo's figures, numeric ratios, the baselines' results
# checked, the JSON kept; Gloo where /usr/bin/python3 has torch; the MPI
# door's columns under Open MPI and MPICH for the all-reduce, all-gather and
# all-to-all, where the doors are built in $BUILD) and tools/plot_bench (an
# SVG drawn from the JSON). Run from the repository root (make test does).
# shellcheck disable=SC2016 # the perl programs in single quotes are perl's

# The bench to test: tools/ for the default build; a build elsewhere (the
# Makefile puts other BUILD directories' tools in $(BUILD)/bin) passes its own.
# compare_mpi and plot_bench are scripts and stay in tools/.
BENCH=${BENCH:-tools/allreduce_bench}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/shoal_compare.XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT INT TERM

TAP_LIMIT_S=300
# shellcheck source=tests/tap.sh
. tests/tap.sh

# json_ok FILE NRANKS BYTES...: FILE parses, says status ok and ranks
# NRANKS, and holds one result per size, these byte counts in order, with
# no wrong element in either placement.
json_ok() {
    f=$1
    np=$2
    shift 2
    perl -MJSON::PP -e '
        my ($f, $np, @bytes) = @ARGV;
        open(my $fh, "<", $f) or die "$f: $!\n";
        my $d = decode_json(do { local $/; <$fh> });
        die "status $d->{status}\n" unless $d->{status} eq "ok";
        die "ranks $d->{ranks}\n" unless $d->{ranks} == $np;
        my @r = @{ $d->{results} };
        die scalar(@r) . " results\n" unless @r == @bytes;
        for my $i (0 .. $#r) {
            die "result $i: $r[$i]{bytes} B, not $bytes[$i]\n" unless $r[$i]{bytes} == $bytes[$i];
            for my $p ("out_of_place", "in_place") {
                my $w = $r[$i]{$p}{wrong};
                die "result $i $p: wrong $w\n" unless defined $w && $w == 0;
                die "result $i $p: no time\n" unless $r[$i]{$p}{time_us} > 0;
            }
        }' "$f" "$np" "$@"
}
# oop_ok RC FILE: the run exited 0 and FILE holds two results, each with
# an out-of-place time and no in-place figures (compare_mpi -I 0).
oop_ok() {
    [ "$1" -eq 0 ] && perl -MJSON::PP -e '
        open(my $fh, "<", $ARGV[0]) or die "$ARGV[0]: $!\n";
        my @r = @{ decode_json(do { local $/; <$fh> })->{results} };
        exit !(@r == 2 && !grep { defined $_->{in_place} || !($_->{out_of_place}{time_us} > 0) } @r)' "$2"
}
# col FILE NAME: the column NAME has in compare_mpi's table (from its
# header line, "#np size ..."), empty if none.
col() {
    awk -v name="$2" '/^#np / { for (i = 1; i <= NF; i++) if ($i == name) print i }' "$1"
}
# numeric FILE NAME: every row of the table has a number in column NAME.
numeric() {
    c=$(col "$1" "$2")
    [ -n "$c" ] && awk -v c="$c" '!/^#/ && NF > 2 { rows++; if ($c !~ /^[0-9]+(\.[0-9]+)?$/) bad++ }
        END { exit !(rows > 0 && !bad) }' "$1"
}
# cell FILE NAME SIZE: the figure in column NAME of the row of SIZE.
cell() {
    c=$(col "$1" "$2")
    awk -v c="$c" -v s="$3" '!/^#/ && $2 == s { print $c }' "$1"
}
# sizes FILE NP: the size column of the rows of NP ranks, on one line.
sizes() {
    awk -v np="$2" '!/^#/ && $1 == np { printf "%s%s", sep, $2; sep = " " }' "$1"
}
# coll_sizes FILE COLL: the same for the rows of collective COLL.
coll_sizes() {
    awk -v c="$2" '!/^#/ && $3 == c { printf "%s%s", sep, $2; sep = " " }' "$1"
}

if [ ! -x "$BENCH" ]; then
    echo "Bail out! $BENCH is not built (make builds it)"
    exit 1
fi

# allreduce_bench -J: sizes 8, 64, 512, 4096, 32768 bytes.
"$BENCH" -h >"$TMP/help.out" 2>&1
check "-h lists -J,--json" grep -q -- '-J,--json <file>' "$TMP/help.out"
$LIMIT "$BENCH" -np 2 -b 8 -e 32K -f 8 -c 1 -n 2 -w 1 -J "$TMP/shoal.json" >"$TMP/bench.out" 2>&1
rc=$?
check "-np 2 -J exits 0" [ $rc -eq 0 ] || show "$TMP/bench.out"
check "-J: the JSON parses, 5 results of 8..32768 B, none wrong" \
    json_ok "$TMP/shoal.json" 2 8 64 512 4096 32768
check "-J: the settings name the collective, type, op and algorithm" \
    perl -MJSON::PP -e 'local $/; my $d = decode_json(<STDIN>);
        exit !($d->{collective} eq "allreduce" && $d->{dtype} eq "float" &&
               $d->{op} eq "sum" && $d->{algorithm} eq "auto" && $d->{iterations} == 2 &&
               $d->{warmup} == 1 && length $d->{host} && $d->{date} =~ /^\d{4}-/)' \
    <"$TMP/shoal.json"
# The table still prints as before, beside the file.
check "-J: the table keeps its 5 rows" \
    sh -c "[ \$(awk '!/^#/ && NF == 13' '$TMP/bench.out' | wc -l) -eq 5 ]"
$LIMIT "$BENCH" -np 2 -b 8 -e 8 -J "$TMP/no/such/dir.json" >"$TMP/badjson.out" 2>&1
rc=$?
check "-J into a missing directory fails the run, saying so" \
    sh -c "[ $rc -ne 0 ] && grep -q 'cannot write' '$TMP/badjson.out'"
# sendrecv in place has no defined result: N/A in the table, null in JSON.
$LIMIT "$BENCH" -np 2 --coll sendrecv -b 8 -e 64 -f 8 -J "$TMP/sendrecv.json" >/dev/null 2>&1
check "-J: an unchecked placement is null" \
    perl -MJSON::PP -e 'local $/; my $d = decode_json(<STDIN>);
        exit !(@{ $d->{results} } == 2 && !defined $d->{results}[0]{in_place}{wrong} &&
               $d->{results}[0]{out_of_place}{wrong} == 0)' <"$TMP/sendrecv.json"

# compare_mpi on tiny sizes; Open MPI's columns where it can run.
ompi=
if ! command -v mpicc.openmpi >/dev/null 2>&1 || ! command -v mpirun.openmpi >/dev/null 2>&1; then
    reason="Open MPI (mpicc.openmpi, mpirun.openmpi) is not installed"
elif ! $LIMIT mpirun.openmpi --allow-run-as-root --oversubscribe -np 1 true \
    >"$TMP/mpi_probe.out" 2>&1; then
    reason="mpirun.openmpi cannot start a process here: $(head -n 1 "$TMP/mpi_probe.out")"
else
    ompi=y
fi
gloo=
if ! /usr/bin/python3 -c 'import torch.distributed as d; assert d.is_gloo_available()' \
    >"$TMP/gloo_probe.out" 2>&1; then
    gloo_reason="/usr/bin/python3 has no torch.distributed with gloo (apt-get install python3-torch)"
else
    gloo=y
fi
BENCH=$BENCH $LIMIT tools/compare_mpi -np 2 -b 8 -e 64K -f 8 -n 5 -r 1 -c 1 -J "$TMP/cmp" \
    >"$TMP/cmp.out" 2>&1
rc=$?
check "compare_mpi exits 0 (every checked result right)" [ $rc -eq 0 ] || show "$TMP/cmp.out"
check "compare_mpi: one row per size, 8B to 32K" \
    [ "$(sizes "$TMP/cmp.out" 2)" = "8B 64B 512B 4K 32K" ] || show "$TMP/cmp.out"
# memcpy comes from mpi_allreduce --memcpy, or without an MPI compiler from
# the bench's own figure: a number either way.
for c in shoal_us shoal_GB/s memcpy_GB/s shoal/memcpy; do
    check "compare_mpi: a number in column $c of every row" numeric "$TMP/cmp.out" "$c"
done
check "compare_mpi -J: shoal_np2.json holds the median rows" \
    json_ok "$TMP/cmp/shoal_np2.json" 2 8 64 512 4096 32768
if [ -n "$ompi" ]; then
    for c in OMPI_us OMPI_GB/s shoal/OMPI; do
        check "compare_mpi: a number in column $c of every row" numeric "$TMP/cmp.out" "$c"
    done
    check "compare_mpi -J: ompi_np2.json (mpi_allreduce) parses, 5 results, none wrong" \
        json_ok "$TMP/cmp/ompi_np2.json" 2 8 64 512 4096 32768
    # -I 0: the MPI runs time out of place alone, the in-place figures null.
    BENCH=$BENCH $LIMIT tools/compare_mpi -np 2 -b 8 -e 64 -f 8 -n 1 -w 0 -r 1 -c 1 -I 0 -B ompi \
        -J "$TMP/oop" >"$TMP/oop.out" 2>&1
    rc=$?
    check "compare_mpi -I 0: runs; OMPI's JSON has out-of-place figures, in_place null" \
        oop_ok $rc "$TMP/oop/ompi_np2.json" || show "$TMP/oop.out"
else
    for what in OMPI_us OMPI_GB/s shoal/OMPI ompi_np2.json "-I 0"; do
        missing "compare_mpi $what" "$reason"
    done
fi

# The MPI door (libshoal_mpi.so of this build, as tests/mpi_env.sh finds
# it) under each MPI that runs here, beside that MPI alone: -B with the
# doors, the three collectives, tiny sizes and two iterations. Shape only:
# the columns are there and hold numbers, the door's runs are checked right.
BUILD=${BUILD:-build}
door_b=
door_cols=
door_json=
if [ -z "$ompi" ]; then
    ompi_door_reason=$reason
elif [ ! -f "$BUILD/libshoal_mpi.so" ]; then
    ompi_door_reason="$BUILD/libshoal_mpi.so is not built"
else
    door_b="ompi_door"
    door_cols="OMPI+door_us OMPI+door_GB/s door/OMPI"
    door_json="ompi_door_np2 ompi_door_allgather_np2 ompi_door_alltoall_np2"
fi
if ! command -v mpicc.mpich >/dev/null 2>&1 || ! command -v mpiexec.mpich >/dev/null 2>&1; then
    mpich_door_reason="MPICH (mpicc.mpich, mpiexec.mpich) is not installed"
elif ! $LIMIT mpiexec.mpich -np 1 true >"$TMP/mpich_probe.out" 2>&1; then
    mpich_door_reason="mpiexec.mpich cannot start a process here: $(head -n 1 "$TMP/mpich_probe.out")"
elif [ ! -f "$BUILD/mpich/libshoal_mpi.so" ]; then
    mpich_door_reason="$BUILD/mpich/libshoal_mpi.so is not built"
else
    door_b="$door_b mpich_door"
    door_cols="$door_cols MPICH+door_us MPICH+door_GB/s door/MPICH"
    door_json="$door_json mpich_door_np2 mpich_door_allgather_np2 mpich_door_alltoall_np2"
fi
if [ -n "$door_b" ]; then
    DOOR_OMPI=$BUILD/libshoal_mpi.so DOOR_MPICH=$BUILD/mpich/libshoal_mpi.so BENCH=$BENCH \
        $LIMIT tools/compare_mpi -np 2 -b 8 -e 512 -f 8 -n 2 -w 1 -r 1 -c 1 \
        --coll "allreduce allgather alltoall" -B "$door_b" -J "$TMP/door" >"$TMP/door.out" 2>&1
    rc=$?
    check "compare_mpi -B \"$door_b\" exits 0 (every checked result right)" [ $rc -eq 0 ] ||
        show "$TMP/door.out"
    for c in allreduce allgather alltoall; do
        check "compare_mpi --coll: $c has a row per size, 8B to 512B" \
            [ "$(coll_sizes "$TMP/door.out" $c)" = "8B 64B 512B" ] || show "$TMP/door.out"
    done
    for c in $door_cols; do
        check "compare_mpi: a number in column $c of every row" numeric "$TMP/door.out" "$c"
    done
    for f in $door_json; do
        check "compare_mpi -J: $f.json (the door's runs) parses, 3 results, none wrong" \
            json_ok "$TMP/door/$f.json" 2 8 64 512
    done
    for d in $door_b; do
        label=OMPI+door
        [ "$d" = ompi_door ] || label=MPICH+door
        check "compare_mpi: $label takes MPI_Allreduce, as the door's log says" \
            grep -q "^# $label: the door takes MPI_Allreduce" "$TMP/door.out" || show "$TMP/door.out"
    done
    if [ "$(getconf _NPROCESSORS_ONLN)" -ge 2 ]; then
        check "compare_mpi: the cache-line round trip is printed, in ns" \
            grep -Eq '^# cache-line round trip CPU [0-9]+ <-> [0-9]+: [0-9]+ ns' "$TMP/door.out"
    else
        skip "compare_mpi: the cache-line round trip needs two CPUs"
    fi
fi
case " $door_b " in *" ompi_door "*) ;; *)
    for what in "door run" "door rows" OMPI+door_us OMPI+door_GB/s door/OMPI "door JSON" "door log"; do
        missing "compare_mpi OMPI+door $what" "$ompi_door_reason"
    done
    ;;
esac
case " $door_b " in *" mpich_door "*) ;; *)
    for what in MPICH+door_us MPICH+door_GB/s door/MPICH "door JSON" "door log"; do
        missing "compare_mpi MPICH+door $what" "$mpich_door_reason"
    done
    ;;
esac
# Gloo: in the default baselines where torch has it, with its columns, ratio
# and checked JSON (tools/gloo_allreduce.py under /usr/bin/python3).
if [ -n "$gloo" ]; then
    check "compare_mpi: gloo among the default baselines" \
        grep -q '^# shoal: .*baselines: .*gloo' "$TMP/cmp.out" || show "$TMP/cmp.out"
    for c in Gloo_us Gloo_GB/s shoal/Gloo; do
        check "compare_mpi: a number in column $c of every row" numeric "$TMP/cmp.out" "$c"
    done
    check "compare_mpi -J: gloo_np2.json (gloo_allreduce) parses, 5 results, none wrong" \
        json_ok "$TMP/cmp/gloo_np2.json" 2 8 64 512 4096 32768
    check "compare_mpi -J: gloo_np2.json is Gloo's, with a positive time per row" \
        perl -MJSON::PP -e 'local $/; open(my $fh, "<", $ARGV[0]) or die "$ARGV[0]: $!\n";
            my $d = decode_json(<$fh>);
            my @t = map { $_->{out_of_place}{time_us} } @{ $d->{results} };
            exit !($d->{tool} eq "gloo_allreduce" && $d->{library} =~ /^Gloo \(torch / &&
                   $d->{label} eq "Gloo" && @t == 5 && !grep { !($_ > 0) } @t)' \
        "$TMP/cmp/gloo_np2.json"
    # The table's Gloo time of the 8B row is the JSON's, as the table prints it.
    t8=$(perl -MJSON::PP -e 'local $/; open(my $fh, "<", $ARGV[0]) or exit 1;
        my $t = decode_json(<$fh>)->{results}[0]{out_of_place}{time_us};
        printf($t >= 10000 ? "%.0f" : $t >= 100 ? "%.1f" : "%.2f", $t)' "$TMP/cmp/gloo_np2.json")
    c8=$(cell "$TMP/cmp.out" Gloo_us 8B)
    check "compare_mpi: Gloo_us of the 8B row ($c8) is gloo_np2.json's time" \
        [ "${c8:-none}" = "${t8:-no JSON}" ]
else
    for what in "default baselines" Gloo_us Gloo_GB/s shoal/Gloo gloo_np2.json \
        "gloo_np2.json is Gloo's" "gloo time"; do
        missing "compare_mpi gloo $what" "$gloo_reason"
    done
fi
# Without torch, gloo leaves the defaults with a one-line note on stderr,
# and -B gloo is refused.
GLOO_PYTHON=/nonexistent/python3 BENCH=$BENCH $LIMIT tools/compare_mpi -np 2 -b 8 -e 8 \
    -n 1 -w 0 -r 1 >"$TMP/nogloo.out" 2>"$TMP/nogloo.err"
rc=$?
check "compare_mpi without torch: runs, gloo left out, one note on stderr" \
    sh -c "[ $rc -eq 0 ] && ! grep -q '^# shoal:.* gloo' '$TMP/nogloo.out' &&
        [ -n \"\$(awk '!/^#/ && \$2 == \"8B\"' '$TMP/nogloo.out')\" ] &&
        [ \$(wc -l <'$TMP/nogloo.err') -eq 1 ] && grep -q '^# Gloo: skipped' '$TMP/nogloo.err'" ||
    { show "$TMP/nogloo.out"; show "$TMP/nogloo.err"; }
GLOO_PYTHON=/nonexistent/python3 BENCH=$BENCH $LIMIT tools/compare_mpi -np 2 -b 8 -e 8 \
    -n 1 -w 0 -r 1 -B gloo >"$TMP/nogloo.out" 2>&1
rc=$?
check "compare_mpi -B gloo without torch fails, saying why" \
    sh -c "[ $rc -eq 2 ] && grep -q 'asks for gloo.*/nonexistent/python3' '$TMP/nogloo.out'" ||
    show "$TMP/nogloo.out"
BENCH=$BENCH $LIMIT tools/compare_mpi -np 2 -b 8 -e 8 -n 1 -w 0 -r 1 -B "" >"$TMP/alone.out" 2>&1
rc=$?
check "compare_mpi -B \"\" runs shoal alone" \
    sh -c "[ $rc -eq 0 ] && grep -q 'baselines: none' '$TMP/alone.out'" || show "$TMP/alone.out"
BENCH=$BENCH tools/compare_mpi -np 2 -B nccl >"$TMP/cmp_bad.out" 2>&1
rc=$?
check "compare_mpi -B refuses an unknown baseline" \
    sh -c "[ $rc -eq 2 ] && grep -q 'unknown baseline' '$TMP/cmp_bad.out'"
BENCH=$BENCH tools/compare_mpi -np 2 -q 1 >"$TMP/cmp_bad.out" 2>&1
rc=$?
check "compare_mpi refuses an unknown flag" \
    sh -c "[ $rc -ne 0 ] && grep -q 'unknown argument' '$TMP/cmp_bad.out'"

# plot_bench: an SVG from the bench's JSON and compare_mpi's.
if ! command -v gnuplot >/dev/null 2>&1; then
    for what in svg label png; do missing "plot_bench $what" "gnuplot is not installed"; done
else
    tools/plot_bench -o "$TMP/bw.svg" "$TMP/shoal.json" >"$TMP/plot.out" 2>&1
    rc=$?
    check "plot_bench writes an SVG with an <svg element" \
        sh -c "[ $rc -eq 0 ] && [ -s '$TMP/bw.svg' ] && grep -q '<svg' '$TMP/bw.svg'" ||
        show "$TMP/plot.out"
    tools/plot_bench -o "$TMP/two.svg" "mine=$TMP/shoal.json" "$TMP"/cmp/*_np2.json \
        >"$TMP/plot2.out" 2>&1
    rc=$?
    check "plot_bench: label=file names the line; sizes label the x axis" \
        sh -c "[ $rc -eq 0 ] && grep -q '>mine<' '$TMP/two.svg' && grep -q '>32K<' '$TMP/two.svg'" ||
        show "$TMP/plot2.out"
    tools/plot_bench -o "$TMP/bw.pdf" "$TMP/shoal.json" >"$TMP/plot3.out" 2>&1
    rc=$?
    check "plot_bench refuses an output that is neither .svg nor .png" \
        sh -c "[ $rc -ne 0 ] && [ ! -e '$TMP/bw.pdf' ]"
fi

echo "1..$n"
