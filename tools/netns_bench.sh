#!/bin/bash
# shellcheck disable=SC2317 # the cleanup functions run from traps
# netns_bench.sh: allreduce_bench across hosts simulated on this machine.
# HOSTS network namespaces (shoal_nb0, shoal_nb1, ...) joined by a bridge
# that lives in a namespace of its own (shoal_nbbr), RANKS ranks in each;
# ranks of one namespace share memory, the others talk tcp over the veths,
# optionally shaped to a NIC's rate with tbf. For each SHOAL_ALGO setting,
# every rank is started by hand through shoal_comm_init_env (SHOAL_RANK,
# SHOAL_SIZE, SHOAL_ADDR, SHOAL_SECRET) and rank 0's table is printed.
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
NS_BRIDGE=${PREFIX}br
SUBNET=10.231.79
HOSTS=2
RANKS=2
RATE=
PORT=29601
LIMIT=900
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
    PMIX_NAMESPACE PMIX_RANK RANK WORLD_SIZE LOCAL_RANK MASTER_ADDR MASTER_PORT \
    OMPI_COMM_WORLD_RANK OMPI_COMM_WORLD_SIZE SLURM_PROCID SLURM_NTASKS

# The names are fixed, and both the start and the end remove whatever has
# them: one run at a time, and the lock taken before any cleanup can run.
LOCK=/run/lock/shoal_netns_bench.lock
exec 9>"$LOCK" || die "cannot open $LOCK"
flock -n 9 || die "another netns_bench.sh is running (lock $LOCK)"

TMP=
PIDS=()

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

cleanup() {
    trap - EXIT INT TERM
    stop_ranks
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

# One run: every rank in its namespace, rank 0's output to stdout, the
# others' kept and shown only if the run fails.
run_algo() {
    local algo=$1 key r ns failed=0 rc
    key=$(secret)
    [ -n "$key" ] || { echo "netns_bench: no random secret" >&2; return 1; }
    PIDS=()
    for ((r = 0; r < NRANKS; r++)); do
        ns=$PREFIX$((r / RANKS))
        if [ "$r" -eq 0 ]; then
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
    start=$SECONDS
    if run_algo "$algo"; then
        summary+=("ok      SHOAL_ALGO=$algo ($((SECONDS - start)) s)")
    else
        summary+=("FAILED  SHOAL_ALGO=$algo ($((SECONDS - start)) s)")
        status=1
    fi
done
echo
echo "######## summary: $HOSTS hosts x $RANKS ranks, links ${RATE:-unlimited}"
printf '%s\n' "${summary[@]}"
exit "$status"
