#!/bin/bash
# verbs_check.sh: inside the guest (tests/rdma/guest.sh), TAP checks that
# the RDMA stack the ib tests stand on works: the two rxe devices with
# their RoCE v2 GIDs (rxe_setup.sh), libibverbs sees both, and reliable-
# connection traffic crosses between them both ways (ibv_rc_pingpong,
# rdma-core's own example); then shoal's view of them and its queue pairs
# over them (tests/test_ib_dev and tests/test_ib_qp with SHOAL_TEST_RXE=1,
# from the build folder $BUILD, default build).
here=$(cd "$(dirname "$0")" && pwd)
n=0
failed=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
notok() { n=$((n + 1)); failed=1; echo "not ok $n - $1"; }
echo "1..12"
# shellcheck source=tests/rdma/rxe_setup.sh
if . "$here/rxe_setup.sh"; then
    ok "rxe0 and rxe1 on a veth pair, RoCE v2 GIDs $RXE_GID0 and $RXE_GID1"
else
    notok "rxe0 and rxe1 on a veth pair"
    exit 1
fi
devs=$(ibv_devices 2>&1)
if grep -qw rxe0 <<<"$devs" && grep -qw rxe1 <<<"$devs"; then
    ok "libibverbs lists rxe0 and rxe1"
else
    notok "libibverbs lists rxe0 and rxe1: $devs"
fi
pingpong() { # SERVER_DEV SERVER_GID CLIENT_DEV CLIENT_GID SERVER_ADDR PORT
    ibv_rc_pingpong -d "$1" -g "$2" -p "$6" -n 200 -s 65536 >"$GUEST_OUT/pp_server_$1" 2>&1 &
    local server=$! _
    for _ in $(seq 50); do
        ibv_rc_pingpong -d "$3" -g "$4" -p "$6" -n 200 -s 65536 "$5" \
            >"$GUEST_OUT/pp_client_$3" 2>&1 && break
        sleep 0.2
    done
    wait "$server" && grep -q "bytes in" "$GUEST_OUT/pp_client_$3"
}
if pingpong rxe1 "$RXE_GID1" rxe0 "$RXE_GID0" "$RXE_ADDR1" 18515; then
    ok "RC traffic rxe0 -> rxe1: $(grep 'bytes in' "$GUEST_OUT/pp_client_rxe0" | head -1)"
else
    notok "RC traffic rxe0 -> rxe1: $(tail -3 "$GUEST_OUT/pp_client_rxe0" "$GUEST_OUT/pp_server_rxe1" | tr '\n' ' ')"
fi
if pingpong rxe0 "$RXE_GID0" rxe1 "$RXE_GID1" "$RXE_ADDR0" 18516; then
    ok "RC traffic rxe1 -> rxe0: $(grep 'bytes in' "$GUEST_OUT/pp_client_rxe1" | head -1)"
else
    notok "RC traffic rxe1 -> rxe0: $(tail -3 "$GUEST_OUT/pp_client_rxe1" "$GUEST_OUT/pp_server_rxe0" | tr '\n' ' ')"
fi
ibdev=${BUILD:-build}/tests/test_ib_dev
if SHOAL_TEST_RXE=1 "$ibdev" >"$GUEST_OUT/ib_dev" 2>&1; then
    ok "shoal finds rxe0 and rxe1, their RoCE v2 GIDs and SHOAL_IB_HCA's choices ($ibdev)"
    grep "rxe[01]:" "$GUEST_OUT/ib_dev" | sed 's/^ */# /'
else
    notok "shoal finds rxe0 and rxe1 ($ibdev)"
    sed 's/^/# /' "$GUEST_OUT/ib_dev"
fi
ibqp=${BUILD:-build}/tests/test_ib_qp
if SHOAL_TEST_RXE=1 "$ibqp" >"$GUEST_OUT/ib_qp" 2>&1; then
    ok "shoal's queue pairs on rxe0 and rxe1 connect, RDMA-write both ways and carry a FIFO of slots both ways ($ibqp)"
    grep "^# " "$GUEST_OUT/ib_qp"
