"""DSR-IOV VF scheduling (:func:`sova.policy.vfsched.schedule`) as one array pass over the
VMs of any number of hosts.

:func:`schedule_hosts` is the implementation: a host agent calls it with its one host
(:func:`schedule_one`, what the VF policies use) and a simulated world with every host at
once (``sova.sim.fleet_control``). :func:`sova.policy.vfsched.schedule` stays as the
readable specification; ``tests/test_vfkernel.py`` holds the two equal on random
heterogeneous clusters.

Rows are VMs, each with its host's index. Ties the specification breaks by VM name are
broken by ``name_rank`` (any numbering in the names' order). The greedy tolerance groups
are sequential inside a host, so that step loops over rank positions (as many iterations
as the largest host has VMs), each one vectorised over all hosts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from sova.lazymap import LazyMapping
from sova.policy.vfsched import Candidate, VFDecision, VFSchedulerConfig


@dataclass(frozen=True)
class VFRows:
    """What the scheduler knows of each VM this period, one row per VM (any order)."""

    host: np.ndarray  # int64: the VM's host (index into vf_count)
    name_rank: np.ndarray  # int64: the names' order (ties go to the smaller)
    io_score: np.ndarray
    net_score: np.ndarray
    has_traffic: np.ndarray  # bool
    eligible: np.ndarray  # bool
    holder: np.ndarray  # bool: holds a VF now
    since: np.ndarray  # when a holder got its VF (ignored for the others)
    demand: np.ndarray | None = None  # demand estimate, bit/s (Candidate.demand_bps; None = 0)


@dataclass(frozen=True)
class VFSchedule:
    """The period's decision for every row."""

    passed: np.ndarray  # bool: eligible and through the I/O filter
    rank: np.ndarray  # int64: position in its host's ranking (0 = best), -1 = not ranked
    pq: np.ndarray  # bool: holds a VF after this period
    dwell: np.ndarray  # bool: in the PQ because its dwell time protects it
    ranked: np.ndarray  # int64: the host's ranking rows, hosts in index order
    served: np.ndarray | None = None  # bool: passed with traffic, but virtio serves it
    held_back: np.ndarray | None = None  # bool: a move that did not pay decided its place


