"""Cold-spot screening (Sova Alg. 2 lines 7-10, docs/design.md#cold-spot): which host may
receive a VM leaving a hot one, and why each less-hot host before it may not.

Apart from :mod:`sova.policy.hotspot`, which detects the hot hosts and plans the round,
because the screening is asked on its own too: by an operator's proposed move (the
manager's desk) and by a drain, each for one VM and one source.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from sova.policy import _core
from sova.policy.hotness import (
    RESOURCES,
    FloatArray,
    HostCapacity,
    HotnessMetric,
    Utilisation,
    VMLoad,
    hotness_rows,
)

# A refusal lists the first few hosts it tried and counts the rest: on a fleet where a sixth of
# the hosts stay hot with no target, listing every refused host made each decision as long as
# the fleet (issue 36).
REFUSALS_LISTED: Final = 8


class RankedHosts:
    """Every observed host by (hotness, name), once a round, as arrays: what the cold-spot
    screening walks for every hot host at once (:func:`screen_round`). ``taken`` marks the
    hosts that may not receive this round (hot, leased, fenced, already a target)."""

    def __init__(
        self,
        names: Sequence[str],
        rows: FloatArray,
        metric: HotnessMetric | str,
        alpha: float,
        capacities: Mapping[str, HostCapacity] | None,
    ) -> None:
        rows = np.asarray(rows, dtype=np.float64).reshape(-1, 3)
        heat_a = hotness_rows(rows, metric)
        # by (hotness, name): one sort of arrays, not a key tuple per host
        order = np.lexsort((np.array(names, dtype=str), heat_a)).tolist() if len(names) else []
        heat = heat_a.tolist()
        self.names = [names[i] for i in order]
        self.heat = {names[i]: heat[i] for i in order}  # for the order of the hot hosts
        self.pos = {name: i for i, name in enumerate(self.names)}
        self.now = np.ascontiguousarray(rows[order])
        self.alpha = alpha
        self.capacities = capacities
        self.caps = (
            None
            if capacities is None
            else np.array([capacities[n].as_tuple() for n in self.names], dtype=np.float64).reshape(
                -1, 3
            )
        )
        self.taken = np.zeros(len(self.names), dtype=bool)

    @classmethod
    def of(
        cls,
        hosts: Mapping[str, Utilisation],
        metric: HotnessMetric | str,
        alpha: float,
        capacities: Mapping[str, HostCapacity] | None,
    ) -> RankedHosts:
        rows = np.array([u.as_tuple() for u in hosts.values()], dtype=np.float64)
        return cls(list(hosts), rows, metric, alpha, capacities)

    def take(self, names: Collection[str]) -> None:
        at = [self.pos[n] for n in names if n in self.pos]
        self.taken[at] = True

    def utilisation(self, name: str) -> Utilisation:
        return Utilisation(*self.now[self.pos[name]].tolist())


@dataclass(frozen=True)
class ScreenQuery:
    """One source's request: its VMs to try in turn (each with the hosts it may not go
    to), and last round's proposal (a VM among them and its target) to keep if it fits."""

    src: str
    vms: Sequence[tuple[str, VMLoad, Collection[str]]]
    keep: tuple[str, str] | None = None


@dataclass(frozen=True)
class Screened:
    """What a query got: the VM moved and its target (both None: refused), whether it was
    last round's proposal, and when refused, for each VM why each host was refused."""

    vm: str | None
    target: str | None
    kept: bool
    refused: dict[str, list[str]]


