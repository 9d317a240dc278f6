#!/bin/bash
# shoal_info: every setting with default, current value and doc; the
# secret never printed; transports and the host listed.
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
echo "1..7"
out=$(SHOAL_TIMEOUT=7s SHOAL_SECRET=hunter2-secret $INFO -c)
check "-c exits 0" $INFO -c
for name in SHOAL_DEBUG SHOAL_DEBUG_FILE SHOAL_TIMEOUT SHOAL_SOCKET_IFNAME SHOAL_SHM_ENABLE SHOAL_TCP_NSOCKS SHOAL_CHUNK_SIZE SHOAL_ALGO; do
    grep -q "^  $name .*default=" <<<"$out" || missing="${missing:-} $name"
done
check "-c lists every setting with its default" test -z "${missing:-}"
check "-c shows the current value" grep -q 'SHOAL_TIMEOUT .*current="7s"' <<<"$out"
check "-c never prints the secret" bash -c '! grep -q hunter2' <<<"$out"
full=$($INFO)
check "no flag: transports shm and tcp" bash -c 'x=$(cat); grep -q shm <<<"$x" && grep -q tcp <<<"$x"' <<<"$full"
check "no flag: host id shown" grep -qi "host" <<<"$full"
check "-h exits 0" $INFO -h
