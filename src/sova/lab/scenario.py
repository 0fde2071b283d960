"""Lab scenarios (scenarios/lab/*.yaml): phases of guest loads and what must hold in each."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from sova.agent.config import ControllerConfig, SchedulerSpec, SensingSpec
from sova.lab.settings import LAB_HOTPLUG, lab_hotplug_budget_s
from sova.units import Duration

#: what a guest runs in a phase: iperf3 to the peer, stress-ng on its vCPU, both, nothing
Load = Literal["net", "cpu", "net+cpu", "idle"]
Experiment = Literal["vf-scheduling", "hotspot-migration", "guarantee"]
#: guarantee: how a phase's limits reach the guests (none = no bandwidth controller)
Enforcement = Literal["none", "guest-side", "host-side"]


class LabScenarioError(ValueError):
    """One line naming the field and the value."""


class Phase(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    duration_s: float = Field(gt=0, le=3600)
    loads: dict[str, Load]
    expect_holders: list[str] = Field(default_factory=list)
    # guarantee: "guest-side" = the bandwidth controller's limits as HTB inside the guests,
    # set through the guest agent (guest-exec, exit status checked); "host-side" = HTB on
    # the guests' taps, no guest agent; "none" = no controller (the baseline)
    guarantee: Enforcement | None = None


def _lab_scheduler() -> SchedulerSpec:
    # Under TCG a network-heavy guest burns its vCPU emulating virtio, so an io_degree
    # threshold filters every guest out; top-q ranks them all by net_degree instead.
    # The lab's guests send tens of Mbit/s: the tier tests the plugs, not whether each pays
    # (docs/design.md#vf-cost-benefit).
    return SchedulerSpec(io_filter="top-q", min_dwell=0.0, cost_benefit=False)


class LabController(ControllerConfig):
    """The controller schema of every world (:class:`sova.agent.config.ControllerConfig`)
    with the lab's defaults: short periods and windows (a phase lasts a minute), a longer
    operation timeout (hot-plug under software emulation takes seconds)."""

    period: Duration = 5.0
    op_timeout: Duration = 60.0
    sensing: SensingSpec = Field(default_factory=lambda: SensingSpec(window=2))
    scheduler: SchedulerSpec = Field(default_factory=_lab_scheduler)

    @model_validator(mode="after")
    def _lab(self) -> LabController:
        return self

    @model_validator(mode="after")
    def _op_timeout_covers_a_plug(self) -> LabController:
        budget = lab_hotplug_budget_s()
        if self.op_timeout < budget:
            raise ValueError(
                f"op_timeout: {self.op_timeout:g}s is shorter than the lab driver's worst-case "
                f"plug ({LAB_HOTPLUG['hotplug_timeout_s']:g}s x hotplug_attempts "
                f"{LAB_HOTPLUG['hotplug_attempts']} + back-off = {budget:g}s)"
            )
        return self


class LabChecks(BaseModel):
    model_config = ConfigDict(extra="forbid")
    max_ping_gap_s: float = Field(default=1.0, gt=0)
    settle_s: float = Field(
        default=25.0, ge=0
    )  # holders are checked this long after a phase starts


class LabHosts(BaseModel):
    """What each lab hypervisor reports as its size (``host_cpus``/``host_memory_mib`` of
    its driver, ``host_totals = "domains"``): both daemons share this machine, so each
    reports its own domains' load over this capacity (docs/lab.md#host-totals)."""

    model_config = ConfigDict(extra="forbid")
    cpus: int = Field(default=2, ge=1, le=64)
    memory_mib: int = Field(default=2048, ge=256, le=1 << 20)


class MigrationChecks(BaseModel):
    """hotspot-migration: what the run must show."""

    model_config = ConfigDict(extra="forbid")
    migrations: int = Field(default=1, ge=0)  # exactly this many
    max_downtime_ms: float = Field(default=5000.0, gt=0)
    max_migration_ping_gap_s: float = Field(default=5.0, gt=0)
    fast_path_on_target: bool = True  # the migrated guest holds a fast path on its target


