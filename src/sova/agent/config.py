"""The controller's configuration: one schema for every world.

The same model is the ``controller:`` section of a scenario (``sova simulate``, ``sova
demo``), the ``[controller]`` table of the agent's TOML (``sova agent``) and, with three
extra fields, the ``controller:`` of a testbed scenario; :class:`~sova.agent.loop.HostAgent`
takes it as it is. Policy names are checked against the registries
(:mod:`sova.agent.registry`) when the file is parsed, so a policy registered by a plug-in
is accepted everywhere at once and a misspelt one is refused with the field and the value.
Every parameter, its default and where it comes from is in docs/design.md#parameters.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

from sova.agent.registry import check_bandwidth_policy, check_vf_policy
from sova.policy.vfsched import VFSchedulerConfig
from sova.units import Duration, Fraction, Rate

__all__ = [
    "CONFIG_PROTOCOL",
    "SETTINGS_SINCE",
    "ControllerConfig",
    "ManagerSpec",
    "SchedulerSpec",
    "SensingSpec",
    "settings_for_protocol",
]

# The wire protocol (sova.manager.daemons.schema.PROTOCOL) each setting newer than the unversioned
# 0.1 agent arrived with. An agent's schema is strict, so a world that serves a controller
# configuration to an agent of an older release leaves these out instead of having it refuse
# the whole configuration (a rolling upgrade: agents are upgraded in batches). A new setting
# goes here with the protocol of its release; tests/test_agent_config_protocol.py holds the
# table against the schema.
# This release's protocol, the same number as sova.manager.daemons.schema.PROTOCOL (a daemon module
# the agent layer does not import; the test holds the two equal).
CONFIG_PROTOCOL = 3
SETTINGS_SINCE: dict[tuple[str, str], int] = {
    ("manager", "lease_timeout"): 2,
    ("manager", "min_relief"): 3,
    ("manager", "move_copy_rate"): 3,
    ("manager", "move_downtime"): 3,
    ("manager", "relief_horizon"): 3,
    ("scheduler", "benefit_margin"): 3,
    ("scheduler", "cost_benefit"): 3,
    ("scheduler", "horizon"): 3,
    ("scheduler", "hotplug_blip"): 3,
    ("scheduler", "top_senders"): 3,
    ("scheduler", "virtio_lossless"): 3,
    ("sensing", "censor_margin"): 3,
    ("sensing", "cpu_saturation"): 3,
    ("sensing", "hotspot_on_demand"): 3,
}


def settings_for_protocol(cfg: dict[str, Any], protocol: int) -> tuple[dict[str, Any], list[str]]:
    """A controller configuration (as JSON) without the settings an agent speaking
    ``protocol`` does not know; returns it and the dotted names it left out (for the log)."""
    out = {k: (dict(v) if isinstance(v, dict) else v) for k, v in cfg.items()}
    dropped: list[str] = []
    for (section, name), since in SETTINGS_SINCE.items():
        if since > protocol and name in out.get(section, {}):
            del out[section][name]
            dropped.append(f"{section}.{name}")
    return out, sorted(dropped)


class _Strict(BaseModel):
    # inf and nan pass every ge/le bound and then hang or crash a control loop.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class SchedulerSpec(_Strict):
    """The VF scheduler (docs/design.md#vf-scheduling)."""

    io_filter: Literal["threshold", "top-q"] = "threshold"
    io_threshold: float = 65.0
    top_q: int = Field(default=0, ge=0)
    io_metric: Literal["io_degree", "if"] = "io_degree"
    net_metric: Literal["net_degree", "nf"] = "net_degree"
    tolerance: float = Field(default=0.10, ge=0)
    hysteresis: float = Field(default=0.05, ge=0)
    min_dwell: Duration = 30.0
    # docs/design.md#vf-cost-benefit (the sova policy; dsr-iov runs the papers' scheduler)
    top_senders: bool = True
    cost_benefit: bool = True
    # virtio's per-VM ceiling (docs/design.md#useless-move); in a simulated world the
    # profile's, unless the scenario sets it (sova.sim.world.agent_config)
    virtio_lossless: Rate = 100e6
    hotplug_blip: Duration = 2.0
    horizon: Duration = Field(default=60.0, gt=0)
    benefit_margin: float = Field(default=1.0, ge=0)

    def to_config(self) -> VFSchedulerConfig:
        return VFSchedulerConfig(
            io_filter=self.io_filter,
            io_threshold=self.io_threshold,
            top_q=self.top_q,
            io_metric=self.io_metric,
            net_metric=self.net_metric,
            tolerance=self.tolerance,
            hysteresis=self.hysteresis,
            min_dwell_s=self.min_dwell,
            top_senders=self.top_senders,
            cost_benefit=self.cost_benefit,
            virtio_lossless=self.virtio_lossless,
            hotplug_blip=self.hotplug_blip,
            horizon=self.horizon,
            benefit_margin=self.benefit_margin,
        )


class SensingSpec(_Strict):
    """Sensing windows (docs/design.md#sensing)."""

    window: int = Field(default=6, ge=1, le=1000)
    epsilon: Fraction = 0.7
    traffic_threshold: Rate = 10_000.0
    # Censored demand (docs/design.md#censored-demand): a period at >= (1 - censor_margin)
    # of the VM's path ceiling, or on virtio with vCPU use >= cpu_saturation, was held back.
    censor_margin: Fraction = 0.10
    cpu_saturation: Fraction = 0.95
    # The loads reported to the manager count censored VMs' unmet demand
    # (docs/design.md#demand-hotspots); false = what got through, as the papers measure.
    hotspot_on_demand: bool = True


def _seconds(name: str) -> AliasChoices:
    """A duration field also accepted as ``<name>_s`` (the manager daemon's spelling before
    the two schemas were one; docs/operations.md shows both)."""
    return AliasChoices(name, f"{name}_s")


class ManagerSpec(_Strict):
    """Hotspot detection and planning (docs/design.md#hotspots; Sova's own: 3 of 5).

    The one manager schema: a scenario's ``controller.manager`` and, with the daemon-only
    fields on top (:class:`sova.manager.daemons.config.PlannerSettings`), the manager daemon's
    ``[planner]``; ``ManagerCore.from_spec`` builds the decision core from either. The agent
    reads ``metric`` (which VM to move), ``n`` (load reports kept) and
    ``migration_bandwidth``; the rest configures the manager.
    """

    alpha: float = Field(default=0.75, gt=0, le=1)
    k: int = Field(default=3, ge=1, le=100)
    n: int = Field(default=5, ge=1, le=100)
    metric: Literal["volume", "skewness"] = "volume"
    # Limit on the target after receiving the VM; null = alpha, 1.0 = "it fits": a target
    # above 1 would be over its capacity (docs/design.md#cold-spot).
    ceiling: float | None = Field(default=None, gt=0, le=1)
    migration_bandwidth: Rate | None = None
    # A migration's lease holds its source and target until the source reports its end or
    # this passes (docs/design.md#leases); longer than controller.migration_timeout, which
    # bounds the migration itself.
    lease_timeout: Duration = Field(default=900.0, gt=0, validation_alias=_seconds("lease_timeout"))
    # Anti-thrash, on by default (docs/design.md#anti-thrash; sova.manager.decisions.core.ManagerCore).
    # After a migration, restart the source's and target's windows (drop the reports that
    # describe the old placement and the copy traffic). Off = judge the raw last n reports.
    restart_window_after_migration: bool = True
    # Anti-ping-pong: a VM is not sent back to a host it left less than this long ago (0 = off).
    return_tabu: Duration = Field(default=900.0, validation_alias=_seconds("return_tabu"))
    # Cluster-wide limits (0 = none): migrations in flight at once, started per hour, and
    # how long a VM stays put after it was sent somewhere.
    max_concurrent_migrations: int = Field(default=4, ge=0, le=10_000)
    max_migrations_per_hour: int = Field(default=30, ge=0, le=1_000_000)
    vm_cooldown: Duration = Field(default=300.0, validation_alias=_seconds("vm_cooldown"))
    # Migrations that remove the cause (docs/design.md#relief): a mover must remove at
    # least min_relief of its host's overload on a hot resource, and that relief counted
    # over relief_horizon must beat its cost, its memory copied at move_copy_rate plus
    # move_downtime (relief_horizon 0 = no cost check; both 0 = the papers' rule).
    min_relief: Fraction = 0.25
    relief_horizon: Duration = Field(default=600.0, ge=0)
    move_copy_rate: Rate = Field(default=1e9, gt=0)
    move_downtime: Duration = Field(default=0.5, ge=0)

    @model_validator(mode="before")
    @classmethod
    def _one_spelling(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for name in ("lease_timeout", "return_tabu", "vm_cooldown"):
                if name in data and f"{name}_s" in data:
                    raise ValueError(f"give {name} or {name}_s (the same setting), not both")
        return data

    @model_validator(mode="after")
    def _k_le_n(self) -> ManagerSpec:
        if self.k > self.n:
            raise ValueError(f"k ({self.k}) must be <= n ({self.n})")
        return self


# The papers' manager: Alg. 2 over the raw last n reports, no anti-thrash rule or limit
# (e.g. for a harness that models only that; scenarios get the defaults above).
PAPERS_MANAGER: dict[str, bool | float] = {
    "restart_window_after_migration": False,
    "return_tabu": 0.0,
    "max_concurrent_migrations": 0,
    "max_migrations_per_hour": 0,
    "vm_cooldown": 0.0,
    "min_relief": 0.0,
    "relief_horizon": 0.0,
}


class ControllerConfig(_Strict):
    """One host agent's control loops (and, in a simulated world, its manager)."""

    period: Duration = 10.0
    vf_policy: str = "dsr-iov"
    bandwidth_policy: str = "none"
    bandwidth_period: Duration = 1.0
    # A VM sending at >= (1 - probe) of its cap may want more: ask for (1 + probe) x.
    probe: Fraction = 0.10
    static_caps: dict[str, Rate] = Field(default_factory=dict)
    scheduler: SchedulerSpec = Field(default_factory=SchedulerSpec)
    sensing: SensingSpec = Field(default_factory=SensingSpec)
    manager: ManagerSpec = Field(default_factory=ManagerSpec)
    max_ops_per_period: int = Field(default=4, ge=1, le=1000)
    op_timeout: Duration = 30.0
    migration_timeout: Duration = 600.0
    max_retries: int = Field(default=3, ge=0, le=100)
    # static-sriov only: VMs boot with their VFs (a hostdev in the domain XML) instead of
    # having them hot-plugged at the first period, so a run has no virtio warm-up.
    boot_vfs: bool = False

    @field_validator("vf_policy")
    @classmethod
    def _vf_policy(cls, v: str) -> str:
        return check_vf_policy(v)

    @field_validator("bandwidth_policy")
    @classmethod
    def _bandwidth_policy(cls, v: str) -> str:
        return check_bandwidth_policy(v)

    @field_validator("period", "bandwidth_period", "op_timeout", "migration_timeout")
    @classmethod
    def _positive(cls, v: float) -> float:
        if v <= 0:
            raise ValueError("must be > 0")
        return v

    def for_policy(
        self, vf_policy: str, bandwidth_policy: str, static_caps: dict[str, float] | None = None
    ) -> ControllerConfig:
        """This configuration with one compared policy's VF and bandwidth policies."""
        return self.model_copy(
            update={
                "vf_policy": check_vf_policy(vf_policy),
                "bandwidth_policy": check_bandwidth_policy(bandwidth_policy),
                "static_caps": {**self.static_caps, **(static_caps or {})},
            }
        )
