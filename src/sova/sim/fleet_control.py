"""Every host's VF scheduling of a simulated world in one pass of the policy's kernel.

Each control period :meth:`HostAgent.step` builds its host's candidates and runs the VF
policy; for the scheduling policies (``dsr-iov``, ``sova``: ``VFPolicy.schedules``) that
is :func:`~sova.policy.vfkernel.schedule_hosts` on one host. Here the world runs the same
kernel once for every host, from the sensing pass's factor arrays
(:class:`~sova.sim.fleet_sensing.FleetSensing`) and the engine's VM state, and hands each
agent its host's decision (``Sensed.vf``). An agent whose decision could differ from the
one the world computed decides for itself as before: a host not yet measured (the policy
keeps its holders), with an operation in flight (its outcome may change the dwell times),
with the manager's migration signal (the chosen VM stops being a candidate) or with
operator fences.

A host whose decided holders are the ones it has, at the rates it has, with nothing in
flight and nothing leaving, is *settled* (:attr:`FleetControl.settled`): its step would
plan nothing, so its agent takes only the holders and ranking
(:meth:`~sova.agent.loop.HostAgent.settle`: the records the step would leave, no
``VFDecision``, ``Decision`` or ``StepReport``). So the policy's objects, the executor,
the planner and the operations run only on hosts where something happens (about 8 % of
the host-periods of benchmarks/simulate_scale.py).

The timeline rows of the hosts the world decided for come from the same arrays
(:class:`Rows`, ``World._decided_values``: the sensing's factors and the inventory columns
the agents read), not from their step reports.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from sova.agent.loop import HostAgent, Sensed
from sova.model import Inventory, NicKind, VMState
from sova.policy.kernels import SensedFactors
from sova.policy.vfkernel import Decisions, VFRows, schedule_hosts
from sova.sim.engine import Engine
from sova.sim.state import INF


@dataclass(frozen=True)
class Rows:
    """The VMs of the hosts the world decided for in a period, in the order their timeline
    rows come (host by host, each host's VMs by name: ``sorted(factors)`` of the step), with
    the inventory's columns as the agents read them (:meth:`FleetControl._inventories`)."""

    hosts: list[int]  # host indices, ascending
    cut: list[int]  # host k's rows are members[cut[k] : cut[k + 1]]
    members: np.ndarray  # VM indices
    state: np.ndarray  # the inventory columns (_inventories' cols) of those VMs
    time_s: float


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
        # the last period's reading of each host this world read for its agent, and the
        # VM state it was read from (see _inventories)
        self.read: dict[str, Inventory] = {}
        self.state: tuple[np.ndarray, np.ndarray] | None = None
        # each VM's state as that reading saw it, and each host's VMs in index order
        self.vm_states: dict[int, VMState] = {}
        self.members: list[list[int]] = []
        # this period's hosts the world decided for, as timeline rows (see rows())
        self.decided: Rows | None = None
        # this period's settled hosts (see decide): host -> (inventory, PQ, ranking)
        self.settled: dict[str, tuple[Inventory, tuple[str, ...], tuple[str, ...]]] = {}

    @staticmethod
    def applies(agents: dict[str, HostAgent]) -> bool:
        """Whether the world's agents schedule with the kernel (one config for all)."""
        first = next(iter(agents.values()), None)
        return first is not None and first.vf_policy.schedules

    def decide(
        self,
        engine: Engine,
        agents: dict[str, HostAgent],
        sensed: Mapping[str, Sensed],
        factors: SensedFactors,
    ) -> Mapping[str, Sensed]:
        """Each host's sensing with its VF decision where the world can make it; the
        settled hosts' holders and ranking go to :attr:`settled` instead (their agents
        take them with :meth:`~sova.agent.loop.HostAgent.settle`)."""
        e = engine
        self.decided = None
        self.settled = {}
        now = e.env.now
        host = e.host
        hosts = e.host_names
        # hosts whose agent decides as the kernel here would (see the module's docstring)
        mine = np.array(
            [
                sensed[h].measured
                and not a.executor.in_flight
                and not a.signalled
                and not a.vf_freeze_host
                and not a.vf_freeze_vms
                for h, a in ((h, agents[h]) for h in hosts)
            ],
            dtype=bool,
        )
        if not mine.any():
            return sensed
        leaving = np.zeros(e.N, dtype=bool)
        since = np.full(e.N, now)
        index = e.vm_index
        # an agent's own records count for the VMs on its host only (a VM that left is
        # the target's now)
        for hi, h in enumerate(hosts):
            a = agents[h]
            for vm in a.migrating:
                i = index[vm]
                if host[i] == hi:
                    leaving[i] = True
            for vm, t in a.vf_since.items():
                i = index[vm]
                if host[i] == hi:
                    since[i] = t
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
        )
        result = schedule_hosts(rows, self.pool, now, cfg)
        holder = rows.holder
        changes = np.bincount(host, result.pq != holder, minlength=e.H) > 0
        rated = holder & ((e.vf_max < INF) | (e.vf_min > 0))
        settled = ~changes & ~self.tiered & (np.bincount(host, rated, minlength=e.H) == 0)
        # rows by host, each host's VMs in name order (the agent's candidates' order)
        by_host = np.lexsort((self.name_rank, host))
        m_cut = np.searchsorted(host[by_host], np.arange(e.H + 1)).tolist()
        r_cut = np.searchsorted(host[result.ranked], np.arange(e.H + 1)).tolist()
        by_host_l, ranked_l = by_host.tolist(), result.ranked.tolist()
        decisions = Decisions(e.vm_names, rows, result, cfg)
        pool, settled_l = self.pool.tolist(), settled.tolist()
        out = dict(sensed)
        mine_l = np.flatnonzero(mine).tolist()
        inventories = self._inventories(e, mine_l)
        assert self.state is not None
        members = by_host[mine[host[by_host]]]
        counts = np.bincount(host[members], minlength=e.H)[mine]
        self.decided = Rows(
            mine_l,
            np.concatenate(([0], np.cumsum(counts))).tolist(),
            members,
            self.state[0][:, members],
            now,
        )
        # a settled host's agent takes its holders and ranking (HostAgent.settle); the
        # others their whole decision
        quiet = [settled_l[hi] and not agents[hosts[hi]].migrating for hi in mine_l]
        busy = [hi for hi, q in zip(mine_l, quiet, strict=True) if not q]
        calm = [hi for hi, q in zip(mine_l, quiet, strict=True) if q]
        vfs = decisions.of_hosts(by_host_l, m_cut, ranked_l, r_cut, pool, busy)
        for hi, vf in zip(busy, vfs, strict=True):
            h = hosts[hi]
            s = sensed[h]
            out[h] = Sensed(s.factors, s.measured, s.loads, vf, inventories[h])
        self.settled = {
            hosts[hi]: (inventories[hosts[hi]], *q)
            for hi, q in zip(calm, decisions.queues(ranked_l, r_cut, calm), strict=True)
        }
        return out

    def _inventories(self, e: Engine, hosts: list[int]) -> dict[str, Inventory]:
        """Each host's inventory (the driver's view, ``Engine.inventory``), built again
        only for hosts where a VM's state in that view changed since the last period, and
        from a :class:`~sova.model.VMState` built again only for the VMs that changed (the
        bandwidth loop moves a guest limit on most VMs every period, VF holders rarely
        change). Another host's step cannot change this host's VMs (an operation changes
        its own VM, and only when the clock runs), so reading every host before the steps
        gives what each would read at its own step."""
        # every column Engine.inventory reads, and which host each VM is on
        cols = np.stack(
            (e.on_vf, e.vf_index, e.vf_max, e.vf_min, e.guest_limit, e.ready, e.migrating)
        ).astype(np.float64)
        host = e.host.copy()
        prev, self.state = self.state, (cols, host)
        if prev is None:
            moved = np.ones(e.N, dtype=bool)
            changed = np.ones(e.H, dtype=bool)
        else:
            moved = (cols != prev[0]).any(axis=0) | (host != prev[1])
            changed = (np.bincount(host[moved], minlength=e.H) > 0) | (
                np.bincount(prev[1][moved], minlength=e.H) > 0
            )
        states = self.vm_states
        idx = np.flatnonzero(moved)
        # Engine.inventory's VMState of each VM that changed, its columns read once for all
        vms, names = e.vms, e.vm_names
        for i, on, vfi, vmax, vmin, glim, ready, mig in zip(
            idx.tolist(),
            e.on_vf[idx].tolist(),
            e.vf_index[idx].tolist(),
            e.vf_max[idx].tolist(),
            e.vf_min[idx].tolist(),
            e.guest_limit[idx].tolist(),
            e.ready[idx].tolist(),
            e.migrating[idx].tolist(),
            strict=True,
        ):
            states[i] = VMState(
                vm=vms[i],
                nic=NicKind.VF if on else NicKind.VIRTIO,
                vf_index=vfi if on else None,
                vf_max_bps=vmax if on and vmax < INF else None,
                vf_min_bps=vmin if on and vmin > 0 else None,
                guest_limit_bps=glim if glim < INF else None,
                failover_ready=ready,
                backup_link_up=ready,
                migrating=mig,
            )
        if prev is None or bool((host != prev[1]).any()):
            # each host's VMs in index order (Engine.inventory's), again when VMs moved
            order = np.argsort(host, kind="stable")
            cut = np.searchsorted(host[order], np.arange(e.H + 1)).tolist()
            order_l = order.tolist()
            self.members = [order_l[cut[h] : cut[h + 1]] for h in range(e.H)]
        host_names, last, members = e.host_names, self.read, self.members
        fresh = changed.tolist()
        read: dict[str, Inventory] = {}
        for hi in hosts:
            h = host_names[hi]
            inv = last.get(h)
            if inv is None or fresh[hi]:
                inv = Inventory(host=e.hosts[hi], vms={names[i]: states[i] for i in members[hi]})
            read[h] = inv
        self.read = read
        return read
