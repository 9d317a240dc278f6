#!/bin/bash
# shoal_info: every setting with default, current value and doc; the
# secret never printed; transports and the host listed; -T shows the
# topology of a recorded machine that SHOAL_TOPO_FILE names, with the link
# classes; -T -C the cluster view of three ranks on two hosts.
set -u
cd "$(dirname "$0")/.."
INFO=${INFO:-tools/shoal_info}
n=0
check() {
    local what=$1
    shift
    n=$((n + 1))
    if "$@" >/dev/null 2>&1; then echo "ok $n - $what"; else echo "not ok $n - $what"; fi
}
echo "1..14"
out=$(SHOAL_TIMEOUT=7s SHOAL_SECRET=hunter2-secret $INFO -c)
check "-c exits 0" $INFO -c
for name in SHOAL_DEBUG SHOAL_DEBUG_FILE SHOAL_TIMEOUT SHOAL_SOCKET_IFNAME SHOAL_SHM_ENABLE SHOAL_TCP_NSOCKS SHOAL_CHUNK_SIZE SHOAL_ALGO SHOAL_TOPO_FILE SHOAL_TOPO_SYNTHETIC; do
    grep -q "^  $name .*default=" <<<"$out" || missing="${missing:-} $name"
done
check "-c lists every setting with its default" test -z "${missing:-}"
check "-c shows the current value" grep -q 'SHOAL_TIMEOUT .*current="7s"' <<<"$out"
check "-c never prints the secret" bash -c '! grep -q hunter2' <<<"$out"
full=$($INFO)
check "no flag: transports shm and tcp" bash -c 'x=$(cat); grep -q shm <<<"$x" && grep -q tcp <<<"$x"' <<<"$full"
check "no flag: host id shown" grep -qi "host" <<<"$full"
check "-h exits 0" $INFO -h
topo=$(SHOAL_TOPO_FILE=tests/topo/fake-dgx-8gpu-4nic.xml $INFO -T)
check "-T with SHOAL_TOPO_FILE: 8 GPUs and 4 NICs" \
    bash -c 'x=$(cat); grep -q "^GPUs: 8$" <<<"$x" && grep -q "^NICs: 4$" <<<"$x" &&
             [ $(grep -c "^  GPU [0-9]" <<<"$x") = 8 ] && [ $(grep -c "^  NIC [0-9]" <<<"$x") = 4 ]' <<<"$topo"
check "-T: GPU 2 nearest NIC is mlx5_1" grep -q "^  GPU 2 .*nearest NIC 1 (mlx5_1, 4 hops)" <<<"$topo"
check "-T with a missing file fails" bash -c "! SHOAL_TOPO_FILE=tests/topo/none.xml $INFO -T"
# hwloc unloads its PCI plugin and libpciaccess with it, whose global state
# then looks leaked to LeakSanitizer in a sanitizer build: keep the library
# loaded (test_topo.c does the same). A gcc ASan build links its runtime
# dynamically and wants it first among the preloads: let it come second.
pciaccess=$(ls /usr/lib/*/libpciaccess.so.0 /usr/lib64/libpciaccess.so.0 2>/dev/null | head -n 1)
check "-T on this machine exits 0" env ${pciaccess:+LD_PRELOAD=$pciaccess} \
    ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0" $INFO -T
check "-T: link classes with SHOAL_TOPO_LINKS applied" \
    bash -c "SHOAL_TOPO_SYNTHETIC='pu:2' SHOAL_TOPO_LINKS=tcp:80us:64M $INFO -T | grep -q '^  tcp *80.00 us *0.07 GB/s'"
# Three ranks from SHOAL_RANK: 0 and 1 on host a, 2 on host b.
port=$((20000 + RANDOM % 20000))
for r in 0 1 2; do
    h=a; [ $r = 2 ] && h=b
    env ${pciaccess:+LD_PRELOAD=$pciaccess} ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0" \
        SHOAL_RANK=$r SHOAL_SIZE=3 SHOAL_ADDR=127.0.0.1:$port SHOAL_SECRET=info-test \
        SHOAL_HOST_ID=host-$h SHOAL_TIMEOUT=30s $INFO -T -C >"${TMPDIR:-/tmp}/shoal-info-C.$$.$r" 2>&1 &
done
wait
cview=$(cat "${TMPDIR:-/tmp}/shoal-info-C.$$.0")
rm -f "${TMPDIR:-/tmp}"/shoal-info-C.$$.*
check "-T -C: 3 ranks on 2 hosts" grep -q "^cluster: 3 ranks on 2 host(s), 1 to 2 per host" <<<"$cview"
check "-T -C: host b's one rank owns both rails" \
    bash -c 'x=$(cat); grep -q "^  rail 0: 0 2$" <<<"$x" && grep -q "^  rail 1: 1 2$" <<<"$x" &&
             grep -q "^  host 1 host-b: 1 rank" <<<"$x"' <<<"$cview"
