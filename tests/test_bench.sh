#!/bin/sh
# allreduce_bench end to end, as TAP for prove: forked ranks over every type
# and op with the results checked, a small chunk size, sizes of zero elements
# and sizes that are no multiple of the element, ranks started by mpirun
# (through PMIx) and by torchrun-style variables; then every collective of
# --coll at 1..8 ranks over shm and tcp, every type of each, and groups of
# operations (-m); the compressed all-reduces of --compress (every kind) and
# the compressed all-gather, reduce-scatter and all-to-all of --coll with
# --compress, with what each refuses; buffers from
# shoal_mem_alloc (--mem shared) and in device memory (--mem device, on the
# CPU stand-in of the CUDA driver that make test names). Run from the
# repository root (make test does).

# The bench to test: tools/ for the default build; a build elsewhere (the
# Makefile puts other BUILD directories' tools in $(BUILD)/bin) passes its own.
BENCH=${BENCH:-tools/allreduce_bench}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/shoal_bench.XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT INT TERM

# shellcheck source=tests/tap.sh
. tests/tap.sh

# Table rows: 13 columns; columns 9 and 13 are #wrong of out-of-place and
# in-place.
rows() { awk '!/^#/ && NF == 13' "$1" | wc -l | tr -d ' '; }
rows_equal() { [ "$(rows "$1")" -eq "$2" ]; }
no_wrong() {
    [ "$(rows "$1")" -gt 0 ] &&
        [ "$(awk '!/^#/ && NF == 13 && ($9 != "0" || $13 != "0")' "$1" | wc -l)" -eq 0 ]
}
# The same, where in place has no defined result and reads N/A (sendrecv).
no_wrong_na() {
    [ "$(rows "$1")" -gt 0 ] &&
        [ "$(awk '!/^#/ && NF == 13 && ($9 != "0" || $13 != "N/A")' "$1" | wc -l)" -eq 0 ]
}
oob_ok() { grep -q '^# Out of bounds values : 0 OK$' "$1"; }
memcpy_line() { grep -Eq '^# memcpy bandwidth \(1 thread, 64 MiB\): [0-9]+\.[0-9]+ GB/s$' "$1"; }
has_row() { # FILE SIZE COUNT TYPE [REDOP ROOT]
    awk -v s="$2" -v c="$3" -v t="$4" -v o="${5-}" -v r="${6-}" \
        '!/^#/ && NF == 13 && $1 == s && $2 == c && $3 == t && (o == "" || $4 == o) &&
            (r == "" || $5 == r) {f = 1}
        END {exit !f}' "$1"
}

if [ ! -x "$BENCH" ]; then
    echo "Bail out! $BENCH is not built (make builds it)"
    exit 1
fi

# Command line.
$BENCH -h >"$TMP/help.out" 2>&1
rc=$?
check "-h prints the usage and exits 0" \
    sh -c "[ $rc -eq 0 ] && grep -q -- '--minbytes' '$TMP/help.out'"
$BENCH -np 2 -q 1 >"$TMP/bad.out" 2>&1
rc=$?
check "an unknown flag is refused" sh -c "[ $rc -ne 0 ] && grep -q 'unknown' '$TMP/bad.out'"

# Two forked ranks, every type and op: 12 types x 5 ops x 9 sizes.
$LIMIT $BENCH -np 2 -b 8 -e 1M -f 4 -c 1 -d all -o all -n 2 -w 1 >"$TMP/np2.out" 2>&1
rc=$?
check "-np 2 -d all -o all exits 0" [ $rc -eq 0 ] || show "$TMP/np2.out"
check "-np 2: one row per type, op and size (540)" rows_equal "$TMP/np2.out" 540
check "-np 2: no wrong element in any row" no_wrong "$TMP/np2.out"
check "-np 2: guard bytes after the results intact" oob_ok "$TMP/np2.out"
check "-np 2: memcpy baseline printed" memcpy_line "$TMP/np2.out"

# Three ranks (not a power of two), a chunk small enough that the larger
# sizes take many pipeline steps.
SHOAL_CHUNK_SIZE=4096 $LIMIT $BENCH -np 3 -b 8 -e 1M -f 4 -c 1 -d all -o all -n 2 -w 1 \
    >"$TMP/np3.out" 2>&1
rc=$?
check "-np 3 with SHOAL_CHUNK_SIZE=4096 exits 0" [ $rc -eq 0 ] || show "$TMP/np3.out"
check "-np 3: one row per type, op and size (540)" rows_equal "$TMP/np3.out" 540
check "-np 3: no wrong element in any row" no_wrong "$TMP/np3.out"
check "-np 3: guard bytes after the results intact" oob_ok "$TMP/np3.out"

# Sizes 1, 4 and 7 bytes: zero-element rows, and sizes rounded down to whole
# elements (7 bytes of float are 1 element, 4 bytes).
$LIMIT $BENCH -np 2 -b 1 -e 7 -i 3 -c 1 -d all -o all -n 2 -w 1 -z 1 >"$TMP/odd.out" 2>&1
rc=$?
check "sizes 1..7 bytes exit 0" [ $rc -eq 0 ] || show "$TMP/odd.out"
check "a 1-byte float row has 0 elements" has_row "$TMP/odd.out" 0 0 float
check "a 7-byte float row rounds down to 1 element" has_row "$TMP/odd.out" 4 1 float
check "sizes 1..7 bytes: no wrong element" no_wrong "$TMP/odd.out"
check "sizes 1..7 bytes: guard bytes intact" oob_ok "$TMP/odd.out"

# --waits: every rank's line, in rank order; with 3 ranks on a ring or a
# tree some rank waits for another's data.
$LIMIT $BENCH -np 3 -b 4M -e 4M -n 3 -w 1 -c 0 --waits 1 >"$TMP/waits.out" 2>&1
rc=$?
check "--waits 1 exits 0" [ $rc -eq 0 ] || show "$TMP/waits.out"
check "--waits 1: one line per rank, in rank order" sh -c \
    "[ \"\$(grep -o '^# waits of rank [0-9]*' '$TMP/waits.out' | awk '{print \$5}' | tr '\n' ' ')\" = '0 1 2 ' ]"
check "--waits 1: a wait for some rank's data, in ms" \
    grep -Eq '^# waits of rank [0-9]: [1-9][0-9]*, .*for data from [0-9]:[0-9.]+' "$TMP/waits.out"

# mpirun: Open MPI gives the ranks a PMIx server, and the id travels
# through it. First see whether mpirun can start anything at all here.
MPIRUN="mpirun --allow-run-as-root --oversubscribe"
reason=
if ! command -v mpirun >/dev/null 2>&1; then
    reason="mpirun is not installed"
elif ! $LIMIT $MPIRUN -np 1 true >"$TMP/mpi_probe.out" 2>&1; then
    reason="mpirun cannot start a process here: $(head -n 1 "$TMP/mpi_probe.out")"
fi
if [ -n "$reason" ]; then
    for what in exit pmix ranks wrong oob; do missing "mpirun $what" "$reason"; done
else
    $LIMIT $MPIRUN -np 2 -x SHOAL_DEBUG=info -x SHOAL_DEBUG_SUBSYS=INIT \
        $BENCH -b 8 -e 64K -f 4 -c 1 >"$TMP/mpi.out" 2>"$TMP/mpi.err"
    rc=$?
    check "mpirun -np 2 exits 0" [ $rc -eq 0 ] || { show "$TMP/mpi.out"; show "$TMP/mpi.err"; }
    check "mpirun: the ranks found each other through PMIx" \
        grep -q 'launcher PMIx' "$TMP/mpi.err"
    check "mpirun: two ranks in the header and 7 rows" \
        sh -c "grep -q '^#  Rank  1 ' '$TMP/mpi.out' && [ \$(awk '!/^#/ && NF == 13' '$TMP/mpi.out' | wc -l) -eq 7 ]"
    check "mpirun: no wrong element" no_wrong "$TMP/mpi.out"
    check "mpirun: guard bytes intact" oob_ok "$TMP/mpi.out"
fi

# torchrun's variables: two processes, shoal on MASTER_PORT+1 (a free port
# picked by perl, which prove brings along).
port=$(perl -MIO::Socket::INET -e \
    'print IO::Socket::INET->new(Listen => 1, LocalAddr => "127.0.0.1:0")->sockport')
