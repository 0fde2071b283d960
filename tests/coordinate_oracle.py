"""The cold-spot screening and Alg. 2's round as they read before the compiled core ran
the screening for every hot host at once (issue 36), the oracle tests/test_screening_core.py
holds ``coordinate``, the manager's round and ``choose_target`` to, decision for decision
and reason for reason.

``screen_targets`` walks the hosts ranked by (hotness, name) over numpy arrays once per
mover of every hot host (a round cost hot hosts x hosts); ``coordinate`` serves the hot
hosts hottest first through ``_Round``, each target taken for the rest of the round. The
hotness here is the readable one (tests/hotness_oracle.py).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from tests.hotness_oracle import hotness

from sova.policy.cold_spots import REFUSALS_LISTED
from sova.policy.hotspot import (
    PAPERS_MOVE,
    RESOURCES,
    HostCapacity,
    HostReport,
    HotnessMetric,
    HotspotDetector,
    HotspotVerdict,
    MigrationSignal,
    MoveCost,
    Mover,
    Utilisation,
    VMLoad,
    migration_factor,
)


def rank_movers(
    vms: Mapping[str, VMLoad],
    verdict: HotspotVerdict,
    now: Utilisation,
    cost: MoveCost = PAPERS_MOVE,
    metric: HotnessMetric | str = HotnessMetric.VOLUME,
) -> tuple[list[Mover], list[str]]:
    """The VMs whose move relieves the hot host's overload, best first, and why the others
    were not candidates (docs/design.md#relief).

    Best first: a VM that carries some of the net heat before one whose copy would load a
    hot link while relieving only another resource (that one only if nothing else helps);
    then the largest net benefit (relief counted over the horizon minus the cost); then the
    papers' migration factor; ties by name, so the choice never flips between equal VMs.

    The readable form, a VM at a time, that ``sova.policy.hotspot._Ranking`` (every hot
    host's VMs at once, over arrays) must equal mover for mover and refusal for refusal.
    """
    hot = {r.resource: r for r in verdict.resources if r.hot}
    index = {r: i for i, r in enumerate(RESOURCES)}
    current = now.as_tuple()
    excess = {r: max(current[index[r]], v.forecast) - verdict.alpha for r, v in hot.items()}
    # the hot resources with an overload, with their column: the same for every VM
    over = [(r, index[r], e) for r, e in excess.items() if e > 0.0]
    keyed: list[tuple[tuple[bool, float, float, str], Mover]] = []
    refused: list[str] = []
    for name, vm in vms.items():
        if vm.migrating:
            continue
        share = vm.util.as_tuple()
        relief_of = {r: min(1.0, share[i] / e) for r, i, e in over}
        relief = max(relief_of.values(), default=0.0)
        if relief <= 0.0 or relief < cost.min_relief:
            worst = max(hot, key=lambda r: (relief_of.get(r, 0.0), r), default="")
            refused.append(
                f"{name}: carries {share[index[worst]] if worst else 0.0:.4f} of "
                f"{worst or 'no hot resource'} (removes {relief:.0%} of the overload, "
                f"< {cost.min_relief:.0%})"
            )
            continue
        cost_s = cost.seconds(vm)
        gain = relief * cost.horizon_s - cost_s
        if cost.horizon_s > 0.0 and gain < 0.0:
            refused.append(
                f"{name}: relief {relief:.0%} x {cost.horizon_s:g}s < cost {cost_s:.1f}s"
            )
            continue
        # The papers' rule (min_relief 0) has no such preference: MF alone orders.
        hot_link = (
            cost.min_relief > 0.0 and "net" in hot and relief_of.get("net", 0.0) < cost.min_relief
        )
        mover = Mover(name, relief, cost_s, hot_link)
        key = (
            hot_link,
            -gain if cost.horizon_s > 0.0 else 0.0,
            -migration_factor(vm, metric),
            name,
        )
        keyed.append((key, mover))
    keyed.sort(key=lambda km: km[0])
    return [m for _, m in keyed], refused


def _share_on(
    vm: VMLoad,
    src: str,
    dst: str,
    capacities: Mapping[str, HostCapacity] | None,
) -> tuple[float, float, float]:
    if capacities is None:
        return vm.util.as_tuple()
    for host in (src, dst):
        if host not in capacities:
            raise ValueError(f"capacities has no entry for host {host!r}")
    src_cap, dst_cap = capacities[src].as_tuple(), capacities[dst].as_tuple()
    share = vm.util.as_tuple()
    return (
        share[0] * src_cap[0] / dst_cap[0],
        share[1] * src_cap[1] / dst_cap[1],
        share[2] * src_cap[2] / dst_cap[2],
    )


def why_unfit(
    host: Utilisation,
    name: str,
    src: str,
    vm: VMLoad,
    alpha: float,
    limit: float,
    capacities: Mapping[str, HostCapacity] | None,
) -> str | None:
    """Why ``name`` cannot take ``vm`` from ``src`` (busy now, or too full after), or None."""
    now = host.as_tuple()
    busy = [r for r, x in zip(RESOURCES, now, strict=True) if x >= alpha]
    if busy:
        return f"{name}: {', '.join(busy)} already at/over {alpha:g}"
    after = [a + b for a, b in zip(now, _share_on(vm, src, name, capacities), strict=True)]
    full = [
        f"{r} {x:.3f}->{y:.3f}" for r, x, y in zip(RESOURCES, now, after, strict=True) if y >= limit
    ]
    if full:
        return f"{name}: would reach {', '.join(full)} >= {limit:g}"
    return None


def _refusal(verdict: HotspotVerdict, why: str, vm: str | None = None) -> MigrationSignal:
    return MigrationSignal(False, None, f"{verdict.reason}; {why}", vm, verdict.hot_resources)


class RankedHosts:
    """Every observed host by (hotness, name), once a round, as arrays: what the cold-spot
    screening walks for each hot host (issue 36: that walk in Python made a round cost hot
    hosts x hosts; over arrays each hot host costs one pass in numpy)."""

    def __init__(
        self,
        ranked: Sequence[tuple[float, str]],
        hosts: Mapping[str, Utilisation],
        alpha: float,
        capacities: Mapping[str, HostCapacity] | None,
    ) -> None:
        self.names = [name for _, name in ranked]
        self.pos = {name: i for i, name in enumerate(self.names)}
        self.now = np.array([hosts[n].as_tuple() for n in self.names], dtype=np.float64).reshape(
            -1, 3
        )
        now = self.now
        self.busy = (now[:, 0] >= alpha) | (now[:, 1] >= alpha) | (now[:, 2] >= alpha)
        self.caps = (
            None
            if capacities is None
            else np.array([capacities[n].as_tuple() for n in self.names], dtype=np.float64).reshape(
                -1, 3
            )
        )
        self.blocked = np.zeros(len(self.names), dtype=bool)  # hosts taken this round

    def block(self, names: Collection[str]) -> None:
        at = [self.pos[n] for n in names if n in self.pos]
        self.blocked[at] = True


def screen_targets(
    hosts: Mapping[str, Utilisation],
    src: str,
    vm: VMLoad,
    alpha: float,
    taken: Collection[str],
    metric: HotnessMetric | str,
    ceiling: float | None,
    capacities: Mapping[str, HostCapacity] | None,
    ranked: RankedHosts | None = None,
    barred: Collection[str] = (),
) -> tuple[str | None, list[str]]:
    """The chosen cold spot and, for logging, why the less-hot candidates before it were
    refused (the first :data:`REFUSALS_LISTED`, then a count).

    The candidates are ``hosts`` by (hotness, name) without ``src``, ``taken`` and
    ``barred``; the first that passes :func:`why_unfit` is chosen. ``ranked`` is that ranking
    as arrays when the caller already has it, with ``taken`` already blocked in it:
    :func:`coordinate` ranks once per round instead of once per hot host.
    """
    if not (math.isfinite(alpha) and 0.0 < alpha <= 1.0):
        raise ValueError(f"alpha must be a utilisation in (0, 1], got {alpha!r}")
    limit = alpha if ceiling is None else ceiling
    if not (math.isfinite(limit) and limit > 0.0):
        raise ValueError(f"ceiling must be finite and > 0, got {ceiling!r}")
    if ranked is None:
        if capacities is not None:
            for host in (src, *hosts):
                if host not in capacities:
                    raise ValueError(f"capacities has no entry for host {host!r}")
        order = sorted((hotness(u, metric), name) for name, u in hosts.items())
        ranked = RankedHosts(order, hosts, alpha, capacities)
        ranked.block(taken)
    open_ = ~ranked.blocked
    for name in (src, *barred):
        i = ranked.pos.get(name)
        if i is not None:
            open_[i] = False
    share = np.array(vm.util.as_tuple(), dtype=np.float64)
    if ranked.caps is not None and capacities is not None:
        # _share_on's arithmetic, per target: share * cap_src / cap_dst
        add = share * np.array(capacities[src].as_tuple()) / ranked.caps
    else:
        add = np.broadcast_to(share, ranked.now.shape)
    after = ranked.now + add
    # three column tests, not .any(axis=1): a reduction over a length-3 axis is ~10x slower
    full = (after[:, 0] >= limit) | (after[:, 1] >= limit) | (after[:, 2] >= limit)
    fits = open_ & ~ranked.busy & ~full
    hit = np.flatnonzero(fits)
    stop = int(hit[0]) if len(hit) else len(ranked.names)
    tried = np.flatnonzero(open_[:stop])
    refused: list[str] = []
    for i in tried[:REFUSALS_LISTED].tolist():
        name = ranked.names[i]
        why = why_unfit(hosts[name], name, src, vm, alpha, limit, capacities)
        refused.append(why or f"{name}: refused")
    if len(tried) > REFUSALS_LISTED:
        refused.append(f"{len(tried) - REFUSALS_LISTED} more host(s) refused")
    return (ranked.names[stop] if len(hit) else None), refused


def coordinate(
    reports: Mapping[str, HostReport],
    detector: HotspotDetector,
    *,
    metric: HotnessMetric | str = HotnessMetric.VOLUME,
    ceiling: float | None = None,
    leased: Collection[str] = frozenset(),
    barred: Mapping[str, Collection[str]] | None = None,
    fenced: Mapping[str, str] | None = None,
    cost: MoveCost = PAPERS_MOVE,
    prefer: Mapping[str, tuple[str, str]] | None = None,
) -> dict[str, MigrationSignal]:
    """One round of Sova Alg. 2: a signal for every reported host.

    Hot hosts are served hottest first (ties by name), so the worst hotspot gets the first
    pick of the cold spots. Each gets at most one migration: of the first VM, in
    :func:`rank_movers`' order (at most ``cost.tries`` of them), that relieves its overload
    and has a cold spot; or a refusal saying why none does. A host flagged hot never
    receives, so a target can never be a source in the same round. A target is taken for the
    rest of the round. Leased hosts (already sending or receiving) are neither source nor
    target. Hosts without observations cannot be targets because their load is unknown.
    ``barred`` maps a VM to hosts it may not be sent to (the manager's anti-ping-pong rule:
    a VM does not go back to a host it left recently); default none. ``fenced`` maps a host
    an operator took out of play (maintenance) to why: like a leased host it is neither
    source nor target, and a hot one says why it was skipped. ``prefer`` maps a source to
    the move (VM, target) it was last proposed: kept while that VM still relieves it and the
    target still fits, so near-equal targets do not make a plan flip between rounds
    (docs/design.md#plan-stability).
    """
    fenced = fenced or {}
    verdicts = {name: detector.assess(rep.history) for name, rep in reports.items()}
    hot = {name for name, v in verdicts.items() if v.hot}
    signals: dict[str, MigrationSignal] = {}
    for name in sorted(reports):
        if name not in hot:
            signals[name] = MigrationSignal(False, None, verdicts[name].reason)
    current = {name: rep.history[-1] for name, rep in reports.items() if rep.history}
    rnd = _Round(
        current,
        taken=set(hot) | set(leased) | set(fenced),
        alpha=detector.alpha,
        ceiling=ceiling,
        metric=metric,
        capacities=_capacities(reports),
        barred=barred or {},
    )
    for name in sorted(hot, key=lambda h: (-hotness(current[h], metric), h)):
        verdict = verdicts[name]
        if name in fenced:
            signals[name] = _refusal(verdict, f"skipped: {fenced[name]}")
            continue
        if name in leased:
            signals[name] = _refusal(verdict, "skipped: a migration of this host is in progress")
            continue
        vms = reports[name].vms
        movers, unhelpful = rank_movers(vms, verdict, current[name], cost, metric)
        if not movers:
            why = "no VM to move (none reported with load on a hot resource)"
            if unhelpful and cost != PAPERS_MOVE:
                why = "no VM whose move relieves the overload (" + "; ".join(unhelpful[:4]) + ")"
            signals[name] = _refusal(verdict, why)
            continue
        tries = movers[: cost.tries]
        was = (prefer or {}).get(name)
        kept = None if was is None else rnd.keep(name, verdict, tries, vms, was)
        if kept is None:
            kept = rnd.place(name, verdict, tries, vms, cost.horizon_s)
        signals[name] = kept
    return dict(sorted(signals.items()))


def _capacities(reports: Mapping[str, HostReport]) -> dict[str, HostCapacity] | None:
    """Every host's capacity, or None when no report gives one (hosts taken as identical)."""
    capacities = {name: rep.capacity for name, rep in reports.items() if rep.capacity is not None}
    if capacities and len(capacities) != len(reports):
        missing = sorted(set(reports) - set(capacities))
        raise ValueError(f"capacity given for some hosts but not for {missing}")
    return capacities or None


@dataclass
class _Round:
    """What one :func:`coordinate` round knows while it serves the hot hosts in turn: the
    hosts' current loads, the hosts taken (hot, leased, fenced, or already a target), and
    the screening's settings."""

    current: Mapping[str, Utilisation]
    taken: set[str]
    alpha: float
    ceiling: float | None
    metric: HotnessMetric | str
    capacities: Mapping[str, HostCapacity] | None
    barred: Mapping[str, Collection[str]]
    # All hosts by (hotness, name) as arrays, built at the first screening of the round.
    ranked: RankedHosts | None = None

    def _take(self, target: str) -> None:
        self.taken.add(target)
        if self.ranked is not None:
            self.ranked.block((target,))

    def keep(
        self,
        name: str,
        verdict: HotspotVerdict,
        tries: Sequence[Mover],
        vms: Mapping[str, VMLoad],
        was: tuple[str, str],
    ) -> MigrationSignal | None:
        """The move proposed for ``name`` last time, if its VM still relieves the host and
        its target still fits (docs/design.md#plan-stability); else None."""
        kept_vm, kept_dst = was
        limit = self.alpha if self.ceiling is None else self.ceiling
        if not (
            any(m.vm == kept_vm for m in tries)
            and kept_dst in self.current
            and kept_dst != name
            and kept_dst not in self.taken
            and kept_dst not in self.barred.get(kept_vm, ())
            and why_unfit(
                self.current[kept_dst],
                kept_dst,
                name,
                vms[kept_vm],
                self.alpha,
                limit,
                self.capacities,
            )
            is None
        ):
            return None
        self._take(kept_dst)
        return MigrationSignal(
            True,
            kept_dst,
            f"{verdict.reason}; move {kept_vm} to {kept_dst} (as proposed before)",
            kept_vm,
            verdict.hot_resources,
        )

    def place(
        self,
        name: str,
        verdict: HotspotVerdict,
        tries: Sequence[Mover],
        vms: Mapping[str, VMLoad],
        horizon_s: float,
    ) -> MigrationSignal:
        """The first of ``tries`` with a cold spot, moved there; or a refusal naming why
        each found none."""
        if self.ranked is None:
            self.ranked = RankedHosts(
                sorted((hotness(u, self.metric), h) for h, u in self.current.items()),
                self.current,
                self.alpha,
                self.capacities,
            )
            self.ranked.block(self.taken)
        tried: list[str] = []
        for mover in tries:
            target, refused = screen_targets(
                self.current,
                name,
                vms[mover.vm],
                self.alpha,
                self.taken,
                self.metric,
                self.ceiling,
                self.capacities,
                self.ranked,
                self.barred.get(mover.vm, ()),
            )
            if target is not None:
                self._take(target)
                relief = (
                    "" if horizon_s <= 0.0 else f" (removes {mover.relief:.0%} of the overload)"
                )
                if mover.crosses_hot_link:
                    relief += "; it carries none of the net heat, but no VM that does can go"
                return MigrationSignal(
                    True,
                    target,
                    f"{verdict.reason}; move {mover.vm} to {target}{relief}",
                    mover.vm,
                    verdict.hot_resources,
                )
            detail = "; ".join(refused) if refused else "no other host available"
            tried.append(f"{mover.vm} ({detail})")
        return _refusal(verdict, "no cold spot for " + "; for ".join(tried), tries[0].vm)


def choose_target(
    hosts: Mapping[str, Utilisation],
    src: str,
    vm: VMLoad,
    alpha: float,
    taken: Collection[str] = frozenset(),
    *,
    metric: HotnessMetric | str = HotnessMetric.VOLUME,
    ceiling: float | None = None,
    capacities: Mapping[str, HostCapacity] | None = None,
) -> tuple[str | None, list[str]]:
    return screen_targets(hosts, src, vm, alpha, taken, metric, ceiling, capacities)
