#!/bin/bash
# sim_memory.sh: tcp's slot memory per rank, by simulation (shoal_sim -m):
# eager tcp connects every peer at init with SHOAL_TCP_NSLOTS slots each
# way; lazy tcp connects only the peers a schedule touches, with
# SHOAL_TCP_MEM's slot rule. One rank per host (every peer over tcp), one
# call per collective and algorithm; the figures are the most of any rank.
set -u

usage() {
    cat <<EOF
usage: $0 [-r "64 512 4096"] [-s size] [-M ranks_per_host]
  -r list    total rank counts (default "64 512 4096")
  -s size    the call's size, as shoal_sim -b counts it (default 64M)
  -M ranks   ranks per host (default 1; peers on the same host use shm)
The simulator is \$SIM, else shoal_sim next to this script. 4,096 ranks take
minutes (the all-to-all longest).
EOF
}

RANKS="64 512 4096"
SIZE=64M
M=1
while getopts "r:s:M:h" opt; do
    case $opt in
    r) RANKS=$OPTARG ;;
    s) SIZE=$OPTARG ;;
    M) M=$OPTARG ;;
    h) usage; exit 0 ;;
    *) usage >&2; exit 2 ;;
    esac
done
SIM=${SIM:-$(dirname "$0")/shoal_sim}
[ -x "$SIM" ] || { echo "sim_memory: no $SIM (build it, or set SIM)" >&2; exit 2; }
[[ $M =~ ^[1-9][0-9]*$ ]] || { echo "sim_memory: bad -M $M" >&2; exit 2; }

echo "| ranks | collective | algorithm | eager peers | eager MiB | lazy peers | lazy MiB |"
echo "|---:|---|---|---:|---:|---:|---:|"
for n in $RANKS; do
    if ! [[ $n =~ ^[1-9][0-9]*$ ]] || [ $((n % M)) -ne 0 ]; then
        echo "sim_memory: $n ranks is not a multiple of $M" >&2
        exit 2
    fi
    for run in "allreduce ring,rhd" "alltoall pairwise"; do
        set -- $run
        out=$("$SIM" -N $((n / M)) -M "$M" -c "$1" -a "$2" -b "$SIZE" -m) ||
            { echo "sim_memory: shoal_sim failed at $n ranks ($1)" >&2; exit 1; }
        awk '$3 ~ /^[0-9]+$/ { printf "| %d | %s | %s | %d | %.0f | %d | %.0f |\n",
                                       $3, $1, $2, $4, $5, $6, $7 }' <<<"$out"
    done
done
