"""DSR-IOV VF scheduling (docs/design.md#vf-scheduling) in one pass over the VMs of any
number of hosts: one implementation, the compiled core's (rust/sova-core/src/vfsched.rs,
docs/design.md "The compiled core").

:func:`schedule_hosts` is the facade: a host agent calls it with its one host
(:func:`schedule_one`, what the VF policies and Alg. 1's Operation Table use) and a
simulated world with every host at once (``sova.sim.fleet_control``). The readable per-host
form it replaced is kept in tests/vfsched_oracle.py; ``tests/test_vfkernel.py`` holds the
two equal on random heterogeneous clusters.

Rows are VMs, each with its host's index. Ties the readable form breaks by VM name are
broken by ``name_rank`` (any numbering in the names' order).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from sova.lazymap import LazyMapping
from sova.policy import _core
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


def schedule_hosts(
    rows: VFRows, vf_count: np.ndarray, now_s: float, config: VFSchedulerConfig
) -> VFSchedule:
    """One scheduling period of every host (``vf_count[h]``: host h's VFs): the compiled
    core's (rust/sova-core/src/vfsched.rs), which ``schedule_one`` runs for one host."""

    def i64(a: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(a, dtype=np.int64)

    def f64(a: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(a, dtype=np.float64)

    def flag(a: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(a, dtype=np.bool_)

    demand = rows.demand if rows.demand is not None else np.zeros(rows.host.size)
    passed, rank, pq, dwell, ranked, served, held_back = _core.vf_schedule(
        i64(rows.host),
        i64(rows.name_rank),
        f64(rows.io_score),
        f64(rows.net_score),
        flag(rows.has_traffic),
        flag(rows.eligible),
        flag(rows.holder),
        f64(rows.since),
        f64(demand),
        i64(vf_count),
        float(now_s),
        (
            config.io_filter == "threshold",
            float(config.io_threshold),
            int(config.top_q),
            float(config.tolerance),
            float(config.hysteresis),
            float(config.min_dwell_s),
            bool(config.top_senders),
            bool(config.cost_benefit),
            float(config.virtio_lossless),
            float(config.hotplug_blip),
            float(config.horizon),
            float(config.benefit_margin),
        ),
    )
    return VFSchedule(
        passed=passed,
        rank=rank,
        pq=pq,
        dwell=dwell,
        ranked=ranked,
        served=served,
        held_back=held_back,
    )


def queue(
    names: Sequence[str], pq: Sequence[bool] | np.ndarray, ranking: Sequence[int]
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """:meth:`Decisions.queue` from the ``pq`` column alone (a list, or the result's array:
    a settled host's queue read in a later period, without the period's lists)."""
    return tuple([names[i] for i in ranking if pq[i]]), tuple([names[i] for i in ranking])


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
        return queue(self.names, self.pq, ranking)

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
    """:func:`schedule_hosts` for one host, with the readable form's arguments and result
    (tests/vfsched_oracle.py's ``schedule``): a host agent's VF policy and Alg. 1's
    Operation Table call this."""
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
