"""Placement rules: where a VM may be sent, checked by the planner and again on approval.

Small named filters behind one interface (the Kubernetes scheduler framework's filter
extension point), built by name from the validated ``[placement]`` configuration:

* ``anti-affinity`` — the VMs named are never on one host: a member is not sent to a host
  holding (or receiving, or still sending) another member;
* ``affinity`` — the VMs named stay together: a member is sent only to the host where every
  other member is (so members sharing a host do not move one by one);
* ``vm-host-must`` — the VMs named are sent only to hosts of ``group``;
* ``vm-host-should`` — the same, but soft: broken only when no host of the group can take
  the VM this round (the planner tries again without it);
* ``migration_domains`` — host groups a VM may move within (CPU model, shared storage): a
  VM is sent only to a host that belongs to exactly the same domains as its source.

A filter refuses a (vm, source, target) triple and says why. The planner turns the refusals
into the VM's barred hosts (:class:`Bars`), the form the cold-spot screening already takes
for the anti-ping-pong rule, so the scalar round and its vectorised copy
(:mod:`sova.manager.decisions.fastplan`) apply the rules identically.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, model_validator

RuleKind = Literal["anti-affinity", "affinity", "vm-host-must", "vm-host-should"]
NAME = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RuleSpec(_Strict):
    """One ``[[placement.rules]]`` entry."""

    name: str = Field(pattern=NAME)
    kind: RuleKind
    vms: list[str] = Field(min_length=1, max_length=10_000)
    group: str | None = Field(default=None, description="vm-host-*: the host group")


class PlacementSpec(_Strict):
    """The manager's ``[placement]``: host groups, rules and migration domains."""

    host_groups: dict[str, list[str]] = Field(default_factory=dict)
    migration_domains: list[str] = Field(
        default_factory=list, description="host groups a VM may move within"
    )
    rules: list[RuleSpec] = Field(default_factory=list)

    @model_validator(mode="after")
    def _references(self) -> PlacementSpec:
        groups = sorted(self.host_groups)
        for d in self.migration_domains:
            if d not in self.host_groups:
                raise ValueError(f"migration_domains: {d!r} is not a host group ({groups})")
        seen: set[str] = set()
        for i, r in enumerate(self.rules):
            where = f"rules[{i}]"
            if r.name in seen:
                raise ValueError(f"{where}.name = {r.name!r}: another rule has this name")
            seen.add(r.name)
            if r.kind in ("vm-host-must", "vm-host-should"):
                if r.group not in self.host_groups:
                    raise ValueError(f"{where}.group = {r.group!r}: not a host group ({groups})")
            elif r.group is not None:
                raise ValueError(f"{where}.group = {r.group!r}: only vm-host-* rules name one")
            elif len(set(r.vms)) < 2:
                raise ValueError(f"{where}.vms = {r.vms!r}: {r.kind} needs two VMs or more")
        return self

    @property
    def empty(self) -> bool:
        return not (self.rules or self.migration_domains)


# --------------------------------------------------------------------------- filters


@dataclass
class View:
    """Where each VM is, as the manager knows it: the hosts that hold it (a VM in flight
    is on its source and its target until its lease ends)."""

    hosts_of: Mapping[str, frozenset[str]]
    # VMs a rule names that no report has ever named (nor a lease moved): their host is
    # unknown, so a hard rule pairing them refuses every move of the others.
    unknown: frozenset[str] = frozenset()

    @classmethod
    def last_known(
        cls,
        located: Mapping[str, frozenset[str]],
        in_flight: Iterable[tuple[str, str, str]],
        members: frozenset[str],
    ) -> View:
        """From each rule member's last known host (the last report naming it, or the
        target of its last completed migration) and the leases (vm, src, dst): a report
        names only a few candidate VMs, so its list alone misses idle members."""
        out: dict[str, set[str]] = {vm: set(h) for vm, h in located.items() if vm in members}
        for vm, src, dst in in_flight:
            if vm in members:
                out.setdefault(vm, set()).update((src, dst))
        return cls({vm: frozenset(h) for vm, h in out.items()}, members - out.keys())

    @classmethod
    def of(
        cls,
        vms_by_host: Mapping[str, Iterable[str]],
        in_flight: Iterable[tuple[str, str, str]] = (),
        only: frozenset[str] | None = None,
    ) -> View:
        """From each host's reported VMs and the leases (vm, src, dst); ``only``: index just
        these VMs (the rules' members), not every VM of the cluster."""
        out: dict[str, set[str]] = {}
        for host, names in vms_by_host.items():
            for vm in names:
                if only is None or vm in only:
                    out.setdefault(vm, set()).add(host)
        for vm, src, dst in in_flight:
            if only is None or vm in only:
                out.setdefault(vm, set()).update((src, dst))
        return cls({vm: frozenset(h) for vm, h in out.items()})

    def where(self, vm: str) -> frozenset[str]:
        return self.hosts_of.get(vm, frozenset())


