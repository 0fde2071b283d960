"""Testbed scenarios: what to build in network namespaces and which real traffic to send.

A simulated scenario (``sova.scenario``) describes duty cycles that a model turns into
rates; a testbed scenario describes *processes*: how many TCP streams each VM opens, when,
and at what application rate, because on real packets the outcome has to come out of the
kernel's queues and TCP, not out of a formula. The two schemas therefore differ, but they
share the SLA format, the units and the scheduler settings, and they are validated the
same strict way: unknown keys are errors and every error names the field path and the
offending value (``traffic[2].vm: unknown VM 'be9' (got 'be9')``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from sova import model
from sova.agent.config import ControllerConfig
from sova.agent.registry import check_bandwidth_policy, check_vf_policy
from sova.scenario import ExpectedHolders, SLASpec
from sova.units import Duration, Fraction, Rate

# Names become parts of namespace names and of report file names: keep them plain.
NAME_RE = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,23}$"
Name = Annotated[str, Field(pattern=NAME_RE)]
MAX_VMS = 200  # one /24 of VM addresses, three-digit interface suffixes


class TestbedScenarioError(ValueError):
    """A testbed scenario that cannot be run; the message lists every bad field."""

    __test__ = False  # not a pytest test class, despite the name


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LinkSpec(_Strict):
    """The host's uplink, standing for the SR-IOV NIC's port."""

    capacity: Rate = Field(description="port rate, enforced by HTB on the uplink")
    vf_pool: int = Field(ge=0, le=MAX_VMS, description="VFs Sova may hand out")
    tiers: list[Rate] = Field(default_factory=list, description="VF max rates, eq. 7")
    min_rate_supported: bool = Field(
        default=False, description="whether VF min_tx_rate works (HTB rate on the port)"
    )
    queue: int = Field(default=300, ge=10, le=10_000, description="port FIFO, packets")

    @model_validator(mode="after")
    def _check(self) -> LinkSpec:
        if self.capacity <= 0:
            raise ValueError(f"capacity must be > 0 (got {self.capacity})")
        if self.tiers and sum(self.tiers) > self.capacity * (1 + 1e-9):
            raise ValueError(
                f"tiers sum to {sum(self.tiers):.0f} bit/s, above the capacity "
                f"{self.capacity:.0f} bit/s (eq. 7 requires sum <= B)"
            )
        return self


class ProfileSpec(_Strict):
    """How the testbed's 'hardware' behaves beyond what the kernel does by itself."""

    hotplug_attach: Duration = Field(default=0.5, description="VF hot-plug delay")
    hotplug_detach: Duration = Field(default=0.2, description="VF hot-unplug delay")
    op_timeout: Duration = 10.0


class VMSpec(_Strict):
    name: Name
    vcpus: int = Field(default=1, gt=0, le=64)
    memory: Annotated[int, Field(ge=0)] = 512 * model.MIB
    sla: SLASpec = Field(default_factory=SLASpec)
    vf: bool = Field(default=False, description="holds a VF from the start")


class FlowSpec(_Strict):
    """One iperf3 client run in a VM towards its own server in the sink."""

    vm: str
    start: Duration = 0.0
    stop: Duration | None = None  # default: the end of the run
    streams: int = Field(default=1, ge=1, le=32)
    rate: Rate | None = Field(
        default=None, description="offered load of the whole flow; none = as fast as TCP goes"
    )

    @model_validator(mode="after")
    def _order(self) -> FlowSpec:
        if self.stop is not None and self.stop <= self.start:
            raise ValueError(f"stop ({self.stop:g} s) must be after start ({self.start:g} s)")
        if self.rate is not None and self.rate <= 0:
            raise ValueError(f"rate must be > 0 (got {self.rate})")
        return self


class ProbeSpec(_Strict):
    """Connectivity probes across VF switches."""

    ping_interval: Duration | None = Field(
        default=None, description="ICMP echo from every VM to the sink this often"
    )
    gap_resolution: Duration | None = Field(
        default=None, description="read the sink's per-VM counters this often for TCP gaps"
    )

    @model_validator(mode="after")
    def _positive(self) -> ProbeSpec:
        for field in ("ping_interval", "gap_resolution"):
            v = getattr(self, field)
            if v is not None and not 0.002 <= v <= 1.0:
                raise ValueError(f"{field} must be between 2ms and 1s (got {v})")
        return self


