#!/bin/sh
# allreduce_bench end to end, as TAP for prove: forked ranks over every type
# and op with the results checked, a small chunk size, sizes of zero elements
# and sizes that are no multiple of the element, ranks started by mpirun
# (through PMIx) and by torchrun-style variables. Run from the repository
# root (make test does).

BENCH=tools/allreduce_bench
TMP=$(mktemp -d "${TMPDIR:-/tmp}/shoal_bench.XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT INT TERM

# The runs below choose their launcher themselves; a launcher around this
# script (a CI job under Slurm or mpirun) must not leak into them.
unset SHOAL_RANK SHOAL_SIZE SHOAL_LOCAL_RANK SHOAL_ADDR SHOAL_PORT SHOAL_SECRET \
    PMIX_NAMESPACE PMIX_RANK RANK WORLD_SIZE LOCAL_RANK MASTER_ADDR MASTER_PORT \
    TORCHELASTIC_RUN_ID OMPI_COMM_WORLD_RANK OMPI_COMM_WORLD_SIZE \
    OMPI_COMM_WORLD_LOCAL_RANK SLURM_PROCID SLURM_NTASKS SLURM_LOCALID SLURM_JOB_ID

# A hung run must end as a failure, not hang prove.
if command -v timeout >/dev/null 2>&1; then
    LIMIT="timeout 600"
else
    LIMIT=
fi

n=0
pass() { n=$((n + 1)); echo "ok $n - $1"; }
fail() { n=$((n + 1)); echo "not ok $n - $1"; }
skip() { n=$((n + 1)); echo "ok $n # SKIP $1"; }
# check DESCRIPTION COMMAND...: one TAP line from the command's status.
# Returns the command's status, so a failure can show the run's output.
check() {
    desc=$1
    shift
    if "$@"; then
        pass "$desc"
    else
        fail "$desc"
        return 1
    fi
}
# Show a run's output as TAP comments when one of its checks failed.
show() {
    sed 's/^/# /' "$1"
}

# Table rows: 13 columns; columns 9 and 13 are #wrong of out-of-place and
# in-place.
rows() { awk '!/^#/ && NF == 13' "$1" | wc -l | tr -d ' '; }
rows_equal() { [ "$(rows "$1")" -eq "$2" ]; }
no_wrong() {
    [ "$(rows "$1")" -gt 0 ] &&
        [ "$(awk '!/^#/ && NF == 13 && ($9 != "0" || $13 != "0")' "$1" | wc -l)" -eq 0 ]
}
oob_ok() { grep -q '^# Out of bounds values : 0 OK$' "$1"; }
memcpy_line() { grep -Eq '^# memcpy bandwidth \(1 thread, 64 MiB\): [0-9]+\.[0-9]+ GB/s$' "$1"; }
has_row() { # FILE SIZE COUNT TYPE
    awk -v s="$2" -v c="$3" -v t="$4" '!/^#/ && NF == 13 && $1 == s && $2 == c && $3 == t {f = 1}
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
    for what in exit pmix ranks wrong oob; do skip "mpirun $what: $reason"; done
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
        TORCHELASTIC_RUN_ID=bench-test SHOAL_DEBUG=info SHOAL_DEBUG_SUBSYS=INIT \
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

echo "1..$n"
