"""The virtio backend of the testbed: a userspace relay between two TAP devices.

A hypervisor's virtio backend (QEMU's or vhost's) touches every packet on the host's CPU;
that per-packet cost and the latency it adds are why SR-IOV VFs exist at all. The relay
makes the testbed's virtio path pay the same kind of price honestly: every frame the
bridge hands to ``A`` is read into this process and written to ``B`` (and back), one
system call each way, without offloads (no ``IFF_VNET_HDR``: the kernel must segment TSO
traffic into MTU frames before the relay sees it). One relay serves every VM on virtio,
like one backend host, so busy virtio VMs slow each other down.

Run as ``python -m sova.testbed.relay A B`` inside the host namespace. The TAPs exist as
long as this process does: if it dies, the virtio path is down, which the driver detects
before it ever moves a VM off its VF.
"""

from __future__ import annotations

import fcntl
import os
import signal
import struct
import sys
import threading

TUNSETIFF = 0x400454CA
IFF_TAP = 0x0002
IFF_NO_PI = 0x1000
MAX_FRAME = 65536


def open_tap(name: str) -> int:
    fd = os.open("/dev/net/tun", os.O_RDWR)
    fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TAP | IFF_NO_PI))
    return fd


def pump(src: int, dst: int) -> None:
    read, write = os.read, os.write
    while True:
        try:
            frame = read(src, MAX_FRAME)
        except OSError:
            return
        try:
            write(dst, frame)
        except OSError:
            continue  # a full or downed peer drops the frame, as a busy backend would


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m sova.testbed.relay TAP_A TAP_B", file=sys.stderr)
        return 2
    a, b = open_tap(argv[0]), open_tap(argv[1])
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    threading.Thread(target=pump, args=(b, a), daemon=True).start()
    pump(a, b)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
