"""KVM when it can actually run the guest, TCG (software emulation) otherwise.

``/dev/kvm`` existing is not enough: some hosts' KVM (e.g. PVM kernels) creates VMs but
cannot run a stock guest kernel (``-cpu host`` aborts, or the guest dies in emulation). So
the probe boots the lab's own kernel for a few seconds and looks for its first words.
"""

from __future__ import annotations

import os
import select
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class AccelChoice:
    domain_type: str  # libvirt <domain type=…>: "kvm" or "qemu" (TCG)
    reason: str


#: Under a KVM that works, the lab's kernel prints its banner well within a second (it only
#: has to decompress); a KVM that cannot run it stays silent (QEMU 10 on a PVM host) or dies.
KVM_PROBE_S = 4.0


def choose_accel(
    kernel: Path,
    timeout_s: float = KVM_PROBE_S,
    kvm_dev: str = "/dev/kvm",
    wrap: Callable[[list[str]], list[str]] = list,
) -> AccelChoice:
    """``wrap`` turns the probe's QEMU command into one running the lab's QEMU
    (``LabQemu.wrap``): the accelerator is the one the guests will run under."""
    if os.environ.get("SOVA_LAB_ACCEL") in ("kvm", "qemu"):
        t = os.environ["SOVA_LAB_ACCEL"]
        return AccelChoice(t, f"SOVA_LAB_ACCEL={t}")
    if not os.access(kvm_dev, os.R_OK | os.W_OK):
        return AccelChoice("qemu", f"TCG: {kvm_dev} absent or not accessible")
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
    booted, out, err = _watch(wrap(cmd), "Linux version", timeout_s)
    if booted:
        return AccelChoice("kvm", "KVM: the guest kernel boots under -accel kvm -cpu host")
    last = (err.strip().splitlines() or [""])[-1][:160]
    why = last or (f"no kernel output within {timeout_s:g} s" if not out else "no kernel banner")
    return AccelChoice("qemu", f"TCG: {kvm_dev} exists but cannot run the guest kernel ({why})")


def _watch(cmd: list[str], banner: str, timeout_s: float) -> tuple[bool, str, str]:
    """Run ``cmd`` until ``banner`` shows on its stdout, it exits, or ``timeout_s`` passes;
    never longer. (seen, stdout, stderr)."""
    try:
        proc = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
    except OSError as e:
        return False, "", str(e)
    assert proc.stdout is not None and proc.stderr is not None
    os.set_blocking(proc.stdout.fileno(), False)
    out = b""
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([proc.stdout], [], [], 0.1)
            if ready:
                chunk = proc.stdout.read() or b""
                out += chunk
                if banner.encode() in out:
                    return True, out.decode(errors="replace"), ""
                if not chunk and proc.poll() is not None:
                    break
            elif proc.poll() is not None:
                break
    finally:
        if proc.poll() is None:
            proc.kill()
        try:
            _, err_b = proc.communicate(timeout=5)
        except subprocess.TimeoutExpired:
            err_b = b""
    return False, out.decode(errors="replace"), err_b.decode(errors="replace")
