#!/usr/bin/env bash
# Installs what the hypervisor lab (`sova lab`, tests/lab/) needs on a Debian 12 machine:
# libvirt's daemon with its QEMU driver, QEMU itself, and the tools that build the guest
# image offline from the Debian mirror apt already uses (mmdebstrap, mkfs.ext4 -d,
# qemu-img). Idempotent: installs only what is missing, apt-get update at most once.
#
# Usage: scripts/ci-setup-lab.sh
set -euo pipefail

APT_PKGS=(
    libvirt-daemon libvirt-daemon-driver-qemu libvirt-clients
    qemu-system-x86 qemu-utils
    mmdebstrap e2fsprogs
    iproute2 iperf3 iputils-ping
)
source "$(dirname "${BASH_SOURCE[0]}")/_apt.sh"
apt_ensure ci-setup-lab "${APT_PKGS[@]}"

# libvirt's QEMU driver resolves its compiled-in default user (libvirt-qemu:kvm) before
# reading qemu.conf, and fails to start without them; libvirt-daemon-system would create
# them but drags in systemd units this machine does not run. The lab runs QEMU as root.
getent group kvm >/dev/null || groupadd --system kvm
getent group libvirt-qemu >/dev/null || groupadd --system libvirt-qemu
getent passwd libvirt-qemu >/dev/null ||
    useradd --system --no-create-home --home-dir /var/lib/libvirt --gid kvm \
        --shell /usr/sbin/nologin libvirt-qemu
echo "ci-setup-lab: ready"
