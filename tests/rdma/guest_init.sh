#!/bin/sh
# /init of the guest's initramfs (tests/rdma/guest.sh), run by busybox:
# load the modules in the order guest.sh wrote, mount the host's / (9p,
# read-only) with fresh proc, sys, dev, /dev/shm and /run over it, /tmp and
# /var/tmp made writable over the host's (overlayfs),
# the read-write share at the path the kernel command line names
# (shoal_out=), run its run.sh there as root, and power off.
PATH=/bin
export PATH
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
while read -r m; do
    insmod "/modules/$m" || echo "init: insmod $m failed"
done </modules/order
out=
read -r cmdline </proc/cmdline
for w in $cmdline; do
    case $w in shoal_out=*) out=${w#shoal_out=} ;; esac
done
nine="trans=virtio,version=9p2000.L,msize=262144"
if mount -t 9p -o "$nine,ro" hostroot /newroot; then
    mount -t proc proc /newroot/proc
    mount -t sysfs sys /newroot/sys
    mount -t devtmpfs dev /newroot/dev
    mkdir -p /newroot/dev/shm
    mount -t tmpfs shm /newroot/dev/shm
    mount -t tmpfs run /newroot/run
    # /tmp and /var/tmp writable, still showing the host's files (a
    # checkout under /tmp): a tmpfs over each through overlayfs.
    mkdir -p /upper
    mount -t tmpfs upper /upper
    for d in tmp var/tmp; do
        mkdir -p "/upper/$d/u" "/upper/$d/w"
        mount -t overlay overlay -o "lowerdir=/newroot/$d,upperdir=/upper/$d/u,workdir=/upper/$d/w" \
            "/newroot/$d" || mount -t tmpfs tmp "/newroot/$d"
    done
    mkdir -p "/newroot$out"
    if mount -t 9p -o "$nine,rw" guestout "/newroot$out"; then
        chroot /newroot /bin/sh "$out/run.sh"
    else
        echo "init: cannot mount the share at $out"
    fi
else
    echo "init: cannot mount the host's root"
fi
poweroff -f
