"""The hosts of a written scenario: from options, or an inventory file that names each host's
NIC, VF pool, cores and memory (docs/operations.md#replay-your-cluster).

An inventory is YAML::

    defaults: {vf_pool: 2, nic_capacity: 25Gbit}
    hosts:
      - {name: hv1, instance: "10.0.0.11:9177", vf_pool: 4}
      - {name: hv2}

``instance`` is the host's label value in Prometheus when it differs from ``name`` (the
capture otherwise takes the label's host part). A host listed with no VM stays in the
scenario as room for migrations.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from sova.traces.replay import HostPlan, TraceError
from sova.units import Rate, Size


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class HostDefaults(_Strict):
    vf_pool: int = Field(default=2, ge=0, le=4096)
    nic_capacity: Rate = Field(default=10e9, gt=0)
    nic: str = "pf0"
    cores: int = Field(default=64, gt=0, le=4096)
    memory: Size = Field(default=512 * 2**30, gt=0)


class InventoryHost(_Strict):
    name: str = Field(min_length=1)
    instance: str | None = None
    vf_pool: int | None = Field(default=None, ge=0, le=4096)
    nic_capacity: Rate | None = Field(default=None, gt=0)
    nic: str | None = None
    cores: int | None = Field(default=None, gt=0, le=4096)
    memory: Size | None = Field(default=None, gt=0)


class Inventory(_Strict):
    defaults: HostDefaults = Field(default_factory=HostDefaults)
    hosts: list[InventoryHost] = Field(default_factory=list)

    def plan(self, name: str) -> HostPlan:
        """The host called ``name`` (listed or not) with its own values over the defaults."""
        d = self.defaults
        h = next((x for x in self.hosts if x.name == name), InventoryHost(name=name))
        return HostPlan(
            name=name,
            cores=h.cores or d.cores,
            memory=h.memory or d.memory,
            capacity=h.nic_capacity or d.nic_capacity,
            vf_pool=d.vf_pool if h.vf_pool is None else h.vf_pool,
            nic=h.nic or d.nic,
        )

    def name_of(self, instance: str) -> str:
        """The inventory's name for a label value (itself when no host claims it)."""
        for h in self.hosts:
            if h.instance == instance:
                return h.name
        return instance


def load_inventory(path: Path | None, defaults: dict[str, Any]) -> Inventory:
    """The inventory at ``path`` (or none); ``defaults`` given as options (not None) replace
    its defaults, a host's own values replace both."""
    data: Any = {}
    if path is not None:
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        except (OSError, UnicodeDecodeError) as exc:
            raise TraceError(f"{path}: cannot read the inventory: {exc}") from None
        except yaml.YAMLError as exc:
            raise TraceError(f"{path}: not YAML: {str(exc).splitlines()[0]}") from None
        if not isinstance(data, dict):
            raise TraceError(f"{path}: an inventory is a mapping with 'hosts' (and 'defaults')")
    given = {k: v for k, v in defaults.items() if v is not None}
    merged = {**(data.get("defaults") or {}), **given}
    try:
        inv = Inventory.model_validate({**data, "defaults": merged})
    except ValidationError as err:
        e = err.errors()[0]
        where = ".".join(str(p) for p in e["loc"])
        raise TraceError(
            f"{path or 'options'}: {where}: {e['msg']} (got {e.get('input')!r})"
        ) from None
    names = [h.name for h in inv.hosts]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise TraceError(f"{path}: hosts: {dup[0]!r} is listed twice")
    return inv
