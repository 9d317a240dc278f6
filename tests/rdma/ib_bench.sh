#!/bin/bash
# ib_bench.sh [ROUNDS]: inside the guest (tests/rdma/guest.sh), all-reduce
# of 2 ranks as two hosts (tests/rdma/ib_pair.sh) over ib and over tcp on
# the same veth pair, in ROUNDS (default 5) interleaved rounds, at 64 KiB,
# 1 MiB and 16 MiB: the median time of an operation and the median CPU time
# per byte of the two ranks, and ib's ratios to tcp. Under emulation the
# absolute figures mean little; the ratios compare the two transports on
# the same machine. Figures only, never a verdict.
here=$(cd "$(dirname "$0")" && pwd)
rounds=${1:-5}
if [ -z "${RXE_GID0:-}" ]; then
    # shellcheck source=tests/rdma/rxe_setup.sh
    . "$here/rxe_setup.sh" || exit 1
fi
log=$GUEST_OUT/bench
: >"$log"
for round in $(seq "$rounds"); do
    for tl in ib tcp; do
        enable=y
        [ "$tl" = tcp ] && enable=n
        if ! SHOAL_IB_ENABLE=$enable "$here/ib_pair.sh" -b 64K -e 16M -f 16 -n 3 -w 1 -c 0 \
            --cpu 1 >"$GUEST_OUT/bench_$tl" 2>&1; then
            echo "# round $round over $tl failed:"
            sed 's/^/#   /' "$GUEST_OUT/bench_$tl"
            exit 1
        fi
        # "tl bytes time_us" and "tl bytes cpu ns_per_byte" lines.
        awk -v tl="$tl" '
            /^ *[0-9]+ +[0-9]+ +float/ { print tl, $1, "time", $6 }
            /^# cpu of rank .* out-of-place:/ { print tl, $6, "cpu", $(NF - 3) }
        ' "$GUEST_OUT/bench_$tl" >>"$log"
    done
done
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR) print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }
pick() { awk -v tl="$1" -v b="$2" -v k="$3" '$1 == tl && $2 == b && $3 == k { print $4 }' "$log" | median; }
printf '# %d rounds; medians (time of one all-reduce; CPU per byte, both ranks)\n' "$rounds"
printf '# %10s %12s %12s %8s %12s %12s %8s\n' bytes "ib us" "tcp us" "ib/tcp" "ib ns/B" "tcp ns/B" "ib/tcp"
for b in 65536 1048576 16777216; do
    ti=$(pick ib $b time) tt=$(pick tcp $b time) ci=$(pick ib $b cpu) ct=$(pick tcp $b cpu)
    awk -v b="$b" -v ti="$ti" -v tt="$tt" -v ci="$ci" -v ct="$ct" 'BEGIN {
        printf "# %10d %12.1f %12.1f %8.2f %12.3f %12.3f %8.2f\n", b, ti, tt, ti / tt, ci, ct, ci / ct }'
done