class Filter(Protocol):
    """A placement rule: why ``vm`` may not go from ``src`` to ``dst`` (None: it may)."""

    @property
    def name(self) -> str: ...
    @property
    def soft(self) -> bool: ...

    def applies(self, vm: str) -> bool: ...
    def refuses(self, vm: str, src: str, dst: str, view: View) -> str | None: ...
    def bars(self, vm: str, src: str, hosts: frozenset[str], view: View) -> frozenset[str]:
        """Exactly the hosts of ``hosts`` that ``refuses`` (``src`` aside), by set
        operations: a round asks this for every hot host's VM over every host."""
        ...


@dataclass(frozen=True)
class AntiAffinity:
    name: str
    vms: frozenset[str]
    soft: bool = False

    def applies(self, vm: str) -> bool:
        return vm in self.vms

    def refuses(self, vm: str, src: str, dst: str, view: View) -> str | None:
        for peer in sorted(self.vms - {vm}):
            if peer in view.unknown:
                return f"anti-affinity rule {self.name}: peer {peer}'s host unknown"
            if dst in view.where(peer):
                return f"anti-affinity rule {self.name}: {peer} is on {dst}"
        return None

    def bars(self, vm: str, src: str, hosts: frozenset[str], view: View) -> frozenset[str]:
        if view.unknown and not view.unknown.isdisjoint(self.vms - {vm}):
            return hosts
        return hosts & frozenset().union(*(view.where(p) for p in self.vms - {vm}))


@dataclass(frozen=True)
class Affinity:
    name: str
    vms: frozenset[str]
    soft: bool = False

    def applies(self, vm: str) -> bool:
        return vm in self.vms

    def refuses(self, vm: str, src: str, dst: str, view: View) -> str | None:
        for peer in sorted(self.vms - {vm}):
            if peer in view.unknown:
                return f"affinity rule {self.name}: peer {peer}'s host unknown"
            where = view.where(peer)
            if where and where != {dst}:
                return f"affinity rule {self.name}: {peer} is on {', '.join(sorted(where))}"
        return None

    def bars(self, vm: str, src: str, hosts: frozenset[str], view: View) -> frozenset[str]:
        # Allowed: the one host every located member is on (none if they are apart, or
        # if a member was never located).
        if view.unknown and not view.unknown.isdisjoint(self.vms - {vm}):
            return hosts
        located = [w for w in (view.where(p) for p in self.vms - {vm}) if w]
        if not located:
            return frozenset()
        first = located[0]
        if len(first) == 1 and all(w == first for w in located):
            return hosts - first
        return hosts


@dataclass(frozen=True)
class HostGroup:
    name: str
    vms: frozenset[str]
    group: str
    hosts: frozenset[str]
    soft: bool = False

    def applies(self, vm: str) -> bool:
        return vm in self.vms

    def refuses(self, vm: str, src: str, dst: str, view: View) -> str | None:
        if dst in self.hosts:
            return None
        word = "should" if self.soft else "must"
        return f"vm-host-{word} rule {self.name}: {dst} is not in host group {self.group}"

    def bars(self, vm: str, src: str, hosts: frozenset[str], view: View) -> frozenset[str]:
        return hosts - self.hosts


@dataclass(frozen=True)
class MigrationDomains:
    """Every VM: only between hosts of exactly the same domains."""

    domains: Mapping[str, frozenset[str]]  # domain -> its hosts
    name: str = "migration_domains"
    soft: bool = False

    def member_of(self, host: str) -> frozenset[str]:
        return frozenset(d for d, hosts in self.domains.items() if host in hosts)

    def bars(self, vm: str, src: str, hosts: frozenset[str], view: View) -> frozenset[str]:
        mine = self.member_of(src)
        # Hosts sharing ``src``'s domains: in all of them, and in no other.
        same = frozenset(hosts).intersection(*(self.domains[d] for d in mine)) if mine else hosts
        for d, members in self.domains.items():
            if d not in mine:
                same = same - members
        return hosts - same

    def applies(self, vm: str) -> bool:
        return True

    def refuses(self, vm: str, src: str, dst: str, view: View) -> str | None:
        a, b = self.member_of(src), self.member_of(dst)
        if a == b:
            return None
        return (
            f"migration domains: {src} is in {', '.join(sorted(a)) or 'none'}, "
            f"{dst} in {', '.join(sorted(b)) or 'none'}"
        )


