#!/bin/bash
# shellcheck disable=SC2317 # the cleanup function runs from a trap
# netns_init.sh: how long a communicator takes to form over tcp between
# hosts simulated on this machine, lazy against eager tcp connections
# (SHOAL_TCP_CONNECT), interleaved run by run. HOSTS network namespaces
# (shoal_ni0, shoal_ni1, ...) joined by a bridge in a namespace of its own
# (shoal_nibr), one rank in each, started through shoal_comm_init_env;
# tools/init_bench prints the job's init time (from the last rank's call
# to the last rank's return), its first all-reduce of 8 bytes (where lazy
# tcp connects) and its second; and the transports' wireup inside init,
# from the last rank's start of it to the last rank's end (from the ranks'
# INFO lines). The secret is derived from the job's
# identity (SHOAL_AUTH=off) so that no rank spends its init in scrypt.
# Prints every run and the medians. Everything it creates is removed on
# exit. Needs root.
set -u

HOSTS=${1:-16}
RUNS=${2:-5}
PREFIX=shoal_ni
SUBNET=10.231.80
PORT=29611
BENCH=${BENCH:-$(dirname "$0")/init_bench}

die() {
    echo "netns_init: $*" >&2
    exit 2
}
[[ $HOSTS =~ ^[0-9]+$ ]] && [ "$HOSTS" -ge 2 ] && [ "$HOSTS" -le 200 ] || die "HOSTS in 2..200"
[[ $RUNS =~ ^[0-9]+$ ]] && [ "$RUNS" -ge 1 ] || die "RUNS >= 1"
[ "$(id -u)" -eq 0 ] || die "run as root: network namespaces need CAP_SYS_ADMIN"
[ -x "$BENCH" ] || die "no $BENCH (build it, or set BENCH)"
BENCH=$(realpath "$BENCH")
unset SHOAL_RANK SHOAL_SIZE SHOAL_COMM_ID SHOAL_SECRET SHOAL_SECRET_FILE SHOAL_TCP_CONNECT

remove_topology() {
    local ns
    for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${PREFIX}(br|[0-9]+)$"); do
        ip netns del "$ns" 2>/dev/null
    done
}
trap remove_topology EXIT
trap 'exit 130' INT TERM

run() {
    "$@" || die "failed: $*"
}

remove_topology
run ip netns add "${PREFIX}br"
run ip -n "${PREFIX}br" link add "${PREFIX}br0" type bridge
run ip -n "${PREFIX}br" link set "${PREFIX}br0" up
for ((i = 0; i < HOSTS; i++)); do
    ns=$PREFIX$i
    run ip netns add "$ns"
    run ip -n "${PREFIX}br" link add "${PREFIX}p$i" type veth peer name "${PREFIX}v$i" netns "$ns"
    run ip -n "${PREFIX}br" link set "${PREFIX}p$i" master "${PREFIX}br0" up
    run ip -n "$ns" addr add "$SUBNET.$((i + 1))/24" dev "${PREFIX}v$i"
    run ip -n "$ns" link set "${PREFIX}v$i" up
    run ip -n "$ns" link set lo up
done

# One job: every rank in its namespace; rank 0's line on stdout.
job() {
    local mode=$1 port=$2 r pids=() out rc=0
    out=$(mktemp)
    for ((r = 0; r < HOSTS; r++)); do
        timeout -k 5 120 ip netns exec "$PREFIX$r" env SHOAL_RANK="$r" SHOAL_SIZE="$HOSTS" \
            SHOAL_ADDR="$SUBNET.1:$port" SHOAL_AUTH=off SHOAL_HOST_ID="$PREFIX$r" \
            SHOAL_SOCKET_IFNAME="${PREFIX}v" SHOAL_TCP_CONNECT="$mode" \
            SHOAL_DEBUG=info SHOAL_DEBUG_SUBSYS=init \
            "$BENCH" >>"$out" 2>&1 &
        pids+=($!)
    done
    for r in "${pids[@]}"; do
        wait "$r" || rc=1
    done
    local wired
    wired=$(awk '/transports wired up in/ {
                   gsub(/[()]/, ""); s = $(NF - 3); e = $(NF - 1)
                   if (s > ms) ms = s; if (e > me) me = e; n++ }
                 END { if (n) printf "%.3f", (me - ms) * 1e3 }' "$out")
    line=$(grep '^init_ms' "$out") || { sed 's/^/# /' "$out" >&2; rc=1; }
    echo "$line wireup_ms ${wired:-nan}"
    rm -f "$out"
    return $rc
}

median() {
    sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2];
                                        else printf "%.3f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

declare -A col
for ((k = 0; k < RUNS; k++)); do
    for m in 0 1; do
        mode=$([ $m = 0 ] && echo eager || echo lazy)
        line=$(job "$mode" $((PORT + k * 2 + m))) || die "a $mode job failed"
        echo "$mode run $k: $line"
        read -r _ init _ first _ second _ _ _ wire <<<"$line"
        col[$mode.init]+="$init "
        col[$mode.first]+="$first "
        col[$mode.second]+="$second "
        col[$mode.wire]+="$wire "
    done
done
echo "# $HOSTS ranks, one per namespace, tcp; medians of $RUNS runs (ms)"
printf '%-6s %10s %10s %18s %19s\n' mode init wireup first_allreduce second_allreduce
for mode in eager lazy; do
    printf '%-6s %10s %10s %18s %19s\n' "$mode" \
        "$(tr ' ' '\n' <<<"${col[$mode.init]}" | grep . | median)" \
        "$(tr ' ' '\n' <<<"${col[$mode.wire]}" | grep . | median)" \
        "$(tr ' ' '\n' <<<"${col[$mode.first]}" | grep . | median)" \
        "$(tr ' ' '\n' <<<"${col[$mode.second]}" | grep . | median)"
done