for r in 0 1; do
    RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$((port - 1)) \
        TORCHELASTIC_RUN_ID=bench-test SHOAL_SECRET=bench-test-passphrase \
        SHOAL_DEBUG=info SHOAL_DEBUG_SUBSYS=INIT \
        $LIMIT $BENCH -b 8 -e 64K -f 4 -c 1 >"$TMP/tr$r.out" 2>"$TMP/tr$r.err" &
    eval "pid$r=\$!"
done
wait "$pid0"
rc0=$?
wait "$pid1"
rc1=$?
check "torchrun-style ranks exit 0" [ $rc0 -eq 0 -a $rc1 -eq 0 ] ||
    { show "$TMP/tr0.out"; show "$TMP/tr0.err"; show "$TMP/tr1.err"; }
check "torchrun-style: launcher recognised, rendezvous on MASTER_PORT+1" \
    grep -q "launcher torchrun, rank 0 of 2.*rendezvous 127.0.0.1:$port" "$TMP/tr0.err"
check "torchrun-style: no wrong element" no_wrong "$TMP/tr0.out"
check "torchrun-style: guard bytes intact" oob_ok "$TMP/tr0.out"

# Every collective. A row of S bytes holds S/4 floats; the collectives of
# one block per rank pass a count of S/4/nranks and show the nranks blocks
# as the size, as nccl-tests does.
COLLS="allreduce reducescatter allgather broadcast reduce alltoall gather scatter sendrecv"
blocked() { case $1 in reducescatter | allgather | alltoall | gather | scatter) return 0 ;; esac; return 1; }
rooted() { case $1 in broadcast | reduce | gather | scatter) return 0 ;; esac; return 1; }
reduces() { case $1 in allreduce | reducescatter | reduce) return 0 ;; esac; return 1; }
# wrong_ok COLL FILE: no wrong element, with N/A in place for sendrecv.
wrong_ok() {
    if [ "$1" = sendrecv ]; then no_wrong_na "$2"; else no_wrong "$2"; fi
}

$BENCH -np 2 --coll allgather_x >"$TMP/badcoll.out" 2>&1
rc=$?
check "--coll refuses an unknown collective" \
    sh -c "[ $rc -ne 0 ] && grep -q 'unknown collective' '$TMP/badcoll.out'"
$LIMIT $BENCH -np 2 --coll broadcast -r 2 -b 8 -e 8 >"$TMP/badroot.out" 2>&1
rc=$?
check "-r beyond the ranks is refused" \
    sh -c "[ $rc -ne 0 ] && grep -q 'no rank of 2' '$TMP/badroot.out'"

# 1..8 ranks, the odd counts over tcp (SHOAL_SHM_ENABLE=n), the even ones
# over shared memory; 4 KiB chunks so that the largest rows (29412 floats)
# take several pieces. Sizes 0, 1, 7, ... 117649 bytes: rows of no element,
# of fewer elements than ranks, odd counts. -r -1 runs every root.
SIZES="-b 0 -e 117649 -f 7"
NSIZES=8
# Short runs (SHOAL_TEST_QUICK=1, CI's sanitizer and clang variants) take
# one rank, the smallest shm and tcp counts and the largest: the paths of
# the whole matrix, which the plain run covers rank count by rank count.
NPS="1 2 3 4 5 6 7 8"
[ "${SHOAL_TEST_QUICK:-0}" = 1 ] && NPS="1 2 3 8"
# run_ok COLL FILE STATUS ROWS: the run exited 0 with ROWS rows, none wrong,
# the guards intact.
run_ok() {
    [ "$3" -eq 0 ] && rows_equal "$2" "$4" && wrong_ok "$1" "$2" && oob_ok "$2"
}
# last_row_ok COLL NP FILE: the largest row has nccl-tests' size, count,
# redop and root columns (the last root of -r -1).
last_row_ok() {
    count=$((117649 / 4))
    blocked "$1" && count=$((count / $2))
    size=$((count * 4))
    blocked "$1" && size=$((count * $2 * 4))
    root=-1
    rooted "$1" && root=$(($2 - 1))
    redop=none
    reduces "$1" && redop=sum
    has_row "$3" $size $count float $redop $root
}
for coll in $COLLS; do
    for np in $NPS; do
        shm=y
        [ $((np % 2)) -eq 1 ] && shm=n
        out="$TMP/$coll.$np.out"
        SHOAL_SHM_ENABLE=$shm SHOAL_CHUNK_SIZE=4096 $LIMIT $BENCH -np $np --coll $coll \
            $SIZES -r -1 -n 1 -w 1 >"$out" 2>&1
        rc=$?
        nrows=$NSIZES
        rooted $coll && nrows=$((NSIZES * np))
        check "--coll $coll -np $np (shm $shm): exits 0, $nrows rows, none wrong, guards intact" \
            run_ok $coll "$out" $rc $nrows || show "$out"
        check "--coll $coll -np $np: size, count, redop and root of the largest row" \
            last_row_ok $coll $np "$out"
    done
done
check "the header names the collective and SHOAL_ALGO" \
    grep -q '^# Collective: gather  SHOAL_ALGO: auto$' "$TMP/gather.3.out"

# Every type (and op, for the reductions) of each collective, 5 ranks,
# root 3.
for coll in $COLLS; do
    out="$TMP/$coll.all.out"
    SHOAL_CHUNK_SIZE=4096 $LIMIT $BENCH -np 5 --coll $coll -b 0 -e 40K -f 7 -d all -o all \
        -r 3 -n 1 -w 0 >"$out" 2>&1
    rc=$?
    nrows=$((7 * 12))
    reduces $coll && nrows=$((nrows * 5))
    check "--coll $coll -np 5 -d all -o all: exits 0, $nrows rows, none wrong" \
        run_ok $coll "$out" $rc $nrows || show "$out"
done

# Outputs written with streaming stores (SHOAL_STREAM_MIN=4096: every
# output of 4 KiB and more), over shared memory with 4 ranks and over tcp
# with 3; the check covers every byte and the guards around the buffers.
for coll in $COLLS; do
    for np in 3 4; do
        shm=y
        [ $np -eq 3 ] && shm=n
        out="$TMP/$coll.stream$np.out"
        SHOAL_STREAM_MIN=4096 SHOAL_SHM_ENABLE=$shm SHOAL_CHUNK_SIZE=4096 $LIMIT $BENCH \
            -np $np --coll $coll $SIZES -n 1 -w 1 >"$out" 2>&1
        rc=$?
        check "--coll $coll -np $np (shm $shm) streaming its output: exits 0, none wrong" \
            run_ok $coll "$out" $rc $NSIZES || show "$out"
    done
done

# Each named copy (SHOAL_COPY) over shared memory with 3 ranks, in pieces
# large enough that auto would time them: every byte checked.
for coll in $COLLS; do
    for copy in libc vector; do
        out="$TMP/$coll.copy-$copy.out"
        SHOAL_COPY=$copy SHOAL_CHUNK_SIZE=16384 $LIMIT $BENCH \
            -np 3 --coll $coll $SIZES -n 1 -w 1 >"$out" 2>&1
        rc=$?
        check "--coll $coll -np 3 SHOAL_COPY=$copy: exits 0, none wrong" \
            run_ok $coll "$out" $rc $NSIZES || show "$out"
    done
done

# Groups: -m 10 operations per timed iteration, each in its own slice of
# the buffers; the check runs one group over all the slices. All-reduces of
# one group are fused, so their slices must come back apart.
for coll in $COLLS; do
    for np in 3 4; do
        out="$TMP/$coll.m$np.out"
        SHOAL_CHUNK_SIZE=4096 $LIMIT $BENCH -np $np --coll $coll -b 0 -e 40K -f 7 -m 10 \
            -n 2 -w 1 >"$out" 2>&1
        rc=$?
        check "--coll $coll -np $np -m 10: exits 0, 7 rows, none wrong" \
            run_ok $coll "$out" $rc 7 || show "$out"
    done
