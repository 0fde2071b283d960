"""The scenario file's schema: one pydantic model per YAML section, with the bounds that
keep a scenario ``validate`` accepts one ``simulate`` can run, and the error message that
names each failing field by its path.

Why one module near 550 lines: the models are one schema, and the error paths that name
``section.field`` come from how they nest; split, files would have to agree on them.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from sova import model
from sova.agent.config import ControllerConfig
from sova.agent.config import ManagerSpec as ManagerSpec
from sova.agent.config import SchedulerSpec as SchedulerSpec
from sova.agent.config import SensingSpec as SensingSpec
from sova.agent.registry import check_bandwidth_policy, check_vf_policy
from sova.scenario.files import _check_trace
from sova.units import Duration as Duration
from sova.units import Fraction as Fraction
from sova.units import Rate as Rate
from sova.units import Size as Size

# The controller's schema is the agent's, one for every world; scenarios re-export it.
ControllerSpec = ControllerConfig

# Explicit bounds, so that a scenario `validate` accepts is one `simulate` can run: far
# above any real link, memory or run, far below where the simulator's arithmetic breaks.
# (The unit types' own bounds, MAX_RATE, MAX_SIZE, MAX_TIME, live in sova.units.)
MAX_DURATION = 7 * 86400.0  # s of simulated time
MIN_TICK = 1e-3  # s
MAX_STEPS = 10_000_000  # duration / tick, per policy
MAX_SEED = 2**64 - 1
MAX_REQUESTS_PER_S = 1e9


class ScenarioError(ValueError):
    """A scenario that cannot be run; the message lists every bad field."""


class _Strict(BaseModel):
    # inf and nan pass every ge/le bound and then hang or crash the simulator.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class NICSpec(_Strict):
    name: str = "pf0"
    capacity: Rate = Field(gt=0, description="PF line rate")
    vf_pool: int = Field(ge=0, le=4096, description="VFs Sova may hand out")
    tiers: list[Rate] = Field(default_factory=list, description="VF max rates, eq. 7")
    min_rate_supported: bool = False

    @model_validator(mode="after")
    def _tiers_fit(self) -> NICSpec:
        if self.tiers and sum(self.tiers) > self.capacity * (1 + 1e-9):
            raise ValueError(
                f"tiers sum to {sum(self.tiers):.0f} bit/s, above the NIC capacity "
                f"{self.capacity:.0f} bit/s (eq. 7 requires sum <= B)"
            )
        return self


class HostSpec(_Strict):
    name: str
    cores: int = Field(gt=0, le=4096)
    memory: Size = Field(gt=0)
    nic: NICSpec
    vms: list[str] = Field(default_factory=list)
    # A driver domain (Xen IDD) pinned to its own cores runs the virtio/netback backend;
    # None = the backend shares the host's cores with the vCPUs (KVM vhost), as before.
    backend_cores: float | None = Field(default=None, gt=0)


class SLASpec(_Strict):
    min: Rate = 0.0
    default: Rate = 0.0
    max: Rate | None = None
    max_pps: float | None = Field(default=None, ge=0)
    priority: int = 0
    weight: float = Field(default=1.0, ge=1e-6, le=1e6)

    @model_validator(mode="after")
    def _ordered(self) -> SLASpec:
        if self.max is not None and self.max < self.min:
            raise ValueError(f"max ({self.max:.0f} bit/s) is below min ({self.min:.0f} bit/s)")
        return self


class VMSpec(_Strict):
    name: str
    vcpus: int = Field(default=1, gt=0, le=4096)
    memory: Size = Field(default=512 * 1024 * 1024, gt=0)
    sla: SLASpec = Field(default_factory=SLASpec)
    failover_ready: bool = True
    # Device-level ingress QoS (chapter §7): incoming requests above this bit rate are
    # discarded at the NIC, before they cost the VM (or a driver domain) any CPU.
    ingress_limit: Rate | None = None


class Workload(_Strict):
    """What one VM runs. ``kind`` picks the generator; every kind may add CPU work.

    * ``duty``: the papers' netperf/lookbusy duty cycles — network-bound ``net`` of the
      time at ``rate``, CPU-busy ``cpu`` of the time (the default kind);
    * ``bulk``: netperf/iperf3 with ``streams`` parallel TCP streams, always on;
    * ``requests``: httperf — ``requests_per_s`` requests, each answered with ``response``
      bytes; response times are measured;
    * ``file``: scp of ``size`` bytes at up to ``rate``, costing ``ns_per_byte`` guest CPU
      (encryption); transfer times are measured;
    * ``trace``: replay the VM's demand (Mbit/s) from column ``column`` of CSV ``trace``;
      with ``cpu_column``, the VM's CPU busy share of its vCPUs (0..1) from that column of
      the same CSV at the same ``time_s``, in place of the constant ``cpu``, so a VM can be
      busy on CPU and network at once and change both over time.
    """

    kind: Literal["duty", "bulk", "requests", "file", "trace"] = "duty"
    net: Fraction | None = None
    cpu: Fraction = 0.0
    rate: Rate = 1e9
    streams: int = Field(default=1, ge=1, le=1024)
    packet_bytes: int = Field(default=1448, gt=0, le=65536)
    # netperf TCP_STREAM: data out, one 66-byte ACK per two 1448-byte segments in
    rx_share: Fraction = 0.023
    requests_per_s: float = Field(default=0.0, ge=0, le=MAX_REQUESTS_PER_S)
    response: Size = 10_000
    request: Size = 200
    size: Size = 0
    # 1 ms of guest CPU per byte bounds what any cipher costs (the paper's scp: 66 ns) and
    # keeps the cost of a 1 Pbit/s stream finite (the full fuzz tier: 6.6e301 gave NaN).
    ns_per_byte: float = Field(default=0.0, ge=0, le=1e6)
    trace: str | None = None
    column: str | None = None
    cpu_column: str | None = None

    @model_validator(mode="after")
    def _kind_fields(self) -> Workload:
        if self.kind == "requests" and self.requests_per_s <= 0:
            raise ValueError("kind 'requests' needs requests_per_s > 0")
        if self.kind == "file" and self.size <= 0:
            raise ValueError("kind 'file' needs size > 0")
        if self.kind == "trace":
            if not (self.trace and self.column):
                raise ValueError("kind 'trace' needs trace (a CSV path) and column")
            if self.cpu_column is not None and self.cpu > 0:
                raise ValueError(
                    f"cpu_column {self.cpu_column!r} replaces cpu ({self.cpu}): give one of them"
                )
            _check_trace(self.trace, self.column, self.cpu_column)
        elif self.cpu_column is not None:
            raise ValueError(
                f"cpu_column {self.cpu_column!r} needs kind 'trace' (is {self.kind!r})"
            )
        return self

    @property
    def net_duty(self) -> float:
        if self.net is not None:
            return self.net
        return 1.0 if self.kind in ("bulk", "file") else 0.0


DutyWorkload = Workload  # the foundation issue's name


class Phase(_Strict):
    at: Duration
    vms: dict[str, Workload]


class PolicySpec(_Strict):
    """One compared policy: a VF policy and a bandwidth policy under one name."""

    name: str
    vf: str = "default"
    bandwidth: str = "none"
    static_caps: dict[str, Rate] = Field(default_factory=dict)

    @field_validator("vf")
    @classmethod
    def _vf(cls, v: str) -> str:
        return check_vf_policy(v)

    @field_validator("bandwidth")
    @classmethod
    def _bandwidth(cls, v: str) -> str:
        return check_bandwidth_policy(v)


class ProfileSpec(_Strict):
    """Hardware profile of the simulated world; one per paper (docs/design.md#profiles)."""

    name: str = "generic-10gbe"
    hotplug_attach: Duration = 2.0
    hotplug_detach: Duration = 1.0
    hotplug_failure_rate: Fraction = 0.0
    virtio_pps_limit: float = Field(default=1_200_000.0, gt=0)
    virtio_latency: Duration = 50e-6
    vf_latency: Duration = 15e-6
    virtio_host_ns_per_packet: float = Field(default=1500.0, ge=0)
    guest_ns_per_packet: float = Field(default=500.0, ge=0)
    # VM exits and notifications a virtio guest pays per packet on top (VFs avoid them).
    virtio_guest_ns_per_packet: float = Field(default=0.0, ge=0)
    virtio_flow_limit: Rate = Field(default=40e9, description="one VM's vhost ceiling")
    guest_ns_per_request: float = Field(default=0.0, ge=0)
    sched_quantum: Duration = 3e-3  # run-queue delay scale when cores are oversubscribed
    # Backend time per second per active virtio VM besides its packets (wake-ups,
    # notifications, switching between queues); it shrinks the backend's packet rate.
    virtio_backend_ns_per_vm: float = Field(default=0.0, ge=0)
    # Request latency: time outside the host (client, switch, wire), crossings of the
    # host's path per request (httperf: handshake + request = 2), and whether the guest's
    # own processing of the request (queued at its vCPU) counts.
    request_fixed_latency: Duration = 0.0
    request_round_trips: float = Field(default=1.0, gt=0)
    request_service_latency: bool = False
    # TCP senders (duty, bulk, file) offer only their share of the egress link, so CPU is
    # spent on what is sent rather than on what netperf would like to send.
    tcp_link_clocked: bool = False
    # pre-copy live migration (SimGrid's model; Clark et al.)
    dirty_rate: Rate = 200e6  # bit/s of pages dirtied by an idle-ish guest
    dirty_per_tx: float = Field(default=0.05, ge=0)  # extra dirtying per bit sent
    max_downtime: Duration = 0.03
    max_rounds: int = Field(default=30, ge=1, le=1000)
    migration_setup: Duration = 1.0
    migration_failure_rate: Fraction = 0.0
    cycle_min: Duration = 4.0
    cycle_max: Duration = 16.0
    rate_jitter: Fraction = 0.05
    cpu_jitter: Fraction = 0.03

    @model_validator(mode="after")
    def _cycle(self) -> ProfileSpec:
        if self.cycle_min <= 0 or self.cycle_max < self.cycle_min:
            raise ValueError(
                f"need 0 < cycle_min <= cycle_max (got {self.cycle_min}, {self.cycle_max})"
            )
        return self


class ExpectedHolders(_Strict):
    """A paper's published VF holders over a time range, shown beside ours in the report."""

    start: Duration
    end: Duration
    vms: list[str]
    label: str = ""


class ClassificationSpec(_Strict):
    """Sova Table 1 / DSR-IOV Table 2 groups, each listed by increasing benchmark share."""

    cpu: list[str] = Field(default_factory=list)
    network: list[str] = Field(default_factory=list)
    hybrid: list[str] = Field(default_factory=list)


class PaperValue(_Strict):
    """One published number (or claim) shown beside ours in the report."""

    label: str
    metric: str  # a summary key; "per_vm.VM2.throughput_mbps" reaches into per_vm
    policy: str
    value: float | None = None  # the paper's figure, if it printed one
    at: float | int | str | None = None  # the sweep value it belongs to
    claim: str = ""


class PaperSpec(_Strict):
    source: str = ""
    vf_holders: list[ExpectedHolders] = Field(default_factory=list)
    classification: ClassificationSpec | None = None
    values: list[PaperValue] = Field(default_factory=list)
    # sweeps: the metric the paper's figure plots, and its curves (policy -> x -> y)
    sweep_metric: str | None = None
    sweep_metric_label: str = ""
    series: dict[str, dict[str, float]] = Field(default_factory=dict)
    note: str = ""


class VMGroup(_Strict):
    """``count`` alike VMs named ``prefix + number``, placed round-robin on ``hosts``."""

    prefix: str = "VM"
    count: int = Field(ge=0, le=100_000)
    start: int = Field(default=1, ge=0)
    hosts: list[str] = Field(min_length=1)
    vcpus: int = Field(default=1, gt=0, le=4096)
    memory: Size = Field(default=512 * 1024 * 1024, gt=0)
    sla: SLASpec = Field(default_factory=SLASpec)
    workload: Workload | None = None


class SweepSpec(_Strict):
    """Run the scenario once per value, substituting ``${variable}`` in the file.

    A value may also be a mapping ``{variable: x, other: y}`` when a point needs several
    numbers that move together (48 VMs of which 34 are CPU-busy): every ``${key}`` is
    substituted and ``variable``'s entry is the point's x value.
    """

    variable: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    values: list[float | int | str | dict[str, float | int | str]] = Field(min_length=1)
    label: str = ""


# Metrics the simulator reads as numbers, with the range that makes sense: a tolerance
# is a share of the guarantee, and measuring starts at a time of the run.
NUMERIC_METRICS: dict[str, tuple[float, float]] = {
    "guarantee_tolerance": (0.0, 1.0),
    "response_from_s": (0.0, math.inf),
}


class OutputSpec(_Strict):
    """What the timeline keeps (docs/design.md#timeline-resolution): a week of a fleet
    at every control period is billions of rows, more than anyone reads or a disk holds."""

    # Record the timeline every this many seconds (a multiple of controller.period);
    # None: every control period. The rows are the period's own values, not means.
    timeline_period: Duration | None = Field(default=None, gt=0)
    # Only these VMs' rows; empty: every VM.
    timeline_vms: list[str] = Field(default_factory=list)


class Scenario(_Strict):
    # One line, short: it titles every figure and names every output (a 100,000-character
    # name made a run take 63 s instead of 3.5 s; issue 37).
    name: str = Field(min_length=1, max_length=200, pattern=r"^[^\x00-\x1f\x7f-\x9f]+$")
    description: str = ""
    seed: int = Field(default=0, ge=0, le=MAX_SEED)
    duration: Duration = Field(le=MAX_DURATION)
    tick: Duration = Field(default=1.0, ge=MIN_TICK)
    hosts: list[HostSpec] = Field(min_length=1)
    vms: list[VMSpec] = Field(default_factory=list)
    vm_groups: list[VMGroup] = Field(default_factory=list)
    workload: list[Phase] = Field(default_factory=list)
    controller: ControllerSpec = Field(default_factory=ControllerSpec)
    compare: list[PolicySpec | str] = Field(default_factory=list)
    sweep: SweepSpec | None = None
    sweep_value: float | int | str | None = None
    profile: ProfileSpec = Field(default_factory=ProfileSpec)
    paper: PaperSpec = Field(default_factory=PaperSpec)
    metrics: dict[str, Any] = Field(default_factory=dict)
    output: OutputSpec = Field(default_factory=OutputSpec)

    @field_validator("compare")
    @classmethod
    def _compare_names(cls, v: list[PolicySpec | str]) -> list[PolicySpec | str]:
        for p in v:
            if isinstance(p, str):
                check_vf_policy(p)
        return v

    @field_validator("metrics")
    @classmethod
    def _metric_values(cls, v: dict[str, Any]) -> dict[str, Any]:
        # The report reads these as numbers or names; a mapping, list or null crashed it.
        for key, value in v.items():
            number = isinstance(value, int | float) and not isinstance(value, bool)
            ok = isinstance(value, str) or (number and math.isfinite(value))
            if not ok:
                raise ValueError(
                    f"metrics.{key}: must be a finite number or a string (got {value!r})"
                )
            # The world reads these as numbers when it is built; a string passed validate
            # and then crashed simulate (found by the full fuzz tier).
            bounds = NUMERIC_METRICS.get(key)
            if bounds is not None and not (number and bounds[0] <= value <= bounds[1]):
                raise ValueError(
                    f"metrics.{key}: must be a number from {bounds[0]:g} to {bounds[1]:g}"
                    f" (got {value!r})"
                )
        return v

    @model_validator(mode="after")
    def _expand_groups(self) -> Scenario:
        """Turn vm_groups into plain VMs, host placements and phase-0 workloads."""
        if not self.vm_groups:
            return self
        hosts = {h.name: h for h in self.hosts}
        vms = list(self.vms)
        placement: dict[str, list[str]] = {h.name: list(h.vms) for h in self.hosts}
        initial: dict[str, Workload] = {}
        for gi, g in enumerate(self.vm_groups):
            for hn in g.hosts:
                if hn not in hosts:
                    raise ValueError(f"vm_groups[{gi}].hosts: unknown host {hn!r}")
            for k in range(g.count):
                name = f"{g.prefix}{g.start + k}"
                vms.append(VMSpec(name=name, vcpus=g.vcpus, memory=g.memory, sla=g.sla))
                placement[g.hosts[k % len(g.hosts)]].append(name)
                if g.workload is not None:
                    initial[name] = g.workload
        new_hosts = [h.model_copy(update={"vms": placement[h.name]}) for h in self.hosts]
        phases = list(self.workload)
        if initial:
            zero = [i for i, p in enumerate(phases) if p.at == 0]
            if zero:
                p0 = phases[zero[0]]
                phases[zero[0]] = p0.model_copy(update={"vms": {**initial, **p0.vms}})
            else:
                phases.insert(0, Phase(at=0.0, vms=initial))
        object.__setattr__(self, "vms", vms)
        object.__setattr__(self, "hosts", new_hosts)
        object.__setattr__(self, "workload", phases)
        object.__setattr__(self, "vm_groups", [])
        return self

    @model_validator(mode="after")
    def _references(self) -> Scenario:
        if self.tick <= 0:
            raise ValueError(f"tick must be > 0 (got {self.tick})")
        if self.duration <= 0:
            raise ValueError(f"duration must be > 0 (got {self.duration})")
        if self.tick > self.duration:
            raise ValueError(
                f"tick ({self.tick:g} s) must not exceed duration ({self.duration:g} s)"
            )
        if self.duration < self.controller.period:
            # The agents step (and the timeline gets its rows) once per control period: a
            # shorter run would "succeed" with an empty timeline.
            raise ValueError(
                f"duration ({self.duration:g} s) must be at least controller.period "
                f"({self.controller.period:g} s): a shorter run records nothing"
            )
        if self.duration / self.tick > MAX_STEPS:
            raise ValueError(
                f"duration / tick: {self.duration:g} s in ticks of {self.tick:g} s is "
                f"{self.duration / self.tick:.3g} steps, above the limit {MAX_STEPS:,}"
            )
        vm_names = [v.name for v in self.vms]
        # Counter, not list.count per name: O(N) matters with 20k VMs (sim_scale benchmark)
        dup = {n for n, c in Counter(vm_names).items() if c > 1}
        if dup:
            raise ValueError(f"vms: duplicate VM names {sorted(dup)}")
        known = set(vm_names)
        placed: dict[str, str] = {}
        for i, h in enumerate(self.hosts):
            for j, name in enumerate(h.vms):
                if name not in known:
                    raise ValueError(f"hosts[{i}].vms[{j}]: unknown VM {name!r}")
                if name in placed:
                    raise ValueError(
                        f"hosts[{i}].vms[{j}]: VM {name!r} is already on host {placed[name]!r}"
                    )
                placed[name] = h.name
        memory = {v.name: v.memory for v in self.vms}
        for i, h in enumerate(self.hosts):
            for j, name in enumerate(h.vms):
                if memory[name] > h.memory:
                    raise ValueError(
                        f"hosts[{i}].vms[{j}]: VM {name!r} needs {memory[name]} B of memory, "
                        f"above host {h.name!r}'s {h.memory} B"
                    )
        unplaced = known - set(placed)
        if unplaced:
            raise ValueError(f"vms: {sorted(unplaced)} are on no host (list them in hosts[].vms)")
        if self.paper.classification is not None:
            c = self.paper.classification
            for group in ("cpu", "network", "hybrid"):
                for j, name in enumerate(getattr(c, group)):
                    if name not in known:
                        raise ValueError(f"paper.classification.{group}[{j}]: unknown VM {name!r}")
        if not self.vms:
            raise ValueError("vms: a scenario needs at least one VM (vms or vm_groups)")
        self.check_output()
        names = [p.name for p in self.policy_specs]
        if len(set(names)) != len(names):
            raise ValueError(f"compare: policy names must be unique, got {names}")
        for i, p in enumerate(self.workload):
            for name in p.vms:
                if name not in known:
                    raise ValueError(f"workload[{i}].vms: unknown VM {name!r}")
            if p.at > self.duration:
                raise ValueError(
                    f"workload[{i}].at: {p.at} s is after the scenario's end ({self.duration} s)"
                )
        return self

    def check_output(self) -> None:
        """output: against the rest of the scenario (also after --timeline-* changed it)."""
        tp = self.output.timeline_period
        if tp is not None:
            ratio = tp / self.controller.period
            if abs(ratio - round(ratio)) > 1e-9 or round(ratio) < 1:
                raise ValueError(
                    f"output.timeline_period: must be a multiple of controller.period "
                    f"({self.controller.period:g} s) (got {tp:g})"
                )
        known = {v.name for v in self.vms}
        for j, name in enumerate(self.output.timeline_vms):
            if name not in known:
                raise ValueError(f"output.timeline_vms[{j}]: unknown VM {name!r}")

    @property
    def policy_specs(self) -> list[PolicySpec]:
        if not self.compare:
            c = self.controller
            name = (
                c.vf_policy
                if c.bandwidth_policy == "none"
                else f"{c.vf_policy}+{c.bandwidth_policy}"
            )
            return [PolicySpec(name=name, vf=c.vf_policy, bandwidth=c.bandwidth_policy)]
        out = []
        for p in self.compare:
            if isinstance(p, str):
                out.append(PolicySpec(name=p, vf=p, bandwidth=self.controller.bandwidth_policy))
            else:
                out.append(p)
        return out

    @property
    def policies(self) -> list[str]:
        return [p.name for p in self.policy_specs]

    def model_host(self, host: HostSpec) -> model.Host:
        nic = model.NIC(
            name=host.nic.name,
            capacity_bps=host.nic.capacity,
            vf_pool=host.nic.vf_pool,
            tiers_bps=tuple(host.nic.tiers),
            caps=model.NICCapabilities(min_rate=host.nic.min_rate_supported),
        )
        return model.Host(host.name, host.cores, host.memory, nic)

    def model_vm(self, vm: VMSpec, seq: int) -> model.VM:
        return model.VM(vm.name, vm.vcpus, vm.memory, _model_sla(vm.sla), created_seq=seq)

    def model_vms(self) -> list[model.VM]:
        """Every VM's :meth:`model_vm`, in order, VMs with equal SLAs sharing one SLA
        object (frozen, so one serves them all): building an SLA per VM was most of a
        20,000-VM world's construction, and fleets have a handful of distinct SLAs."""
        slas: dict[tuple[object, ...], model.SLA] = {}
        out = []
        for seq, vm in enumerate(self.vms):
            s = vm.sla
            values = (s.min, s.default, s.max, s.max_pps, s.priority, s.weight)
            # the types too: 1 == 1.0 as keys, and an SLA keeps what the scenario gave
            key = (*values, *map(type, values))
            sla = slas.get(key)
            if sla is None:  # the first VM with this SLA: model_vm's own
                first = self.model_vm(vm, seq)
                slas[key] = first.sla
                out.append(first)
            else:
                out.append(model.VM(vm.name, vm.vcpus, vm.memory, sla, created_seq=seq))
        return out


def _model_sla(sla: SLASpec) -> model.SLA:
    return model.SLA(
        bandwidth=model.ResourceTuple(sla.min, sla.default, sla.max),
        max_pps=sla.max_pps,
        priority=sla.priority,
        weight=sla.weight,
    )


def _format_errors(err: ValidationError, source: str) -> str:
    lines = [f"{source}: invalid scenario ({err.error_count()} error(s))"]
    for e in err.errors():
        path = ""
        for part in e["loc"]:
            if isinstance(part, int):
                path += f"[{part}]"
            else:
                path += ("." if path else "") + str(part)
        msg = e["msg"].removeprefix("Value error, ")
        value = e.get("input")
        got = repr(value)
        if len(got) > 80:  # a 100,000-character value is named, not printed (issue 37)
            got = f"{got[:60]}… ({len(str(value))} characters)"
        shown = "" if isinstance(value, dict | list) else f" (got {got})"
        lines.append(f"  {path}: {msg}{shown}" if path else f"  {msg}")
    return "\n".join(lines)


def parse_scenario(data: Any, source: str = "<scenario>") -> Scenario:
    if not isinstance(data, dict):
        raise ScenarioError(f"{source}: a scenario is a YAML mapping, got {type(data).__name__}")
    try:
        return Scenario.model_validate(data)
    except ValidationError as err:
        raise ScenarioError(_format_errors(err, source)) from None
