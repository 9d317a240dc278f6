#!/bin/bash
# rxe_setup.sh: inside the guest (tests/rdma/guest.sh), as root: two
# Soft-RoCE devices that stand for two hosts' NICs. Source it; it sets
# RXE_ADDR0/1 (their IPv4 addresses) and RXE_GID0/1 (the index of each
# one's RoCE v2 IPv4 GID), and returns non-zero with a message on failure.
#
# rxe0 sits on vethA (10.232.0.1), rxe1 on vethB (10.232.0.2), a veth pair
# in the root network namespace: rxe on this kernel works only there (one
# device per namespace fails with "local QP operation error"). The two
# addresses are both local, so the kernel would send their traffic through
# lo, where rxe drops it: policy routing sends what one address sends the
# other out through its own veth (rules on iif lo, so that what arrives on
# the other end is still delivered locally). The RoCE v2 GID entries appear
# some time after the link is added: wait for them in sysfs.
RXE_ADDR0=10.232.0.1
RXE_ADDR1=10.232.0.2

rxe_gid_index() { # DEVICE ADDRESS: the index of its RoCE v2 entry for ADDRESS
    local want port=/sys/class/infiniband/$1/ports/1 f i octets
    IFS=. read -r -a octets <<<"$2"
    want=$(printf '0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x' "${octets[@]}")
    for f in "$port"/gids/*; do
        i=${f##*/}
        [ "$(cat "$f" 2>/dev/null)" = "$want" ] || continue
        [ "$(cat "$port/gid_attrs/types/$i" 2>/dev/null)" = "RoCE v2" ] || continue
        echo "$i"
        return 0
    done
    return 1
}

rxe_setup() {
    ip link set lo up &&
        ip link add vethA type veth peer name vethB &&
        ip addr add "$RXE_ADDR0/24" dev vethA &&
        ip addr add "$RXE_ADDR1/24" dev vethB &&
        ip link set vethA mtu 9000 && ip link set vethB mtu 9000 &&
        ip link set vethA up && ip link set vethB up || return 1
    local k
    for k in all default vethA vethB; do
        sysctl -qw "net.ipv4.conf.$k.rp_filter=0" "net.ipv4.conf.$k.accept_local=1" || return 1
    done
    sysctl -qw net.core.netdev_max_backlog=30000 || return 1
    ip rule add pref 100 lookup local && ip rule del pref 0 &&
        ip route add "$RXE_ADDR1" dev vethA src "$RXE_ADDR0" table 101 &&
        ip route add "$RXE_ADDR0" dev vethB src "$RXE_ADDR1" table 102 &&
        ip rule add pref 10 iif lo from "$RXE_ADDR0" to "$RXE_ADDR1" lookup 101 &&
        ip rule add pref 11 iif lo from "$RXE_ADDR1" to "$RXE_ADDR0" lookup 102 || return 1
    rdma link add rxe0 type rxe netdev vethA && rdma link add rxe1 type rxe netdev vethB ||
        return 1
    local _
    for _ in $(seq 100); do
        RXE_GID0=$(rxe_gid_index rxe0 "$RXE_ADDR0") && RXE_GID1=$(rxe_gid_index rxe1 "$RXE_ADDR1") &&
            break
        sleep 0.1
    done
    if [ -z "${RXE_GID0:-}" ] || [ -z "${RXE_GID1:-}" ]; then
        echo "rxe_setup: no RoCE v2 GID for $RXE_ADDR0 on rxe0 or $RXE_ADDR1 on rxe1" >&2
        return 1
    fi
    export RXE_ADDR0 RXE_ADDR1 RXE_GID0 RXE_GID1
}

rxe_setup
