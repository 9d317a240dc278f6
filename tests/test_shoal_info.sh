#!/bin/bash
# shoal_info: every setting with default, current value and doc; the
# secret never printed; transports and the host listed; -T shows the
# topology of a recorded machine that SHOAL_TOPO_FILE names.
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
echo "1..11"
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
