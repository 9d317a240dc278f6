#!/bin/sh
# Install the Debian 12 packages that shoal's build and tests need.
set -eu
PKGS="build-essential clang libclang-rt-14-dev pkg-config perl iproute2 libssl-dev libpmix-dev libcmocka-dev libhwloc-dev openmpi-bin libopenmpi-dev"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing
fi
