#!/usr/bin/env bash
# The nested SR-IOV lab's L1 hypervisor image, built offline from the Debian mirror apt
# already uses: Debian 12 with libvirt 9.0 and QEMU 7.2 (the hypervisor inside), the full
# kernel (igb, igbvf, vfio-pci, intel-iommu), and the L2 guest's kernel + busybox initramfs
# under /var/lib/sova-l2. Cached by the hash of every input like scripts/lab-image.sh.
#
# Usage: scripts/lab-nested-image.sh [CACHE_DIR]   (default: $SOVA_LAB_CACHE or /var/cache/sova-lab)
# Prints the image directory (base.qcow2, vmlinuz, initrd.img) on its last line.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
CACHE="${1:-${SOVA_LAB_CACHE:-/var/cache/sova-lab}}"
SUITE=bookworm
PKGS=(
    linux-image-amd64 systemd-sysv udev kmod
    libvirt-daemon-system libvirt-clients qemu-system-x86 qemu-guest-agent
    iproute2 pciutils ethtool busybox-static cpio xz-utils python3
)
MIRROR="$(awk '/^URIs:/ && !done {print $2; done=1}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)"
MIRROR="${MIRROR:-http://deb.debian.org/debian}"
key="$( {
    cat "$0"
    find "$here/lab/nested" -type f | LC_ALL=C sort | xargs cat
    echo "$SUITE ${PKGS[*]} $MIRROR"
} | sha256sum | cut -c1-16)"
out="$CACHE/nested-l1-$key"
if [[ -f "$out/base.qcow2" && -f "$out/vmlinuz" && -f "$out/initrd.img" ]]; then
    echo "lab-nested-image: cached ($key)" >&2
    echo "$out"
    exit 0
fi
for tool in mmdebstrap mkfs.ext4 qemu-img; do
    command -v "$tool" >/dev/null || { echo "lab-nested-image: $tool missing (run scripts/ci-setup-lab.sh)" >&2; exit 2; }
done
mkdir -p "$CACHE"
work="$(mktemp -d "$CACHE/build-nested.XXXXXX")"
# mmdebstrap mounts /proc, /sys and /dev/shm (the machine's own) into the root it builds; it
# runs in a private mount namespace so that a kill mid-build leaves no mount behind, and the
# clean-up never recurses into a mount (it would delete the machine's /dev/shm files).
cleanup() {
    if grep -q " $work/" /proc/self/mountinfo; then
        echo "lab-nested-image: mounts left under $work: not removing it" >&2
    else
        rm -rf --one-file-system "$work"
    fi
}
trap cleanup EXIT
root="$work/root"
t0=$SECONDS
unshare --mount --propagation private mmdebstrap --variant=minbase --include="$(IFS=,; echo "${PKGS[*]}")" \
    --customize-hook="cp -a $here/lab/nested/l1/. \"\$1\"/" \
    --customize-hook="cp $here/lab/nested/l2/init \"\$1\"/tmp/l2-init" \
    --customize-hook="cp $here/lab/nested/build-l2.sh \"\$1\"/tmp/build-l2.sh" \
    --customize-hook='chroot "$1" sh /tmp/build-l2.sh' \
    --customize-hook='rm -f "$1"/tmp/l2-init "$1"/tmp/build-l2.sh' \
    --customize-hook='chroot "$1" systemctl enable sova-l1.service sova-agent.service sova-l1-exec.service libvirtd-tcp.socket' \
    --customize-hook='chroot "$1" systemctl disable libvirt-guests.service || true' \
    --customize-hook='echo sova-l1 > "$1/etc/hostname"' \
    --customize-hook='printf "/dev/vda / ext4 defaults 0 1\n" > "$1/etc/fstab"' \
    --customize-hook='chroot "$1" passwd -d root' \
    "$SUITE" "$root" "$MIRROR" >&2
cp -L "$root/vmlinuz" "$work/vmlinuz"
cp -L "$root/initrd.img" "$work/initrd.img"
rm -rf "$root/var/cache/apt/archives/"*.deb "$root/var/lib/apt/lists/"*
mkfs.ext4 -q -F -L sova-l1 -d "$root" "$work/root.ext4" 3G
qemu-img convert -q -O qcow2 "$work/root.ext4" "$work/base.qcow2"
rm -f "$work/root.ext4"
rm -rf "$root"
mkdir -p "$out"
mv "$work/base.qcow2" "$work/vmlinuz" "$work/initrd.img" "$out/"
echo "lab-nested-image: built $key in $((SECONDS - t0)) s" >&2
echo "$out"
