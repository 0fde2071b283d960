"""Lab guests: per-guest qcow2 overlays of the cached image, booted directly (no bootloader).

Each guest has one virtio NIC on the slow bridge — the backup its bond starts on — a guest
agent channel, and a serial log inside its daemon's own /var/log/libvirt (so the same path
on the other daemon is another file, and migration needs no destination XML).
"""

from __future__ import annotations

import json
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape

from sova.lab.settings import LabSettings

BACKUP_ALIAS = "ua-backup"


@dataclass(frozen=True)
class Image:
    directory: Path

    @property
    def base(self) -> Path:
        return self.directory / "base.qcow2"

    @property
    def kernel(self) -> Path:
        return self.directory / "vmlinuz"

    @property
    def initrd(self) -> Path:
        return self.directory / "initrd.img"


def build_image(s: LabSettings, repo: Path) -> Image:
    """Run scripts/lab-image.sh (instant when cached); the image directory."""
    r = subprocess.run(
        ["bash", str(repo / "scripts" / "lab-image.sh"), str(s.image_cache)],
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    if r.returncode != 0:
        tail = " | ".join(r.stderr.strip().splitlines()[-3:])
        raise RuntimeError(f"scripts/lab-image.sh exited {r.returncode}: {tail}")
    return Image(Path(r.stdout.strip().splitlines()[-1]))


def overlay(s: LabSettings, image: Image, name: str) -> Path:
    disks = s.root / "disks"
    disks.mkdir(parents=True, exist_ok=True)
    path = disks / f"{name}.qcow2"
    if not path.exists():
        subprocess.run(
            [
                "qemu-img",
                "create",
                "-q",
                "-f",
                "qcow2",
                "-F",
                "qcow2",
                "-b",
                str(image.base),
                str(path),
            ],
            check=True,
            timeout=30,
        )
    return path


def domain_xml(s: LabSettings, image: Image, n: int, accel: str = "qemu") -> str:
    name = s.guest_name(n)
    disk = overlay(s, image, name)
    cmdline = f"console=ttyS0 root=/dev/vda rw quiet sova.ip={s.guest_ip(n)}/24"
    tcg = "<tcg><tb-cache unit='MiB'>64</tb-cache></tcg>" if accel == "qemu" else ""
    return f"""<domain type='{accel}'>
  <name>{escape(name)}</name>
  <memory unit='MiB'>{s.memory_mib}</memory>
  <vcpu>1</vcpu>
  <os>
    <type arch='x86_64' machine='pc'>hvm</type>
    <kernel>{escape(str(image.kernel))}</kernel>
    <initrd>{escape(str(image.initrd))}</initrd>
    <cmdline>{escape(cmdline)}</cmdline>
  </os>
  <features><acpi/>{tcg}</features>
  <on_crash>destroy</on_crash>
  <devices>
    <emulator>/usr/bin/qemu-system-x86_64</emulator>
    <disk type='file' device='disk'>
      <driver name='qemu' type='qcow2'/>
      <source file='{escape(str(disk))}'/>
      <target dev='vda' bus='virtio'/>
    </disk>
    <interface type='bridge'>
      <mac address='{s.guest_mac(n)}'/>
      <source bridge='{s.slow_bridge}'/>
      <model type='virtio'/>
      <alias name='{BACKUP_ALIAS}'/>
    </interface>
    <channel type='unix'>
      <target type='virtio' name='org.qemu.guest_agent.0'/>
    </channel>
    <serial type='file'>
      <source path='/var/log/libvirt/qemu/{escape(name)}-serial.log'/>
    </serial>
    <memballoon model='none'/>
  </devices>
</domain>
"""


def agent_ping(dom: Any, timeout_s: int = 2) -> bool:
    import libvirt
    import libvirt_qemu

    try:
        out = libvirt_qemu.qemuAgentCommand(
            dom, json.dumps({"execute": "guest-ping"}), timeout_s, 0
        )
    except libvirt.libvirtError:
        return False
    return "return" in json.loads(out)


def wait_agent(dom: Any, timeout_s: float) -> float:
    """Seconds until the guest agent answers; raises TimeoutError past ``timeout_s``."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        if agent_ping(dom):
            return time.monotonic() - t0
        time.sleep(1.0)
    raise TimeoutError(f"guest agent of {dom.name()} silent after {timeout_s:g}s")
