"""Which QEMU the lab's hypervisors run: the machine's own, or another build in a prefix.

Production fleets run QEMU from 7.2 to 10.x, and the lab must be green on both ends. The
machine keeps its own QEMU (Debian 12: 7.2); another one (QEMU 10.0.2 from
bookworm-backports, unpacked with ``dpkg -x`` by ``scripts/lab-nested-qemu.sh``) is laid
over it only inside the lab's private mount namespaces: its binary on
``/usr/bin/qemu-system-x86_64`` and its modules and firmware on the system's directories.
libvirt then probes, caches and starts it at the path it always uses, and QEMU loads the
modules of its own build (QEMU refuses others: ``Only modules from the same build can be
loaded``). Nothing outside those namespaces changes.
"""

from __future__ import annotations

import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path

#: what a prefix lays over the machine's QEMU, relative to ``/`` (each only where both exist)
OVERLAID = (
    "usr/bin/qemu-system-x86_64",
    "usr/lib/x86_64-linux-gnu/qemu",  # accelerator, display, device modules of the build
    "usr/share/qemu",  # firmware: linuxboot, kvmvapic, keymaps, …
    "usr/share/seabios",  # the BIOS the build looks for
    "usr/lib/ipxe/qemu",  # the virtio-net option ROM
)
BINARY = OVERLAID[0]
CHOICES = "system, backports or the path of a qemu-system-x86_64 under an unpacked prefix"


class QemuChoiceError(ValueError):
    """A QEMU choice that names nothing usable; the message names the value."""


@dataclass(frozen=True)
class LabQemu:
    """The lab's QEMU: ``prefix`` None is the machine's own. ``root`` is the system it is
    laid over: ``/`` on a lab host; a directory of their own in tests, so that what a
    command binds does not depend on whether the machine running them has a QEMU."""

    prefix: Path | None = None
    root: Path = Path("/")

    @property
    def name(self) -> str:
        return "system" if self.prefix is None else str(self.prefix / BINARY)

    def binds(self, root: Path | None = None) -> list[tuple[Path, Path]]:
        """(source, target) bind mounts laying this QEMU over the machine's (under
        ``root``, by default :attr:`root`)."""
        if self.prefix is None:
            return []
        root = self.root if root is None else root
        return [
            (self.prefix / rel, root / rel)
            for rel in OVERLAID
            if (self.prefix / rel).exists() and (root / rel).exists()
        ]

    def mount_script(self) -> str:
        """Shell commands making the binds (for a shell inside a private mount namespace)."""
        return " && ".join(
            f"mount --bind {shlex.quote(str(a))} {shlex.quote(str(b))}" for a, b in self.binds()
        )

    def wrap(self, argv: list[str]) -> list[str]:
        """``argv`` run where ``qemu-system-x86_64`` is this QEMU: as it is for the machine's
        own, else in a private mount namespace with the binds made first."""
        if self.prefix is None:
            return list(argv)
        return [
            "unshare", "--mount", "--propagation", "private",
            # no piece to bind (a machine without its own QEMU): the exec alone, not a
            # script starting with "&&", which sh refuses
            "sh", "-c", " && ".join(filter(None, (self.mount_script(), f"exec {shlex.join(argv)}"))),
        ]  # fmt: skip


def from_record(text: str) -> LabQemu:
    """The QEMU ``up`` recorded (``<lab>/qemu``: ``system`` or the prefix's binary)."""
    text = text.strip()
    if not text or text == "system":
        return LabQemu()
    return _from_binary(Path(text), "recorded QEMU")


def _from_binary(binary: Path, field: str) -> LabQemu:
    parts = binary.parts
    if parts[-3:] != ("usr", "bin", "qemu-system-x86_64") or not binary.is_file():
        raise QemuChoiceError(
            f"{field}: {str(binary)!r} is not {CHOICES} (<prefix>/usr/bin/qemu-system-x86_64)"
        )
    return LabQemu(binary.parents[2])


def resolve(choice: str, repo: Path, cache: Path) -> LabQemu:
    """``--qemu`` / ``$SOVA_LAB_QEMU``: ``system``; ``backports`` (QEMU 10 from
    bookworm-backports, fetched once and cached by ``scripts/lab-nested-qemu.sh``); or a path."""
    choice = choice.strip()
    if choice in ("", "system"):
        return LabQemu()
    if choice == "backports":
        script = repo / "scripts" / "lab-nested-qemu.sh"
        r = subprocess.run(
            ["bash", str(script), str(cache)], capture_output=True, text=True, timeout=900
        )
        lines = r.stdout.strip().splitlines()
        if r.returncode != 0 or not lines:
            tail = (r.stderr.strip().splitlines() or ["no output"])[-1]
            raise QemuChoiceError(f"--qemu: backports: {script.name} failed: {tail}")
        return _from_binary(Path(lines[-1]), "--qemu")
    return _from_binary(Path(choice), "--qemu")
