#!/bin/bash
# guest.sh SCRIPT [ARG...]: run SCRIPT as root inside a qemu guest that has
# a real RDMA stack, Soft-RoCE (rdma_rxe), and print what it printed; exit
# with its status.
#
# The guest boots Debian's own kernel (the package linux-image-amd64
# depends on, fetched with apt-get download) with a small initramfs:
# busybox-static as /init, which loads the modules rxe and 9p need in
# dependency order (modprobe --show-depends over the unpacked package), then
# mounts this machine's / read-only over 9p and runs SCRIPT there, so the
# binaries built here run unchanged. A second 9p share, read-write, is a
# fresh directory that SCRIPT sees as $GUEST_OUT (and this script prints
# the path of, as "# guest out: DIR"): the status comes back through it.
# SCRIPT starts in this script's working directory, with BUILD and the
# SHOAL_* settings of its environment.
# The guest has no network card; tests/rdma/rxe_setup.sh gives it two rxe
# devices on a veth pair.
#
# Kernel and initramfs are cached in $SHOAL_GUEST_CACHE (default
# /var/tmp/shoal-guest), one folder per kernel package and version of the
# initramfs, outside the source tree. qemu runs with KVM where kvm_intel or kvm_amd is loaded, else with
# its software emulation (TCG): a boot takes a few seconds either way.
#
# Settings: SHOAL_GUEST_TIMEOUT (seconds, default 600), SHOAL_GUEST_MEM
# (MiB, default 2048), SHOAL_GUEST_CPUS (default 2).
# Exit status: SCRIPT's; 77 when a tool is missing or the kernel cannot be
# fetched (the message says which); 124 when the guest ran past the limit;
# 125 when it ended without a status.
set -u

usage() {
    sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'
    exit 2
}
[ $# -ge 1 ] || usage
case $1 in -h | --help) usage ;; esac

script=$(realpath "$1")
shift
[ -r "$script" ] || { echo "guest.sh: cannot read $script" >&2; exit 2; }
CACHE=${SHOAL_GUEST_CACHE:-/var/tmp/shoal-guest}
LIMIT=${SHOAL_GUEST_TIMEOUT:-600}
MEM=${SHOAL_GUEST_MEM:-2048}
CPUS=${SHOAL_GUEST_CPUS:-2}

unavailable() {
    echo "guest.sh: $1" >&2
    exit 77
}
for tool in qemu-system-x86_64:qemu-system-x86 busybox:busybox-static depmod:kmod \
    modprobe:kmod cpio:cpio gzip:gzip dpkg-deb:dpkg apt-get:apt apt-cache:apt; do
    command -v "${tool%%:*}" >/dev/null 2>&1 ||
        unavailable "${tool%%:*} not found (Debian package ${tool#*:})"
done
bb=$(command -v busybox)
# ldd fails on a static executable; the initramfs has no libraries.
! ldd "$bb" >/dev/null 2>&1 ||
    unavailable "$bb is not statically linked (install busybox-static)"

# The modules the guest loads, in this order after their dependencies.
MODULES="virtio_pci 9pnet_virtio 9p overlay veth crc32_generic rdma_rxe ib_uverbs rdma_ucm"

pkg=$(apt-cache depends linux-image-amd64 2>/dev/null |
    awk '/Depends: linux-image-[0-9]/ { print $2; exit }')