def screen_round(
    ranked: RankedHosts, queries: Sequence[ScreenQuery], ceiling: float | None
) -> list[Screened]:
    """Every query in turn, each target taken for the ones after it (and marked in
    ``ranked``). One call of the compiled core (rust/sova-core/src/coldspots.rs) for the
    round, so a round costs about hosts, not hot hosts x hosts (issue 36)."""
    alpha = ranked.alpha
    if not (math.isfinite(alpha) and 0.0 < alpha <= 1.0):
        raise ValueError(f"alpha must be a utilisation in (0, 1], got {alpha!r}")
    limit = alpha if ceiling is None else ceiling
    if not (math.isfinite(limit) and limit > 0.0):
        raise ValueError(f"ceiling must be finite and > 0, got {ceiling!r}")
    pos, caps = ranked.pos, ranked.capacities
    src: list[int] = []
    first: list[int] = []
    end: list[int] = []
    keep_mover: list[int] = []
    keep_dst: list[int] = []
    shares: list[tuple[float, float, float]] = []
    barred_start, barred = [0], []
    src_caps: list[tuple[float, float, float]] = []
    for q in queries:
        src.append(pos.get(q.src, -1))
        first.append(len(shares))
        kept_vm, kept_dst = q.keep or (None, None)
        k = next((i for i, (vm, _, _) in enumerate(q.vms) if vm == kept_vm), None)
        ok = k is not None and kept_dst in pos
        keep_mover.append(len(shares) + k if ok and k is not None else -1)
        keep_dst.append(pos[kept_dst] if ok and kept_dst is not None else -1)
        for _, load, bar in q.vms:
            shares.append(load.util.as_tuple())
            barred.extend(sorted({pos[h] for h in bar if h in pos}))
            barred_start.append(len(barred))
        end.append(len(shares))
        if caps is not None:
            if q.src not in caps:
                raise ValueError(f"capacities has no entry for host {q.src!r}")
            src_caps.append(caps[q.src].as_tuple())

    def ints(x: list[int]) -> npt.NDArray[np.int64]:
        return np.array(x, dtype=np.int64)

    target, mover, kept, tried, listed, after, why = _core.screen_round(
        ranked.now.ravel(),
        None if ranked.caps is None else ranked.caps.ravel(),
        None if caps is None else np.array(src_caps, dtype=np.float64).ravel(),
        alpha,
        limit,
        ranked.taken,
        ints(src),
        ints(first),
        ints(end),
        ints(keep_mover),
        ints(keep_dst),
        np.array(shares, dtype=np.float64).reshape(-1),
        ints(barred_start),
        ints(barred),
    )
    ranked.taken[target[target >= 0]] = True
    return _screened(
        ranked, queries, first, end, limit, target, mover, kept, tried, listed, after, why
    )


def _screened(
    ranked: RankedHosts,
    queries: Sequence[ScreenQuery],
    first: list[int],
    end: list[int],
    limit: float,
    *core: npt.NDArray[Any],
) -> list[Screened]:
    """What :func:`screen_round`'s queries got, from the core's arrays."""
    target, mover, kept, tried, listed, after, why = core
    names, alpha = ranked.names, ranked.alpha
    # Each array read into Python once for the round, not once per VM tried (a hot fleet
    # refuses most of its hot hosts every round), and flat: numbers, not a list per row,
    # which the collector would count and walk (the daemon's heap is not all frozen).
    target_l, mover_l, kept_l = target.tolist(), mover.tolist(), kept.tolist()
    tried_l = tried.tolist()
    listed_f, why_f, after_f = listed.ravel().tolist(), why.ravel().tolist(), after.ravel().tolist()
    # The listed hosts (a few of the fleet, the coldest heading every refusal) with their
    # text that does not depend on the VM, formatted once a round: a hot fleet with no fit
    # refuses most of its hot hosts every round, 8 hosts listed for each.
    heads: dict[int, tuple[str, list[str]]] = {}
    out = []
    # Alike VMs get the same reason from the same host: each formatted once a round.
    said: dict[tuple[int, int, tuple[float, ...]], str] = {}
    for qi, q in enumerate(queries):
        m = mover_l[qi]
        if m >= 0:
            out.append(Screened(q.vms[m - first[qi]][0], names[target_l[qi]], bool(kept_l[qi]), {}))
            continue
        refused = {}
        for (vm, _, _), row in zip(q.vms, range(first[qi], end[qi]), strict=True):
            reasons = []
            b, e = row * REFUSALS_LISTED, (row + 1) * REFUSALS_LISTED
            it = iter(after_f[3 * b : 3 * e])
            triples = zip(it, it, it, strict=False)
            for i, w, a in zip(listed_f[b:e], why_f[b:e], triples, strict=True):
                if i < 0:
                    break
                key = (i, w, a)
                text = said.get(key)
                if text is None:
                    head = heads.get(i)
                    if head is None:
                        head = heads[i] = _unfit_head(names[i], ranked.now[i].tolist())
                    text = said[key] = _unfit(head, a, w, alpha, limit)
                reasons.append(text)
            if tried_l[row] > REFUSALS_LISTED:
                reasons.append(f"{tried_l[row] - REFUSALS_LISTED} more host(s) refused")
            refused[vm] = reasons
        out.append(Screened(None, None, False, refused))
    return out


