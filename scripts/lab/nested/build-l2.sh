#!/bin/sh
# Run inside the L1 root filesystem (chroot) while the image is built: the L2 guest's boot
# files, /var/lib/sova-l2/{vmlinuz,initrd.img} — L1's own kernel and a busybox initramfs
# holding only the drivers a teamed VF needs (virtio-net, failover, net_failover, igbvf),
# virtio-serial and the guest agent (with the libraries it links) for Sova's counters and
# the lab's loads (`guest-exec`).
set -eu
kver=$(ls /lib/modules | head -n 1)
out=/var/lib/sova-l2
d=/tmp/l2-root
rm -rf "$d"
mkdir -p "$d/bin" "$d/proc" "$d/sys" "$d/dev" "$d/mods" "$d/usr/bin" "$out"
cp /bin/busybox "$d/bin/"
for a in $(/bin/busybox --list); do [ -e "$d/bin/$a" ] || ln -s busybox "$d/bin/$a"; done
ga=$(command -v qemu-ga || echo /usr/sbin/qemu-ga)
cp "$ga" "$d/usr/bin/qemu-ga"
for lib in $(ldd "$ga" | awk '/=> \// {print $3} /^\t\/lib/ {print $1}'); do
    mkdir -p "$d$(dirname "$lib")"
    cp -L "$lib" "$d$lib"
done
cp /tmp/l2-init "$d/init"
chmod +x "$d/init"
: > "$d/modules.order"
# one module per modprobe call: `modprobe --show-depends a b c` takes b and c as a's
# parameters (the L2 had only virtio_pci until this was found)
for path in $(for m in virtio_pci virtio_net net_failover igbvf virtio_console; do modprobe -S "$kver" --show-depends "$m"; done | awk '$1 == "insmod" {print $2}'); do
    name=$(basename "$path")
    case "$name" in
        *.xz) xz -dc "$path" > "$d/mods/${name%.xz}"; name=${name%.xz} ;;
        *.zst) zstd -qdc "$path" > "$d/mods/${name%.zst}"; name=${name%.zst} ;;
        *) cp "$path" "$d/mods/$name" ;;
    esac
    grep -qx "/mods/$name" "$d/modules.order" || echo "/mods/$name" >> "$d/modules.order"
done
(cd "$d" && find . | cpio -o -H newc --quiet | gzip -9) > "$out/initrd.img"
cp -L /vmlinuz "$out/vmlinuz"
rm -rf "$d"
echo "build-l2: kernel $kver, initramfs $(wc -c < "$out/initrd.img") bytes" >&2
