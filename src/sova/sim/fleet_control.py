"""Every host's VF scheduling of a simulated world in one pass of the policy's kernel.

Each control period :meth:`HostAgent.step` builds its host's candidates and runs the VF
policy; for the scheduling policies (``dsr-iov``, ``sova``: ``VFPolicy.schedules``) that
is :func:`~sova.policy.vfkernel.schedule_hosts` on one host. Here the world runs the same
kernel once for every host, from the sensing pass's factor arrays
(:class:`~sova.sim.fleet_sensing.FleetSensing`) and the engine's VM state, and hands each
agent its host's decision (``Sensed.vf``). An agent whose decision could differ from the
one the world computed decides for itself as before: a host not yet measured whose
policy's warm-up (it keeps the eligible holders) would change something, with an operation
in flight (its outcome may change the dwell times),
with the manager's migration signal (the chosen VM stops being a candidate) or with
operator fences.

A host whose decided holders are the ones it has, at the rates it has, with nothing in
flight and nothing leaving, is *settled* (so is a host not measured yet whose holders are
all eligible and unrated: its warm-up keeps them; at 1,000 hosts the first period was
1,000 steps) (:attr:`FleetControl.settled`): its step would
plan nothing, so its agent takes only the holders and ranking
(:meth:`~sova.agent.loop.HostAgent.settle`: the records the step would leave, no
``VFDecision``, ``PeriodDecision`` or ``StepReport``; the world hands them as arrays,
sim/fleet_settle.py). So the policy's objects, the executor, the planner and the
operations run only on hosts where something happens (about 8 % of the host-periods of
benchmarks/simulate_scale.py). A settled host's inventory builds its VMs only when
something reads them (:class:`HostVMs`), and its desired holders and ranking are built
only when its agent reads them (:class:`SettledMap`).

The timeline rows of the hosts the world decided for come from the same arrays
(:class:`Rows`, ``World._decided_values``: the sensing's factors and the inventory columns
the agents read), not from their step reports.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import chain
from operator import attrgetter
from typing import ClassVar

import numpy as np

from sova.agent.loop import HostAgent, Sensed
from sova.lazymap import LazyMapping
from sova.model import Inventory, VMState
from sova.policy.sensing import SensedFactors
from sova.policy.vfkernel import Decisions, VFRows, VFSchedule, queue, schedule_hosts
from sova.sim.engine import Engine, vm_states
from sova.sim.fleet_sensing import FleetSensed
from sova.sim.state import INF


@dataclass(frozen=True)
class Rows:
    """The VMs of the hosts the world decided for in a period, in the order their timeline
    rows come (host by host, each host's VMs by name: ``sorted(factors)`` of the step), with
    the inventory's columns as the agents read them (:meth:`FleetControl._inventories`)."""

    hosts: list[int]  # host indices, ascending
    cut: list[int]  # host k's rows are members[cut[k] : cut[k + 1]]
    members: np.ndarray  # VM indices
    # the inventory columns the rows read, of those VMs (the period's _Frame)
    on_vf: np.ndarray
    vf_max: np.ndarray
    guest_limit: np.ndarray
    time_s: float


# a settled host's inventory, desired holders, ranking and the holders it finds without a
# dwell start (the arguments of HostAgent.settle)
Settled = tuple[Inventory, dict[str, float | None], tuple[str, ...], Sequence[str]]


class FleetControl:
    def __init__(self, engine: Engine, agents: dict[str, HostAgent]) -> None:
        first = next(iter(agents.values()))
        self.scheduler = first.scheduler
        names = engine.vm_names
        order = sorted(range(len(names)), key=names.__getitem__)
        self.name_rank = np.empty(len(names), dtype=np.int64)
        self.name_rank[order] = np.arange(len(names))
        self.pool = np.array([h.nic.vf_pool for h in engine.hosts], dtype=np.int64)
        # tiers give holders rates from their demand: such a host is never settled here
        self.tiered = np.array([bool(h.nic.tiers_bps) for h in engine.hosts], dtype=bool)
        # the last reading's inventory columns and each VM's host (see _inventories)
        self.frame: _Frame | None = None
        self.read_host: np.ndarray | None = None
        # the last reading's settled hosts' inventories, by host index (see _inventories)
        self.calm_read: dict[int, Inventory] = {}
        # each host's VMs in index order
        self.members: list[list[int]] = []
        # this period's hosts the world decided for, as timeline rows (see rows())
        self.decided: Rows | None = None
        # this period's settled hosts (see decide): what each one's agent takes
        self.settled = SettledMap.NONE
        # each VM's host and every VM by host, in name order within a host (_by_host)
        self._sorted: tuple[np.ndarray, np.ndarray] | None = None

    @staticmethod
    def applies(agents: dict[str, HostAgent]) -> bool:
        """Whether the world's agents schedule with the kernel (one config for all)."""
        first = next(iter(agents.values()), None)
        return first is not None and first.vf_policy.schedules

    def decide(
        self,
        engine: Engine,
        agents: dict[str, HostAgent],
        sensed: FleetSensed,
        factors: SensedFactors,
        alone: np.ndarray,
    ) -> FleetSensed:
        """Each host's sensing with its VF decision where the world can make it (``sensed``
        itself, each deciding host's reading replaced); the settled hosts' holders and
        ranking go to :attr:`settled` instead (their agents take them with
        :meth:`~sova.agent.loop.HostAgent.settle`, and no ``Sensed`` is built for them).
        ``alone``: each host's ``HostAgent.acts_alone`` as its agent keeps it in the
        world's array (sim/fleet_settle.py)."""
        e = engine
        self.decided = None
        self.settled = SettledMap.NONE
        now = e.env.now
        host = e.host
        hosts = e.host_names
        agent_l = list(map(agents.__getitem__, hosts))
        # hosts whose agent decides as the kernel here would (see the module's docstring),
        # or, not measured yet, as the policy's warm-up would
        free = ~alone
        if not free.any():
            return sensed
        measured = np.array(sensed.measured_list(), dtype=bool)
        # each agent's VMs it migrates away (read once: _dwell and _who read them)
        migrating = list(map(_MIGRATING, agent_l))
        leaving, since, recorded = _dwell(e, agent_l, migrating, now)
        cfg = self.scheduler
        rows = VFRows(
            host=host,
            name_rank=self.name_rank,
            io_score=factors.io_degree if cfg.io_metric == "io_degree" else factors.io_factor,
            net_score=factors.net_degree if cfg.net_metric == "net_degree" else factors.net_factor,
            has_traffic=factors.has_traffic,
            eligible=e.ready & ~e.migrating & ~leaving,
            holder=e.on_vf.copy(),
            since=since,
            demand=factors.demand_est_bps,
        )
        result = schedule_hosts(rows, self.pool, now, cfg)
        mine_l, busy, calm = self._who(e, rows, result, free, measured, migrating)
        if not mine_l:
            return sensed
        measured_l = measured.tolist()
        mine = np.zeros(e.H, dtype=bool)
        mine[mine_l] = True
        inventories = self._inventories(e, mine_l, set(busy))
        assert self.frame is not None
        by_host = self._by_host(host)
        self.decided = _decided_rows(host, by_host, mine, mine_l, self.frame, now)
        r_cut = np.searchsorted(host[result.ranked], np.arange(e.H + 1)).tolist()
        ranked_l = result.ranked.tolist()
        # read into lists only when a host needs a decision (most periods of a large
        # world none does)
        if busy:
            decisions = Decisions(e.vm_names, rows, result, cfg)
            m_cut = np.searchsorted(host[by_host], np.arange(e.H + 1)).tolist()
            pool = self.pool.tolist()
            vfs = decisions.of_hosts(by_host.tolist(), m_cut, ranked_l, r_cut, pool, busy)
            for hi, vf in zip(busy, vfs, strict=True):
                h = hosts[hi]
                s = sensed[h]
                sensed.decided(hi, Sensed(s.factors, s.measured, s.loads, vf, inventories[h]))
        warm = _warm_up(e, [hi for hi in calm if not measured_l[hi]], by_host)
        self.settled = self._settled(e, calm, warm, inventories, result, ranked_l, r_cut, recorded)
        return sensed

    def _by_host(self, host: np.ndarray) -> np.ndarray:
        """Every VM by host, each host's VMs in name order (the agent's candidates'
        order): sorted again only when a VM moved (the sort was the period's largest
        array operation)."""
        known = self._sorted
        if known is None or not np.array_equal(known[0], host):
            known = self._sorted = (host.copy(), np.lexsort((self.name_rank, host)))
        return known[1]

    def _who(
        self,
        e: Engine,
        rows: VFRows,
        result: VFSchedule,
        free: np.ndarray,
        measured: np.ndarray,
        migrating: list[dict[str, str]],
    ) -> tuple[list[int], list[int], list[int]]:
        """The hosts the world decides for, ascending, and of those the ones that act
        (busy: handed their whole decision) and the settled ones (calm: holders and
        ranking, see :meth:`HostAgent.settle`). A measured host is settled when the
        kernel keeps its holders; one not measured yet when its policy's warm-up would
        (``DsrIov.desired``: it keeps the eligible holders), i.e. it has no other, and an
        unmeasured one that is not settled steps with that warm-up itself (the kernel's
        decision is not its). Neither with tiers or a rated holder (rates to set)."""
        host, holder = e.host, rows.holder
        changes = np.bincount(host, result.pq != holder, minlength=e.H) > 0
        drops = np.bincount(host, holder & ~rows.eligible, minlength=e.H) > 0
        rated = holder & ((e.vf_max < INF) | (e.vf_min > 0))
        settled = (
            np.where(measured, ~changes, ~drops)
            & ~self.tiered
            & (np.bincount(host, rated, minlength=e.H) == 0)
        )
        leaves = np.fromiter(map(bool, migrating), dtype=bool, count=e.H)
        mine = free & (measured | settled) & (measured | ~leaves)
        quiet = settled & ~leaves
        return (
            np.flatnonzero(mine).tolist(),
            np.flatnonzero(mine & ~quiet).tolist(),
            np.flatnonzero(mine & quiet).tolist(),
        )

    def _settled(
        self,
        e: Engine,
        calm: list[int],
        warm: dict[int, tuple[str, ...]],
        inventories: dict[str, Inventory],
        result: VFSchedule,
        ranked: list[int],
        r_cut: list[int],
        recorded: np.ndarray,
    ) -> SettledMap:
        """What each settled host's agent takes (:meth:`HostAgent.settle`), built per host
        when read (:class:`SettledMap`): a host settled period after period is read only
        when its agent next steps or reports, from the period it was settled in."""
        # the holders whose dwell start the agent has not recorded (attached before it ran),
        # by host in index order, as the policy's step records them (note_holders)
        fresh: dict[int, list[str]] = {}
        names, host = e.vm_names, e.host
        for i in np.flatnonzero(e.on_vf & ~recorded).tolist():
            fresh.setdefault(int(host[i]), []).append(names[i])
        return SettledMap(
            e.host_names, calm, warm, inventories, names, result.pq, ranked, r_cut, fresh
        )

    def _inventories(self, e: Engine, hosts: list[int], busy: set[int]) -> dict[str, Inventory]:
        """Each host's inventory (the driver's view, ``Engine.inventory``) as it is now.
        Another host's step cannot change this host's VMs (an operation changes its own VM,
        and only when the clock runs), so reading every host before the steps gives what
        each would read at its own step. A settled host's VMs (:class:`HostVMs`) are built
        only when something reads them (the manager reads the few hosts it may move a VM
        off or onto): the bandwidth loop moves a guest limit on most VMs every period, and
        a VM's state costs more to build than its host's whole settled period.

        A settled host whose VMs and every column read are as at the last reading, where
        it was settled too, gets that reading's inventory again (what it would build is
        equal: ``Engine.inventory`` reads nothing else): in benchmarks/simulate_scale.py
        no host's columns change between most periods."""
        host = e.host.copy()
        prev, self.read_host = self.read_host, host
        before, frame = self.frame, _Frame(e)
        # every column Engine.inventory reads (the timeline's rows read them too)
        self.frame = frame
        kept, self.calm_read = self.calm_read, {}
        if prev is None or not np.array_equal(host, prev):
            # each host's VMs in index order (Engine.inventory's), again when VMs moved
            order = np.argsort(host, kind="stable")
            cut = np.searchsorted(host[order], np.arange(e.H + 1)).tolist()
            order_l = order.tolist()
            self.members = [order_l[cut[h] : cut[h + 1]] for h in range(e.H)]
            kept = {}
        elif kept:
            assert before is not None
            # (NaN != NaN: a column holding one counts as changed, and is built again)
            changed = np.bincount(host, before.differs(frame), minlength=e.H) > 0
            kept = {hi: inv for hi, inv in kept.items() if not changed[hi]}
        host_names, objs, members = e.host_names, e.hosts, self.members
        read: dict[str, Inventory] = {}
        calm_read = self.calm_read
        for hi in hosts:
            if hi in busy:
                # a host that steps reads its VMs at once, and often: a plain dict
                read[host_names[hi]] = Inventory(objs[hi], HostVMs(frame, members[hi]).built())
                continue
            inv = kept.get(hi)
            if inv is None or inv.host is not objs[hi]:
                inv = Inventory(objs[hi], HostVMs(frame, members[hi]))
            read[host_names[hi]] = calm_read[hi] = inv
        return read


class SettledMap(Mapping[str, Settled]):
    """A period's settled hosts (host name -> what its agent takes, :data:`Settled`), each
    host's built when read from the period's own arrays and lists (nothing changes them
    after the period): the desired holders and ranking of the kernel's queue (or the
    warm-up's holders of a host not measured yet), its inventory, and its holders without
    a dwell start (:attr:`unrecorded`: the hosts that have any)."""

    NONE: ClassVar[SettledMap]

    __slots__ = ("hosts", "unrecorded", "_index", "_args")

    def __init__(
        self,
        host_names: Sequence[str],
        calm: list[int],
        warm: dict[int, tuple[str, ...]],
        inventories: Mapping[str, Inventory],
        vm_names: Sequence[str],
        pq: np.ndarray,
        ranked: list[int],
        r_cut: list[int],
        fresh: dict[int, list[str]],
    ) -> None:
        self.hosts = calm  # host indices, ascending
        self._index = dict(zip(map(host_names.__getitem__, calm), calm, strict=True))
        self.unrecorded = [host_names[hi] for hi in calm if hi in fresh]
        self._args = (warm, inventories, vm_names, pq, ranked, r_cut, fresh)

    def __getitem__(self, host: str) -> Settled:
        hi = self._index[host]
        warm, inventories, vm_names, pq, ranked, r_cut, fresh = self._args
        keep = warm.get(hi)
        if keep is not None:  # not measured yet: its warm-up's, not the kernel's
            desired, ranking = keep, keep
        else:
            desired, ranking = queue(vm_names, pq, ranked[r_cut[hi] : r_cut[hi + 1]])
        return inventories[host], dict.fromkeys(desired), ranking, fresh.get(hi, ())

    def __contains__(self, host: object) -> bool:
        return host in self._index

    def __iter__(self) -> Iterator[str]:
        return iter(self._index)

    def __len__(self) -> int:
        return len(self._index)


SettledMap.NONE = SettledMap((), [], {}, {}, (), np.zeros(0, dtype=bool), [], [0], {})


class _Frame:
    """One period's copy of the engine's columns that :meth:`Engine.inventory` reads (the
    engine's arrays change as the clock runs; a reading is of its moment)."""

    __slots__ = (
        "vms",
        "vm_names",
        "on_vf",
        "vf_index",
        "vf_max",
        "vf_min",
        "guest_limit",
        "ready",
        "migrating",
    )

    def __init__(self, e: Engine) -> None:
        self.vms, self.vm_names = e.vms, e.vm_names  # never changed after the engine's start
        self.on_vf, self.vf_index = e.on_vf.copy(), e.vf_index.copy()
        self.vf_max, self.vf_min = e.vf_max.copy(), e.vf_min.copy()
        self.guest_limit, self.ready = e.guest_limit.copy(), e.ready.copy()
        self.migrating = e.migrating.copy()

    def differs(self, other: _Frame) -> np.ndarray:
        """Per VM: whether any column differs between this reading and ``other``."""
        out: np.ndarray = self.on_vf != other.on_vf
        for a, b in (
            (self.vf_index, other.vf_index),
            (self.vf_max, other.vf_max),
            (self.vf_min, other.vf_min),
            (self.guest_limit, other.guest_limit),
            (self.ready, other.ready),
            (self.migrating, other.migrating),
        ):
            out |= a != b
        return out


class HostVMs(LazyMapping[str, VMState]):
    """One host's ``Inventory.vms`` as :meth:`Engine.inventory` read them at a period's
    start, built when first read (tests/test_fleet_control.py holds a settled agent's
    snapshot equal to its own read)."""

    __slots__ = ("_frame", "_members")

    def __init__(self, frame: _Frame, members: list[int]) -> None:
        self._built = None
        self._frame, self._members = frame, members

    def _build(self) -> dict[str, VMState]:
        return vm_states(self._frame, self._members)

    def __len__(self) -> int:
        return len(self._members)


def _warm_up(e: Engine, warm: list[int], by_host: np.ndarray) -> dict[int, tuple[str, ...]]:
    """The holders of the settled hosts not measured yet (``warm``), in name order: their
    desired holders and ranking (``DsrIov.desired``'s warm-up keeps the eligible holders
    among the candidates, by name, and a settled one has no other)."""
    if not warm:
        return {}
    names = e.vm_names
    held = by_host[e.on_vf[by_host]]
    cut = np.searchsorted(e.host[held], np.arange(e.H + 1)).tolist()
    held_l = held.tolist()
    return {hi: tuple([names[i] for i in held_l[cut[hi] : cut[hi + 1]]]) for hi in warm}


# what _dwell reads of each agent (through C-level maps over all agents, not a Python
# loop per host: a few attribute reads per host were most of its cost)
_MIGRATING = attrgetter("migrating")
_VF_SINCE = attrgetter("vf_since")


def _dwell(
    e: Engine, agent_l: list[HostAgent], migrating: list[dict[str, str]], now: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per VM: leaving (its agent migrates it away: ``migrating``, each agent's), since
    when it holds its VF by its agent's records (``now`` where they have none), and
    whether they have one."""
    host = e.host
    index = e.vm_index
    # an agent's own records count for the VMs on its host only (a VM that left is
    # the target's now)
    gone: list[int] = []
    for hi in [hi for hi, m in enumerate(migrating) if m]:
        gone += [i for i in map(index.__getitem__, migrating[hi]) if host[i] == hi]
    leaving = np.zeros(e.N, dtype=bool)
    leaving[gone] = True
    # every agent's dwell starts at once (~2 per host, every period): read through
    # chained iterators into arrays, not a Python loop per holder
    since_l = list(map(_VF_SINCE, agent_l))
    counts = list(map(len, since_l))
    n = sum(counts)
    held = np.fromiter(
        map(index.__getitem__, chain.from_iterable(since_l)), dtype=np.int64, count=n
    )
    held_since = np.fromiter(
        chain.from_iterable(map(dict.values, since_l)), dtype=np.float64, count=n
    )
    own = host[held] == np.repeat(np.arange(e.H), counts)
    held, held_since = held[own], held_since[own]
    since = np.full(e.N, now)
    since[held] = held_since
    recorded = np.zeros(e.N, dtype=bool)  # the agent has the VF's dwell start
    recorded[held] = True
    return leaving, since, recorded


def _decided_rows(
    host: np.ndarray,
    by_host: np.ndarray,
    mine: np.ndarray,
    mine_l: list[int],
    frame: _Frame,
    now: float,
) -> Rows:
    """The deciding hosts' rows, each host's VMs in name order (the agent's candidates'
    order); when the world decides for every host (most periods) every VM's row, in
    ``by_host``'s order, without selecting."""
    every = len(mine_l) == mine.size
    members = by_host if every else by_host[mine[host[by_host]]]
    counts = np.bincount(host[members], minlength=mine.size)
    if not every:
        counts = counts[mine]
    cut = np.concatenate(([0], np.cumsum(counts))).tolist()
    return Rows(
        mine_l,
        cut,
        members,
        frame.on_vf[members],
        frame.vf_max[members],
        frame.guest_limit[members],
        now,
    )
