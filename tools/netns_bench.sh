#!/bin/bash
# shellcheck disable=SC2317 # the cleanup functions run from traps
# netns_bench.sh: allreduce_bench across hosts simulated on this machine.
# HOSTS network namespaces (shoal_nb0, shoal_nb1, ...) joined by a bridge
# that lives in a namespace of its own (shoal_nbbr), RANKS ranks in each;
# ranks of one namespace share memory, the others talk tcp over the veths,
# optionally shaped to a NIC's rate with tbf. For each SHOAL_ALGO setting,
# every rank is started by hand through shoal_comm_init_env (SHOAL_RANK,
# SHOAL_SIZE, SHOAL_ADDR, SHOAL_SECRET) and rank 0's table is printed.
# With --iperf3, iperf3 measures the raw TCP throughput from shoal_nb0 to
# shoal_nb1 over the same links just before each run, and each size row's
# busbw is printed divided by it.
# Everything it creates is removed on exit. Needs root.
#
# The names (shoal_nb*, 10.231.79.0/24) differ from those of the tests
# (shoal_nh*, 10.231.78.0/24; shoal_test_*, 10.231.77.0/24) so that a test
# run cleaning up its leftovers never takes this topology away.
set -u

usage() {
    cat <<EOF
usage: $0 [options] [HOSTS [RANKS]] [-- bench flags]
  HOSTS            namespaces, each a host (default 2, at most 200)
  RANKS            ranks per namespace (default 2)
  --rate RATE      shape the namespace end of every veth with
                   tbf rate RATE burst 256kb latency 50ms (e.g. 1gbit, 10gbit);
                   default: unlimited
  --algo SETTING   SHOAL_ALGO of one run; repeat for more
                   (default: ring, then allreduce:hier)
  --port PORT      rendezvous port of rank 0 (default 29601)
  --iperf3         before each run, measure the raw TCP throughput from
                   ${PREFIX}0 to ${PREFIX}1 (the same veths and --rate) with
                   iperf3 -t $IPERF_TIME, its server on port PORT+1 (PORT-1 for 65535),
                   and print it as "# iperf3 ..."; after the run, each size
                   row's out-of-place busbw over it: "# busbw / iperf3: SIZE R".
                   Needs 2 HOSTS or more, iperf3 and perl's JSON::PP; a failed
                   measurement is reported and the run goes on
  --timeout SEC    limit of each run (default 900)
  -h, --help       this text
Bench flags after -- replace the default: $DEFAULT_FLAGS
The bench is \$BENCH, else allreduce_bench next to this script. Other SHOAL_*
settings in the environment (SHOAL_CHUNK_SIZE, SHOAL_DEBUG...) reach every rank.
Exit status: 0 when every run succeeded, 1 otherwise, 2 for a usage error.
EOF
}

DEFAULT_FLAGS="-b 1M -e 64M -f 4 -n 5 -w 2 -c 1"
PREFIX=shoal_nb
IPERF_TIME=3
NS_BRIDGE=${PREFIX}br
SUBNET=10.231.79
HOSTS=2
RANKS=2
RATE=
PORT=29601
LIMIT=900
IPERF=0
ALGOS=()
FLAGS=()
npos=0

die() {
    echo "netns_bench: $*" >&2
    exit 2
}

while [ $# -gt 0 ]; do
    case $1 in
    --rate) [ $# -ge 2 ] || die "--rate needs a value"; RATE=$2; shift 2 ;;
    --algo) [ $# -ge 2 ] || die "--algo needs a value"; ALGOS+=("$2"); shift 2 ;;
    --port) [ $# -ge 2 ] || die "--port needs a value"; PORT=$2; shift 2 ;;
    --timeout) [ $# -ge 2 ] || die "--timeout needs a value"; LIMIT=$2; shift 2 ;;
    --iperf3) IPERF=1; shift ;;
    -h | --help) usage; exit 0 ;;
    --) shift; FLAGS=("$@"); break ;;
    -*) usage >&2; die "unknown option $1" ;;
    *)
        case $npos in
        0) HOSTS=$1 ;;
        1) RANKS=$1 ;;
        *) usage >&2; die "unexpected argument $1" ;;
        esac
        npos=$((npos + 1))
        shift
        ;;
    esac
done