done
out="$TMP/m1000.out"
$LIMIT $BENCH -np 2 -b 8 -e 8K -f 4 -m 1000 -n 2 -w 1 >"$out" 2>&1
rc=$?
m1000_ok() { run_ok allreduce "$1" "$2" 6 && grep -q 'agg iters: 1000 ' "$1"; }
check "-m 1000 small all-reduces: exits 0, 6 rows, none wrong, agg iters in the header" \
    m1000_ok "$out" $rc || show "$out"

# --compress: shoal_allreduce_compressed instead of the plain all-reduce.
# Rows of 15 columns: the relative error against the exact sum in 9 and 13
# (out of place, in place), the bytes each rank sent in 14, the ratio to a
# full-precision ring in 15 (N/A with one rank, which sends nothing).
# Sizes 4 bytes to 1.07 MB in steps of x23: counts 1, 23, 23^2, 23^3 and
# 23^4, none a multiple of a block, and PowerSGD matrices 1x1, 1x23, 23x23,
# 23x529 and 529x529.
CSIZES="-b 4 -e 1200000 -f 23"
CNSIZES=5
crows() { awk '!/^#/ && NF == 15' "$1" | wc -l | tr -d ' '; }
# crun_ok FILE STATUS: exited 0 with the rows, guards intact, none wrong.
crun_ok() {
    [ "$2" -eq 0 ] && [ "$(crows "$1")" -eq $CNSIZES ] && oob_ok "$1" &&
        ! grep -q '^# Wrong elements' "$1"
}
# cerr_ok FILE MAX: every row's two errors are numbers below MAX (MAX "any":
# numbers at all).
cerr_ok() {
    [ "$(crows "$1")" -gt 0 ] &&
        awk -v max="$2" '
            function num(x) { return x ~ /^[0-9]\.[0-9][0-9]e[-+][0-9]+$/ }
            !/^#/ && NF == 15 && (!num($9) || !num($13) ||
                (max != "any" && ($9 + 0 >= max || $13 + 0 >= max))) { bad = 1 }
            END { exit bad }' "$1"
}
# cwire_ok FILE NP MINRATIO: one rank sends nothing (ratio N/A); more send
# bytes in every row of elements, and the largest row's ratio is above
# MINRATIO ("any": a number).
cwire_ok() {
    [ "$(crows "$1")" -gt 0 ] &&
        awk -v np="$2" -v min="$3" '
            !/^#/ && NF == 15 { last_ratio = $15
                if (np == 1 && ($14 != "0" || $15 != "N/A")) bad = 1
                if (np > 1 && ($14 + 0 <= 0 || $15 !~ /^[0-9]+\.[0-9][0-9]$/)) bad = 1 }
            END { if (np > 1 && min != "any" && last_ratio + 0 <= min) bad = 1
                  exit bad }' "$1"
}
for kind in int8 ternary powersgd:4; do
    for np in 1 2 3; do
        for shm in y n; do
            out="$TMP/comp.$kind.$np.$shm.out"
            # shellcheck disable=SC2086 # CSIZES is several flags
            SHOAL_SHM_ENABLE=$shm SHOAL_CHUNK_SIZE=4096 $LIMIT "$BENCH" -np $np \
                --compress $kind $CSIZES -n 2 -w 1 >"$out" 2>&1
            rc=$?
            transport=shm
            [ $shm = n ] && transport=tcp
            check "--compress $kind -np $np ($transport): exits 0, $CNSIZES rows of 15 columns, guards intact" \
                crun_ok "$out" $rc || show "$out"
            case $kind in
            int8) maxerr=1e-2 minratio=3 ;;
            ternary) maxerr=any minratio=3 ;;
            *) maxerr=any minratio=any ;;
            esac
            check "--compress $kind -np $np ($transport): relerr columns below $maxerr" \
                cerr_ok "$out" $maxerr || show "$out"
            check "--compress $kind -np $np ($transport): bytes sent and ratio (above $minratio at 1.07 MB)" \
                cwire_ok "$out" $np $minratio || show "$out"
        done
    done
done
check "--compress: the header names the compression and the new columns" \
    sh -c "grep -q '^# Compression: int8, block 64, nearest rounding, algo auto, error feedback on, seed 0$' '$TMP/comp.int8.2.y.out' &&
        grep -Eq '^# +size .* relerr .* relerr +sent +ratio$' '$TMP/comp.int8.2.y.out'"
check "--compress powersgd:4: each row's matrix, the squarest one (529x529 for 279841)" \
    grep -q '^# 1119364 bytes: powersgd matrix 529x529$' "$TMP/comp.powersgd:4.2.y.out"

# Half and bfloat16, averages, the options, JSON.
crun_err_ok() { crun_ok "$1" "$2" && cerr_ok "$1" "$3"; }
# same_err A B: A has rows, and their relerr columns are B's.
cerrs() { awk '!/^#/ && NF == 15 {print $9, $13}' "$1"; }
same_err() { [ "$(crows "$1")" -gt 0 ] && [ "$(cerrs "$1")" = "$(cerrs "$2")" ]; }
# crun_near_ok OUT RC HOST TOL: a clean run whose relerrs are near HOST's.
crun_near_ok() { crun_ok "$1" "$2" && near_err "$1" "$3" "$4"; }
# near_err A B TOL: as same_err, each relerr within TOL of B's (relative).
near_err() {
    [ "$(crows "$1")" -gt 0 ] && [ "$(crows "$1")" = "$(crows "$2")" ] &&
        awk -v t="$3" '
            function off(x, y) { d = x - y; if (d < 0) d = -d; if (y < 0) y = -y; return d > t * y + 1e-12 }
            !/^#/ && NF == 15 {
                if (NR == FNR) { a[++n] = $9; b[n] = $13; next }
                m++
                if (off(a[m], $9) || off(b[m], $13)) bad = 1
            }
            END { exit bad }' "$1" "$2"
}
for dtype in half bfloat16; do
    out="$TMP/comp.$dtype.out"
    # shellcheck disable=SC2086 # CSIZES is several flags
    $LIMIT "$BENCH" -np 3 --compress int8 -d $dtype -o avg $CSIZES -n 2 -w 1 >"$out" 2>&1
    rc=$?
    check "--compress int8 -d $dtype -o avg -np 3: exits 0, relerr below 2e-2" \
        crun_err_ok "$out" $rc 2e-2 || show "$out"
done
for algo in ring two-shot tree; do
    out="$TMP/comp.$algo.out"
    # shellcheck disable=SC2086 # CSIZES is several flags
    $LIMIT "$BENCH" -np 3 --compress int8 --compress-opts algo=$algo $CSIZES -n 2 -w 1 \
        >"$out" 2>&1
    rc=$?
    check "--compress int8 --compress-opts algo=$algo -np 3: exits 0, relerr below 2e-2" \
        crun_err_ok "$out" $rc 2e-2 || show "$out"
done
out="$TMP/comp.opts.out"
$LIMIT "$BENCH" -np 2 --compress int8 --compress-opts block=32,stochastic,noef,seed=7 \
    -b 1M -e 1M -n 2 -w 1 -J "$TMP/comp.json" >"$out" 2>&1
rc=$?
check "--compress-opts block=32,stochastic,noef,seed=7: exits 0, shown in the header" \
    sh -c "[ $rc -eq 0 ] && grep -q '^# Compression: int8, block 32, stochastic rounding, algo auto, error feedback off, seed 7$' '$out'" ||
    show "$out"
check "--compress -J: the settings and each row's error, wire bytes and ratio" \
    sh -c "grep -q '\"compression\": {\"kind\": \"int8\", \"error_feedback\": false, \"block\": 32, \"stochastic\": true' '$TMP/comp.json' &&
        grep -Eq '\"rel_error\": [0-9.e+-]+\\}' '$TMP/comp.json' &&
        grep -Eq '\"bytes_sent\": [1-9][0-9]*, \"bytes_received\": [1-9][0-9]*, \"ratio\": [0-9.]+, \"wrong\": 0\\}' '$TMP/comp.json' &&
        grep -q '\"status\": \"ok\"' '$TMP/comp.json'" || show "$TMP/comp.json"
