#!/usr/bin/env bash
# Builds the hypervisor lab's guest image offline: a small Debian 12 root filesystem from the
# Debian mirror apt already uses (nothing else is downloaded), made into an ext4 image without
# mounting anything (mkfs.ext4 -d), converted to a qcow2 base, with the kernel and initrd
# beside it for direct kernel boot. Guests run on per-guest overlays of that base.
#
# The result is cached under a hash of every input (this script, the guest files under
# scripts/lab/guest/, the package list, the suite and the mirror), so a second build is
# instant and any change to an input builds a new image.
#
# Usage: scripts/lab-image.sh [CACHE_DIR]   (default: $SOVA_LAB_CACHE or /var/cache/sova-lab)
# Prints the image directory (base.qcow2, vmlinuz, initrd.img) on its last line.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
CACHE="${1:-${SOVA_LAB_CACHE:-/var/cache/sova-lab}}"
SUITE=bookworm
PKGS=(
    linux-image-cloud-amd64 systemd-sysv udev kmod
    qemu-guest-agent iproute2 ifenslave iperf3 stress-ng iputils-ping procps
)
MIRROR="$(awk '/^URIs:/ && !done {print $2; done=1}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)"
MIRROR="${MIRROR:-http://deb.debian.org/debian}"

key="$( {
    cat "$0"
    find "$here/lab/guest" -type f | LC_ALL=C sort | xargs cat
    echo "$SUITE ${PKGS[*]} $MIRROR"
} | sha256sum | cut -c1-16)"
out="$CACHE/image-$key"
if [[ -f "$out/base.qcow2" && -f "$out/vmlinuz" && -f "$out/initrd.img" ]]; then
    echo "lab-image: cached ($key)" >&2
    echo "$out"
    exit 0
fi
for tool in mmdebstrap mkfs.ext4 qemu-img; do
    command -v "$tool" >/dev/null || { echo "lab-image: $tool missing (run scripts/ci-setup-lab.sh)" >&2; exit 2; }
done
mkdir -p "$CACHE"
work="$(mktemp -d "$CACHE/build.XXXXXX")"
# mmdebstrap mounts /proc, /sys and /dev/shm (the machine's own) into the root it builds; it
# runs in a private mount namespace so that a kill mid-build leaves no mount behind, and the
# clean-up never recurses into a mount (it would delete the machine's /dev/shm files).
cleanup() {
    if grep -q " $work/" /proc/self/mountinfo; then
        echo "lab-image: mounts left under $work: not removing it" >&2
    else
        rm -rf --one-file-system "$work"
    fi
}
trap cleanup EXIT
root="$work/root"
t0=$SECONDS
# Guest files (the boot-time network setup) are copied in by a customize hook so the image
# is made in one pass; the services are enabled the way systemd itself would.
unshare --mount --propagation private mmdebstrap --variant=minbase --include="$(IFS=,; echo "${PKGS[*]}")" \
    --customize-hook="cp -a $here/lab/guest/. \"\$1\"/" \
    --customize-hook='chroot "$1" systemctl enable sova-net.service' \
    --customize-hook='echo sova-guest > "$1/etc/hostname"' \
    --customize-hook='printf "/dev/vda / ext4 defaults 0 1\n" > "$1/etc/fstab"' \
    --customize-hook='chroot "$1" passwd -d root' \
    "$SUITE" "$root" "$MIRROR" >&2
cp -L "$root/vmlinuz" "$work/vmlinuz"
cp -L "$root/initrd.img" "$work/initrd.img"
rm -rf "$root/var/cache/apt/archives/"*.deb "$root/var/lib/apt/lists/"*
mkfs.ext4 -q -F -L sova-root -d "$root" "$work/root.ext4" 2G
qemu-img convert -q -O qcow2 "$work/root.ext4" "$work/base.qcow2"
rm -f "$work/root.ext4"
rm -rf "$root"
mkdir -p "$out"
mv "$work/base.qcow2" "$work/vmlinuz" "$work/initrd.img" "$out/"
echo "lab-image: built $key in $((SECONDS - t0)) s" >&2
echo "$out"