def _segments(keys_sorted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For sorted keys: the start of each element's run of equal keys, and its position
    inside the run."""
    n = keys_sorted.size
    if n == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    new = np.r_[True, keys_sorted[1:] != keys_sorted[:-1]]
    start = np.maximum.accumulate(np.where(new, np.arange(n), 0))
    return start, np.arange(n) - start


def _cumcount(host_sorted: np.ndarray, flag: np.ndarray) -> np.ndarray:
    """For rows sorted by host: the flagged rows of the same host up to this one, inclusive."""
    cs = np.cumsum(flag)
    start, _ = _segments(host_sorted)
    before = np.where(start > 0, cs[np.maximum(start - 1, 0)], 0)
    return np.asarray(cs - before)


def schedule_hosts(
    rows: VFRows, vf_count: np.ndarray, now_s: float, config: VFSchedulerConfig
) -> VFSchedule:
    """One scheduling period of every host: :func:`~sova.policy.vfsched.schedule` per host."""
    if vf_count.size and int(vf_count.min()) < 0:
        raise ValueError(f"vf_count must be >= 0, got {int(vf_count.min())}")
    host, name_rank = rows.host, rows.name_rank
    n = host.size
    # a holder's scores count (1 + hysteresis) times, in the filter and in the ranking
    boost = np.where(rows.holder, 1.0 + config.hysteresis, 1.0)
    netb, iob = rows.net_score * boost, rows.io_score * boost
    passed = rows.eligible.copy()
    if config.io_filter == "threshold":
        passed &= iob >= config.io_threshold
    elif config.top_q:
        e = np.flatnonzero(passed)
        order = e[np.lexsort((name_rank[e], -iob[e], host[e]))]
        _, pos = _segments(host[order])
        passed[order[pos >= config.top_q]] = False
    demand = rows.demand if rows.demand is not None else np.zeros(n)
    if config.top_senders:
        # the vf_count highest (boosted) demands of each host pass whatever their I/O score
        s_ = np.flatnonzero(rows.eligible & rows.has_traffic)
        order = s_[np.lexsort((name_rank[s_], -(demand[s_] * boost[s_]), host[s_]))]
        _, pos = _segments(host[order])
        passed[order[pos < vf_count[host[order]]]] = True
    traffic = passed & rows.has_traffic
    served = np.zeros(n, dtype=bool)
    gain = np.maximum(0.0, demand - config.virtio_lossless)
    if config.cost_benefit:
        # a holder stays ranked: unplugging it buys nothing unless an entrant pays for it
        served = traffic & ~(gain > 0.0) & ~rows.holder
        traffic &= ~served
    active = np.flatnonzero(traffic)
    # tolerance groups, formed greedily from each host's leader down
    order = active[np.lexsort((name_rank[active], -netb[active], host[active]))]
    start, pos = _segments(host[order])
    group = np.zeros(order.size, dtype=np.int64)
    leader = np.zeros(order.size)  # at each host's first row: its current group's leader
    nb = netb[order]
    for j in range(int(pos.max()) + 1 if order.size else 0):
        at = np.flatnonzero(pos == j)
        s = start[at]
        if j == 0:
            leader[s] = nb[at]
            continue
        same = nb[at] >= leader[s] / (1.0 + config.tolerance)
        group[at] = group[at - 1] + ~same
        leader[s] = np.where(same, leader[s], nb[at])
    g_of = np.zeros(n, dtype=np.int64)
    g_of[order] = group
    ranked = active[np.lexsort((name_rank[active], -iob[active], g_of[active], host[active]))]
    hr = host[ranked]
    _, rpos = _segments(hr)
    rank = np.full(n, -1, dtype=np.int64)
    rank[ranked] = rpos
    # holders inside their dwell keep their VF whatever their rank (up to the pool), the
    # rest of the pool goes down the ranking
    prot = rows.holder[ranked] & (now_s - rows.since[ranked] < config.min_dwell_s)
    vfc = vf_count[hr]
    kept = prot & (_cumcount(hr, prot) <= vfc)
    n_kept = np.bincount(hr, kept, minlength=vf_count.size).astype(np.int64)
    rest = ~prot
    fill = rest & (_cumcount(hr, rest) <= np.maximum(vfc - n_kept[hr], 0))
    pq = np.zeros(n, dtype=bool)
    pq[ranked[kept | fill]] = True
    dwell = np.zeros(n, dtype=bool)
    dwell[ranked[kept]] = True
    held_back = np.zeros(n, dtype=bool)
    if config.cost_benefit:
        _pay_for_moves(rows, ranked, rank, pq, held_back, gain, demand, vf_count, config)
    return VFSchedule(
        passed=passed,
        rank=rank,
        pq=pq,
        dwell=dwell,
        ranked=ranked,
        served=served,
        held_back=held_back,
    )


def _pay_for_moves(
    rows: VFRows,
    ranked: np.ndarray,
    rank: np.ndarray,
    pq: np.ndarray,
    held_back: np.ndarray,
    gain: np.ndarray,
    demand: np.ndarray,
    vf_count: np.ndarray,
    config: VFSchedulerConfig,
) -> None:
    """:func:`~sova.policy.vfsched._pay_for_moves` of every host, in place on ``pq`` and
    ``held_back``: entrants in rank order take the free VFs, then pair with the leavers
    in (gain, name) order."""
    holder, host = rows.holder, rows.host
    n_hosts = vf_count.size
    is_ranked = rank >= 0
    ent = ranked[pq[ranked] & ~holder[ranked]]  # host, then rank order
    lv = np.flatnonzero(is_ranked & holder & ~pq)
    lv = lv[np.lexsort((rows.name_rank[lv], gain[lv], host[lv]))]
    n_kept = np.bincount(host, pq & holder, minlength=n_hosts).astype(np.int64)
    n_lv = np.bincount(host[lv], minlength=n_hosts).astype(np.int64)
    overflow = np.maximum(0, n_kept + n_lv - vf_count)
    free = vf_count - n_kept - (n_lv - overflow)
    if ent.size == 0:
        return
    he = host[ent]
    _, j = _segments(he)
    lv_start = np.searchsorted(host[lv], np.arange(n_hosts))
    to_free = j < free[he]
    cost = config.hotplug_blip
    margin = 1.0 + config.benefit_margin
    # a free VF: horizon * (gain - 0.0) > (1 + margin) * (blip * demand), as worth_it
    f = ent[to_free]
    ok = config.horizon * (gain[f] - 0.0) > margin * (cost * demand[f])
    pq[f[~ok]] = False
    held_back[f[~ok]] = True
    p_ent = ent[~to_free]
    if p_ent.size == 0:
        return
    hp = host[p_ent]
    p_lv = lv[lv_start[hp] + overflow[hp] + j[~to_free] - free[hp]]
    ok = config.horizon * (gain[p_ent] - gain[p_lv]) > margin * (
        cost * (demand[p_ent] + demand[p_lv])
    )
    pq[p_ent[~ok]] = False
    pq[p_lv[~ok]] = True
    held_back[p_ent[~ok]] = True
    held_back[p_lv[~ok]] = True


class Decisions:
    """Hosts' :class:`~sova.policy.vfsched.VFDecision` from one :func:`schedule_hosts`
    result (the arrays are read into lists once for all hosts)."""

    def __init__(
        self, names: Sequence[str], rows: VFRows, result: VFSchedule, config: VFSchedulerConfig
    ) -> None:
        self.names, self.config = names, config
        self.eligible, self.passed = rows.eligible.tolist(), result.passed.tolist()
        self.traffic, self.pq = rows.has_traffic.tolist(), result.pq.tolist()
        self.dwell, self.io = result.dwell.tolist(), rows.io_score.tolist()
        n = len(names)
        self.served = result.served.tolist() if result.served is not None else [False] * n
        self.held = result.held_back.tolist() if result.held_back is not None else [False] * n
        self.name_rank = rows.name_rank.tolist()
        # the top-q filter lists its VMs best first by boosted I/O score, then name
        self.io_key: list[tuple[float, int]] = []
        if config.io_filter != "threshold":
            boost = np.where(rows.holder, 1.0 + config.hysteresis, 1.0)
            key = (-(rows.io_score * boost)).tolist()
            self.io_key = list(zip(key, rows.name_rank.tolist(), strict=True))

    def of(self, members: Sequence[int], ranking: Sequence[int], vf_count: int) -> VFDecision:
        """One host's decision: ``members`` are its rows in the candidates' order,
        ``ranking`` its ranked rows best first. The reasons are written when first read
        (:class:`Reasons`): a world of thousands of hosts decides every period, and nothing
        reads most hosts' reasons."""
        names, pq_of = self.names, self.pq
        pq = tuple([names[i] for i in ranking if pq_of[i]])
        gq = tuple(sorted([names[i] for i in members if not pq_of[i]]))
        return VFDecision(
            pq=pq,
            gq=gq,
            ranking=tuple([names[i] for i in ranking]),
            reasons=Reasons(self, members, ranking, vf_count),
        )

    def of_hosts(
        self,
        members: Sequence[int],
        m_cut: Sequence[int],
        ranked: Sequence[int],
        r_cut: Sequence[int],
        vf_count: Sequence[int],
        hosts: Iterable[int],
    ) -> list[VFDecision]:
        """:meth:`of` of each of ``hosts``: host h's members are
        ``members[m_cut[h] : m_cut[h + 1]]``, its ranking ``ranked[r_cut[h] : r_cut[h + 1]]``.
        Only the rows of ``hosts`` are read (a world asks for the few hosts that act)."""
        return [
            self.of(members[m_cut[h] : m_cut[h + 1]], ranked[r_cut[h] : r_cut[h + 1]], vf_count[h])
            for h in hosts
        ]

    def queue(self, ranking: Sequence[int]) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """A host's ``(pq, ranking)`` as :meth:`of` would decide them (``ranking``: its
        ranked rows best first), without the rest of a
        :class:`~sova.policy.vfsched.VFDecision`: what a settled host's agent keeps."""
        names, pq = self.names, self.pq
        return tuple([names[i] for i in ranking if pq[i]]), tuple([names[i] for i in ranking])

    def reasons(
        self, members: Sequence[int], ranking: Sequence[int], vf_count: int
    ) -> dict[str, str]:
        """Why each of a host's VMs is where :meth:`of` put it, in the specification's
        order: ineligible, filtered, no traffic, ranked."""
        names, eligible, passed = self.names, self.eligible, self.passed
        reasons: dict[str, str] = {}
        for i in members:
            if not eligible[i]:
                reasons[names[i]] = "ineligible (migrating or no failover backup)"
        metric = self.config.io_metric
        for i in members:
            if eligible[i] and not passed[i]:
                reasons[names[i]] = f"filtered: {metric}={self.io[i]:.2f}"
        quiet = [i for i in members if passed[i] and not self.traffic[i]]
        if self.config.io_filter != "threshold":
            quiet.sort(key=self.io_key.__getitem__)
        for i in quiet:
            reasons[names[i]] = "no traffic in window"
        served = [i for i in members if self.served[i]]
        served.sort(key=self.name_rank.__getitem__)
        for i in served:
            reasons[names[i]] = "virtio serves it (demand at or below virtio_lossless)"
        total = len(ranking)
        held = self.held
        for k, i in enumerate(ranking):
            vm = names[i]
            if self.pq[i]:
                late = " (dwell)" if self.dwell[i] and k >= vf_count else ""
                paid = " (a move would not pay)" if held[i] else ""
                reasons[vm] = f"rank {k + 1} of {total}{late}{paid}"
            elif held[i]:
                reasons[vm] = f"rank {k + 1} of {total}, a move would not pay"
            else:
                reasons[vm] = f"rank {k + 1} of {total}, below the {vf_count} VFs"
        return reasons


class Reasons(LazyMapping[str, str]):
    """One host's ``VFDecision.reasons`` (:meth:`Decisions.reasons`), written when first
    read from the period's lists (which nothing changes after)."""

    __slots__ = ("_args",)

    def __init__(
        self, decisions: Decisions, members: Sequence[int], ranking: Sequence[int], vf_count: int
    ) -> None:
        self._built = None
        self._args = (decisions, members, ranking, vf_count)

    def _build(self) -> dict[str, str]:
        d, members, ranking, vf_count = self._args
        return d.reasons(members, ranking, vf_count)


def schedule_one(
    candidates: Sequence[Candidate],
    holders: Mapping[str, float],
    vf_count: int,
    now_s: float,
    config: VFSchedulerConfig,
) -> VFDecision:
    """:func:`schedule_hosts` for one host, with :func:`~sova.policy.vfsched.schedule`'s
    arguments and result (a host agent's VF policy calls this)."""
    if vf_count < 0:
        raise ValueError(f"vf_count must be >= 0, got {vf_count}")
    unique = list(candidates)  # one per VM, as a host's inventory lists them
    names = [c.vm for c in unique]
    by_name = sorted(range(len(names)), key=names.__getitem__)
    name_rank = np.empty(len(names), dtype=np.int64)
    name_rank[by_name] = np.arange(len(names))
    rows = VFRows(
        host=np.zeros(len(names), dtype=np.int64),
        name_rank=name_rank,
        io_score=np.array([c.io_score for c in unique], dtype=float),
        net_score=np.array([c.net_score for c in unique], dtype=float),
        has_traffic=np.array([c.has_traffic for c in unique], dtype=bool),
        eligible=np.array([c.eligible for c in unique], dtype=bool),
        holder=np.array([vm in holders for vm in names], dtype=bool),
        since=np.array([holders.get(vm, now_s) for vm in names], dtype=float),
        demand=np.array([c.demand_bps for c in unique], dtype=float),
    )
    result = schedule_hosts(rows, np.array([vf_count], dtype=np.int64), now_s, config)
    members = range(len(names))
    return Decisions(names, rows, result, config).of(members, result.ranked.tolist(), vf_count)