out="$TMP/comp.64m.out"
$LIMIT "$BENCH" -np 1 --compress powersgd:4 -b 64M -e 64M -n 1 -w 0 -c 0 >"$out" 2>&1
rc=$?
check "--compress powersgd:4, 64 MiB of float: a 4096x4096 matrix, relerr N/A with -c 0" \
    sh -c "[ $rc -eq 0 ] && grep -q '^# 67108864 bytes: powersgd matrix 4096x4096$' '$out' &&
        awk '!/^#/ && NF == 15 && \$9 == \"N/A\" && \$13 == \"N/A\" {f = 1} END {exit !f}' '$out'" ||
    show "$out"
out="$TMP/comp.shape.out"
$LIMIT "$BENCH" -np 2 --compress powersgd --shape 32x128 -b 16K -e 16K -n 2 -w 1 >"$out" 2>&1
rc=$?
check "--shape 32x128 for 4096 floats: exits 0 with that matrix" \
    sh -c "[ $rc -eq 0 ] && grep -q '^# 16384 bytes: powersgd matrix 32x128$' '$out'" || show "$out"
out="$TMP/comp.badshape.out"
$LIMIT "$BENCH" -np 2 --compress powersgd --shape 32x128 -b 8K -e 8K -n 2 -w 1 >"$out" 2>&1
rc=$?
check "--shape that does not hold the row's elements: refused, saying so" \
    sh -c "[ $rc -ne 0 ] && grep -q 'shape 32x128 is not the 2048 elements' '$out'" || show "$out"

# Flags --compress refuses, each with its reason.
bad_comp() { # WHAT PATTERN FLAGS...
    what=$1
    pattern=$2
    shift 2
    $LIMIT "$BENCH" -np 2 -b 1K -e 1K "$@" >"$TMP/comp.bad.out" 2>&1
    rc=$?
    check "--compress refuses $what" \
        sh -c "[ $rc -eq 2 ] && grep -q -- '$pattern' '$TMP/comp.bad.out'" || show "$TMP/comp.bad.out"
}
bad_comp "an unknown kind" 'unknown --compress kind "int3"' --compress int3
bad_comp "a collective without a compressed form" \
    'times --coll allreduce, allgather, reducescatter or alltoall, not --coll broadcast' \
    --compress int8 --coll broadcast
bad_comp "an integer type" 'takes -d float, half or bfloat16, not int32' --compress int8 -d int32
bad_comp "-d all" 'takes -d float, half or bfloat16, not int8' --compress int8 -d all
bad_comp "an op other than sum and avg" 'takes -o sum or avg, not max' --compress ternary -o max
bad_comp "-m" 'takes no -m' --compress int8 -m 4
bad_comp ":RANK on int8" 'compress int8:4: only powersgd' --compress int8:4
bad_comp "rank 0" 'powersgd:RANK wants an integer in 1..65536, not "0"' --compress powersgd:0
bad_comp "a block of 48" 'block is 32, 64 or 128, not 48' --compress int8 --compress-opts block=48
bad_comp "an unknown option" 'unknown --compress-opts item "fast"' --compress int8 --compress-opts fast
bad_comp "an option of another kind" 'clip=2 does not apply to int8' --compress int8 --compress-opts clip=2
bad_comp "--compress-opts alone" '--compress-opts needs --compress' --compress-opts noef
bad_comp "--shape without powersgd or adaptive" 'shape is the matrix of PowerSGD and of the adaptive compressor' --compress int8 --shape 32x32
bad_comp "a malformed --shape" 'shape wants ROWSxCOLS' --compress powersgd --shape 32

# The kinds sign, majority and int4 on the all-reduce, and the compressed
# all-gather, reduce-scatter and all-to-all (--coll with --compress), each
# at 2 and 3 ranks. The majority vote is compared with the exact vote (the
# sign of the sum of the inputs' signs), which its exact integer sums must
# give: relerr 0. Sign's error is that of one bit a value (below 1: nearer
# than zero); int4's below 0.25. Ratios at the largest row: sign 1 bit and a
# scale a block (above 15), int4 and the vote 4 bits (above 6).
for kind in sign majority int4; do
    for np in 2 3; do
        out="$TMP/comp.$kind.$np.out"
        shm=y
        [ $np -eq 3 ] && shm=n
        # shellcheck disable=SC2086 # CSIZES is several flags
        SHOAL_SHM_ENABLE=$shm SHOAL_CHUNK_SIZE=4096 $LIMIT "$BENCH" -np $np --compress $kind \
            $CSIZES -n 2 -w 1 >"$out" 2>&1
        rc=$?
        case $kind in
        sign) maxerr=1 minratio=15 errtext="below 1" ;;
        majority) maxerr=1e-300 minratio=6 errtext="0 (the exact vote)" ;;
        int4) maxerr=0.25 minratio=6 errtext="below 0.25" ;;
        esac
        check "--compress $kind -np $np: exits 0, $CNSIZES rows of 15 columns, guards intact" \
            crun_ok "$out" $rc || show "$out"
        check "--compress $kind -np $np: relerr columns $errtext" \
            cerr_ok "$out" $maxerr || show "$out"
        check "--compress $kind -np $np: bytes sent and ratio (above $minratio at 1.07 MB)" \
            cwire_ok "$out" $np $minratio || show "$out"
    done
done
# The adaptive compressor at two budgets, 2 ranks: within its budget (the
# bench's inputs are uniform, so int8 serves 0.05 and int4 0.5), and the
# looser budget sends fewer bytes.
for budget in 0.05 0.5; do
    out="$TMP/comp.adaptive.$budget.out"
    # shellcheck disable=SC2086 # CSIZES is several flags
    SHOAL_CHUNK_SIZE=4096 $LIMIT "$BENCH" -np 2 --compress adaptive:budget=$budget \
        --compress-opts window=1 $CSIZES -n 2 -w 1 >"$out" 2>&1
    rc=$?
    check "--compress adaptive:budget=$budget: exits 0, $CNSIZES rows, guards intact, relerr below the budget" \
        crun_err_ok "$out" $rc $budget || show "$out"
    check "--compress adaptive:budget=$budget: bytes sent and a ratio above 3" \
        cwire_ok "$out" 2 3 || show "$out"
done
lastsent() { awk '!/^#/ && NF == 15 { s = $14 } END { print s + 0 }' "$1"; }
check "--compress adaptive: the looser budget sends fewer bytes" \
    test "$(lastsent "$TMP/comp.adaptive.0.5.out")" -lt "$(lastsent "$TMP/comp.adaptive.0.05.out")"
check "--compress adaptive: the header names the budget and the window" \
    grep -q '^# Compression: adaptive, budget 0.05, window 1, PowerSGD rank 4, the squarest matrix of each size, error feedback on, seed 0$' \
    "$TMP/comp.adaptive.0.05.out" || show "$TMP/comp.adaptive.0.05.out"
check "--compress majority: the header names the vote and the exact vote it is compared with" \
    sh -c "grep -q '^# Compression: majority vote of signs, exact integer sums on the ring, error feedback off\$' '$TMP/comp.majority.2.out' &&
        grep -q 'exact: the exact vote, the sign of the sum of the inputs. signs;' '$TMP/comp.majority.2.out'" ||
    show "$TMP/comp.majority.2.out"
out="$TMP/comp.int4.opts.out"
# shellcheck disable=SC2086 # CSIZES is several flags
$LIMIT "$BENCH" -np 3 --compress int4 --compress-opts algo=ring,block=32,stochastic,seed=5 \
    $CSIZES -n 2 -w 1 >"$out" 2>&1
rc=$?
int4_opts_ok() {
    crun_err_ok "$1" "$2" 0.25 &&
        grep -q '^# Compression: int4, block 32, stochastic rounding, algo ring, error feedback on, seed 5$' "$1"
}
check "--compress int4 --compress-opts algo=ring,block=32,stochastic,seed=5 -np 3: exits 0, relerr below 0.25, in the header" \
    int4_opts_ok "$out" $rc || show "$out"

