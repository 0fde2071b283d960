"""Settings served by protocol: an agent of an older release is given a controller
configuration without the settings it would refuse (rolling upgrades)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from sova.agent.config import (
    CONFIG_PROTOCOL,
    SETTINGS_SINCE,
    ControllerConfig,
    settings_for_protocol,
)
from sova.manager.daemons.schema import PROTOCOL

# The sections whose settings the table names.
SECTIONS = ("scheduler", "sensing", "manager")


def _leaves(model: type[BaseModel]) -> set[tuple[str, str]]:
    return {
        (section, name)
        for section in SECTIONS
        for name in model.model_fields[section].annotation.model_fields  # type: ignore[union-attr]
    }


def test_the_table_speaks_this_releases_protocol() -> None:
    assert CONFIG_PROTOCOL == PROTOCOL
    assert all(1 <= v <= PROTOCOL for v in SETTINGS_SINCE.values())
    assert set(SETTINGS_SINCE) <= _leaves(ControllerConfig)


def test_an_unversioned_agent_is_served_only_what_it_knows() -> None:
    full: dict[str, Any] = {
        "vf_policy": "sova",
        "scheduler": {"min_dwell": 0.0, "virtio_lossless": 1e9, "cost_benefit": False},
        "manager": {"alpha": 0.6, "lease_timeout": 30.0, "min_relief": 0.1},
    }
    old, dropped = settings_for_protocol(full, 0)
    assert old == {"vf_policy": "sova", "scheduler": {"min_dwell": 0.0}, "manager": {"alpha": 0.6}}
    assert dropped == [
        "manager.lease_timeout",
        "manager.min_relief",
        "scheduler.cost_benefit",
        "scheduler.virtio_lossless",
    ]
    # protocol 2 knew the lease timeout, not the cost-benefit settings
    two, _ = settings_for_protocol(full, 2)
    assert two["manager"] == {"alpha": 0.6, "lease_timeout": 30.0}
    # this release is served everything, and the input is left as it was
    assert settings_for_protocol(full, PROTOCOL) == (full, [])
    assert full["scheduler"]["virtio_lossless"] == 1e9
    ControllerConfig.model_validate(full)
