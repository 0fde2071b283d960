"""The libvirt driver's settings: what a host's ``sova agent`` is configured with, checked
once when it is built (one clear line naming a bad field and its value)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class LibvirtDriverConfig:
    uri: str = "qemu:///system"
    read_only: bool = False
    host_name: str | None = None  # default: the hypervisor's hostname
    pf: str | None = None  # PF netdev; None = the first SR-IOV PF libvirt reports
    vf_pool: int | None = None  # VFs Sova may hand out; None = all of the PF's VFs
    sysfs_root: str = "/sys"
    # per attempt, waiting for DEVICE_ADDED/REMOVED; 8 s x 3 + back-off = 27 s fits the
    # agent's default op_timeout (30 s): a plug the executor gave up on must not go on
    hotplug_timeout_s: float = 8.0
    hotplug_attempts: int = 3
    retry_backoff_s: float = 1.0  # multiplied by the attempt number
    migration_uri_template: str = "qemu+ssh://{host}/system"
    migration_timeout_s: float = 600.0
    migration_poll_s: float = 1.0
    migration_abort_grace_s: float = 30.0
    migration_bandwidth_bps: float | None = None  # default cap when the action gives none
    sampling: str = "host"  # "host" (black box) or "guest-agent" (gray box, docs/design.md#sensing)
    max_workers: int = 4
    keepalive: tuple[int, int] = (5, 3)  # interval s, count: a dead remote host fails fast
    # A dead connection (its daemon restarted) is replaced before the next read or action:
    # this many opens, each bounded by connect_timeout_s, back-off 1, 2, 4 ... x this.
    reconnect_attempts: int = 3
    reconnect_backoff_s: float = 1.0
    connect_timeout_s: float = 10.0
    # Strategies (docs/lab.md): where the fast NIC comes from, and what keeps the VM's
    # network up while it comes and goes. Production: sriov-vf + teaming.
    fast_path: str = "sriov-vf"  # "sriov-vf" | "lab-nic"
    failover: str = "teaming"  # "teaming" | "guest-bond"
    lab_nic_bridge: str = ""  # lab-nic: the fast bridge
    lab_nic_taps: tuple[str, ...] = ()  # lab-nic: one pre-named tap per fast slot
    lab_nic_speed_mbit: int = 1000  # lab-nic: the capacity the tiers divide
    migration_unsafe: bool = False  # VIR_MIGRATE_UNSAFE: disks neither shared nor copied
    guest_exec_timeout_s: float = 30.0
    # Host-side limit without a guest agent: libvirt <bandwidth> or HTB on the tap;
    # "auto" probes the kernel (<bandwidth> needs sfq, u32 and police).
    host_side_shaping: str = "auto"  # "auto" | "bandwidth" | "tap-htb"
    # What the host reports as its own load and size (docs/lab.md#host-totals). "node": the
    # machine's counters (getCPUStats, getMemoryStats, the PF's bytes), right when one
    # hypervisor owns the machine. "domains": the sum of this daemon's running domains, for
    # hypervisors that share a machine (the lab's two daemons), where the node's counters
    # are the same for both.
    host_totals: str = "node"  # "node" | "domains"
    host_cpus: int | None = None  # cores the host reports; None = the node's
    host_memory_mib: int | None = None  # memory the host reports; None = the node's

    def hotplug_budget_s(self) -> float:
        """Longest a confirmed plug or unplug may take: every attempt's timeout plus the
        back-off between attempts (attempt x retry_backoff_s)."""
        n = self.hotplug_attempts
        return float(self.hotplug_timeout_s * n + self.retry_backoff_s * n * (n - 1) / 2)

    def __post_init__(self) -> None:
        if self.fast_path not in FAST_PATHS:
            raise ValueError(
                f"fast_path: {self.fast_path!r} is not one of {', '.join(sorted(FAST_PATHS))}"
            )
        if self.failover not in FAILOVERS:
            raise ValueError(
                f"failover: {self.failover!r} is not one of {', '.join(sorted(FAILOVERS))}"
            )
        if self.host_side_shaping not in ("auto", "bandwidth", "tap-htb"):
            raise ValueError(
                f"host_side_shaping: {self.host_side_shaping!r} is not 'auto', 'bandwidth' "
                "or 'tap-htb'"
            )
        if self.sampling not in ("host", "guest-agent"):
            raise ValueError(f"sampling: {self.sampling!r} is not 'host' or 'guest-agent'")
        if self.host_totals not in ("node", "domains"):
            raise ValueError(f"host_totals: {self.host_totals!r} is not 'node' or 'domains'")
        if self.reconnect_attempts < 1:
            raise ValueError(f"reconnect_attempts: {self.reconnect_attempts!r} must be >= 1")
        for k in ("reconnect_backoff_s", "connect_timeout_s"):
            v = getattr(self, k)
            if not v > 0:
                raise ValueError(f"{k}: {v!r} must be > 0")
        for k in ("host_cpus", "host_memory_mib"):
            v = getattr(self, k)
            if v is not None and v < 1:
                raise ValueError(f"{k}: {v!r} must be >= 1")


FAST_PATHS = frozenset({"sriov-vf", "lab-nic"})
FAILOVERS = frozenset({"teaming", "guest-bond"})
CONFIG_ENV = "SOVA_LIBVIRT_DRIVER"


def load_config_file(path: str | Path) -> dict[str, Any]:
    """Driver settings from a TOML file (the keys of :class:`LibvirtDriverConfig`)."""
    import tomllib

    raw = tomllib.loads(Path(path).read_text())
    known = {f.name for f in fields(LibvirtDriverConfig)}
    bad = sorted(set(raw) - known)
    if bad:
        raise ValueError(f"{path}: unknown driver setting {bad[0]!r}")
    for k in ("lab_nic_taps", "keepalive"):
        if k in raw:
            raw[k] = tuple(raw[k])
    return raw