# --coll with --compress: the compressed collective, its buffers laid out as
# nccl-tests lays out the plain one's (the count per rank; the size column
# the larger buffer, nranks blocks) and its busbw nccl-tests' (n-1)/n of the
# algbw. relerr against the exact result: every rank's input (all-gather),
# the exact sum of each rank's block (reduce-scatter), the blocks sent
# (all-to-all). Sizes 24 bytes .. 292008 bytes in steps of x23: counts of
# 1 to 36501 values a rank, none a multiple of a block.
XSIZES="-b 24 -e 300000 -f 23"
XNSIZES=4
# xrun_ok FILE STATUS: exited 0 with the rows, guards intact, none wrong.
xrun_ok() {
    [ "$2" -eq 0 ] && [ "$(crows "$1")" -eq $XNSIZES ] && oob_ok "$1" &&
        ! grep -q '^# Wrong elements' "$1"
}
# xbus_ok FILE NP: busbw = algbw x (n-1)/n in both placements, to the
# table's rounding.
xbus_ok() {
    [ "$(crows "$1")" -gt 0 ] &&
        awk -v np="$2" '
            function off(a, b) { d = b - a * (np - 1) / np; if (d < 0) d = -d; return d > 0.0101 }
            !/^#/ && NF == 15 && (off($7, $8) || off($11, $12)) { bad = 1 }
            END { exit bad }' "$1"
}
# xcols_ok NP FILE REDOP: the largest row's size and count columns are
# nccl-tests' (292008 bytes of float round down to whole blocks), and every
# row's busbw is (n-1)/n of its algbw.
xcols_ok() {
    count=$((292008 / 4 / $1))
    awk -v s=$((count * $1 * 4)) -v c=$count -v o="$3" \
        '!/^#/ && NF == 15 && $1 == s && $2 == c && $3 == "float" && $4 == o && $5 == "-1" {f = 1}
        END {exit !f}' "$2" && xbus_ok "$2" "$1"
}
# xrun_err_ok FILE STATUS MAX: xrun_ok, and every relerr below MAX.
xrun_err_ok() { xrun_ok "$1" "$2" && cerr_ok "$1" "$3"; }
for combo in allgather:int8 allgather:int4 reducescatter:int8 reducescatter:int4 \
    reducescatter:sign alltoall:int8 alltoall:int4; do
    coll=${combo%%:*}
    kind=${combo#*:}
    for np in 2 3; do
        out="$TMP/comp.$coll.$kind.$np.out"
        shm=y
        [ $np -eq 3 ] && shm=n
        # shellcheck disable=SC2086 # XSIZES is several flags
        SHOAL_SHM_ENABLE=$shm SHOAL_CHUNK_SIZE=4096 $LIMIT "$BENCH" -np $np --coll $coll \
            --compress $kind $XSIZES -n 2 -w 1 >"$out" 2>&1
        rc=$?
        case $kind in
        int8) maxerr=1e-2 minratio=3 ;;
        int4) maxerr=0.25 minratio=6 ;;
        sign) maxerr=1 minratio=15 ;;
        esac
        redop=none
        [ $coll = reducescatter ] && redop=sum
        what="--coll $coll --compress $kind -np $np"
        check "$what: exits 0, $XNSIZES rows of 15 columns, guards intact, none wrong" \
            xrun_ok "$out" $rc || show "$out"
        check "$what: relerr columns below $maxerr" cerr_ok "$out" $maxerr || show "$out"
        check "$what: bytes sent and ratio (above $minratio at 292008 bytes)" \
            cwire_ok "$out" $np $minratio || show "$out"
        check "$what: nccl-tests' size, count and redop columns, busbw (n-1)/n of algbw" \
            xcols_ok $np "$out" $redop || show "$out"
    done
done
check "--coll allgather --compress int8: the header names the call and what relerr compares" \
    sh -c "grep -q '^# Compression: int8, block 64, nearest rounding, error feedback on, seed 0; the all-gather: shoal_allgather_compressed\$' '$TMP/comp.allgather.int8.2.out' &&
        grep -q 'exact: every rank.s input;' '$TMP/comp.allgather.int8.2.out' &&
        grep -q '^# Collective: allgather ' '$TMP/comp.allgather.int8.2.out'" ||
    show "$TMP/comp.allgather.int8.2.out"
check "--coll alltoall --compress int4: error feedback off by default, the call in the header" \
    grep -q '^# Compression: int4, block 64, nearest rounding, error feedback off, seed 0; the all-to-all: shoal_alltoall_compressed$' \
    "$TMP/comp.alltoall.int4.3.out" || show "$TMP/comp.alltoall.int4.3.out"
# Half and bfloat16, averages, the ring schedule, -c 0, JSON.
out="$TMP/comp.rs.half.out"
# shellcheck disable=SC2086 # XSIZES is several flags
$LIMIT "$BENCH" -np 3 --coll reducescatter --compress int8 -d half -o avg $XSIZES -n 2 -w 1 \
    >"$out" 2>&1
rc=$?
check "--coll reducescatter --compress int8 -d half -o avg -np 3: exits 0, relerr below 2e-2" \
    xrun_err_ok "$out" $rc 2e-2 || show "$out"
out="$TMP/comp.ag.bf16.out"
# shellcheck disable=SC2086 # XSIZES is several flags
$LIMIT "$BENCH" -np 2 --coll allgather --compress int4 -d bfloat16 $XSIZES -n 2 -w 1 >"$out" 2>&1
rc=$?
check "--coll allgather --compress int4 -d bfloat16 -np 2: exits 0, relerr below 0.25" \
    xrun_err_ok "$out" $rc 0.25 || show "$out"
xalgo_ok() { xrun_err_ok "$1" "$2" 2e-2 && grep -q "algo $3, error feedback on" "$1"; }
for algo in ring two-shot; do
    out="$TMP/comp.rs.$algo.out"
    # shellcheck disable=SC2086 # XSIZES is several flags
    $LIMIT "$BENCH" -np 3 --coll reducescatter --compress int8 --compress-opts algo=$algo \
        $XSIZES -n 2 -w 1 >"$out" 2>&1
    rc=$?
    check "--coll reducescatter --compress int8 --compress-opts algo=$algo -np 3: exits 0, relerr below 2e-2, the schedule in the header" \
        xalgo_ok "$out" $rc $algo || show "$out"
done
out="$TMP/comp.a2a.c0.out"
$LIMIT "$BENCH" -np 2 --coll alltoall --compress int8 -b 1M -e 1M -n 1 -w 0 -c 0 >"$out" 2>&1
rc=$?
check "--coll alltoall --compress int8 -c 0: exits 0, relerr N/A" \
    sh -c "[ $rc -eq 0 ] && awk '!/^#/ && NF == 15 && \$9 == \"N/A\" && \$13 == \"N/A\" {f = 1} END {exit !f}' '$out'" ||
    show "$out"
out="$TMP/comp.ag.json.out"
$LIMIT "$BENCH" -np 2 --coll allgather --compress int8 -b 1M -e 1M -n 2 -w 1 \
    -J "$TMP/comp.ag.json" >"$out" 2>&1
rc=$?
check "--coll allgather --compress int8 -J: the collective and the call in the settings, each row's error, wire bytes and ratio" \
    sh -c "[ $rc -eq 0 ] && grep -q '^  \"collective\": \"allgather\",\$' '$TMP/comp.ag.json' &&
        grep -q '\"compression\": {\"kind\": \"int8\", .*\"collective\": \"allgather\", \"call\": \"shoal_allgather_compressed\", \"rel_error_against\": \"every rank.s input\"' '$TMP/comp.ag.json' &&
        grep -q '\"count\": 131072, \"type\": \"float\", \"op\": \"none\"' '$TMP/comp.ag.json' &&
        grep -Eq '\"rel_error\": [0-9.e+-]+\\}' '$TMP/comp.ag.json' &&
        grep -Eq '\"bytes_sent\": [1-9][0-9]*, \"bytes_received\": [1-9][0-9]*, \"ratio\": [0-9.]+, \"wrong\": 0\\}' '$TMP/comp.ag.json' &&
        grep -q '\"status\": \"ok\"' '$TMP/comp.ag.json'" || { show "$out"; show "$TMP/comp.ag.json"; }

# What the compressed collectives do not take, each refused with its reason.
bad_comp "adaptive without a budget" 'adaptive takes :budget=B' --compress adaptive:0.1
bad_comp "adaptive with budget 0" 'adaptive takes :budget=B' --compress adaptive:budget=0
bad_comp "adaptive on the all-gather" 'the compressed all-gather takes int8 or int4' \
    --coll allgather --compress adaptive:budget=0.1
