"""Every host's bandwidth loop of a simulated world in one pass of array kernels.

:meth:`HostAgent.bandwidth_step` reads its host's counters, measures, allocates and
applies limit changes through its executor; doing that host by host builds a sample and an
inventory of Python objects per host per second, which was most of a large world's run
time. Here the world reads the engine's counter arrays once, and the same kernels
(:mod:`sova.agent.bandwidth`, :mod:`sova.policy.kernels`) decide for all hosts; only the
limit changes go through each host's agent (its executor: in-flight and back-off rules,
outcomes, its record of applied limits).

What a host's agent would have seen is reproduced exactly: a VM is measured only when its
host read it at the previous round too (a VM that arrived since has no previous reading
there), counters are whole numbers as a driver reads them, flows are in VM-name order per
host, and each VM's current limit is the limit *its host's agent* applied (a migrated VM
starts with whatever the target's agent last applied to it, usually none).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial

import numpy as np

from sova.agent import bandwidth as bw
from sova.agent.executor import Outcome, Result
from sova.agent.loop import HostAgent
from sova.model import SetGuestRateLimit
from sova.policy import metering
from sova.policy.kernels import Groups
from sova.sim.engine import CALL_DELAY_S, Engine
from sova.sim.state import INF


class FleetBandwidth:
    def __init__(self, engine: Engine, agents: Mapping[str, HostAgent]) -> None:
        first = next(iter(agents.values()))
        self.probe = first.config.probe
        self.spread_spare = first.spread_spare
        names = engine.host_names
        self.agents = [agents[h] for h in names]
        self.allocators = [a.allocator for a in self.agents if a.allocator is not None]
        self.names = np.array(engine.vm_names, dtype=object)
        self.rank = np.argsort(np.argsort(self.names))
        self.sla = bw.SLAArrays.of([v.sla for v in engine.vms])
        self.prev: tuple[np.ndarray, np.ndarray, np.ndarray, float] | None = None
        # (the engine's links when the hosts were read, a copy of every VM's host then)
        self.placement: tuple[object, np.ndarray] = (None, engine.host.copy())
        # limit[i]: what the agent of host limit_host[i] last applied to VM i (nan: none)
        self.limit = np.full(engine.N, np.nan)
        self.limit_host = np.full(engine.N, -1, dtype=np.int64)
        # limit calls in flight, submitted in rounds (one event on the clock per round)
        self.pending = np.zeros(engine.N, dtype=bool)
        self.pending_host = np.full(engine.N, -1, dtype=np.int64)
        self.pending_rate = np.full(engine.N, np.nan)
        self.pending_pps = np.full(engine.N, np.nan)
        self.rounds: list[_Round] = []
        # A landed limit goes into its agent's record (HostAgent.limits) lazily: rewriting
        # every VM's entry every second was the bandwidth loop's largest cost. saved[i]
        # False: the last limit landed for VM i (saved_rate, by host saved_host's agent)
        # is not in that agent's record yet; whoever reads the record reads it first.
        self.saved = np.ones(engine.N, dtype=bool)
        self.saved_host = np.full(engine.N, -1, dtype=np.int64)
        self.saved_rate = np.full(engine.N, np.nan)
        # Guaranteed VMs' reservations (bandwidth.Reservations), each held for the agent of
        # host res_host[i]; written into that agent's record (HostAgent.reservations) when
        # the VM is next measured on another host, and read back if it returns.
        self.res_quiet = bw.Reservations.free(engine.N).quiet
        self.res_level = np.zeros(engine.N)
        self.res_fast = np.zeros(engine.N, dtype=bool)
        self.res_host = np.full(engine.N, -1, dtype=np.int64)
        self.guaranteed = bool((self.sla.minimum > 0).any())
        # the allocators are the agents' own, taken once above: which form decides is fixed
        self.sova = bw.all_sova(self.allocators)
        self.last_flows: _Flows | None = None
        self.placed: _Flows | None = None  # the flows whose limits and reservations are placed
        # tracking[h]: host h's executor may track something (an operation in flight, a
        # failure, a back-off): it announced one (Executor.on_track) since it was last
        # found tracking nothing. Every other executor is idle and not failing, so the
        # per-second loop asks only these few instead of an executor per host.
        self.tracking = np.zeros(engine.H, dtype=bool)
        for h, a in enumerate(self.agents):
            a.executor.on_track = partial(self._track, h)
            self.tracking[h] = not a.executor.tracks_nothing

    @classmethod
    def of(cls, engine: Engine, agents: Mapping[str, HostAgent]) -> FleetBandwidth | None:
        if not agents or any(a.allocator is None for a in agents.values()):
            return None
        return cls(engine, agents)

    def _track(self, h: int) -> None:
        self.tracking[h] = True

    def limit_set(self, engine: Engine, host: str, action: SetGuestRateLimit, result: str) -> None:
        """An agent's limit change finished (its own record is already updated)."""
        i, h = engine.vm_index[action.vm], engine.host_index[host]
        if result == Result.SUCCEEDED and self.limit_host[i] == h:
            self.limit[i] = math.nan if action.rate_bps is None else action.rate_bps
        if result == Result.SUCCEEDED and self.saved_host[i] == h:
            self.saved[i] = True  # the agent recorded a later limit itself

    def save(self, engine: Engine, idx: np.ndarray | None = None) -> None:
        """Write the landed limits not yet in their agents' records (of VMs ``idx``, or
        all): before a record is read, and at the end of a run (all: the reservations too)."""
        if idx is None:
            for i in np.flatnonzero(self.res_host >= 0).tolist():
                self._keep_reservation(engine, i)
        idx = np.flatnonzero(~self.saved) if idx is None else idx[~self.saved[idx]]
        hosts, rates = self.saved_host[idx].tolist(), self.saved_rate[idx].tolist()
        for i, h, r in zip(idx.tolist(), hosts, rates, strict=True):
            self.agents[h].limits[engine.vm_names[i]] = None if math.isnan(r) else r
        self.saved[idx] = True

    def step(self, engine: Engine) -> None:
        """One bandwidth period of every host: the counters measured, then one call of
        the core for every flow (:func:`bw.decide`), then the changed limits submitted."""
        now = engine.env.now
        # the VMs' hosts, copied only after a move (the engine's links are rebuilt then,
        # EngineState.move): a copy and two comparisons of every VM's host per second
        links = engine.links()
        if links is not self.placement[0]:
            self.placement = (links, engine.host.copy())
        host = self.placement[1]
        tx, pk = np.trunc(engine.tx_b), np.trunc(engine.tx_pk)
        prev, self.prev = self.prev, (tx, pk, host, now)
        if prev is None or now - prev[3] <= 0:
            return
        m = metering.measure(prev[0], prev[1], tx, pk, now - prev[3])
        # measured where the VM is still on the host of the previous reading
        measured = m.valid if prev[2] is host else m.valid & (prev[2] == host)
        fl = self._flows(measured, host, engine.H)
        if not len(fl.flows):
            return
        if fl is not self.placed:  # the flows changed: their limits and reservations may be
            self._place(engine, fl)  # another host's agent's (in place from now on)
        held = None
        if self.spread_spare and self.guaranteed:
            held = bw.Reservations(self.res_quiet, self.res_level, self.res_fast)
        d = bw.decide(
            self.allocators, fl.groups, engine.capacity, fl.flows,
            self.sla.columns(m.bps, m.packet_bytes, self.limit, engine.on_vf),
            lambda k: engine.vms[int(fl.flows[k])], sova=self.sova, probe=self.probe,
            spread_spare=self.spread_spare, held=held, threads=engine.threads,
        )  # fmt: skip
        if d.changed.size:
            self._submit(engine, fl.flows, fl.host, d.changed, d.new, d.pps)

    def _place(self, engine: Engine, fl: _Flows) -> None:
        """Each flow's limit in force and reservation, as its host's agent holds them:
        those another host's agent applied or kept are read from this host's agent's
        record (the VM moved since). Needed only when the flows changed: a flow's host is
        its limit's and its reservation's after this."""
        flows, fh = fl.flows, fl.host
        stale = np.flatnonzero(self.limit_host[flows] != fh)
        if stale.size:
            self.save(engine, flows[stale])
        for k in stale.tolist():
            i = int(flows[k])
            cur = self.agents[fh[k]].limits.get(engine.vm_names[i])
            self.limit[i] = math.nan if cur is None else cur
            self.limit_host[i] = fh[k]
        if self.spread_spare and self.guaranteed:
            for k in np.flatnonzero(self.res_host[flows] != fh).tolist():
                i, h = int(flows[k]), int(fh[k])
                if self.res_host[i] >= 0:
                    self._keep_reservation(engine, i)
                back = bw.Reservations.of([self.agents[h].reservations.get(engine.vm_names[i])])
                self.res_quiet[i], self.res_level[i] = back.quiet[0], back.level[0]
                self.res_fast[i] = back.fast[0]
                self.res_host[i] = h
        self.placed = fl

    def _submit(
        self,
        engine: Engine,
        flows: np.ndarray,
        fh: np.ndarray,
        ks: np.ndarray,
        new: np.ndarray,
        pps: np.ndarray,
    ) -> None:
        """The changed limits (flows ``ks``, in flow order) to the hosts' executors: one
        round of calls for those that can go straight in, the executor's own path for the
        others."""
        now = engine.env.now
        # A flow with no call in flight, not migrating, on a host whose executor tracks
        # nothing (no call in flight, no back-off) goes straight into the round; the
        # others take the per-flow rules below, which would let those through too.
        ci, ch = flows[ks], fh[ks]
        quiet = ~self.tracking
        # only the hosts with a change whose executors may track something are asked
        for h in _distinct(ch[self.tracking[ch]]).tolist():
            ex = self.agents[h].executor
            quiet[h] = ex.idle
            if ex.tracks_nothing:
                self.tracking[h] = False
        plain = quiet[ch] & ~self.pending[ci] & ~engine.migrating[ci]
        batch = ks[plain]
        more: list[int] = []
        for k in ks[~plain].tolist():
            i, h = int(flows[k]), int(fh[k])
            ex = self.agents[h].executor
            vm = engine.vm_names[i]
            if (self.pending[i] and self.pending_host[i] == h) or ex.backing_off(vm, now, "rate"):
                continue  # in flight, or backing off: the executor would not send it
            if engine.migrating[i] or self.pending[i] or ex.busy(vm, "rate"):
                # a VM that may leave before the call lands: the executor's own path
                r, p = float(new[k]), float(pps[k])
                ex.apply_limit(
                    SetGuestRateLimit(
                        vm, None if math.isnan(r) else r, None if math.isnan(p) else p
                    )
                )
                continue
            more.append(k)
        if more:  # submission order: flow order
            batch = np.sort(np.concatenate((batch, np.array(more, dtype=np.int64))))
        if batch.size:
            idx = flows[batch]
            self.pending[idx] = True
            self.pending_host[idx] = fh[batch]
            self.pending_rate[idx], self.pending_pps[idx] = new[batch], pps[batch]
            rnd = _Round(idx)
            self.rounds.append(rnd)
            engine.env.schedule(CALL_DELAY_S, partial(self._land, engine, rnd))

    def _flows(self, measured: np.ndarray, host: np.ndarray, n_hosts: int) -> _Flows:
        """The flows measured (``measured``: per VM) in each host's VM-name order, as
        the last period's when the same VMs were measured on the same hosts (usually)."""
        last = self.last_flows
        if (
            last is not None
            and np.array_equal(last.measured, measured)
            and (last.on is host or np.array_equal(last.on, host))
        ):
            return last
        flows = np.flatnonzero(measured)
        fh = host[flows]
        order = np.lexsort((self.rank[flows], fh))
        flows, fh = flows[order], fh[order]
        fl = _Flows(measured, host, flows, fh, Groups.of(fh, n_hosts))
        self.last_flows = fl
        return fl

    def _keep_reservation(self, engine: Engine, i: int) -> None:
        """VM ``i``'s reservation into the record of the agent it was held for."""
        held = bw.Reservations(
            self.res_quiet[i : i + 1], self.res_level[i : i + 1], self.res_fast[i : i + 1]
        )
        record = self.agents[int(self.res_host[i])].reservations
        entry = held.entry(0)
        if entry is None:
            record.pop(engine.vm_names[i], None)
        else:
            record[engine.vm_names[i]] = entry

    def _land(self, engine: Engine, rnd: _Round) -> None:
        """The round's calls take effect (Engine._apply of each SetGuestRateLimit)."""
        idx = rnd.idx
        ok = engine.host[idx] == self.pending_host[idx]
        on = idx[ok]
        rate, pps = self.pending_rate[on], self.pending_pps[on]
        engine.guest_limit[on] = np.where(np.isnan(rate), INF, rate)
        engine.guest_pps[on] = np.where(np.isnan(pps), INF, pps)
        rnd.ok, rnd.landed = ok, True

    def settle(self, engine: Engine) -> None:
        """At the agents' poll: the landed rounds' outcomes, as each executor would collect
        them. A limit that landed becomes its agent's applied limit (what the outcome would
        do through HostAgent's handler; a successful limit is no event in a simulated run,
        record.outcome_event); one that did not is a failure the executor records."""
        now = engine.env.now
        while self.rounds and self.rounds[0].landed:
            rnd = self.rounds.pop(0)
            idx = rnd.idx
            self.pending[idx] = False
            on = idx[rnd.ok]
            mine = on[self.limit_host[on] == self.pending_host[on]]
            self.limit[mine] = self.pending_rate[mine]
            hosts = self.pending_host[on]
            # an unsaved limit another host's agent applied goes into its record first
            self.save(engine, on[self.saved_host[on] != hosts])
            self.saved[on] = False
            self.saved_host[on], self.saved_rate[on] = hosts, self.pending_rate[on]
            # only an executor that tracks something may be failing
            for h in _distinct(hosts[self.tracking[hosts]]).tolist():
                ex = self.agents[h].executor
                if ex.failing:  # the failure counts of the landed calls start again
                    ex.settled_all(self.names[on[hosts == h]].tolist(), "rate")
            for i in idx[~rnd.ok].tolist():
                h = int(self.pending_host[i])
                r, p = float(self.pending_rate[i]), float(self.pending_pps[i])
                vm = engine.vm_names[i]
                action = SetGuestRateLimit(
                    vm, None if math.isnan(r) else r, None if math.isnan(p) else p
                )
                detail = f"VM {vm!r} is no longer on {engine.host_names[h]}"
                self.agents[h].executor.settle(Outcome(now, action, Result.FAILED, detail))


def _distinct(a: np.ndarray) -> np.ndarray:
    """The distinct values of ``a``, sorted by host (flows are in host order): no sort."""
    if a.size < 2:
        return a
    return a[np.concatenate(([True], a[1:] != a[:-1]))]


@dataclass(frozen=True)
class _Flows:
    """One period's flows (read only: reused while the same VMs are measured in place)."""

    measured: np.ndarray  # per VM: measured this period, on the host of the last reading
    on: np.ndarray  # per VM: its host
    flows: np.ndarray  # the measured VMs, by host, each host's in VM-name order
    host: np.ndarray  # each flow's host
    groups: Groups


@dataclass
class _Round:
    idx: np.ndarray  # the VMs whose limit calls this round submitted, in submission order
    landed: bool = False
    ok: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
