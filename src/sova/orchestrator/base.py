"""The orchestrator seam: one small interface for *performing* actions, two implementations.

The agent keeps talking to one :class:`~sova.driver.base.Driver`. With an orchestrator, that
driver is an :class:`OrchestratedDriver`: sensing (``now``, ``capabilities``, ``sample``) still
comes from the host driver, because only the host can count a VM's packets, while ``submit``
and ``poll`` go to an :class:`Actuator`, and ``inventory`` is the host's view reconciled with
the orchestrator's (the orchestrator owns which VM runs where and which holds a VF port).
Nothing in the policy core, the planner or the executor changes: they still see one driver
whose operations complete later, succeed or fail, and are bounded by the executor's deadline.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, model_validator

from sova.driver.base import Capabilities, Driver, OpStatus
from sova.model import Action, HostSample, Inventory

if TYPE_CHECKING:
    from sova.orchestrator.openstack import OpenStackActuator

OrchestratorName = Literal["libvirt", "openstack"]


class CloudConfigError(ValueError):
    """The cloud cannot be used as configured (missing SDK, unknown clouds.yaml entry)."""


@runtime_checkable
class Actuator(Protocol):
    """Performs actions the agent decided; every call bounded in time, none blocking on an op."""

    name: str

    def submit(self, action: Action) -> str:
        """Start ``action``; return an operation id at once."""
        ...

    def poll(self, op_id: str) -> OpStatus: ...

    def reconcile(self, sensed: Inventory) -> Inventory:
        """The host's sensed inventory corrected by what the orchestrator knows."""
        ...


@dataclass
class OrchestratedDriver:
    """A :class:`Driver` that senses through ``host`` and acts through ``actuator``."""

    host: Driver
    actuator: Actuator

    def now(self) -> float:
        return self.host.now()

    def capabilities(self) -> Capabilities:
        return self.host.capabilities()

    def sample(self) -> HostSample:
        return self.host.sample()

    def inventory(self) -> Inventory:
        return self.actuator.reconcile(self.host.inventory())

    def submit(self, action: Action) -> str:
        return self.actuator.submit(action)

    def poll(self, op_id: str) -> OpStatus:
        return self.actuator.poll(op_id)


# --------------------------------------------------------------------------- settings


class OpenStackOptions(BaseModel):
    """Details of the ``openstack`` orchestrator; every field has a working default."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    network: str | None = Field(
        default=None,
        description="network (name or id) for the VF ports; default: the VM's first port's",
    )
    vf_resource_class: str | None = Field(
        default=None,
        pattern=r"^[A-Z0-9_]+$",
        description="Placement resource class counting this host's VFs (e.g. CUSTOM_SRIOV_VF)",
    )
    api_timeout_s: float = Field(default=30.0, gt=0, le=600)
    migration_timeout_s: float = Field(default=600.0, gt=0, le=86400)
    detach_timeout_s: float = Field(default=60.0, gt=0, le=3600)


class OrchestratorSettings(BaseModel):
    """Fields shared by the agent's and the manager's settings (mixed into both)."""

    orchestrator: OrchestratorName = Field(
        default="libvirt", description="who performs migrations and VF changes"
    )
    cloud: str | None = Field(
        default=None, description="clouds.yaml entry (orchestrator = 'openstack')"
    )
    openstack: OpenStackOptions = Field(default_factory=OpenStackOptions)

    @model_validator(mode="after")
    def _cloud_for_openstack(self) -> OrchestratorSettings:
        if self.orchestrator == "openstack" and not (self.cloud and self.cloud.strip()):
            raise ValueError(
                "cloud: required when orchestrator = 'openstack' (the clouds.yaml entry to use)"
            )
        if self.orchestrator != "openstack" and self.cloud is not None:
            raise ValueError(
                f"cloud = {self.cloud!r}: only used with orchestrator = 'openstack' "
                f"(orchestrator is {self.orchestrator!r})"
            )
        return self


def orchestrate(driver: Driver, settings: OrchestratorSettings, host: str | None = None) -> Driver:
    """The driver the agent should use: ``driver`` itself, or ``driver`` acting through OpenStack.

    ``host`` is this hypervisor's name as Nova knows it (default: the driver's). Raises
    :class:`CloudConfigError` when the cloud cannot be reached or
    the clouds.yaml entry does not exist, so the daemon stops with one line instead of
    running half-configured.
    """
    if settings.orchestrator == "libvirt":
        return driver
    actuator = openstack_actuator(settings, host or driver.capabilities().host, driver)
    return OrchestratedDriver(driver, actuator)


def openstack_actuator(
    settings: OrchestratorSettings, host: str, fallback: Driver | None = None
) -> OpenStackActuator:
    from sova.orchestrator.openstack import OpenStackActuator, connect

    assert settings.cloud is not None  # validated
    opts = settings.openstack
    return OpenStackActuator(
        connect(settings.cloud, opts.api_timeout_s),
        host,
        network=opts.network,
        vf_resource_class=opts.vf_resource_class,
        migration_timeout_s=opts.migration_timeout_s,
        detach_timeout_s=opts.detach_timeout_s,
        fallback=fallback,
    )
