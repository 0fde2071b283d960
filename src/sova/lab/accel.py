"""KVM when it can actually run the guest, TCG (software emulation) otherwise.

``/dev/kvm`` existing is not enough: some hosts' KVM (e.g. PVM kernels) creates VMs but
cannot run a stock guest kernel (``-cpu host`` aborts, or the guest dies in emulation). So
the probe boots the lab's own kernel for a few seconds and looks for its first words.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class AccelChoice:
    domain_type: str  # libvirt <domain type=…>: "kvm" or "qemu" (TCG)
    reason: str


def choose_accel(kernel: Path, timeout_s: float = 15.0) -> AccelChoice:
    if os.environ.get("SOVA_LAB_ACCEL") in ("kvm", "qemu"):
        t = os.environ["SOVA_LAB_ACCEL"]
        return AccelChoice(t, f"SOVA_LAB_ACCEL={t}")
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        return AccelChoice("qemu", "TCG: /dev/kvm absent or not accessible")
    cmd = [
        "qemu-system-x86_64",
        "-accel",
        "kvm",
        "-cpu",
        "host",
        "-m",
        "256",
        "-nodefaults",
        "-display",
        "none",
        "-no-reboot",
        "-serial",
        "stdio",
        "-kernel",
        str(kernel),
        "-append",
        "console=ttyS0 earlyprintk=ttyS0 panic=-1",
    ]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
        out, err = r.stdout, r.stderr
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else ""
        err = ""
    if "Linux version" in out:
        return AccelChoice("kvm", "KVM: the guest kernel boots under -accel kvm -cpu host")
    why = (err.strip().splitlines() or ["no kernel output"])[-1][:160]
    return AccelChoice("qemu", f"TCG: /dev/kvm exists but cannot run the guest kernel ({why})")
