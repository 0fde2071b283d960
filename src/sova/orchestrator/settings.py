"""Settings of the orchestrator seam, shared by ``sova agent`` and ``sova manager``.

``orchestrator = "openstack"`` plus ``cloud = "<clouds.yaml entry>"`` (and an optional
``[openstack]`` section) in either daemon's TOML file. Kept apart from :mod:`.base` so that
the actuators themselves need no pydantic (the OpenStack tier's environments lack it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from sova.driver.base import Driver
from sova.orchestrator.base import OrchestratedDriver

if TYPE_CHECKING:
    from sova.orchestrator.openstack import OpenStackActuator

OrchestratorName = Literal["libvirt", "openstack"]


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
    abort_timeout_s: float = Field(
        default=60.0,
        gt=0,
        le=3600,
        description="after aborting a timed-out migration, how long Nova has to confirm it",
    )
    detach_timeout_s: float = Field(default=60.0, gt=0, le=3600)
    refresh_s: float = Field(
        default=180.0,
        ge=0,
        le=86400,
        description="seconds between two changes-since looks at Nova when the host senses no "
        "change (0: list servers and ports at every inventory, no cache)",
    )
    resync_s: float = Field(
        default=900.0,
        gt=0,
        le=86400,
        description="seconds between two full listings of the host's servers and ports, "
        "which heal changes the change-based looks missed; also the leaked-port sweep's",
    )

    @model_validator(mode="after")
    def _resync_after_refresh(self) -> OpenStackOptions:
        if self.refresh_s > self.resync_s:
            raise ValueError(
                f"openstack.refresh_s = {self.refresh_s:g}: above resync_s = "
                f"{self.resync_s:g} (a full listing every resync_s makes a slower refresh moot)"
            )
        return self


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
    from sova.orchestrator.openstack_view import CloudView

    assert settings.cloud is not None  # validated
    opts = settings.openstack
    conn = connect(settings.cloud, opts.api_timeout_s)
    view = None
    if opts.refresh_s > 0:
        view = CloudView(conn, host, refresh_s=opts.refresh_s, resync_s=opts.resync_s)
    return OpenStackActuator(
        conn,
        host,
        view=view,
        network=opts.network,
        vf_resource_class=opts.vf_resource_class,
        migration_timeout_s=opts.migration_timeout_s,
        abort_timeout_s=opts.abort_timeout_s,
        detach_timeout_s=opts.detach_timeout_s,
        fallback=fallback,
    )