[ -n "$pkg" ] || unavailable "apt-cache knows no kernel that linux-image-amd64 depends on"
kver=${pkg#linux-image-}

# Kernel, modules and initramfs, once per kernel package.
prepare() {
    # Older initramfs versions of this kernel go.
    rm -rf "$CACHE/$pkg"-*
    mkdir -p "$kdir/deb" || return 1
    (cd "$kdir/deb" && apt-get download -q "$pkg" >/dev/null 2>&1) ||
        { echo "guest.sh: apt-get download $pkg failed" >&2; return 77; }
    dpkg-deb -x "$kdir"/deb/*.deb "$kdir/root" || return 1
    depmod -b "$kdir/root" "$kver" || return 1
    cp "$kdir/root/boot/vmlinuz-$kver" "$kdir/vmlinuz" || return 1
    local init=$kdir/initramfs
    mkdir -p "$init"/bin "$init"/proc "$init"/sys "$init"/dev "$init"/newroot "$init"/modules
    cp "$bb" "$init/bin/busybox"
    for applet in sh mount umount insmod mkdir cat echo chroot poweroff sleep; do
        ln -s busybox "$init/bin/$applet"
    done
    local order=$init/modules/order m path
    : >"$order"
    for m in $MODULES; do
        modprobe -d "$kdir/root" -S "$kver" --show-depends "$m" || return 1
    done | awk '$1 == "insmod" && !seen[$2]++ { print $2 }' | while read -r path; do
        # busybox's insmod takes plain modules: unpack compressed ones.
        local ko
        ko=$(basename "$path")
        case $ko in
        *.ko.xz) ko=${ko%.xz}; xz -dc "$path" >"$init/modules/$ko" ;;
        *.ko.gz) ko=${ko%.gz}; gzip -dc "$path" >"$init/modules/$ko" ;;
        *.ko.zst) ko=${ko%.zst}; zstd -qdc "$path" >"$init/modules/$ko" ;;
        *) cp "$path" "$init/modules/$ko" ;;
        esac && echo "$ko" >>"$order"
    done
    [ -s "$order" ] || return 1
    cp "$(dirname "$0")/guest_init.sh" "$init/init" && chmod +x "$init/init" || return 1
    (cd "$init" && find . | cpio -o -H newc --quiet | gzip -1) >"$kdir/initramfs.cpio.gz" ||
        return 1
    rm -rf "$kdir/deb" "$kdir/root"
    touch "$kdir/ready"
}
# A new init, module list or way of preparing makes a new initramfs.
key=$({ cat "$(dirname "$0")/guest_init.sh"; echo "$MODULES"; declare -f prepare; } |
    md5sum | cut -c1-8)
kdir=$CACHE/$pkg-$key
if [ ! -f "$kdir/ready" ]; then
    mkdir -p "$CACHE" || unavailable "cannot create $CACHE"
    (
        flock 9
        [ -f "$kdir/ready" ] || prepare
    ) 9>"$CACHE/.lock"
    rc=$?
    [ "$rc" = 77 ] && unavailable "cannot fetch the kernel package $pkg"
    [ -f "$kdir/ready" ] || { echo "guest.sh: preparing the guest in $kdir failed" >&2; exit 1; }
fi

# Under /tmp, which the guest makes writable: the share's mount point
# must exist there.
out=$(mktemp -d /tmp/shoal-guest.XXXXXX)
echo "# guest out: $out"
# What the guest's init runs: the script, its arguments, and where the
# status goes.
{
    printf 'PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n'
    printf 'HOME=/tmp\nGUEST_OUT=%q\nexport PATH HOME GUEST_OUT\n' "$out"
    printf 'cd %q\n' "$PWD"
    # The build folder of the tests, and shoal's settings, pass through.
    env | grep -E '^(BUILD|SHOAL_[A-Z0-9_]*)=' | while IFS= read -r kv; do
        printf 'export %q\n' "$kv"
    done
    printf '%q ' /bin/bash "$script" "$@"
    printf '>%q 2>&1\n' "$out/log"
    printf 'echo $? >%q\n' "$out/status"
} >"$out/run.sh"

accel=tcg
if [ -w /dev/kvm ] && grep -qE '^(kvm_intel|kvm_amd) ' /proc/modules 2>/dev/null; then
    accel=kvm
fi
t0=$(date +%s.%N)
timeout "$LIMIT" qemu-system-x86_64 -machine q35,accel=$accel -m "$MEM" -smp "$CPUS" \
    -nographic -no-reboot -nic none \
    -kernel "$kdir/vmlinuz" -initrd "$kdir/initramfs.cpio.gz" \
    -append "console=ttyS0 quiet panic=-1 shoal_out=$out" \
    -virtfs local,path=/,mount_tag=hostroot,security_model=none,readonly=on \
    -virtfs "local,path=$out,mount_tag=guestout,security_model=none" \
    >"$out/console" 2>&1 </dev/null
qrc=$?
t1=$(date +%s.%N)
[ -f "$out/log" ] && cat "$out/log"
echo "# guest: $accel, $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }') s from boot to power-off"
if [ "$qrc" = 124 ]; then
    echo "guest.sh: the guest ran past ${LIMIT} s; its console:" >&2
    tail -n 40 "$out/console" >&2
    exit 124
fi
if [ ! -s "$out/status" ]; then
    echo "guest.sh: the guest ended without a status (qemu exit $qrc); its console:" >&2
    tail -n 40 "$out/console" >&2
    exit 125
fi
exit "$(cat "$out/status")"