class ControllerSpec(ControllerConfig):
    """The controller schema of every world (:class:`sova.agent.config.ControllerConfig`)
    with the testbed's defaults (short periods: a run lasts a minute) and its three knobs
    for real traffic. Fields the testbed takes from elsewhere are refused here."""

    period: Duration = Field(default=2.0, description="VF scheduling period")
    vf_policy: str = "static-sriov"
    bandwidth_period: Duration = Field(default=0.5, description="Sova/DBA-VM allocator period")
    daqs_period: Duration = Field(default=0.2, description="DAQS controller period (paper)")
    daqs_reference_link: Rate = Field(
        default=40e9, description="link DAQS's absolute thresholds were tuned for"
    )
    probe_floor: Fraction = Field(
        default=0.02, description="smallest cap, as a share of the link, so a VM can ramp up"
    )

    @model_validator(mode="after")
    def _testbed(self) -> ControllerSpec:
        if self.daqs_period <= 0:
            raise ValueError(f"daqs_period must be > 0 (got {self.daqs_period})")
        elsewhere = {
            "op_timeout": "profile.op_timeout",
            "static_caps": "static_caps (top level, per variant)",
            "manager": "nothing: the testbed is one host",
            "migration_timeout": "nothing: the testbed is one host",
            "boot_vfs": "vms[].vf",
        }
        given = sorted(self.model_fields_set & set(elsewhere))
        if given:
            raise ValueError(f"{given[0]}: not a testbed setting; use {elsewhere[given[0]]}")
        return self


class CompareSpec(_Strict):
    """The runs of one scenario differ in exactly one policy: bandwidth or VF."""

    axis: Literal["bandwidth", "vf"] = "bandwidth"
    policies: list[str] = Field(min_length=1)

    @model_validator(mode="after")
    def _known(self) -> CompareSpec:
        check = check_bandwidth_policy if self.axis == "bandwidth" else check_vf_policy
        for p in self.policies:
            check(p)
        if len(set(self.policies)) != len(self.policies):
            raise ValueError(f"policies listed twice: {self.policies}")
        return self


class VariantSpec(_Strict):
    """The same traffic with other SLAs or static caps (DAQS Fig. 3: two guarantees)."""

    name: Name
    sla: dict[str, SLASpec] = Field(default_factory=dict)
    static_caps: dict[str, Rate] = Field(default_factory=dict)


class AcceptanceSpec(_Strict):
    """What a run must show; checked on the measured per-second delivered rates."""

    policy: str = "sova"
    baseline: str = "none"
    guarantee_held: Fraction | None = None
    # A 1-second TCP sample jitters by a few percent around a rate the shaper holds.
    guarantee_tolerance: Fraction = 0.02
    utilisation_vs_baseline: Fraction | None = None
    max_break: Duration | None = None
    vf_holders: list[ExpectedHolders] = Field(default_factory=list)


