"""The registries of pluggable policies: VF policies and bandwidth allocators, by name.

Adding one is a new module with its class and one line here; a test or a site-specific
package may also call :func:`register_vf_policy` / :func:`register_allocator` before the
configuration is validated. Configuration fields are validated against these registries
when they are parsed (:mod:`sova.agent.config`), so a misspelt name is an error naming
the field and the value, never a silent default.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from sova.agent.vf_policies import DsrIov, MigrationOnly, NoVF, Sova, StaticSriov, VFPolicy
from sova.policy.bandwidth import ALLOCATORS, BandwidthAllocator

__all__ = [
    "ALLOCATORS",
    "NO_BANDWIDTH_POLICY",
    "VF_POLICIES",
    "check_bandwidth_policy",
    "check_vf_policy",
    "make_allocator",
    "register_allocator",
    "register_vf_policy",
    "vf_policy",
]

VF_POLICIES: dict[str, type[VFPolicy]] = {
    p.name: p for p in (NoVF, StaticSriov, DsrIov, Sova, MigrationOnly)
}

# The bandwidth policy that runs no allocator (no bandwidth loop at all).
NO_BANDWIDTH_POLICY = "none"


def register_vf_policy(policy: type[VFPolicy]) -> type[VFPolicy]:
    """Add a VF policy under its ``name`` (usable as a class decorator)."""
    VF_POLICIES[policy.name] = policy
    return policy


def register_allocator(
    name: str, factory: Callable[..., BandwidthAllocator]
) -> Callable[..., BandwidthAllocator]:
    """Add a bandwidth allocator; ``factory()`` (or ``factory(static_caps)`` if it declares
    ``uses_static_caps``) builds one."""
    if name == NO_BANDWIDTH_POLICY:
        raise ValueError(f"{name!r} is reserved for 'no bandwidth policy'")
    ALLOCATORS[name] = factory
    return factory


def check_vf_policy(name: str) -> str:
    if name not in VF_POLICIES:
        raise ValueError(f"unknown VF policy {name!r}; choose from {', '.join(VF_POLICIES)}")
    return name


def check_bandwidth_policy(name: str) -> str:
    if name != NO_BANDWIDTH_POLICY and name not in ALLOCATORS:
        known = ", ".join([NO_BANDWIDTH_POLICY, *ALLOCATORS])
        raise ValueError(f"unknown bandwidth policy {name!r}; choose from {known}")
    return name


def vf_policy(name: str) -> type[VFPolicy]:
    return VF_POLICIES[check_vf_policy(name)]


def make_allocator(name: str, static_caps: Mapping[str, float]) -> BandwidthAllocator | None:
    if check_bandwidth_policy(name) == NO_BANDWIDTH_POLICY:
        return None
    factory = ALLOCATORS[name]
    if getattr(factory, "uses_static_caps", False):
        return factory(static_caps)
    return factory()
