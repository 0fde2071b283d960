"""Plain model types shared by the policy core, the drivers and the simulator.

They are frozen dataclasses rather than pydantic models on purpose: the policy core is
pure, typed and called in hot loops, and must not depend on the validation layer. Input
from outside (scenario YAML, TOML config, HTTP reports) is validated by pydantic models
in ``sova.scenario`` / the daemons and converted into these.

Units are SI throughout: bandwidth in bit/s, packet rates in packets/s, memory in bytes,
time in seconds, CPU time in nanoseconds (as libvirt reports it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

MBIT = 1_000_000.0
GBIT = 1_000_000_000.0
MIB = 1024 * 1024


# --------------------------------------------------------------------------- hardware


@dataclass(frozen=True)
class NICCapabilities:
    """What the PF really supports; probed on real hosts, declared in a sim profile."""

    max_rate: bool = True  # `ip link set PF vf N max_tx_rate` works
    min_rate: bool = False  # `min_tx_rate` works (many Intel NICs refuse it)
    vf_stats: bool = True  # per-VF counters through IFLA_VF_STATS


@dataclass(frozen=True)
class NIC:
    name: str
    capacity_bps: float  # PF line rate
    vf_pool: int  # VFs that Sova may hand out on this PF (fewer than VMs)
    tiers_bps: tuple[float, ...] = ()  # VF_1..VF_N max rates (eq. 7); empty = untiered
    caps: NICCapabilities = field(default_factory=NICCapabilities)


@dataclass(frozen=True)
class Host:
    name: str
    cores: int
    memory_bytes: int
    nic: NIC


# --------------------------------------------------------------------------- SLA


@dataclass(frozen=True)
class ResourceTuple:
    """Chapter §2 resource tuple for one resource: default / min / max.

    ``minimum`` is a guarantee (0 = best effort), ``maximum`` a cap (None = no cap),
    ``default`` the share the VM gets when nothing is known about its demand.
    """

    minimum: float = 0.0
    default: float = 0.0
    maximum: float | None = None

    def __post_init__(self) -> None:
        if self.minimum < 0:
            raise ValueError(f"minimum must be >= 0, got {self.minimum}")
        if self.maximum is not None and self.maximum < self.minimum:
            raise ValueError(f"maximum {self.maximum} is below minimum {self.minimum}")


@dataclass(frozen=True)
class SLA:
    """One VM's network SLA, the single format every bandwidth allocator reads (docs/design.md#sla)."""

    bandwidth: ResourceTuple = field(default_factory=ResourceTuple)  # bit/s
    max_pps: float | None = None  # packets/s over all the VM's interfaces
    priority: int = 0  # higher = more important class (DBA-VM walks from the highest)
    weight: float = 1.0  # share of the left-over in weighted max-min

    @property
    def guaranteed(self) -> bool:
        return self.bandwidth.minimum > 0


@dataclass(frozen=True)
class VM:
    name: str
    vcpus: int
    memory_bytes: int
    sla: SLA = field(default_factory=SLA)
    created_seq: int = 0  # creation order: DBA-VM's tie-break inside a class


# --------------------------------------------------------------------------- counters


@dataclass(frozen=True)
class VMCounters:
    """Cumulative counters of one VM, as a driver reads them. Never rates.

    Counters can go backwards (VM reboot, migration, NIC re-plug); the sensing layer
    treats a negative difference as a reset, not as traffic.
    """

    vm: str
    vcpus: int
    cpu_time_ns: int  # libvirt cpu.time
    steal_ns: int  # libvirt sum of vcpu.N.delay
    rx_bytes: int
    tx_bytes: int
    rx_packets: int
    tx_packets: int
    memory_used_bytes: int = 0


@dataclass(frozen=True)
class HostCounters:
    cpu_busy_ns: int  # all cores together, VMs + backend work
    nic_rx_bytes: int
    nic_tx_bytes: int
    memory_used_bytes: int


@dataclass(frozen=True)
class HostSample:
    host: str
    time_s: float
    vms: Mapping[str, VMCounters]
    totals: HostCounters


# --------------------------------------------------------------------------- state


class NicKind(StrEnum):
    VF = "vf"
    VIRTIO = "virtio"


@dataclass(frozen=True)
class VMState:
    """Actual state of one VM as the driver sees it (what reconciliation compares to)."""

    vm: VM
    nic: NicKind = NicKind.VIRTIO
    vf_index: int | None = None
    vf_max_bps: float | None = None
    vf_min_bps: float | None = None
    guest_limit_bps: float | None = None
    failover_ready: bool = True  # virtio path configured as the failover backup
    backup_link_up: bool = True  # virtio path carries traffic right now
    running: bool = True
    migrating: bool = False


@dataclass(frozen=True)
class Inventory:
    host: Host
    vms: Mapping[str, VMState]

    @property
    def vf_holders(self) -> frozenset[str]:
        return frozenset(n for n, s in self.vms.items() if s.nic is NicKind.VF)


# --------------------------------------------------------------------------- actions


@dataclass(frozen=True)
class AttachVF:
    vm: str
    max_bps: float | None = None  # tier; None = untiered
    min_bps: float | None = None

    kind = "vf_attach"


@dataclass(frozen=True)
class DetachVF:
    vm: str

    kind = "vf_detach"


@dataclass(frozen=True)
class SetVFRate:
    vm: str
    max_bps: float | None
    min_bps: float | None = None

    kind = "tier_change"


@dataclass(frozen=True)
class SetGuestRateLimit:
    """Guest-side HTB (DAQS) or host-side shaping; None removes the limit."""

    vm: str
    rate_bps: float | None
    max_pps: float | None = None

    kind = "guest_limit"


@dataclass(frozen=True)
class Migrate:
    vm: str
    dst_host: str
    bandwidth_cap_bps: float | None = None

    kind = "migrate"


Action = AttachVF | DetachVF | SetVFRate | SetGuestRateLimit | Migrate