FilterFactory = Callable[[RuleSpec, PlacementSpec], Filter]

# kind -> factory (the registry the validated configuration is built through)
FILTERS: Mapping[str, FilterFactory] = {
    "anti-affinity": lambda r, _: AntiAffinity(r.name, frozenset(r.vms)),
    "affinity": lambda r, _: Affinity(r.name, frozenset(r.vms)),
    "vm-host-must": lambda r, s: HostGroup(
        r.name, frozenset(r.vms), str(r.group), frozenset(s.host_groups[str(r.group)])
    ),
    "vm-host-should": lambda r, s: HostGroup(
        r.name, frozenset(r.vms), str(r.group), frozenset(s.host_groups[str(r.group)]), True
    ),
}


@dataclass
class Placement:
    """The filters a configuration describes, and the VMs they name."""

    filters: tuple[Filter, ...] = ()
    members: frozenset[str] = frozenset()  # VMs named by a rule
    every_vm: bool = False  # a filter (migration domains) applies to every VM

    @classmethod
    def from_spec(cls, spec: PlacementSpec) -> Placement:
        filters: list[Filter] = [FILTERS[r.kind](r, spec) for r in spec.rules]
        if spec.migration_domains:
            filters.append(
                MigrationDomains(
                    {d: frozenset(spec.host_groups[d]) for d in spec.migration_domains}
                )
            )
        members = frozenset(vm for r in spec.rules for vm in r.vms)
        return cls(tuple(filters), members, bool(spec.migration_domains))

    @property
    def active(self) -> bool:
        return bool(self.filters)

    def refusal(self, vm: str, src: str, dst: str, view: View, *, soft: bool = True) -> str | None:
        """Why ``vm`` may not move ``src`` -> ``dst`` (the first rule refusing), or None;
        ``soft=False`` checks the hard rules only (an approval: a should-rule was broken
        only because no host of its group could take the VM)."""
        for f in self.filters:
            if (soft or not f.soft) and f.applies(vm):
                why = f.refuses(vm, src, dst, view)
                if why is not None:
                    return why
        return None


@dataclass
class Bars(Mapping[str, frozenset[str]]):
    """VM -> hosts it may not be sent to this round: the anti-ping-pong hosts (``tabu``)
    and, computed when the planner first asks about a VM, the hosts a placement rule
    refuses. ``soft=False`` leaves the should-rules out (the planner's second try)."""

    placement: Placement
    view: View
    source_of: Callable[[str], str | None]  # where the VM is reported
    hosts: Collection[str]  # every host of the round
    tabu: Mapping[str, Iterable[str]] = field(default_factory=dict)
    soft: bool = True
    _cache: dict[str, frozenset[str]] = field(default_factory=dict)
    _hosts: frozenset[str] | None = None

    def __getitem__(self, vm: str) -> frozenset[str]:
        got = self._cache.get(vm)
        if got is None:
            got = frozenset(self.tabu.get(vm, ())) | self.by_rules(vm)
            self._cache[vm] = got
        return got

    def by_rules(self, vm: str) -> frozenset[str]:
        src = self.source_of(vm)
        if src is None or not (self.placement.every_vm or vm in self.placement.members):
            return frozenset()
        if self._hosts is None:
            self._hosts = frozenset(self.hosts)
        out: frozenset[str] = frozenset()
        for f in self.placement.filters:
            if (self.soft or not f.soft) and f.applies(vm):
                out = out | f.bars(vm, src, self._hosts, self.view)
        return out - {src}

    def __iter__(self) -> Iterator[str]:
        return iter(self.tabu)

    def __len__(self) -> int:
        return len(self.tabu)

    def __bool__(self) -> bool:
        # Rule bars are computed on demand, so an empty tabu is no "no bars": the
        # screening's ``barred or {}`` must keep this mapping.
        return True
