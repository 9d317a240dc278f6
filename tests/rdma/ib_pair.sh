#!/bin/bash
# ib_pair.sh [BENCH ARGS...]: inside the guest (tests/rdma/guest.sh), two
# ranks of tools/allreduce_bench as two hosts, rank 0 on rxe0 and rank 1 on
# rxe1 (SHOAL_HOST_ID, SHOAL_IB_HCA), started through the environment
# (SHOAL_RANK, SHOAL_SIZE, SHOAL_ADDR); rank 0's table on stdout, each
# rank's log in $GUEST_OUT/pair_rank<r>. Exit status: rank 0's, or 1.
here=$(cd "$(dirname "$0")" && pwd)
# rxe0 and rxe1, unless a caller set them up already.
if [ -z "${RXE_GID0:-}" ]; then
    # shellcheck source=tests/rdma/rxe_setup.sh
    . "$here/rxe_setup.sh" || exit 1
fi
bench=${BUILD:-build}/bin/allreduce_bench
[ -x "$bench" ] || bench=tools/allreduce_bench
port=$((29600 + RANDOM % 300))
pids=()
for r in 0 1; do
    SHOAL_RANK=$r SHOAL_SIZE=2 SHOAL_ADDR=127.0.0.1:$port SHOAL_SECRET=ib-pair-test \
        SHOAL_HOST_ID=host$r SHOAL_IB_HCA="=rxe$r" "$bench" "$@" >"$GUEST_OUT/pair_rank$r" 2>&1 &
    pids+=($!)
done
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=1; done
cat "$GUEST_OUT/pair_rank0"
[ "$rc" = 0 ] || sed 's/^/# rank 1: /' "$GUEST_OUT/pair_rank1"
exit "$rc"