bad_comp "sign on the all-gather" 'the compressed all-gather takes int8 or int4' \
    --coll allgather --compress sign
bad_comp "the majority vote on the all-to-all" 'the compressed all-to-all takes int8 or int4' \
    --coll alltoall --compress majority
bad_comp "ternary on the reduce-scatter" 'the compressed reduce-scatter takes int8, int4 or sign' \
    --coll reducescatter --compress ternary
bad_comp "error feedback on the all-to-all" 'ef does not apply to int8 on the all-to-all' \
    --coll alltoall --compress int8 --compress-opts ef
bad_comp "error feedback on the majority vote" 'ef does not apply to majority (it takes noef)' \
    --compress majority --compress-opts ef
bad_comp "a block for the majority vote" 'block=32 does not apply to majority' \
    --compress majority --compress-opts block=32
bad_comp "the ring for sign" 'all-reduce runs algo auto or two-shot' \
    --compress sign --compress-opts algo=ring
bad_comp "the tree for int4" 'all-reduce runs algo auto, ring or two-shot' \
    --compress int4 --compress-opts algo=tree
bad_comp "the tree for the reduce-scatter" 'reduce-scatter runs algo auto, ring or two-shot' \
    --coll reducescatter --compress int8 --compress-opts algo=tree
bad_comp "a schedule for the all-gather" 'algo=ring does not apply to int4 on the all-gather' \
    --coll allgather --compress int4 --compress-opts algo=ring
bad_comp "an op other than sum and avg on the reduce-scatter" 'takes -o sum or avg, not max' \
    --coll reducescatter --compress sign -o max
bad_comp "a compressed all-gather in device memory" \
    'the compressed all-gather has no device path' --coll allgather --compress int8 --mem device
bad_comp "a compressed reduce-scatter in device memory" \
    'the compressed reduce-scatter has no device path' --coll reducescatter --compress sign --mem device
bad_comp "a compressed all-to-all in device memory" \
    'the compressed all-to-all has no device path' --coll alltoall --compress int4 --mem device
bad_comp "sign in device memory" \
    'shoal_allreduce_compressed_stream takes int8, ternary or powersgd' --compress sign --mem device

# --mem shared: the send and receive buffers from shoal_mem_alloc, which
# peers can map. Over shared memory the all-gather, all-to-all, broadcast,
# gather, scatter, reduce-scatter and all-reduce then write into or read
# from the peers' buffers directly (the "put" algorithm, which the cost
# model takes from 256 KiB of output per rank for all but the broadcast; a
# broadcast takes it only when SHOAL_ALGO forces it, the slot broadcast
# being faster at some sizes); with --mem host the same put finds no
# shareable buffer and falls back to the slots on every rank. Sizes
# 0 .. 2 MiB in steps of x8 (9 rows), every root: the largest rows take
# put, and the ALGO log shows it, without a fallback.
PUT_COLLS="allgather alltoall broadcast gather scatter reducescatter allreduce"
MSIZES="-b 0 -e 2M -f 8"
MNSIZES=9
put_ok() { grep -q ': put, est\.' "$1" && ! grep -q 'put falls back' "$1"; }
for coll in $PUT_COLLS; do
    for np in 2 3; do
        out="$TMP/$coll.mem$np.out"
        # shellcheck disable=SC2086 # MSIZES is several flags
        SHOAL_DEBUG=debug SHOAL_DEBUG_SUBSYS=ALGO $LIMIT $BENCH -np $np --coll $coll \
            --mem shared $MSIZES -r -1 -c 1 -n 1 -w 1 >"$out" 2>"$out.err"
        rc=$?
        nrows=$MNSIZES
        rooted $coll && nrows=$((MNSIZES * np))
        check "--mem shared --coll $coll -np $np: exits 0, $nrows rows, none wrong, guards intact" \
            run_ok $coll "$out" $rc $nrows || { show "$out"; show "$out.err"; }
        if [ "$coll" = broadcast ]; then
            check "--mem shared --coll broadcast -np $np: put not chosen by the cost model" \
                sh -c "! grep -q ': put, est\.' '$out.err'" || show "$out.err"
        else
            check "--mem shared --coll $coll -np $np: put chosen, no rank fell back to the slots" \
                put_ok "$out.err" || show "$out.err"
        fi
    done
    # put forced onto every size (rows of no element, counts that no rank
    # count divides) and onto groups of 10 in slices of one block; over tcp,
    # where peers cannot write, the shared buffers serve as any other.
    out="$TMP/$coll.memput.out"
    SHOAL_ALGO=$coll:put $LIMIT $BENCH -np 3 --coll $coll --mem shared $SIZES -r -1 -c 1 \
        -n 1 -w 1 >"$out" 2>&1
    rc=$?
    nrows=$NSIZES
    rooted $coll && nrows=$((NSIZES * 3))
    check "--mem shared SHOAL_ALGO=$coll:put -np 3: exits 0, $nrows rows, none wrong" \
        run_ok $coll "$out" $rc $nrows || show "$out"
    out="$TMP/$coll.memm.out"
    SHOAL_ALGO=$coll:put $LIMIT $BENCH -np 3 --coll $coll --mem shared -b 0 -e 3M -f 7 \
        -m 10 -c 1 -n 2 -w 1 >"$out" 2>&1
    rc=$?
    check "--mem shared SHOAL_ALGO=$coll:put -np 3 -m 10: exits 0, 9 rows, none wrong" \
        run_ok $coll "$out" $rc 9 || show "$out"
    out="$TMP/$coll.memtcp.out"
    # shellcheck disable=SC2086 # MSIZES is several flags
    SHOAL_SHM_ENABLE=n $LIMIT $BENCH -np 3 --coll $coll --mem shared $MSIZES -c 1 -n 1 -w 1 \
        >"$out" 2>&1
    rc=$?
    check "--mem shared --coll $coll -np 3 over tcp: exits 0, $MNSIZES rows, none wrong" \
        run_ok $coll "$out" $rc $MNSIZES || show "$out"
done
# The contrast that makes put_ok mean something: malloc'd buffers, same run,
# without cross-memory attach (which SHOAL_CMA=auto turns on where the
# machine's probe finds it faster than the slots: under TSan, for one).
out="$TMP/allgather.memhost.out"
SHOAL_CMA=off SHOAL_DEBUG=debug SHOAL_DEBUG_SUBSYS=ALGO $LIMIT $BENCH -np 2 --coll allgather --mem host \
    -b 2M -e 2M -c 1 -n 1 -w 1 >"$out" 2>"$out.err"
rc=$?
check "--mem host --coll allgather -np 2 at 2 MiB: exits 0, put falls back to the slots" \
    sh -c "[ $rc -eq 0 ] && grep -q 'put falls back' '$out.err'" || show "$out.err"
check "the header names the memory: shared, host by default" \
    sh -c "grep -q '^# Memory: shared (send and receive buffers from shoal_mem_alloc)\$' '$TMP/broadcast.mem3.out' &&
        grep -Eq '^#  Rank  2 Pid +[0-9]+ on +[^ ]+ shared memory\$' '$TMP/broadcast.mem3.out' &&
        grep -q '^# Memory: host (send and receive buffers from malloc)\$' '$TMP/gather.3.out' &&
        grep -Eq '^#  Rank  2 Pid +[0-9]+ on +[^ ]+ host memory\$' '$TMP/gather.3.out'"
out="$TMP/mem.json.out"
$LIMIT $BENCH -np 2 --coll alltoall --mem=shared -b 1M -e 1M -c 1 -n 1 -w 1 \
    -J "$TMP/mem.json" >"$out" 2>&1
rc=$?
check "--mem shared -J: the JSON settings name the memory" \
    sh -c "[ $rc -eq 0 ] && grep -q '^  \"memory\": \"shared\",\$' '$TMP/mem.json' &&
        grep -q '\"status\": \"ok\"' '$TMP/mem.json'" || { show "$out"; show "$TMP/mem.json"; }
check "-J without --mem: the JSON settings say host" \
    grep -q '^  "memory": "host",$' "$TMP/comp.json"
