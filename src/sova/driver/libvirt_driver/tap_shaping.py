"""Host-side rate limits on a tap, both directions, with what this kernel has.

What a PF enforces on a VF (a cap on what the VM sends and receives), enforced on the host
side of a virtio NIC instead. HTB at the tap's root shapes what the guest *receives*; what
it *sends* arrives as the tap's ingress, which is redirected (cls_bpf match-all + mirred)
to an ifb device whose root HTB shapes it. libvirt's own ``<bandwidth>`` is not used: it
needs sfq, u32 and police, which kernels without them refuse ("Specified qdisc kind is
unknown"), sometimes leaving a half-configured HTB behind.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

#: classic BPF "return -1": accept every packet (no u32 or matchall needed)
_MATCH_ALL = "1,6 0 0 4294967295,"


class ShapingError(RuntimeError):
    """tc or ip refused; the message names the command and its error."""


def _run(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    try:
        r = subprocess.run(args, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise ShapingError(f"{' '.join(args)}: {e}") from e
    if check and r.returncode != 0:
        raise ShapingError(f"{' '.join(args)} exited {r.returncode}: {r.stderr.strip()}")
    return r


#: every ifb Sova makes for a tap is named IFB_PREFIX + tap, so an orphan (its tap gone with
#: its guest) is recognisable as Sova's and as nobody else's
IFB_PREFIX = "svi"


def ifb_name(tap: str) -> str:
    """The ifb paired with ``tap`` (netdev names stop at 15 characters)."""
    return (IFB_PREFIX + tap)[:15]


def orphan_ifbs(net: Path = Path("/sys/class/net")) -> list[str]:
    """Sova's ifbs whose tap no longer exists (the guest or its NIC went away)."""
    names = {p.name for p in net.iterdir()}
    return sorted(
        n for n in names if n.startswith(IFB_PREFIX) and n[len(IFB_PREFIX) :] not in names
    )


class TapShaper:
    def __init__(self, tap: str, ifb: str | None = None) -> None:
        self.tap = tap
        self.ifb = ifb or ifb_name(tap)

    def exists(self) -> bool:
        return Path(f"/sys/class/net/{self.tap}").exists()

    def apply(self, rate_bps: float | None) -> str:
        """Cap both directions at ``rate_bps`` (None or 0 removes the cap). Idempotent."""
        if not rate_bps or rate_bps <= 0:
            self.remove()
            return f"{self.tap}: unshaped"
        rate = f"{int(rate_bps)}bit"
        if not Path(f"/sys/class/net/{self.ifb}").exists():
            _run("ip", "link", "add", self.ifb, "type", "ifb")
        _run("ip", "link", "set", self.ifb, "up")
        for dev in (self.tap, self.ifb):
            # An HTB root already there is kept (HTB refuses "replace" by itself: "Change
            # operation not supported"); only its class rate changes.
            if "qdisc htb 1: " not in _run("tc", "qdisc", "show", "dev", dev, "root").stdout:
                _run(
                    "tc",
                    "qdisc",
                    "replace",
                    "dev",
                    dev,
                    "root",
                    "handle",
                    "1:",
                    "htb",
                    "default",
                    "10",
                )
            _run(
                "tc",
                "class",
                "replace",
                "dev",
                dev,
                "parent",
                "1:",
                "classid",
                "1:10",
                "htb",
                "rate",
                rate,
                "ceil",
                rate,
            )
        _run("tc", "qdisc", "replace", "dev", self.tap, "handle", "ffff:", "ingress")
        _run(
            "tc",
            "filter",
            "replace",
            "dev",
            self.tap,
            "parent",
            "ffff:",
            "protocol",
            "all",
            "prio",
            "1",
            "bpf",
            "bytecode",
            _MATCH_ALL,
            "action",
            "mirred",
            "egress",
            "redirect",
            "dev",
            self.ifb,
        )
        return f"{self.tap}: HTB {rate} both ways (egress via {self.ifb})"

    def remove(self) -> None:
        if self.exists():
            _run("tc", "qdisc", "del", "dev", self.tap, "root", check=False)
            _run("tc", "qdisc", "del", "dev", self.tap, "ingress", check=False)
        if Path(f"/sys/class/net/{self.ifb}").exists():
            _run("ip", "link", "del", self.ifb, check=False)

    def rate_bps(self) -> float | None:
        """The cap in force on the tap (from tc), None when unshaped."""
        r = _run("tc", "-j", "class", "show", "dev", self.tap, check=False)
        if r.returncode != 0 or not r.stdout.strip():
            return None
        for c in json.loads(r.stdout):
            if c.get("handle") == "1:10":
                return float(c.get("rate", 0)) * 8 if c.get("rate") else None
        return None


def libvirt_bandwidth_usable(config_gz: str = "/proc/config.gz") -> tuple[bool, str]:
    """Whether libvirt's ``<bandwidth>`` can work on this kernel, and why not.

    libvirt builds it from sfq, u32 and police; a kernel without any of them refuses
    (and may leave a half-configured HTB behind), so Sova never relies on it there.
    """
    import gzip

    try:
        with gzip.open(config_gz, "rt") as f:
            text = f.read()
    except OSError:
        return True, "kernel config not readable: assuming libvirt <bandwidth> works"
    missing = [
        name
        for opt, name in (
            ("CONFIG_NET_SCH_SFQ", "sfq"),
            ("CONFIG_NET_CLS_U32", "u32"),
            ("CONFIG_NET_ACT_POLICE", "police"),
        )
        if f"{opt}=y" not in text and f"{opt}=m" not in text
    ]
    if missing:
        return False, (
            f"libvirt <bandwidth> unusable on this kernel (no {', '.join(missing)}): "
            "host-side limits use HTB on the tap (ifb for guest egress) instead"
        )
    return True, "libvirt <bandwidth> usable (sfq, u32, police present)"
