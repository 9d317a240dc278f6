#!/bin/bash
# sim_scale.sh: how the cost of a collective grows with the rank count, by
# simulation (shoal_sim): hosts of M ranks, from 8 ranks to 4,096, the
# predicted time and busbw of each algorithm at each size, and the cost
# model's choice.
set -u

usage() {
    cat <<EOF
usage: $0 [-c coll] [-a algos] [-M ranks_per_host] [-r "8 64 512 4096"]
          [-s "8 1M 64M"] [-L links] [-i class]
  -c coll    collective (default allreduce)
  -a algos   comma-separated (default ring,rhd,tree,hier,auto)
  -M ranks   ranks per host (default 8)
  -r list    total rank counts, multiples of M (default "8 16 64 512 4096")
  -s list    sizes (default "8 1M 64M")
  -L links   class figures, class:latency:bandwidth,... (default built-in)
  -i class   class between hosts (default tcp)
The simulator is \$SIM, else shoal_sim next to this script.
EOF
}

COLL=allreduce
ALGOS=ring,rhd,tree,hier,auto
M=8
RANKS="8 16 64 512 4096"
SIZES="8 1M 64M"
EXTRA=()
while getopts "c:a:M:r:s:L:i:h" opt; do
    case $opt in
    c) COLL=$OPTARG ;;
    a) ALGOS=$OPTARG ;;
    M) M=$OPTARG ;;
    r) RANKS=$OPTARG ;;
    s) SIZES=$OPTARG ;;
    L) EXTRA+=(-L "$OPTARG") ;;
    i) EXTRA+=(-i "$OPTARG") ;;
    h) usage; exit 0 ;;
    *) usage >&2; exit 2 ;;
    esac
done
SIM=${SIM:-$(dirname "$0")/shoal_sim}
[ -x "$SIM" ] || { echo "sim_scale: no $SIM (build it, or set SIM)" >&2; exit 2; }
[[ $M =~ ^[1-9][0-9]*$ ]] || { echo "sim_scale: bad -M $M" >&2; exit 2; }

header=1
for n in $RANKS; do
    if ! [[ $n =~ ^[1-9][0-9]*$ ]] || [ $((n % M)) -ne 0 ]; then
        echo "sim_scale: $n ranks is not a multiple of $M" >&2
        exit 2
    fi
    for size in $SIZES; do
        out=$("$SIM" -N $((n / M)) -M "$M" -c "$COLL" -a "$ALGOS" -b "$size" -e "$size" \
            "${EXTRA[@]}") || { echo "sim_scale: shoal_sim failed at $n ranks" >&2; exit 1; }
        if [ "$header" = 1 ]; then
            grep '^# inside' <<<"$out"
            echo "# $COLL, hosts of $M ranks; predicted time (us) and busbw (GB/s) per algorithm"
            awk '/^ +size/ { printf "%6s %6s %s\n", "ranks", "hosts", $0 }' <<<"$out"
            header=0
        fi
        awk -v n="$n" -v h=$((n / M)) '/^ +[0-9]/ { printf "%6d %6d %s\n", n, h, $0 }' <<<"$out"
    done
done