class TestbedScenario(_Strict):
    __test__ = False  # not a pytest test class, despite the name

    name: Name
    description: str = ""
    duration: Duration
    warmup: Duration = Field(default=1.0, description="agent runs this long before traffic")
    flow_ramp: Duration = Field(
        default=1.0, description="a flow counts as offered this long after it starts"
    )
    link: LinkSpec
    profile: ProfileSpec = Field(default_factory=ProfileSpec)
    vms: list[VMSpec] = Field(min_length=1, max_length=MAX_VMS)
    traffic: list[FlowSpec] = Field(default_factory=list)
    controller: ControllerSpec = Field(default_factory=ControllerSpec)
    compare: CompareSpec = Field(default_factory=lambda: CompareSpec(policies=["none"]))
    static_caps: dict[str, Rate] = Field(default_factory=dict)
    variants: list[VariantSpec] = Field(default_factory=list)
    probes: ProbeSpec = Field(default_factory=ProbeSpec)
    acceptance: AcceptanceSpec = Field(default_factory=AcceptanceSpec)
    note: str = ""

    @model_validator(mode="after")
    def _references(self) -> TestbedScenario:
        if self.duration <= 0:
            raise ValueError(f"duration must be > 0 (got {self.duration})")
        names = [v.name for v in self.vms]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"vms: duplicate VM names {dup}")
        known = set(names)
        starting = [v.name for v in self.vms if v.vf]
        if len(starting) > self.link.vf_pool:
            raise ValueError(
                f"vms: {len(starting)} VMs start with a VF but link.vf_pool is {self.link.vf_pool}"
            )
        for i, f in enumerate(self.traffic):
            if f.vm not in known:
                raise ValueError(f"traffic[{i}].vm: unknown VM {f.vm!r}")
            if f.start >= self.duration:
                raise ValueError(
                    f"traffic[{i}].start: {f.start:g} s is not before the end ({self.duration:g} s)"
                )
            if f.stop is not None and f.stop > self.duration:
                raise ValueError(
                    f"traffic[{i}].stop: {f.stop:g} s is after the end ({self.duration:g} s)"
                )
        for vm in self.static_caps:
            if vm not in known:
                raise ValueError(f"static_caps: unknown VM {vm!r}")
        seen: set[str] = set()
        for i, var in enumerate(self.variants):
            if var.name in seen:
                raise ValueError(f"variants[{i}].name: {var.name!r} is used twice")
            seen.add(var.name)
            for vm in list(var.sla) + list(var.static_caps):
                if vm not in known:
                    raise ValueError(f"variants[{i}]: unknown VM {vm!r}")
        for i, ph in enumerate(self.acceptance.vf_holders):
            for vm in ph.vms:
                if vm not in known:
                    raise ValueError(f"acceptance.vf_holders[{i}].vms: unknown VM {vm!r}")
        axis_policies = self.compare.policies
        for field in ("policy", "baseline"):
            p = getattr(self.acceptance, field)
            if (
                self.acceptance.guarantee_held is not None
                or self.acceptance.utilisation_vs_baseline is not None
            ) and p not in axis_policies:
                raise ValueError(
                    f"acceptance.{field}: {p!r} is not among compare.policies {axis_policies}"
                )
        return self

    # ----------------------------------------------------------------- derived

    def runs(self) -> list[RunSpec]:
        """Every (variant, policy) pair, in the order they run."""
        variants: list[VariantSpec | None] = list(self.variants) or [None]
        out = []
        for var in variants:
            for p in self.compare.policies:
                vf, bw = self.controller.vf_policy, self.controller.bandwidth_policy
                if self.compare.axis == "bandwidth":
                    bw = p
                else:
                    vf = p
                label = p if var is None else f"{p}@{var.name}"
                out.append(RunSpec(label, p, vf, bw, var.name if var else ""))
        return out

    def sla_of(self, vm: str, variant: str = "") -> SLASpec:
        for var in self.variants:
            if var.name == variant and vm in var.sla:
                return var.sla[vm]
        return next(v.sla for v in self.vms if v.name == vm)

    def static_caps_for(self, variant: str = "") -> dict[str, float]:
        caps = dict(self.static_caps)
        for var in self.variants:
            if var.name == variant:
                caps.update(var.static_caps)
        return caps

    def model_host(self) -> model.Host:
        nic = model.NIC(
            name="uplink",
            capacity_bps=self.link.capacity,
            vf_pool=self.link.vf_pool,
            tiers_bps=tuple(self.link.tiers),
            caps=model.NICCapabilities(min_rate=self.link.min_rate_supported),
        )
        return model.Host("testbed", os.cpu_count() or 1, _memory_bytes(), nic)

    def model_vms(self, variant: str = "") -> dict[str, model.VM]:
        out = {}
        for seq, v in enumerate(self.vms):
            s = self.sla_of(v.name, variant)
            sla = model.SLA(
                bandwidth=model.ResourceTuple(s.min, s.default, s.max),
                max_pps=s.max_pps,
                priority=s.priority,
                weight=s.weight,
            )
            out[v.name] = model.VM(v.name, v.vcpus, v.memory, sla, created_seq=seq)
        return out

    def offered_bps(self, vm: str, t0: float, t1: float) -> float:
        """Load the scenario offers for ``vm`` over the whole of ``[t0, t1]`` (0 if partly).

        A flow offers its load from ``flow_ramp`` after its start: iperf3's handshake and
        TCP's slow start are not the application's demand.
        """
        total = 0.0
        for f in self.traffic:
            stop = self.duration if f.stop is None else f.stop
            if f.vm == vm and f.start + self.flow_ramp <= t0 + 1e-6 and stop >= t1 - 1e-6:
                total += self.link.capacity if f.rate is None else f.rate
        return min(total, self.link.capacity)


@dataclass(frozen=True)
class RunSpec:
    label: str  # "sova" or "sova@g25": the policy column of the outputs
    policy: str  # the compared policy
    vf_policy: str
    bandwidth_policy: str
    variant: str = ""


def _memory_bytes() -> int:
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 1024 * model.MIB


def _format_errors(err: ValidationError, source: str) -> str:
    lines = [f"{source}: invalid testbed scenario ({err.error_count()} error(s))"]
    for e in err.errors():
        path = ""
        for part in e["loc"]:
            path += f"[{part}]" if isinstance(part, int) else ("." if path else "") + str(part)
        msg = e["msg"].removeprefix("Value error, ")
        value = e.get("input")
        shown = "" if isinstance(value, dict | list) else f" (got {value!r})"
        lines.append(f"  {path}: {msg}{shown}" if path else f"  {msg}")
    return "\n".join(lines)


def parse_testbed_scenario(data: Any, source: str = "<scenario>") -> TestbedScenario:
    if not isinstance(data, dict):
        raise TestbedScenarioError(
            f"{source}: a testbed scenario is a YAML mapping, got {type(data).__name__}"
        )
    try:
        return TestbedScenario.model_validate(data)
    except ValidationError as err:
        raise TestbedScenarioError(_format_errors(err, source)) from None


def load_testbed_scenario(path: str | Path) -> TestbedScenario:
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise TestbedScenarioError(f"{p}: cannot read scenario: {exc.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise TestbedScenarioError(f"{p}: not valid YAML: {exc}") from None
    return parse_testbed_scenario(data, str(p))
