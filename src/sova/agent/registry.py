"""The plug-in points: VF policies and bandwidth allocators by name (drivers use the same
:class:`~sova.plugins.Registry`, see :mod:`sova.manager.daemons.drivers`; so do the manager's
planning stages, :mod:`sova.manager.decisions.pipeline`).

As in the Kubernetes scheduler framework, each extension point is a small named registry:

* a plug-in is registered once under its name; a second registration of the name is an
  error naming both (nothing is silently replaced);
* out-of-tree plug-ins come from installed packages' entry points (groups
  ``sova.vf_policies``, ``sova.allocators``, ``sova.drivers``), loaded the first time the
  registry is read; a test or a site package may also call :func:`register_vf_policy` /
  :func:`register_allocator` before the configuration is validated;
* a plug-in declares what it needs (a VF policy its ``uses_manager`` / ``grants_vfs``; an
  allocator :class:`AllocatorPlugin`'s fields) instead of being recognised by its class.

Configuration fields are validated against these registries when they are parsed
(:mod:`sova.agent.config`), so a misspelt name is an error naming the field and the
value, never a silent default.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sova.agent.vf_policies import DsrIov, MigrationOnly, NoVF, Sova, StaticSriov, VFPolicy
from sova.plugins import Registry, RegistryError
from sova.policy.bandwidth import (
    BandwidthAllocator,
    DaqsController,
    DbaVmAllocator,
    EqualShareAllocator,
    SovaAllocator,
    StaticAllocator,
)

__all__ = [
    "ALLOCATORS",
    "NO_BANDWIDTH_POLICY",
    "VF_POLICIES",
    "AllocatorPlugin",
    "Registry",
    "RegistryError",
    "allocator_plugin",
    "check_bandwidth_policy",
    "check_vf_policy",
    "make_allocator",
    "register_allocator",
    "register_vf_policy",
    "vf_policy",
]

# --------------------------------------------------------------------------- VF policies


def _vf_policy(name: str, obj: Any) -> type[VFPolicy]:
    if not (isinstance(obj, type) and issubclass(obj, VFPolicy)):
        raise RegistryError(f"VF policy {name!r}: {obj!r} is not a VFPolicy subclass")
    if obj.name != name:
        raise RegistryError(f"VF policy {name!r}: the class calls itself {obj.name!r}")
    return obj


VF_POLICIES: Registry[type[VFPolicy]] = Registry("VF policy", "sova.vf_policies", _vf_policy)
for _p in (NoVF, StaticSriov, DsrIov, Sova, MigrationOnly):
    VF_POLICIES.register(_p.name, _p)


def register_vf_policy(policy: type[VFPolicy]) -> type[VFPolicy]:
    """Add a VF policy under its ``name`` (usable as a class decorator)."""
    return VF_POLICIES.register(policy.name, _vf_policy(policy.name, policy))


def check_vf_policy(name: str) -> str:
    return VF_POLICIES.check(name)


def vf_policy(name: str) -> type[VFPolicy]:
    return VF_POLICIES[check_vf_policy(name)]


# --------------------------------------------------------------------------- allocators

# The bandwidth policy that runs no allocator (no bandwidth loop at all).
NO_BANDWIDTH_POLICY = "none"


@dataclass(frozen=True)
class AllocatorPlugin:
    """A bandwidth allocator and what it declares it needs from the agent."""

    factory: Callable[..., BandwidthAllocator]
    # built as ``factory(static_caps)`` from the controller's ``static_caps``, else ``factory()``
    needs_static_caps: bool = False
    # Its allocations are fair shares of what was measured, not caps: the agent spreads the
    # capacity nobody was allocated over them, so a bursty VM is not held at its mean rate
    # while the link idles (the published baselines keep their own caps). Being shares of
    # demand, they also get a congested guarantee's minimum as its demand
    # (docs/design.md#guarantees); the baselines read raw rates.
    spread_spare: bool = False

    def build(self, static_caps: Mapping[str, float]) -> BandwidthAllocator:
        return self.factory(static_caps) if self.needs_static_caps else self.factory()


def _allocator(name: str, obj: Any) -> AllocatorPlugin:
    if isinstance(obj, AllocatorPlugin):
        return obj
    if callable(obj):
        return AllocatorPlugin(obj)
    raise RegistryError(f"allocator {name!r}: {obj!r} is neither an AllocatorPlugin nor callable")


ALLOCATORS: Registry[AllocatorPlugin] = Registry("allocator", "sova.allocators", _allocator)
ALLOCATORS.register(EqualShareAllocator.name, AllocatorPlugin(EqualShareAllocator))
ALLOCATORS.register(StaticAllocator.name, AllocatorPlugin(StaticAllocator, needs_static_caps=True))
ALLOCATORS.register(DbaVmAllocator.name, AllocatorPlugin(DbaVmAllocator))
ALLOCATORS.register(DaqsController.name, AllocatorPlugin(DaqsController))
ALLOCATORS.register(SovaAllocator.name, AllocatorPlugin(SovaAllocator, spread_spare=True))


def register_allocator(
    name: str,
    factory: Callable[..., BandwidthAllocator],
    *,
    needs_static_caps: bool = False,
    spread_spare: bool = False,
) -> Callable[..., BandwidthAllocator]:
    """Add a bandwidth allocator under ``name``, declaring what it needs (see
    :class:`AllocatorPlugin`)."""
    if name == NO_BANDWIDTH_POLICY:
        raise RegistryError(f"{name!r} is reserved for 'no bandwidth policy'")
    ALLOCATORS.register(name, AllocatorPlugin(factory, needs_static_caps, spread_spare))
    return factory


def check_bandwidth_policy(name: str) -> str:
    if name != NO_BANDWIDTH_POLICY and name not in ALLOCATORS:
        known = ", ".join([NO_BANDWIDTH_POLICY, *ALLOCATORS])
        raise ValueError(f"unknown bandwidth policy {name!r}; choose from {known}")
    return name


def allocator_plugin(name: str) -> AllocatorPlugin | None:
    """The allocator registered as ``name``; None for ``"none"``."""
    if check_bandwidth_policy(name) == NO_BANDWIDTH_POLICY:
        return None
    return ALLOCATORS[name]


def make_allocator(name: str, static_caps: Mapping[str, float]) -> BandwidthAllocator | None:
    plugin = allocator_plugin(name)
    return None if plugin is None else plugin.build(static_caps)