# check_int WHAT VALUE MIN MAX
check_int() {
    if ! [[ $2 =~ ^[0-9]{1,9}$ ]] || [ "$2" -lt "$3" ] || [ "$2" -gt "$4" ]; then
        die "$1 must be an integer in $3..$4, not \"$2\""
    fi
}
check_int HOSTS "$HOSTS" 1 200
check_int RANKS "$RANKS" 1 4096
check_int --port "$PORT" 1 65535
check_int --timeout "$LIMIT" 1 999999999
[ ${#ALGOS[@]} -gt 0 ] || ALGOS=(ring allreduce:hier)
# shellcheck disable=SC2206 # the default flags are words on purpose
[ ${#FLAGS[@]} -gt 0 ] || FLAGS=($DEFAULT_FLAGS)
if [ "$IPERF" -eq 1 ]; then
    [ "$HOSTS" -ge 2 ] ||
        die "--iperf3 needs 2 HOSTS or more: it measures ${PREFIX}0 -> ${PREFIX}1, and HOSTS is $HOSTS"
    command -v iperf3 >/dev/null 2>&1 ||
        die "--iperf3 needs iperf3, which is not installed (apt-get install iperf3)"
    perl -MJSON::PP -e 1 >/dev/null 2>&1 ||
        die "--iperf3 needs perl's JSON::PP to read iperf3's JSON (apt-get install perl)"
    # PORT+1 (PORT-1 for the last port): never the rendezvous port. The server
    # lives in ${PREFIX}1 and only while a measurement runs, before the ranks.
    IPERF_PORT=$((PORT < 65535 ? PORT + 1 : PORT - 1))
fi
((BASH_VERSINFO[0] > 5 || (BASH_VERSINFO[0] == 5 && BASH_VERSINFO[1] >= 1))) ||
    die "needs bash 5.1 or later (wait -p)"
[ "$(id -u)" -eq 0 ] || die "run as root: network namespaces need CAP_SYS_ADMIN"

BENCH=${BENCH:-$(dirname "$0")/allreduce_bench}
[ -x "$BENCH" ] || die "no bench at $BENCH (build it, or set BENCH)"
BENCH=$(realpath "$BENCH")
NRANKS=$((HOSTS * RANKS))

# A launcher around this script must not leak its own rank variables or a
# rendezvous port that contradicts SHOAL_ADDR into the ranks.
unset SHOAL_RANK SHOAL_SIZE SHOAL_LOCAL_RANK SHOAL_PORT SHOAL_COMM_ID SHOAL_SECRET \
    SHOAL_SECRET_FILE SHOAL_AUTH SHOAL_BOOTSTRAP_MAC \
    PMIX_NAMESPACE PMIX_RANK RANK WORLD_SIZE LOCAL_RANK MASTER_ADDR MASTER_PORT \
    OMPI_COMM_WORLD_RANK OMPI_COMM_WORLD_SIZE SLURM_PROCID SLURM_NTASKS

# The names are fixed, and both the start and the end remove whatever has
# them: one run at a time, and the lock taken before any cleanup can run.
LOCK=/run/lock/shoal_netns_bench.lock
exec 9>"$LOCK" || die "cannot open $LOCK"
flock -n 9 || die "another netns_bench.sh is running (lock $LOCK)"

TMP=
PIDS=()
IPERF_PID=
TEE_PID=

remove_topology() {
    local ns
    for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${PREFIX}(br|[0-9]+)$"); do
        ip netns del "$ns" 2>/dev/null
    done
}

# Each rank runs under timeout(1), which leads a process group of its own
# (so a terminal's ^C reaches the script alone): end the whole group.
stop_ranks() {
    local pid
    for pid in "${PIDS[@]}"; do
        kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null
    done
    for pid in "${PIDS[@]}"; do
        wait "$pid" 2>/dev/null
    done
    PIDS=()
}

# The iperf3 server runs under timeout(1) too: end its group.
stop_iperf() {
    [ -n "$IPERF_PID" ] || return 0
    kill -KILL -- "-$IPERF_PID" 2>/dev/null || kill -KILL "$IPERF_PID" 2>/dev/null
    wait "$IPERF_PID" 2>/dev/null
    IPERF_PID=
}

cleanup() {
    trap - EXIT INT TERM
    stop_iperf
    stop_ranks
    # rank 0's tee ends once the ranks are gone
    [ -n "$TEE_PID" ] && { kill "$TEE_PID" 2>/dev/null; wait "$TEE_PID" 2>/dev/null; }
    remove_topology
    [ -n "$TMP" ] && rm -rf "$TMP"
}
trap cleanup EXIT
trap 'echo "netns_bench: interrupted" >&2; exit 130' INT TERM

run() {
    "$@" || { echo "netns_bench: failed: $*" >&2; exit 1; }
}

# Namespace i: veth end ${PREFIX}v<i> at $SUBNET.<i+1>; its peer ${PREFIX}p<i>
# is a port of bridge ${PREFIX}br0 in $NS_BRIDGE.
create_topology() {
    local i ns
    remove_topology
    run ip netns add "$NS_BRIDGE"
    run ip -n "$NS_BRIDGE" link add "${PREFIX}br0" type bridge
    run ip -n "$NS_BRIDGE" link set "${PREFIX}br0" up
    for ((i = 0; i < HOSTS; i++)); do
        ns=$PREFIX$i
        run ip netns add "$ns"
        run ip -n "$NS_BRIDGE" link add "${PREFIX}p$i" type veth \
            peer name "${PREFIX}v$i" netns "$ns"
        run ip -n "$NS_BRIDGE" link set "${PREFIX}p$i" master "${PREFIX}br0" up
        run ip -n "$ns" addr add "$SUBNET.$((i + 1))/24" dev "${PREFIX}v$i"
        run ip -n "$ns" link set "${PREFIX}v$i" up
        run ip -n "$ns" link set lo up
        if [ -n "$RATE" ]; then
            run ip netns exec "$ns" tc qdisc add dev "${PREFIX}v$i" root tbf rate "$RATE" \
                burst 256kb latency 50ms
        fi
    done
}

secret() {
    od -An -tx1 -N16 /dev/urandom | tr -d ' \n'
}

# iperf_measure: the TCP throughput from ${PREFIX}0 to ${PREFIX}1 into
# IPERF_GBS (GB/s; empty if the measurement failed) and one comment line
# on stdout either way. The server takes one client (-1) and is ended in
# any case before this returns.
iperf_measure() {
    local what="# iperf3 ${PREFIX}0 -> ${PREFIX}1:" i line why=
    IPERF_GBS=
    timeout -k 2 $((IPERF_TIME + 60)) ip netns exec "${PREFIX}1" \
        iperf3 -s -1 -B "$SUBNET.2" -p "$IPERF_PORT" >"$TMP/iperf3_server.out" 2>&1 9>&- &
    IPERF_PID=$!
    # Ready once it listens; the client does not retry a refused connection.
    for ((i = 0; i < 50; i++)); do
        if [ -n "$(ip netns exec "${PREFIX}1" ss -Hltn "sport = :$IPERF_PORT" 2>/dev/null)" ]; then
            break
        fi
        kill -0 "$IPERF_PID" 2>/dev/null || break
        sleep 0.1
    done
    if [ -z "$(ip netns exec "${PREFIX}1" ss -Hltn "sport = :$IPERF_PORT" 2>/dev/null)" ]; then
        why="the server did not listen on $SUBNET.2:$IPERF_PORT"
    else
        timeout -k 2 $((IPERF_TIME + 30)) ip netns exec "${PREFIX}0" \
            iperf3 -c "$SUBNET.2" -p "$IPERF_PORT" -t "$IPERF_TIME" -J \
            >"$TMP/iperf3.json" 2>"$TMP/iperf3_client.err" 9>&-
        # "GBS TEXT" (GBS in GB/s, TEXT for the comment line), or "error: WHY"
        line=$(perl -MJSON::PP -e '
            local $/;
            my $j = eval { JSON::PP->new->decode(<STDIN>) };
            if (!$j) { print "error: no JSON from the client\n"; exit 1 }
            if ($j->{error}) { print "error: $j->{error}\n"; exit 1 }
            my $s = $j->{end}{sum_received};
            my $bps = $s ? $s->{bits_per_second} : undef;
            if (!defined $bps || $bps <= 0) { print "error: no receiver figure\n"; exit 1 }
            printf "%.6g %.3g Gbit/s = %.2f GB/s (%.3g s)\n", $bps / 8e9, $bps / 1e9,
                $bps / 8e9, $s->{seconds};
        ' <"$TMP/iperf3.json" 2>&1)
        if [[ $line =~ ^([0-9.e+-]+)\ ([0-9.e+-]+\ Gbit/s.*)$ ]]; then
            IPERF_GBS=${BASH_REMATCH[1]}
            echo "$what ${BASH_REMATCH[2]}"
        else
            why=${line#error: }
            [ -s "$TMP/iperf3_client.err" ] && why="$why; $(head -n 1 "$TMP/iperf3_client.err")"
        fi
    fi
    stop_iperf
    if [ -z "$IPERF_GBS" ]; then
        echo "$what failed: ${why:-no figure}"
        echo "netns_bench: the iperf3 measurement failed (${why:-no figure}); the run goes on" >&2
        [ -s "$TMP/iperf3_server.out" ] && sed 's/^/# iperf3 server: /' "$TMP/iperf3_server.out" >&2
        return 1
    fi
    return 0
}

# iperf_ratios FILE GBS: each table row's out-of-place busbw (column 8 of
# nccl-tests' 13) over GBS, the size in K/M/G where it is a whole number of
# them; type and redop (and root) added where the table has several rows of
# one size (-d all, -o all, -r -1).
iperf_ratios() {
    awk -v gbs="$2" '
        function label(b) {
            if (b > 0 && b % 1073741824 == 0) return b / 1073741824 "G"
            if (b > 0 && b % 1048576 == 0) return b / 1048576 "M"
            if (b > 0 && b % 1024 == 0) return b / 1024 "K"
            return b
        }
        !/^#/ && NF == 13 && $1 ~ /^[0-9]+$/ {
            n++; size[n] = $1; type[n] = $3; op[n] = $4; root[n] = $5; bw[n] = $8
            if (seen[$1]++) several = 1
        }
        END {
            if (!n) { print "# busbw / iperf3: no table rows"; exit }
            for (i = 1; i <= n; i++) {
                what = label(size[i])
                if (several) what = what " " type[i] " " op[i] (root[i] >= 0 ? " root " root[i] : "")
                printf "# busbw / iperf3: %s %.2f\n", what, bw[i] / gbs
            }
        }' "$1"
}

# One run: every rank in its namespace, rank 0's output to stdout (and, with
# --iperf3, through tee into $TMP/rank0.out), the others' kept and shown only
# if the run fails.
run_algo() {
    local algo=$1 key r ns failed=0 rc
    key=$(secret)
    [ -n "$key" ] || { echo "netns_bench: no random secret" >&2; return 1; }
    PIDS=()
    for ((r = 0; r < NRANKS; r++)); do
        ns=$PREFIX$((r / RANKS))
        if [ "$r" -eq 0 ] && [ "$IPERF" -eq 1 ]; then
            rm -f "$TMP/rank0.out" "$TMP/rank0.fifo"
            mkfifo "$TMP/rank0.fifo" || { echo "netns_bench: mkfifo failed" >&2; return 1; }
            tee "$TMP/rank0.out" <"$TMP/rank0.fifo" 9>&- &
            TEE_PID=$!
            exec 3>"$TMP/rank0.fifo"
        elif [ "$r" -eq 0 ]; then
            exec 3>&1
        else
            exec 3>"$TMP/rank$r.out"
        fi
        timeout -k 5 "$LIMIT" ip netns exec "$ns" env SHOAL_RANK="$r" SHOAL_SIZE="$NRANKS" \
            SHOAL_ADDR="$SUBNET.1:$PORT" SHOAL_SECRET="$key" SHOAL_HOST_ID="$ns" \
            SHOAL_ALGO="$algo" SHOAL_SOCKET_IFNAME="${PREFIX}v" \
            "$BENCH" "${FLAGS[@]}" >&3 2>&1 9>&- &
        PIDS+=($!)
        exec 3>&-
    done
    # A rank that fails usually takes the others down with a peer error
    # soon; one that never came up leaves them waiting for SHOAL_TIMEOUT,
    # so the first failure, whichever rank it is, stops what still runs.
    local left=$NRANKS done_pid
    while [ "$left" -gt 0 ]; do
        wait -n -p done_pid "${PIDS[@]}"
        rc=$?
        left=$((left - 1))
        for r in "${!PIDS[@]}"; do
            # Reaped: its pid is no longer ours to signal.
            [ "${PIDS[$r]}" = "$done_pid" ] && unset "PIDS[$r]" && break
        done
        if [ "$rc" -ne 0 ]; then
            [ "$rc" -eq 124 ] && echo "# rank $r: over the ${LIMIT} s limit" >&2
            echo "# rank $r exited $rc" >&2
            failed=1
            break
        fi
    done
    stop_ranks
    if [ -n "$TEE_PID" ]; then
        wait "$TEE_PID" 2>/dev/null
        TEE_PID=
    fi
    if [ "$failed" -ne 0 ]; then
        for ((r = 1; r < NRANKS; r++)); do
            [ -s "$TMP/rank$r.out" ] && sed "s/^/# rank $r: /" "$TMP/rank$r.out" >&2
        done
    fi
    return "$failed"
}

TMP=$(mktemp -d "${TMPDIR:-/tmp}/netns_bench.XXXXXX") || die "mktemp failed"
create_topology

status=0
summary=()
for algo in "${ALGOS[@]}"; do
    echo
    echo "######## SHOAL_ALGO=$algo: $HOSTS hosts x $RANKS ranks, links ${RATE:-unlimited}"
    echo "######## $BENCH ${FLAGS[*]}"
    note=
    if [ "$IPERF" -eq 1 ]; then
        iperf_measure || note=", iperf3 failed"
    fi
    start=$SECONDS
    if run_algo "$algo"; then
        summary+=("ok      SHOAL_ALGO=$algo ($((SECONDS - start)) s)$note")
    else
        summary+=("FAILED  SHOAL_ALGO=$algo ($((SECONDS - start)) s)$note")
        status=1
    fi
    if [ "$IPERF" -eq 1 ] && [ -n "$IPERF_GBS" ] && [ -s "$TMP/rank0.out" ]; then
        iperf_ratios "$TMP/rank0.out" "$IPERF_GBS"
    fi
done
echo
echo "######## summary: $HOSTS hosts x $RANKS ranks, links ${RATE:-unlimited}"
printf '%s\n' "${summary[@]}"
exit "$status"
