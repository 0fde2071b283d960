#!/usr/bin/env bash
# QEMU 10 for the nested SR-IOV lab (its emulated igb has SR-IOV; Debian 12's QEMU 7.2 has no
# igb), from bookworm-backports, unpacked into a private prefix beside the lab's cache: the
# machine's own QEMU (7.2, which the hypervisor lab also runs on) is left as it is. A private
# apt state (its own sources list and lists) so the machine's apt sources are not changed.
# Idempotent; the prefix is keyed by the package version.
#
# Usage: scripts/lab-nested-qemu.sh [CACHE_DIR]   (default: $SOVA_LAB_CACHE or /var/cache/sova-lab)
# Prints the qemu-system-x86_64 path on its last line.
set -euo pipefail
CACHE="${1:-${SOVA_LAB_CACHE:-/var/cache/sova-lab}}"
MIRROR="$(awk '/^URIs:/ && !done {print $2; done=1}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)"
MIRROR="${MIRROR:-http://deb.debian.org/debian}"
apt_dir="$CACHE/apt-backports"
mkdir -p "$apt_dir/lists/partial" "$apt_dir/archives/partial"
printf 'deb %s bookworm-backports main\ndeb %s bookworm main\n' "$MIRROR" "$MIRROR" >"$apt_dir/sources.list"
APTO=(-o "Dir::Etc::SourceList=$apt_dir/sources.list" -o Dir::Etc::SourceParts=/dev/null
      -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir" -o "Dir::Cache::archives=$apt_dir/archives")
if [[ -z "$(find "$apt_dir/lists" -name '*backports*Packages*' -mmin -1440 2>/dev/null)" ]]; then
    apt-get "${APTO[@]}" update -qq >&2
fi
ver="$(apt-cache "${APTO[@]}" madison qemu-system-x86 | awk '/bookworm-backports/ {print $3; exit}')"
[[ -n "$ver" ]] || { echo "lab-nested-qemu: no qemu-system-x86 in bookworm-backports" >&2; exit 1; }
prefix="$CACHE/qemu-${ver//[:~+]/_}"
if [[ ! -x "$prefix/usr/bin/qemu-system-x86_64" ]]; then
    tmp="$(mktemp -d "$CACHE/qemu-dl.XXXXXX")"
    trap 'rm -rf "$tmp"' EXIT
    bios="$(apt-cache "${APTO[@]}" madison seabios | awk '/bookworm-backports/ {print $3; exit}')"
    (cd "$tmp" && apt-get "${APTO[@]}" download -qq \
        "qemu-system-x86=$ver" "qemu-system-common=$ver" "qemu-system-data=$ver" \
        "seabios${bios:+=$bios}" ipxe-qemu >&2)
    mkdir -p "$tmp/root"
    for deb in "$tmp"/*.deb; do dpkg -x "$deb" "$tmp/root"; done
    rm -rf "$prefix"
    mv "$tmp/root" "$prefix"
fi
missing="$(ldd "$prefix/usr/bin/qemu-system-x86_64" | awk '/not found/ {print $1}')"
if [[ -n "$missing" ]]; then
    echo "lab-nested-qemu: missing libraries: $missing (apt-get install their packages)" >&2
    exit 1
fi
echo "$prefix/usr/bin/qemu-system-x86_64"
