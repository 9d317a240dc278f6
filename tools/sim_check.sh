#!/bin/bash
# sim_check.sh: the simulator's predictions against runs measured on this
# machine. It measures the float sum all-reduce with the bench (2 ranks
# sharing memory on one host; 2 network namespaces x 1 and x 2 ranks over
# tcp, ring and hier), predicts the same runs with shoal_sim from the link
# classes probed (SHOAL_TOPO_PROBE) in a job of the same shape, and prints
# both times, their ratio and the largest factor between them. Measured times are the median of RUNS runs of the bench.
# Needs root (network namespaces), like netns_bench.sh, which it uses.
set -u

usage() {
    cat <<EOF
usage: $0 [--rate RATE] [--runs N] [--sizes "1M 4M 16M 64M"]
  --rate RATE   shape the links between namespaces (tbf, e.g. 1gbit)
  --runs N      bench runs per measurement, median taken (default 3)
  --sizes LIST  all-reduce sizes (default "1M 4M 16M 64M")
Tools: \$BENCH, \$INFO and \$SIM, else allreduce_bench, shoal_info and
shoal_sim next to this script.
EOF
}

RATE=
RUNS=3
SIZES="1M 4M 16M 64M"
die() {
    echo "sim_check: $*" >&2
    exit 2
}
while [ $# -gt 0 ]; do
    case $1 in
    --rate) [ $# -ge 2 ] || die "--rate needs a value"; RATE=$2; shift 2 ;;
    --runs) [ $# -ge 2 ] || die "--runs needs a value"; RUNS=$2; shift 2 ;;
    --sizes) [ $# -ge 2 ] || die "--sizes needs a value"; SIZES=$2; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    *) usage >&2; die "unknown argument $1" ;;
    esac
done
[[ $RUNS =~ ^[1-9][0-9]?$ ]] || die "--runs must be 1..99"

HERE=$(dirname "$0")
BENCH=$(realpath "${BENCH:-$HERE/allreduce_bench}")
INFO=$(realpath "${INFO:-$HERE/shoal_info}")
SIM=$(realpath "${SIM:-$HERE/shoal_sim}")
NETNS=$HERE/netns_bench.sh
export BENCH
for t in "$BENCH" "$INFO" "$SIM"; do
    [ -x "$t" ] || die "no $t (build it, or set BENCH, INFO, SIM)"
done
RATE_ARG=()
[ -n "$RATE" ] && RATE_ARG=(--rate "$RATE")

# probe HOSTS RANKS: the link figures of a job of that shape, measured
# under its own load (SHOAL_TOPO_PROBE; rank 0's class table), as -L text.
probe() {
    local out links
    out=$(SHOAL_TOPO_PROBE=1 BENCH=$INFO bash "$NETNS" "${RATE_ARG[@]}" --algo auto "$1" "$2" \
        -- -T -C 2>/dev/null) || die "the probe run of $1 x $2 failed"
    links=$(awk '/\(measured\)/ && ($1 == "shm" || $1 == "tcp") {
        printf "%s%s:%sus:%.0f", sep, $1, $2, $4 * 1e9; sep = "," }' <<<"$out")
    [ -n "$links" ] || die "the probe of $1 x $2 measured nothing: $out"
    echo "$links"
}

# The bench's out-of-place time (us) per size from its table on stdin.
times_of() {
    awk '/^ +[0-9]+ +[0-9]+ / { print $1, $6 }'
}

# median of the numbers on stdin
median() {
    sort -g | awk '{ v[NR] = $1 } END { if (NR) print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'
}

bench_flags() {
    echo "-b ${SIZES%% *} -e ${SIZES##* } -f 4 -n 5 -w 2 -c 0"
}

# measure NAME HOSTS RANKS ALGO: every size's median time into $TMP/NAME
measure() {
    local name=$1 hosts=$2 ranks=$3 algo=$4 run
    for ((run = 0; run < RUNS; run++)); do
        if [ "$hosts" -eq 1 ]; then
            # shellcheck disable=SC2046 # the flags are words
            SHOAL_ALGO=$algo "$BENCH" -np "$ranks" $(bench_flags) 2>/dev/null
        else
            # shellcheck disable=SC2046
            bash "$NETNS" "${RATE_ARG[@]}" --algo "$algo" "$hosts" "$ranks" -- $(bench_flags) 2>/dev/null
        fi
    done | times_of >"$TMP/$name.all"
    local size
    awk '{ print $1 }' "$TMP/$name.all" | sort -un | while read -r size; do
        echo "$size $(awk -v s="$size" '$1 == s { print $2 }' "$TMP/$name.all" | median)"
    done >"$TMP/$name"
}

# predict NAME HOSTS RANKS ALGO: the simulator's time per size, from the
# figures probed in a job of the same shape
predict() {
    local name=$1 hosts=$2 ranks=$3 algo=$4
    # SHOAL_ALGO's "allreduce:hier" is shoal_sim's "hier"
    "$SIM" -N "$hosts" -M "$ranks" -L "$(probe "$hosts" "$ranks")" -a "${algo#allreduce:}" \
        -b "${SIZES%% *}" -e "${SIZES##* }" -f 4 | awk '/^ +[0-9]/ { print $1, $2 }' >"$TMP/$name.sim"
}

TMP=$(mktemp -d "${TMPDIR:-/tmp}/sim_check.XXXXXX") || die "mktemp failed"
trap 'rm -rf "$TMP"' EXIT

CASES=("1 2 ring" "2 1 ring" "2 2 ring" "2 2 allreduce:hier")
printf '%-8s %-6s %10s %12s %12s %8s\n' "hosts" "algo" "size" "measured_us" "predicted_us" "ratio"
worst=1
for c in "${CASES[@]}"; do
    read -r hosts ranks algo <<<"$c"
    name="h${hosts}r${ranks}_${algo#allreduce:}"
    measure "$name" "$hosts" "$ranks" "$algo"
    predict "$name" "$hosts" "$ranks" "$algo"
    while read -r size meas; do
        pred=$(awk -v s="$size" '$1 == s { print $2 }' "$TMP/$name.sim")
        if [ -z "$pred" ] || [ -z "$meas" ]; then
            continue
        fi
        ratio=$(awk -v m="$meas" -v p="$pred" 'BEGIN { printf "%.2f", m / p }')
        printf '%-8s %-6s %10s %12.1f %12.1f %8s\n' "${hosts}x$ranks" "${algo#allreduce:}" \
            "$size" "$meas" "$pred" "$ratio"
        worst=$(awk -v w="$worst" -v r="$ratio" 'BEGIN { f = r >= 1 ? r : 1 / r; print (f > w ? f : w) }')
    done <"$TMP/$name"
done
echo "# measured / predicted: within a factor of $worst over these runs${RATE:+ (links at $RATE)}"
