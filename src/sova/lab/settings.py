"""Where and how big the lab is: one frozen record, the one place names are made."""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass
from pathlib import Path

LIBVIRT_DIRS = ("etc", "run", "lib", "log", "cache")
#: each lab daemon's private copy, bind-mounted over these in its own mount namespace
HOST_DIRS = {
    "etc": "/etc/libvirt",
    "run": "/run/libvirt",
    "lib": "/var/lib/libvirt",
    "log": "/var/log/libvirt",
    "cache": "/var/cache/libvirt",
}


#: The lab's hot-plug bounds (LibvirtDriverConfig keys). Under TCG a plug or an unplug takes
#: seconds (docs/lab.md), so each attempt waits 20 s; two attempts and one back-off make a
#: worst case of 41 s, which a lab controller's op_timeout must cover (checked at load).
LAB_HOTPLUG: dict[str, float | int] = {
    "hotplug_timeout_s": 20.0,
    "hotplug_attempts": 2,
    "retry_backoff_s": 1.0,
}


#: top-q's q in the lab: every guest the lab can have (a scenario may use fewer guests than
#: the lab runs; q = the scenario's count would rank the others and could keep out the one
#: that sends)
LAB_MAX_GUESTS = 8


def lab_hotplug_budget_s() -> float:
    n = int(LAB_HOTPLUG["hotplug_attempts"])
    return (
        float(LAB_HOTPLUG["hotplug_timeout_s"]) * n
        + float(LAB_HOTPLUG["retry_backoff_s"]) * n * (n - 1) / 2
    )


@dataclass(frozen=True)
class LabSettings:
    root: Path = Path(os.environ.get("SOVA_LAB_DIR", "/var/lib/sova-lab"))
    image_cache: Path = Path(os.environ.get("SOVA_LAB_CACHE", "/var/cache/sova-lab"))
    prefix: str = os.environ.get(
        "SOVA_LAB_PREFIX", "svl"
    )  # every bridge, veth, ifb and netns the lab makes starts with it
    #: the QEMU the hypervisors run (sova.lab.qemu.resolve): system, backports or a path
    qemu: str = os.environ.get("SOVA_LAB_QEMU", "system")
    hosts: tuple[str, ...] = ("HV1", "HV2")
    guests: int = 4
    memory_mib: int = 320
    subnet: str = "10.77.0"  # /24; the peer is .1, guest N is .10+N
    boot_parallel: int = 2  # TCG: more than two booting at once slows every one of them
    boot_timeout_s: float = 240.0

    def host_dir(self, host: str) -> Path:
        return self.root / host

    def socket(self, host: str) -> Path:
        return self.host_dir(host) / "run" / "libvirt-sock"

    def uri(self, host: str) -> str:
        return f"qemu+unix:///system?socket={self.socket(host)}"

    def uri_template(self) -> str:
        """``LibvirtDriverConfig.migration_uri_template`` reaching the other lab daemon."""
        return f"qemu+unix:///system?socket={self.root}/{{host}}/run/libvirt-sock"

    def host_uuid(self, host: str) -> str:
        return str(uuid.uuid5(uuid.NAMESPACE_DNS, f"sova-lab.{host}"))

    @property
    def slow_bridge(self) -> str:
        return f"{self.prefix}-slow"

    @property
    def fast_bridge(self) -> str:
        return f"{self.prefix}-fast"

    @property
    def peer_ns(self) -> str:
        return f"{self.prefix}-peer"

    @property
    def peer_ip(self) -> str:
        return f"{self.subnet}.1"

    def guest_name(self, n: int) -> str:
        return f"g{n}"

    def guest_ip(self, n: int) -> str:
        return f"{self.subnet}.{10 + n}"

    def guest_mac(self, n: int) -> str:
        return f"52:54:00:77:00:{n:02x}"

    def fast_tap(self, host: str, slot: int) -> str:
        """The host side of fast slot ``slot`` on ``host`` (unique across both daemons)."""
        return f"{self.prefix}{host[-1]}f{slot}"

    @property
    def qemu_record(self) -> Path:
        """The QEMU `up` chose, as resolved: every later start of a daemon uses the same."""
        return self.root / "qemu"

    @property
    def state_file(self) -> Path:
        return self.root / "state.json"
