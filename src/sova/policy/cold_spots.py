"""Cold-spot screening (Sova Alg. 2 lines 7-10, docs/design.md#cold-spot): which host may
receive a VM leaving a hot one, and why each less-hot host before it may not.

Apart from :mod:`sova.policy.hotspot`, which detects the hot hosts and plans the round,
because the screening is asked on its own too: by an operator's proposed move (the
manager's desk) and by a drain, each for one VM and one source.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from typing import Final

import numpy as np

from sova.policy.hotness import (
    RESOURCES,
    HostCapacity,
    HotnessMetric,
    Utilisation,
    VMLoad,
    hotness,
)


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


# A refusal lists the first few hosts it tried and counts the rest: on a fleet where a sixth of
# the hosts stay hot with no target, listing every refused host made each decision as long as
# the fleet (issue 36).
REFUSALS_LISTED: Final = 8


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