# The compressed all-reduce takes the bench's buffers, shared ones too.
out="$TMP/comp.mem.out"
# shellcheck disable=SC2086 # CSIZES is several flags
$LIMIT "$BENCH" -np 2 --compress int8 --mem shared $CSIZES -n 2 -w 1 >"$out" 2>&1
rc=$?
check "--compress int8 --mem shared -np 2: exits 0, relerr below 1e-2" \
    crun_err_ok "$out" $rc 1e-2 || show "$out"
$BENCH -np 2 --mem foo >"$TMP/badmem.out" 2>&1
rc=$?
check "--mem foo is refused, naming the kinds" \
    sh -c "[ $rc -eq 2 ] && grep -q 'unknown --mem \"foo\" (host: malloc, shared: shoal_mem_alloc, device: GPU memory)' '$TMP/badmem.out'" ||
    show "$TMP/badmem.out"

# --mem device: the send and receive buffers in device memory, each call
# the _stream form on the rank's stream, the stream waited for before the
# clock is read; inputs, poison and guards go through host mirrors, so the
# check (-c 1) covers every element and the guard bytes. make test names
# the CPU stand-in of the driver (SHOAL_CUDA_DRIVER) and the module
# (SHOAL_CUDA_MODULE); CUDA is first touched in each forked rank, never in
# the parent that forks them. Sizes 0 .. 117648 bytes in steps of x7 with
# 4 KiB chunks: rows of no element, odd counts and many pieces.
DSIZES="-b 0 -e 120K -f 7"
DNSIZES=8
reason=
if [ -z "${SHOAL_CUDA_DRIVER:-}" ] || [ ! -r "${SHOAL_CUDA_DRIVER}" ]; then
    reason="no CUDA driver stand-in (SHOAL_CUDA_DRIVER ${SHOAL_CUDA_DRIVER:-unset}: make builds it where cuda.h is, make test names it)"
elif [ -z "${SHOAL_CUDA_MODULE:-}" ] || [ ! -r "${SHOAL_CUDA_MODULE}" ]; then
    reason="no CUDA module (SHOAL_CUDA_MODULE ${SHOAL_CUDA_MODULE:-unset}: make builds it where nvcc is, make test names it)"
fi
DCOLLS="allreduce allgather broadcast"
if [ -n "$reason" ]; then
    for coll in $DCOLLS; do
        for np in 1 3; do missing "--mem device --coll $coll -np $np" "$reason"; done
    done
    for what in "-m 4 -z 0" "header" "JSON"; do missing "--mem device $what" "$reason"; done
    for kind in int8 ternary; do
        for np in 1 2; do
            for what in "exits 0" "relerr" "bytes sent"; do
                missing "--compress $kind --mem device -np $np: $what" "$reason"
            done
        done
    done
    for what in "-z 0 -d half -o avg" "header" "JSON"; do
        missing "--compress int8 --mem device $what" "$reason"
    done
    missing "--compress ternary --mem device -np 2: the host's relerr" "$reason"
    missing "--compress powersgd:4 --mem device -np 2: the host's relerr, to 1%" "$reason"
    for what in "relerr below 0.5" "the host's relerr"; do
        missing "--compress ternary --compress-opts clip=1 --mem device -np 2: $what" "$reason"
    done
else
    for coll in $DCOLLS; do
        for np in 1 3; do
            out="$TMP/$coll.dev$np.out"
            # shellcheck disable=SC2086 # DSIZES is several flags
            SHOAL_CHUNK_SIZE=4096 $LIMIT "$BENCH" -np $np --coll "$coll" --mem device $DSIZES \
                -r -1 -c 1 -n 2 -w 1 >"$out" 2>&1
            rc=$?
            nrows=$DNSIZES
            rooted "$coll" && nrows=$((DNSIZES * np))
            check "--mem device --coll $coll -np $np: exits 0, $nrows rows, none wrong, guards intact" \
                run_ok "$coll" "$out" $rc $nrows || show "$out"
        done
    done
    # Groups of 4 all-reduces (each in its own slice), the stream waited
    # for once after the timed loop (-z 0), JSON.
    out="$TMP/dev.m.out"
    # shellcheck disable=SC2086 # DSIZES is several flags
    SHOAL_CHUNK_SIZE=4096 $LIMIT "$BENCH" -np 3 --mem device $DSIZES -m 4 -z 0 -c 1 -n 2 -w 1 \
        -J "$TMP/dev.json" >"$out" 2>&1
    rc=$?
    check "--mem device -np 3 -m 4 -z 0: exits 0, $DNSIZES rows, none wrong, guards intact" \
        run_ok allreduce "$out" $rc $DNSIZES || show "$out"
    check "--mem device: the header names the memory, each rank's device and the timing" \
        sh -c "grep -q '^# Memory: device (send and receive buffers from the device module' '$out' &&
            grep -Eq '^#  Rank  2 Pid +[0-9]+ on +[^ ]+ device memory of device [0-9]+\$' '$out' &&
            grep -q 'stream-ordered calls, timed up to the stream.s end after the loop (-z 0)' '$out'" ||
        show "$out"
    check "--mem device -J: the JSON settings name the memory" \
        sh -c "grep -q '^  \"memory\": \"device\",\$' '$TMP/dev.json' &&
            grep -q '\"status\": \"ok\"' '$TMP/dev.json'" || show "$TMP/dev.json"
    # --compress on device buffers: shoal_allreduce_compressed_stream on the
    # rank's stream, the inputs written on the host and copied onto the
    # device, the results copied back for the relerr columns, the bytes
    # sent from the calls' info once the stream has passed them. A rank
    # alone keeps its input exactly (relerr 0); with two, int8's error is
    # below 1e-2, ternary's below 1 (nearer the exact sum than zero is).
    for kind in int8 ternary; do
        for np in 1 2; do
            out="$TMP/comp.$kind.dev$np.out"
            # shellcheck disable=SC2086 # CSIZES is several flags
            SHOAL_CHUNK_SIZE=4096 $LIMIT "$BENCH" -np $np --mem device --compress $kind \
                $CSIZES -n 2 -w 1 >"$out" 2>&1
            rc=$?
            maxerr=1e-300 errtext="relerr 0" wiretext="nothing sent, ratio N/A"
            if [ $np -gt 1 ]; then
                maxerr=1e-2
                [ $kind = ternary ] && maxerr=1
                errtext="relerr columns below $maxerr"
                wiretext="bytes sent and ratio (above 3 at 1.07 MB)"
            fi
            check "--compress $kind --mem device -np $np: exits 0, $CNSIZES rows of 15 columns, guards intact" \
                crun_ok "$out" $rc || show "$out"
            check "--compress $kind --mem device -np $np: $errtext" \
                cerr_ok "$out" $maxerr || show "$out"
            check "--compress $kind --mem device -np $np: $wiretext" \
                cwire_ok "$out" $np 3 || show "$out"
        done
    done
    # Half, averages, the stream waited for once after the timed loop, JSON.
    out="$TMP/comp.devz0.out"
    # shellcheck disable=SC2086 # CSIZES is several flags
    $LIMIT "$BENCH" -np 2 --mem device --compress int8 -d half -o avg -z 0 $CSIZES -n 2 -w 1 \
        -J "$TMP/comp.dev.json" >"$out" 2>&1
    rc=$?
    check "--compress int8 --mem device -z 0 -d half -o avg -np 2: exits 0, relerr below 2e-2" \
        crun_err_ok "$out" $rc 2e-2 || show "$out"
    check "--compress int8 --mem device: the header names the memory, the call and the timing" \
        sh -c "grep -q '^# Memory: device (send and receive buffers from the device module' '$out' &&
            grep -q '^# Compression: int8, block 64, nearest rounding, algo auto, error feedback on, seed 0; device memory: shoal_allreduce_compressed_stream on each rank.s stream (two-shot, whatever algo)\$' '$out' &&
            grep -q 'stream-ordered calls, timed up to the stream.s end after the loop (-z 0)' '$out'" ||
        show "$out"
    check "--compress int8 --mem device -J: the settings name the memory and the compression" \
        sh -c "grep -q '^  \"memory\": \"device\",\$' '$TMP/comp.dev.json' &&
            grep -q '\"compression\": {\"kind\": \"int8\"' '$TMP/comp.dev.json' &&
            grep -Eq '\"bytes_sent\": [1-9][0-9]*, \"bytes_received\": [1-9][0-9]*, \"ratio\": [0-9.]+, \"wrong\": 0\\}' '$TMP/comp.dev.json' &&
            grep -q '\"status\": \"ok\"' '$TMP/comp.dev.json'" || show "$TMP/comp.dev.json"
    # Ternary sums its codes exactly on the device as on the host, so each
    # row's result, and its error, is the host's; clipped too, where
    # clipping at one standard deviation brings the error below 0.5.
    check "--compress ternary --mem device -np 2: the host's relerr in every row" \
        same_err "$TMP/comp.ternary.dev2.out" "$TMP/comp.ternary.2.y.out" ||
        { show "$TMP/comp.ternary.dev2.out"; show "$TMP/comp.ternary.2.y.out"; }
    out="$TMP/comp.clip.device.out"
    # shellcheck disable=SC2086 # CSIZES is several flags
    $LIMIT "$BENCH" -np 2 --compress ternary --compress-opts clip=1 $CSIZES -n 2 -w 1 \
        >"$TMP/comp.clip.host.out" 2>&1
    # shellcheck disable=SC2086 # CSIZES is several flags
    $LIMIT "$BENCH" -np 2 --mem device --compress ternary --compress-opts clip=1 $CSIZES \
        -n 2 -w 1 >"$out" 2>&1
    rc=$?
    check "--compress ternary --compress-opts clip=1 --mem device -np 2: exits 0, relerr below 0.5" \
        crun_err_ok "$out" $rc 0.5 || show "$out"
    check "--compress ternary --compress-opts clip=1 --mem device -np 2: the host's relerr in every row" \
        same_err "$out" "$TMP/comp.clip.host.out" || { show "$out"; show "$TMP/comp.clip.host.out"; }
    # PowerSGD's products run on the device (cuBLAS; in make test its CPU
    # stand-in, SHOAL_CUBLAS), in another order than the host's: the same
    # error to rounding.
    out="$TMP/comp.psgd.device.out"
    # shellcheck disable=SC2086 # CSIZES is several flags
    $LIMIT "$BENCH" -np 2 --mem device --compress powersgd:4 $CSIZES -n 2 -w 1 >"$out" 2>&1
    rc=$?
    check "--compress powersgd:4 --mem device -np 2: the host's relerr, to 1%" \
        crun_near_ok "$out" $rc "$TMP/comp.powersgd:4.2.y.out" 0.01 ||
        { show "$out"; show "$TMP/comp.powersgd:4.2.y.out"; }