# For each value of the core's refusal bits, the resources already busy (bits 0-2) and the
# indices of those that would be full (bits 3-5): read, not recomputed, for every refusal.
_BUSY: Final = tuple(
    ", ".join(r for i, r in enumerate(RESOURCES) if why & (1 << i)) for why in range(1 << 6)
)
_FULL: Final = tuple(
    tuple(i for i in range(len(RESOURCES)) if why & (1 << (len(RESOURCES) + i)))
    for why in range(1 << 6)
)


def _unfit_head(name: str, now: Sequence[float]) -> tuple[str, list[str]]:
    """What :func:`_unfit` says of host ``name`` whatever the VM: its name and, per
    resource, its load now."""
    return name, [f"{r} {now[i]:.3f}->" for i, r in enumerate(RESOURCES)]


def _unfit(
    head: tuple[str, list[str]], after: Sequence[float], why: int, alpha: float, limit: float
) -> str:
    """Why a host (``head``: :func:`_unfit_head`) could not take a VM, as the core found
    it: ``why``'s bit ``r`` says resource ``r`` is at or over ``alpha`` now, bit ``3 + r``
    that it would reach ``limit`` (``after`` its loads with the VM)."""
    name, now = head
    bits = why & ((1 << 6) - 1)
    busy = _BUSY[bits]
    if busy:
        return f"{name}: {busy} already at/over {alpha:g}"
    full = ", ".join([f"{now[i]}{after[i]:.3f}" for i in _FULL[bits]])
    return f"{name}: would reach {full} >= {limit:g}"


def screen_targets(
    hosts: Mapping[str, Utilisation],
    src: str,
    vm: VMLoad,
    alpha: float,
    taken: Collection[str],
    metric: HotnessMetric | str,
    ceiling: float | None,
    capacities: Mapping[str, HostCapacity] | None,
    barred: Collection[str] = (),
) -> tuple[str | None, list[str]]:
    """The chosen cold spot or, when there is none, why the candidates were refused (the
    first :data:`REFUSALS_LISTED`, then a count).

    The candidates are ``hosts`` by (hotness, name) without ``src``, ``taken`` and
    ``barred``; the first not busy and not full after the move is chosen: :func:`screen_round`
    with one query of one VM.
    """
    if capacities is not None:
        for host in (src, *hosts):
            if host not in capacities:
                raise ValueError(f"capacities has no entry for host {host!r}")
    ranked = RankedHosts.of(hosts, metric, alpha, capacities)
    ranked.take(taken)
    (got,) = screen_round(ranked, [ScreenQuery(src, [("vm", vm, barred)])], ceiling)
    return got.target, got.refused.get("vm", [])


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
) -> str | None:
    """Cold spot for ``vm`` leaving ``src`` (Alg. 2 lines 7-10), or None: no migration.

    The least-hot host (by ``metric``, ties by name) that is not ``src`` and not in
    ``taken``, whose every resource is below ``alpha`` now and below ``ceiling`` (default
    ``alpha``) after adding the VM's share rescaled to the host's capacity. ``hosts`` maps
    host name to its current utilisation. ``vm.util`` is the VM's share of ``src``.
    """
    chosen, _ = screen_targets(hosts, src, vm, alpha, taken, metric, ceiling, capacities)
    return chosen