class GuaranteeSpec(BaseModel):
    """guarantee: the shared bottleneck and the minimums declared for guests."""

    model_config = ConfigDict(extra="forbid")
    # the peer link every guest sends through, shaped on the host (HTB both ways)
    link_mbit: float = Field(default=50.0, gt=0, le=10_000)
    # what the bandwidth policy divides; default 90 % of the link: as an operator sets a
    # NIC's capacity to what it delivers, so that limits adding up to it leave the link
    # itself uncongested (a full shared queue would let the many-stream guest win anyway)
    capacity_mbit: float | None = Field(default=None, gt=0, le=10_000)
    # guest -> its minimum, declared in its domain's <metadata> (sova:sla min_bps)
    min_mbit: dict[str, float] = Field(default_factory=dict)
    tolerance: float = Field(default=0.1, ge=0, lt=1)  # held = mean >= (1 - tolerance) x min
    settle_s: float = Field(default=15.0, ge=0)  # a phase's first seconds are not judged

    @property
    def capacity(self) -> float:
        return self.capacity_mbit if self.capacity_mbit is not None else 0.9 * self.link_mbit


class LabScenario(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    description: str = ""
    experiment: Experiment = "vf-scheduling"
    guests: int = Field(default=4, ge=1, le=8)
    fast_slots: int = Field(default=2, ge=1, le=8)
    tier_mbit: float = Field(default=300.0, gt=0)
    slow_mbit: float = Field(default=100.0, gt=0)
    net_mbit: float = Field(default=60.0, gt=0)  # what a "net" guest's iperf3 offers
    # parallel TCP streams of a guest's iperf3 (default 1): an aggressive neighbour
    net_streams: dict[str, int] = Field(default_factory=dict)
    ping_interval_s: float = Field(default=0.1, ge=0.01)
    controller: LabController = Field(default_factory=LabController)
    checks: LabChecks = Field(default_factory=LabChecks)
    phases: list[Phase] = Field(min_length=1)
    # hotspot-migration: the hypervisors' declared size, the manager's planning period, and
    # what must hold; the detector (alpha, k of n, ceiling) is controller.manager, as in
    # every world's scenario.
    hosts: LabHosts = Field(default_factory=LabHosts)
    plan_period_s: float = Field(default=5.0, gt=0, le=600)
    migration: MigrationChecks = Field(default_factory=MigrationChecks)
    guarantee: GuaranteeSpec = Field(default_factory=GuaranteeSpec)

    @model_validator(mode="after")
    def _manager_only_where_one_runs(self) -> LabScenario:
        if self.experiment != "hotspot-migration" and "manager" in self.controller.model_fields_set:
            raise ValueError(
                f"controller.manager: only hotspot-migration runs a manager "
                f"(experiment is {self.experiment!r})"
            )
        if (
            self.experiment != "guarantee"
            and "bandwidth_policy" in self.controller.model_fields_set
        ):
            raise ValueError(
                f"controller.bandwidth_policy: only guarantee runs a bandwidth controller "
                f"(experiment is {self.experiment!r})"
            )
        if self.experiment == "guarantee":
            for i, ph in enumerate(self.phases):
                if ph.guarantee is None:
                    raise ValueError(
                        f"phases.{i}.guarantee: a guarantee phase says how limits are enforced "
                        "(none, guest-side or host-side)"
                    )
            for g in self.guarantee.min_mbit:
                if g not in {f"g{n}" for n in range(1, self.guests + 1)}:
                    raise ValueError(f"guarantee.min_mbit: guest {g!r} does not exist")
        return self

    @model_validator(mode="after")
    def _guests_named(self) -> LabScenario:
        names = {f"g{n}" for n in range(1, self.guests + 1)}
        for i, ph in enumerate(self.phases):
            for g in [*ph.loads, *ph.expect_holders]:
                if g not in names:
                    raise ValueError(
                        f"phases.{i}: guest {g!r} does not exist (guests: {', '.join(sorted(names))})"
                    )
            if len(ph.expect_holders) > self.fast_slots:
                raise ValueError(
                    f"phases.{i}.expect_holders: {len(ph.expect_holders)} holders "
                    f"but fast_slots is {self.fast_slots}"
                )
        return self

    @property
    def duration_s(self) -> float:
        return sum(p.duration_s for p in self.phases)


def load_lab_scenario(path: Path) -> LabScenario:
    try:
        raw = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as e:
        raise LabScenarioError(f"{path}: cannot read: {e}") from None
    try:
        return LabScenario.model_validate(raw)
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "(top level)"
        value = err.get("input")
        shown = "" if isinstance(value, dict | list) else f" (got {value!r})"
        raise LabScenarioError(f"{path}: {where}: {err['msg']}{shown}") from None