else
    notok "shoal's queue pairs on rxe0 and rxe1 ($ibqp)"
    sed 's/^/# /' "$GUEST_OUT/ib_qp"
fi
# Collectives over ib: every one of them, 2 to 4 ranks as two hosts on
# rxe0 and rxe1 (tests/test_ib_coll with SHOAL_TEST_RXE=1).
ibcoll=${BUILD:-build}/tests/test_ib_coll
if SHOAL_TEST_RXE=1 CMOCKA_MESSAGE_OUTPUT=TAP "$ibcoll" >"$GUEST_OUT/ib_coll" 2>&1; then
    ok "collectives over ib between rxe0 and rxe1, results checked ($ibcoll: $(grep -c '^ok' "$GUEST_OUT/ib_coll") cases)"
else
    notok "collectives over ib between rxe0 and rxe1 ($ibcoll)"
    grep -v '^ok' "$GUEST_OUT/ib_coll" | tail -40 | sed 's/^/# /'
fi
# Which transport joins the hosts, and ib's memory: registrations sharing
# regions, zero-copy puts of registered buffers; one-sided puts into
# windows of the other host.
for t in ib_select ib_mem rma; do
    bin=${BUILD:-build}/tests/test_$t
    filter=
    [ "$t" = rma ] && filter=test_patterns_hosts
    if SHOAL_TEST_RXE=1 CMOCKA_MESSAGE_OUTPUT=TAP TEST_FILTER=$filter "$bin" \
        >"$GUEST_OUT/$t" 2>&1; then
        ok "$bin: $(grep -c '^ok' "$GUEST_OUT/$t") cases"
        grep '^# rank' "$GUEST_OUT/$t"
    else
        notok "$bin"
        grep -v '^ok' "$GUEST_OUT/$t" | tail -40 | sed 's/^/# /'
    fi
done
# ib against tcp on the same veth pair: figures, never a verdict.
if "$here/ib_bench.sh" "${SHOAL_IB_BENCH_ROUNDS:-1}" >"$GUEST_OUT/ib_bench" 2>&1; then
    ok "all-reduce of two hosts over ib and over tcp (tests/rdma/ib_bench.sh)"
    grep '^#' "$GUEST_OUT/ib_bench"
else
    notok "all-reduce of two hosts over ib and over tcp (tests/rdma/ib_bench.sh)"
    sed 's/^/# /' "$GUEST_OUT/ib_bench"
fi
# A port that goes down mid-transfer: both ranks end with the peer error,
# well within their deadline (from the device's event or from a write that
# failed, whichever comes first; test_ib_select checks the event alone).
rm -f "$GUEST_OUT"/pair_rank*
SHOAL_TIMEOUT=30s "$here/ib_pair.sh" -b 4M -e 4M -n 5000 -w 0 -c 0 >"$GUEST_OUT/port_down" 2>&1 &
pair=$!
for _ in $(seq 100); do
    grep -q "float" "$GUEST_OUT/pair_rank0" 2>/dev/null && break
    sleep 0.2
done
sleep 1
ip link set vethB down
t0=$(date +%s)
for _ in $(seq 200); do kill -0 "$pair" 2>/dev/null || break; sleep 0.2; done
if kill -0 "$pair" 2>/dev/null; then
    kill -9 "$pair" 2>/dev/null
    notok "rxe1's port down mid-transfer: the ranks still run after 40 s"
elif wait "$pair"; then
    notok "rxe1's port down mid-transfer: the pair exited 0"
elif grep -q "rank 1: connection to rank 0 lost" "$GUEST_OUT/pair_rank1" &&
    grep -q "rank 0: connection to rank 1 lost" "$GUEST_OUT/pair_rank0"; then
    ok "rxe1's port down mid-transfer: both ranks end with the peer error in $(($(date +%s) - t0)) s"
    grep -h "connection to rank" "$GUEST_OUT/pair_rank0" "$GUEST_OUT/pair_rank1" | sed 's/^/# /'
else
    notok "rxe1's port down mid-transfer: not the errors expected"
    tail -n 5 "$GUEST_OUT/pair_rank0" "$GUEST_OUT/pair_rank1" | sed 's/^/# /'
fi
ip link set vethB up
exit "$failed"
