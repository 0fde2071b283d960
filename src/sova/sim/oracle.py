"""An oracle with hindsight for VF assignment: the best holders per period, knowing the
true future demand, paying the same blip per move as everyone else.

The model, per host: ``k`` identical VFs over ``S`` blocks of time (a block is a run of
control periods over which the trace is constant, e.g. its 5-minute samples). A VF held by
VM ``i`` in block ``s`` is worth ``benefit[i, s]``: the traffic (Mbit) a VF carries for it
beyond its virtio ceiling, ``sum over the block's samples of (min(d, link) - min(d, virtio
ceiling)) * period``, at the demand ``d`` the VM offered (measured in a run, so the
workload's own jitter is included). Moving a VF costs the blip: ``BLIP_ATTACH_S * d`` of the
VM that gets it and ``BLIP_DETACH_S * d`` of the VM that loses it (docs/lab.md, nested
tier), plus tiny fixed costs so that a move that buys nothing is never made and a VF is held no
longer than it pays. Plugging a VF costs least while the VM is quiet, so the oracle
plugs a VM one block before its burst when the blip at the burst's rate would cost more:
such an attach counts as useless by :mod:`sova.sim.decisions`' one-minute definition.

That is a min-cost flow: each VF is one unit of flow through time, from a free pool through
at most one VM per block; edges VM(s) -> VM(s+1) cost 0 (keep it), VM(s) -> pool(s+1) costs
the detach, pool(s) -> VM(s) costs the attach, and the VM(s) node's one-unit edge pays
``-benefit``. Its linear program's constraint matrix is a network matrix (totally
unimodular), so HiGHS's simplex answer is integral: **exact for this model** over schedules
that change at block boundaries. It is **not exact for the simulated physics** — link
sharing among VMs, the backend's shared packet rate, hot-plug delays and the controller's
period are outside the model — so its replay through the simulator is a strong reference,
a bound on what a VF policy can reach only up to those effects.

:func:`oracle_policy` turns a schedule into a VF policy class the simulator's agents run
(registered by the decision benchmark for its runs only; it is no operator policy).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from sova.agent.vf_policies import Desired, VFContext, VFPolicy
from sova.policy.vfsched import VFDecision
from sova.scenario import Scenario
from sova.sim.decisions import BLIP_ATTACH_S, BLIP_DETACH_S, DemandGrid, virtio_ceiling_bps

MOVE_EPSILON_MBIT = 1e-3  # breaks ties between equal schedules towards fewer moves
# ... and towards holding a VF no longer than it pays: a VF is attached as late as the blip's
# price allows (a VM's quiet block before its burst is the cheapest time to plug it)
HOLD_EPSILON_MBIT = 1e-6


@dataclass(frozen=True)
class HostPlan:
    block_s: float
    holders: list[list[str]]  # per block, the VMs holding a VF
    value_mbit: float  # the model's objective: benefit minus blip costs


def solve_host(
    benefit: np.ndarray, attach: np.ndarray, detach: np.ndarray, k: int
) -> tuple[np.ndarray, float]:
    """The min-cost flow above for one host: ``benefit``, ``attach``, ``detach`` are (n, S)
    arrays in Mbit (``detach[i, s]``: freeing VM i's VF at the start of block s). Returns
    the (n, S) holders (bool) and the schedule's value (benefit minus costs)."""
    # scipy (the test and benchmark environments) only for the oracle, which only the
    # decision benchmark and its tests run
    from scipy.optimize import linprog  # type: ignore[import-untyped]
    from scipy.sparse import coo_matrix  # type: ignore[import-untyped]

    n, S = benefit.shape
    if n == 0 or S == 0 or k == 0:
        return np.zeros((n, S), dtype=bool), 0.0
    # nodes: pool[0..S], then in[i, s] and out[i, s]
    pool = np.arange(S + 1)
    vin = S + 1 + np.arange(n * S).reshape(n, S)
    vout = vin + n * S
    n_nodes = S + 1 + 2 * n * S
    tails: list[np.ndarray] = []
    heads: list[np.ndarray] = []
    costs: list[np.ndarray] = []
    caps: list[np.ndarray] = []

    def edges(t: np.ndarray, h: np.ndarray, c: np.ndarray, cap: float) -> None:
        tails.append(t.ravel())
        heads.append(h.ravel())
        costs.append(c.ravel().astype(float))
        caps.append(np.full(t.size, cap))

    edges(pool[:-1], pool[1:], np.zeros(S), float(k))  # a VF stays free
    edges(np.broadcast_to(pool[:-1], (n, S)), vin, attach + MOVE_EPSILON_MBIT, 1.0)
    edges(vin, vout, HOLD_EPSILON_MBIT - benefit, 1.0)  # held for the block
    edges(vout[:, :-1], vin[:, 1:], np.zeros((n, S - 1)), 1.0)  # kept
    last = np.zeros((n, 1))  # the run ends: no detach to pay
    freed = np.hstack([detach[:, 1:] + MOVE_EPSILON_MBIT, last])
    edges(vout, np.broadcast_to(pool[1:], (n, S)), freed, 1.0)
    tail, head = np.concatenate(tails), np.concatenate(heads)
    cost, cap = np.concatenate(costs), np.concatenate(caps)
    m = tail.size
    rows = np.concatenate([tail, head])
    cols = np.concatenate([np.arange(m), np.arange(m)])
    vals = np.concatenate([np.ones(m), -np.ones(m)])  # out minus in = supply
    a_eq = coo_matrix((vals, (rows, cols)), shape=(n_nodes, m)).tocsr()
    b_eq = np.zeros(n_nodes)
    b_eq[pool[0]], b_eq[pool[-1]] = k, -k
    res = linprog(
        cost, A_eq=a_eq, b_eq=b_eq, bounds=np.column_stack([np.zeros(m), cap]), method="highs-ds"
    )
    if res.status != 0:
        raise RuntimeError(f"oracle: the flow problem did not solve ({res.message})")
    x = res.x
    held = x[S + n * S : S + 2 * n * S].reshape(n, S)
    if not np.allclose(held, np.round(held), atol=1e-6):
        raise RuntimeError("oracle: the simplex answer is fractional (not a network matrix?)")
    return held > 0.5, float(-res.fun)


def plan(
    scn: Scenario,
    grid: DemandGrid,
    block_s: float,
    blip_attach_s: float = BLIP_ATTACH_S,
    blip_detach_s: float = BLIP_DETACH_S,
) -> dict[str, HostPlan]:
    """Every host's oracle schedule for ``scn`` given the demand ``grid`` (a run's offered
    load per VM and sample; the workload does not depend on the policy)."""
    period = scn.controller.period
    if block_s < period or abs(block_s / period - round(block_s / period)) > 1e-9:
        raise ValueError(f"block_s: a whole number of periods ({period} s) (got {block_s})")
    ceiling = virtio_ceiling_bps(scn.profile)
    S = int(np.ceil(scn.duration / block_s))
    # sample at time t shows the period (t - period, t]: block s holds samples in
    # (s * block_s, (s + 1) * block_s]
    blk = np.clip(np.ceil(grid.times / block_s - 1e-9).astype(int) - 1, 0, S - 1)
    out: dict[str, HostPlan] = {}
    placement = {h.name: list(h.vms) for h in scn.hosts}
    for host in scn.hosts:
        vms = [v for v in placement[host.name] if v in grid.vms]
        idx = np.array([grid.index(v) for v in vms], dtype=np.int64)
        d = grid.offered[idx] if idx.size else np.zeros((0, grid.times.size))
        cap = host.nic.capacity
        gain = (np.minimum(d, cap) - np.minimum(d, min(ceiling, cap))) * period / 1e6
        benefit = np.zeros((len(vms), S))
        for i in range(len(vms)):
            benefit[i] = np.bincount(blk, gain[i], minlength=S)[:S]
        # the demand at each block's first sample prices its moves
        first = np.searchsorted(blk, np.arange(S))
        first = np.clip(first, 0, max(grid.times.size - 1, 0))
        d0 = d[:, first] / 1e6 if d.size else np.zeros((len(vms), S))
        held, value = solve_host(benefit, blip_attach_s * d0, blip_detach_s * d0, host.nic.vf_pool)
        holders = [[vms[i] for i in np.flatnonzero(held[:, s])] for s in range(S)]
        out[host.name] = HostPlan(block_s, holders, value)
    return out


class OracleVF(VFPolicy):
    """Holds the VFs where the precomputed schedule says (benchmarks only)."""

    name = "oracle"
    schedule: ClassVar[Mapping[str, HostPlan]] = {}

    def desired(self, ctx: VFContext) -> tuple[VFDecision | None, Desired]:
        p = self.schedule.get(ctx.actual.host.name)
        if p is None or not p.holders:
            return None, {}
        s = min(int(ctx.now / p.block_s + 1e-9), len(p.holders) - 1)
        chosen: Sequence[str] = [v for v in p.holders[s] if v in ctx.actual.vms]
        return None, ctx.with_tiers(list(chosen))


def oracle_policy(schedule: Mapping[str, HostPlan], name: str = "oracle") -> type[VFPolicy]:
    """A VF policy class that replays ``schedule`` (register it, run, unregister it)."""
    return type("OracleReplay", (OracleVF,), {"name": name, "schedule": dict(schedule)})