fi
# Without the module, --mem device stops at the start and says why, naming
# the module it looked for; no stand-in is needed for that.
out="$TMP/dev.nomodule.out"
SHOAL_CUDA_MODULE=/nonexistent $LIMIT "$BENCH" -np 2 --mem device -b 1K -e 1K -n 1 -w 0 \
    >"$out" 2>&1
rc=$?
check "--mem device without the module: exits 2, saying --mem device needs CUDA, naming the module" \
    sh -c "[ $rc -eq 2 ] && grep -q -- '--mem device needs CUDA: .*/nonexistent' '$out'" || show "$out"

# tools/netns_bench.sh --iperf3: iperf3's TCP figure between the first two
# namespaces before the run, and each size row's busbw over it after. Needs
# root (network namespaces), iperf3 and bash 5.1.
NB_SERVER="iperf3 -s -1 -B 10.231.79.2 -p 29602"
iperf_line() { # FILE: the figure line, with a positive Gbit/s figure
    grep -Eq '^# iperf3 shoal_nb0 -> shoal_nb1: [0-9.]+ Gbit/s = [0-9.]+ GB/s \([0-9.]+ s\)$' "$1" &&
        awk '/^# iperf3 shoal_nb0 -> / { if ($6 + 0 > 0) f = 1 } END { exit !f }' "$1"
}
ratio_lines() { # FILE SIZE...: one ratio line per size row, in order, none else
    f=$1
    shift
    [ "$(awk '/^# busbw \/ iperf3: / { print $5 }' "$f" | tr '\n' ' ')" = "$* " ] &&
        [ "$(awk '/^# busbw \/ iperf3: / && $6 ~ /^[0-9]+\.[0-9][0-9]$/' "$f" | wc -l)" -eq $# ] &&
        [ "$(rows "$f")" -eq $# ]
}
no_server() { # no iperf3 server left behind; unknown without pgrep, a failure in CI
    if command -v pgrep >/dev/null 2>&1; then
        ! pgrep -f "$NB_SERVER" >/dev/null
    else
        [ "${SHOAL_CI:-0}" != 1 ]
    fi
}
# A missing tool fails in CI (tap.sh: missing); not being root skips.
reason=
not_root=
if ! command -v iperf3 >/dev/null 2>&1; then
    reason="iperf3 is not installed (apt-get install iperf3)"
elif ! bash -c '((BASH_VERSINFO[0] > 5 || (BASH_VERSINFO[0] == 5 && BASH_VERSINFO[1] >= 1)))'; then
    reason="bash older than 5.1"
elif [ "$(id -u)" -ne 0 ]; then
    reason="not root (network namespaces)"
    not_root=y
fi
if [ -n "$reason" ]; then
    for what in "exits 0" "iperf3 line" "ratio lines" "no server left" "HOSTS=1" \
        "failure: exits 0" "failure: reported" "failure: no server left"; do
        if [ -n "$not_root" ]; then
            skip "netns_bench.sh --iperf3 $what: $reason"
        else
            missing "netns_bench.sh --iperf3 $what" "$reason"
        fi
    done
else
    out="$TMP/nb_iperf.out"
    BENCH="$BENCH" $LIMIT bash tools/netns_bench.sh --iperf3 --algo ring 2 1 -- \
        -b 1M -e 2M -f 2 -n 2 -w 1 -c 1 >"$out" 2>&1
    rc=$?
    check "netns_bench.sh --iperf3 2 1 exits 0" [ $rc -eq 0 ] || show "$out"
    check "netns_bench.sh --iperf3: the iperf3 line with a positive figure" iperf_line "$out"
    check "netns_bench.sh --iperf3: a busbw / iperf3 line for each size row (1M 2M)" \
        ratio_lines "$out" 1M 2M
    check "netns_bench.sh --iperf3: no iperf3 server left" no_server
    out="$TMP/nb_iperf1.out"
    BENCH="$BENCH" $LIMIT bash tools/netns_bench.sh --iperf3 1 1 >"$out" 2>&1
    rc=$?
    check "netns_bench.sh --iperf3 with HOSTS=1 exits 2 naming the reason" \
        sh -c "[ $rc -eq 2 ] && grep -q 'needs 2 HOSTS' '$out'" || show "$out"
    # A measurement that fails (an iperf3 whose client only reports an
    # error) is reported, the run goes on and the server is ended.
    mkdir -p "$TMP/fakebin"
    printf '#!/bin/sh\ncase " $* " in *" -s "*) exec %s "$@" ;; esac\n%s\nexit 1\n' \
        "$(command -v iperf3)" "echo '{\"error\": \"fake failure\"}'" >"$TMP/fakebin/iperf3"
    chmod +x "$TMP/fakebin/iperf3"
    out="$TMP/nb_iperf_fail.out"
    PATH="$TMP/fakebin:$PATH" BENCH="$BENCH" $LIMIT bash tools/netns_bench.sh --iperf3 \
        --algo ring 2 1 -- -b 1M -e 1M -n 2 -w 1 -c 1 >"$out" 2>&1
    rc=$?
    check "netns_bench.sh --iperf3, iperf3 failing: exits 0 with the table" \
        sh -c "[ $rc -eq 0 ] && [ \$(awk '!/^#/ && NF == 13' '$out' | wc -l) -eq 1 ]" || show "$out"
    check "netns_bench.sh --iperf3, iperf3 failing: reported, no ratio line" \
        sh -c "grep -q '^# iperf3 shoal_nb0 -> shoal_nb1: failed: fake failure' '$out' &&
            ! grep -q '^# busbw / iperf3' '$out'" || show "$out"
    check "netns_bench.sh --iperf3, iperf3 failing: no iperf3 server left" no_server
fi

echo "1..$n"
