"""BENCHMARK HARNESS, not the controller: the Sova loop for every host at once, in numpy.

The controller is :class:`sova.agent.loop.HostAgent` (one per host) with the manager's
:class:`sova.manager.core.ManagerCore`; that is what runs in every world and what the design
describes (docs/design.md). This module exists only so that ``benchmarks/sim_scale.py`` can
drive 1,000 hosts x 20 VMs x 360 control periods in seconds: one Python agent per host
builds per-VM objects every step, which is right for a real host and hopeless at that scale.
It re-implements the subset of the policy that benchmark needs on flat arrays:

    cumulative counters -> per-period stats in (N x window) shift buffers, resets dropped
    -> io_degree, IF, net_degree, host-normalised NF        (formulas of policy/sensing.py)
    -> VF holders per host: filter, no-traffic exclusion, tolerance groups from the leader,
       I/O and name tie-breaks, hysteresis, dwell, ineligible VMs    (policy/vfsched.py)
    -> detaches before attaches, only into VFs free now, per-period op budget
                                                                     (agent/loop.py)
    -> host (cpu, mem, net) history -> k-of-n + AR(1) verdicts for every host at once
       (policy/hotspot.py); target choice for the few hot hosts is delegated to the scalar
       :func:`~sova.policy.hotspot.coordinate`, so planning is the real code
    -> migrations submitted to the engine, the VF revoked first.

Every float is computed with the same operations in the same order as the scalar code, so
``tests/test_batch.py`` demands *identical* answers from the kernels and the same decisions
from a World of HostAgents tick for tick: that test is what keeps this copy honest, and a
change to the policy must be mirrored here or the test fails. What it does not implement it
refuses (:func:`unsupported`) instead of silently differing: VF policies other than dsr-iov,
sova and migration-only, bandwidth policies, VF rate tiers, boot-time VFs, and the
manager's restart_window_after_migration and return_tabu.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from sova.agent.config import ControllerConfig
from sova.agent.registry import vf_policy
from sova.model import Action, AttachVF, DetachVF, Migrate
from sova.policy.hotspot import (
    VOLUME_CLAMP,
    HostReport,
    HotnessMetric,
    HotspotDetector,
    MigrationSignal,
    Utilisation,
    VMLoad,
    choose_vm,
    coordinate,
)
from sova.policy.sensing import GOTTEN_FLOOR_FRACTION, NS
from sova.policy.vfsched import VFSchedulerConfig
from sova.scenario import PolicySpec, Scenario
from sova.sim.engine import Engine
from sova.sim.state import Op
from sova.sim.world import agent_config

# --------------------------------------------------------------------------- sensing


@dataclass
class BatchFactors:
    """The factors of :class:`sova.policy.sensing.VMFactors` for every VM, as arrays."""

    cpu_usage: np.ndarray
    io_degree: np.ndarray
    io_factor: np.ndarray
    net_degree: np.ndarray
    net_factor: np.ndarray
    has_traffic: np.ndarray
    count: np.ndarray  # periods in each VM's window (0 = nothing measured yet)


class BatchSensor:
    """:class:`~sova.policy.sensing.HostSensor` for all hosts: one row per VM.

    Windows are right-aligned shift buffers (newest in the last column) so that sums over
    a window run oldest first exactly like ``sum(...)`` over the scalar deque; the empty
    slots on the left add 0.0 first, which leaves every partial sum bit-identical.
    A VM whose host changed since the last observation starts an empty window and skips
    that period (the scalar target sensor has no previous reading of it).
    """

    FIELDS = ("cpu", "gotten", "blocked", "bytes", "packets", "dt", "vcpus")

    def __init__(
        self, n_vms: int, num: int = 6, epsilon: float = 0.7, threshold_bps: float = 10_000.0
    ) -> None:
        if num < 1:
            raise ValueError(f"window num must be >= 1, got {num}")
        self.n, self.num, self.epsilon, self.threshold = n_vms, num, epsilon, threshold_bps
        self.buf = {k: np.zeros((n_vms, num)) for k in self.FIELDS}
        self.count = np.zeros(n_vms, dtype=np.int64)
        self.prev: np.ndarray | None = None  # (6, N) truncated counters at the last reading
        self.prev_host = np.full(n_vms, -1, dtype=np.int64)
        self.last_t: float | None = None
        self.resets = 0

    def observe(
        self, t: float, counters: np.ndarray, vcpus: np.ndarray, host: np.ndarray
    ) -> tuple[np.ndarray, dict[str, np.ndarray], float] | None:
        """Take a reading: ``counters`` is (6, N) cpu, steal, rx_b, tx_b, rx_pk, tx_pk.

        Returns ``(valid, stats, dt)`` — which VMs got a new period and its values (what
        the agent's per-VM loads are computed from) — or None for the first or a stale
        reading. Counters must already be truncated like the driver's ``int()``.
        """
        if self.last_t is not None and t <= self.last_t:
            return None  # repeated or out-of-order reading: ignored, like the scalar sensor
        prev, prev_host, last_t = self.prev, self.prev_host, self.last_t
        self.prev, self.prev_host, self.last_t = counters.copy(), host.copy(), t
        moved = host != prev_host
        self.count[moved] = 0
        if prev is None or last_t is None:
            return None
        dt = t - last_t
        d = counters - prev
        reset = (d < 0).any(axis=0) & ~moved
        self.resets += int(reset.sum())
        valid = ~moved & ~reset
        v = np.maximum(vcpus, 1.0)
        capacity_ns = dt * NS * v
        d_cpu = d[0]
        stats = {
            "cpu": np.minimum(1.0, d_cpu / capacity_ns),
            "gotten": d_cpu,
            "blocked": np.maximum(0.0, capacity_ns - d_cpu - d[1]),
            "rx_bytes": d[2],
            "tx_bytes": d[3],
            "bytes": d[2] + d[3],
            "packets": d[4] + d[5],
            "dt": np.full(self.n, dt),
            "vcpus": v,
        }
        idx = np.flatnonzero(valid)
        for k in self.FIELDS:
            b = self.buf[k]
            b[idx, :-1] = b[idx, 1:]
            b[idx, -1] = stats[k][idx]
        self.count[idx] = np.minimum(self.count[idx] + 1, self.num)
        return valid, stats, dt

    def factors(self, host: np.ndarray, n_hosts: int) -> BatchFactors:
        num, c = self.num, self.count
        valid = np.arange(num)[None, :] >= (num - c)[:, None]
        b = self.buf
        dt = np.where(valid, b["dt"], 1.0)
        rate = 8.0 * b["bytes"] / dt
        traffic = valid & (rate >= self.threshold)
        floor = GOTTEN_FLOOR_FRACTION * b["dt"] * NS * b["vcpus"]
        ratio = b["blocked"] / np.maximum(b["gotten"], np.where(valid, floor, 1.0))
        kbps = b["bytes"] / dt
        pps = b["packets"] / dt
        s_cpu, s_if, s_kb = np.zeros(self.n), np.zeros(self.n), np.zeros(self.n)
        for j in range(num):  # oldest first, like sum() over the deque
            m = valid[:, j]
            s_cpu = s_cpu + np.where(m, b["cpu"][:, j], 0.0)
            s_if = s_if + np.where(m, ratio[:, j], 0.0)
            s_kb = s_kb + np.where(m, kbps[:, j], 0.0)
        n = np.maximum(c, 1).astype(float)
        has = c > 0
        busy_n = traffic.sum(axis=1)
        freq = np.where(has, busy_n / n, 0.0)
        eps = self.epsilon
        io_degree = np.where(has, 100.0 * (1.0 - s_cpu / n), 100.0)
        io_factor = np.where(has, s_if / n, 0.0)
        net_degree = np.where(has, eps * (s_kb / n / 1000.0) + (1.0 - eps) * freq, 0.0)
        # NF: min-max over every traffic period of every VM of the host (sensing.py).
        vmin = np.where(traffic, pps, np.inf).min(axis=1)
        vmax = np.where(traffic, pps, -np.inf).max(axis=1)
        lo_h, hi_h = np.full(n_hosts, np.inf), np.full(n_hosts, -np.inf)
        np.minimum.at(lo_h, host, vmin)
        np.maximum.at(hi_h, host, vmax)
        active_h = np.isfinite(lo_h)
        lo_h, hi_h = np.where(active_h, lo_h, 0.0), np.where(active_h, hi_h, 0.0)
        lo, span = lo_h[host], (hi_h - lo_h)[host]
        pos = span > 0
        norm = np.where(pos[:, None], (pps - lo[:, None]) / np.where(pos, span, 1.0)[:, None], 1.0)
        s_norm = np.zeros(self.n)
        for j in range(num):
            s_norm = s_norm + np.where(traffic[:, j], norm[:, j], 0.0)
        avg = np.where(busy_n > 0, s_norm / np.maximum(busy_n, 1), 0.0)
        net_factor = eps * freq + (1.0 - eps) * avg
        last_cpu = np.where(has, b["cpu"][:, -1], 0.0)
        return BatchFactors(
            cpu_usage=last_cpu,
            io_degree=io_degree,
            io_factor=io_factor,
            net_degree=net_degree,
            net_factor=net_factor,
            has_traffic=busy_n > 0,
            count=c.copy(),
        )


# --------------------------------------------------------------------------- VF scheduling


def _segments(keys_sorted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Start index of each element's run of equal keys, and its position inside the run."""
    n = keys_sorted.size
    if n == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    new = np.r_[True, keys_sorted[1:] != keys_sorted[:-1]]
    start = np.maximum.accumulate(np.where(new, np.arange(n), 0))
    return start, np.arange(n) - start


def _cumcount(host_sorted: np.ndarray, flag: np.ndarray) -> np.ndarray:
    """For rows sorted by host: how many flagged rows of the same host up to and incl. this."""
    cs = np.cumsum(flag)
    start, _ = _segments(host_sorted)
    before = np.where(start > 0, cs[np.maximum(start - 1, 0)], 0)
    return cs - before


@dataclass
class BatchDecision:
    pq: np.ndarray  # bool per VM: holds a VF after this period
    rank: np.ndarray  # position in its host's ranking (0 = best), -1 = not ranked


def schedule_batch(
    host: np.ndarray,
    name_rank: np.ndarray,
    io_score: np.ndarray,
    net_score: np.ndarray,
    has_traffic: np.ndarray,
    eligible: np.ndarray,
    holder: np.ndarray,
    since: np.ndarray,
    vf_count: np.ndarray,
    now_s: float,
    config: VFSchedulerConfig,
) -> BatchDecision:
    """:func:`sova.policy.vfsched.schedule` for every host at once (one row per VM)."""
    n = host.size
    passed = eligible.copy()
    boost = np.where(holder, 1.0 + config.hysteresis, 1.0)
    netb, iob = net_score * boost, io_score * boost
    if config.io_filter == "threshold":
        passed &= iob >= config.io_threshold
    elif config.top_q:
        e = np.flatnonzero(eligible)
        order = e[np.lexsort((name_rank[e], -iob[e], host[e]))]
        _, pos = _segments(host[order])
        passed[order[pos >= config.top_q]] = False
    active = np.flatnonzero(passed & has_traffic)
    # tolerance groups, formed greedily from each host's leader down
    order = active[np.lexsort((name_rank[active], -netb[active], host[active]))]
    hs = host[order]
    start, pos = _segments(hs)
    group = np.zeros(order.size, dtype=np.int64)
    leader = np.zeros(order.size)  # per segment start, the current group's leader score
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
    # holders inside their dwell keep their VF whatever their rank (up to the pool)
    prot = holder[ranked] & (now_s - since[ranked] < config.min_dwell_s)
    vfc = vf_count[hr]
    prot_taken = prot & (_cumcount(hr, prot) <= vfc)
    n_prot = np.bincount(hr, prot_taken, minlength=vf_count.size).astype(np.int64)
    rest = ~prot
    fill = rest & (_cumcount(hr, rest) <= np.maximum(vfc - n_prot[hr], 0))
    pq = np.zeros(n, dtype=bool)
    pq[ranked[prot_taken | fill]] = True
    return BatchDecision(pq=pq, rank=rank)


# --------------------------------------------------------------------------- hotspots


def volume_batch(u: np.ndarray) -> np.ndarray:
    """Sandpiper volume of each row (cpu, mem, net), as :func:`hotspot.volume`."""
    product = np.ones(u.shape[0])
    for r in range(3):
        product = product * (1.0 - np.minimum(u[:, r], VOLUME_CLAMP))
    return 1.0 / product


def skewness_batch(u: np.ndarray) -> np.ndarray:
    mean = (((0.0 + u[:, 0]) + u[:, 1]) + u[:, 2]) / 3
    safe = np.where(mean == 0.0, 1.0, mean)
    s = np.zeros(u.shape[0])
    for r in range(3):
        d = u[:, r] / safe - 1.0
        s = s + d * d
    return np.where(mean == 0.0, 0.0, np.sqrt(s))


def hotness_batch(u: np.ndarray, metric: HotnessMetric | str) -> np.ndarray:
    if HotnessMetric(metric) is HotnessMetric.SKEWNESS:
        return skewness_batch(u)
    return volume_batch(u)


@dataclass
class BatchVerdict:
    hot: np.ndarray  # (H,) any resource hot
    hot_res: np.ndarray  # (H, 3)
    over: np.ndarray  # (H, 3)
    forecast: np.ndarray  # (H, 3)


def assess_batch(hist: np.ndarray, count: np.ndarray, detector: HotspotDetector) -> BatchVerdict:
    """:meth:`HotspotDetector.assess` for every host: ``hist`` is (H, n, 3), newest last,
    with the last ``count[h]`` entries of row h valid."""
    H, n, _ = hist.shape
    valid = np.arange(n)[None, :] >= (n - count)[:, None]
    c = np.maximum(count, 1).astype(float)
    over = np.zeros((H, 3), dtype=np.int64)
    fc = np.zeros((H, 3))
    for r in range(3):
        x = hist[:, :, r]
        over[:, r] = (valid & (x > detector.alpha)).sum(axis=1)
        s = np.zeros(H)
        for j in range(n):
            s = s + np.where(valid[:, j], x[:, j], 0.0)
        mean = s / c
        dev = x - mean[:, None]
        var = np.zeros(H)
        cov = np.zeros(H)
        for j in range(n):
            var = var + np.where(valid[:, j], dev[:, j] * dev[:, j], 0.0)
            if j + 1 < n:
                cov = cov + np.where(valid[:, j], dev[:, j] * dev[:, j + 1], 0.0)
        flat = var <= 1e-24 * np.maximum(1.0, mean * mean) * c
        phi = np.where(flat, 0.0, cov / np.where(flat, 1.0, var))
        phi = np.maximum(-1.0, np.minimum(1.0, phi))
        fc[:, r] = mean + phi * (x[:, -1] - mean)
    hot_res = (over >= detector.k) & (fc > detector.alpha) & (count > 0)[:, None]
    return BatchVerdict(
        hot=np.asarray(hot_res.any(axis=1)), hot_res=hot_res, over=over, forecast=fc
    )


# --------------------------------------------------------------------------- planning


def plan_batch(
    hosts: np.ndarray,
    host: np.ndarray,
    name_rank: np.ndarray,
    rank: np.ndarray,
    desired: np.ndarray,
    holder: np.ndarray,
    busy: np.ndarray,
    pool: np.ndarray,
    pending_attach: np.ndarray,
    budget: np.ndarray,
) -> list[tuple[int, int, str]]:
    """:func:`sova.agent.loop.plan_actions` for the hosts in ``hosts`` (no tiers, no rates).

    Returns ``(host, vm, "detach"|"attach")`` in submission order: host by host, detaches by
    name, then attaches by rank into the VFs free now, at most ``budget[h]`` per host.
    """
    on = np.zeros(pool.size, dtype=bool)
    on[hosts] = True
    mine = on[host] & (budget[host] > 0)
    det = np.flatnonzero(mine & holder & ~desired & ~busy)
    cand = np.flatnonzero(mine & desired & ~holder & ~busy)
    cand = cand[np.lexsort((rank[cand], host[cand]))]
    n_hold = np.bincount(host[holder], minlength=pool.size)
    free = pool - n_hold - pending_attach
    att = cand[_cumcount(host[cand], np.ones(cand.size, dtype=bool)) <= free[host[cand]]]
    vm = np.r_[det, att]
    kind = np.r_[np.zeros(det.size, dtype=np.int64), np.ones(att.size, dtype=np.int64)]
    key2 = np.r_[name_rank[det], rank[att]]
    o = np.lexsort((key2, kind, host[vm]))
    vm, kind = vm[o], kind[o]
    keep = _cumcount(host[vm], np.ones(vm.size, dtype=bool)) <= budget[host[vm]]
    return [
        (int(host[i]), int(i), "attach" if k else "detach")
        for i, k in zip(vm[keep], kind[keep], strict=True)
    ]


# --------------------------------------------------------------------------- controller


@dataclass
class _InFlight:
    op_id: str
    host: int
    action: Action
    submitted_s: float


@dataclass
class _Lease:
    src: int
    dst: int
    since_s: float


@dataclass
class BatchStats:
    steps: int = 0
    submitted: int = 0
    vf_attaches: int = 0
    vf_detaches: int = 0
    migrations_started: int = 0
    migrations_done: int = 0
    migrations_failed: int = 0
    hotspots: int = 0  # (host, round) verdicts that were hot
    coordinate_calls: int = 0
    coordinate_hosts: int = 0  # reports handed to the scalar planner, summed over calls
    coordinate_fallbacks: int = 0  # replay disagreed with coordinate(): ran it on every host
    blocked: int = 0


@dataclass
class ManagerParams:
    alpha: float = 0.75
    k: int = 3
    n: int = 5
    metric: str = "volume"
    ceiling: float | None = None
    lease_timeout_s: float = 900.0


BATCH_VF_POLICIES = ("dsr-iov", "sova", "migration-only")


def unsupported(config: ControllerConfig, engine: Engine) -> list[str]:
    """Every option of ``config`` (and the engine's hosts) this harness does not implement,
    each as ``field=value``; empty when it can run them exactly as the agents would."""
    out = []
    if config.vf_policy not in BATCH_VF_POLICIES:
        out.append(f"vf_policy={config.vf_policy!r} (only {', '.join(BATCH_VF_POLICIES)})")
    if config.bandwidth_policy != "none":
        out.append(f"bandwidth_policy={config.bandwidth_policy!r} (no bandwidth loop)")
    if config.boot_vfs:
        out.append("boot_vfs=True")
    m = config.manager
    if m.restart_window_after_migration:
        out.append("manager.restart_window_after_migration=True")
    if m.return_tabu:
        out.append(f"manager.return_tabu={m.return_tabu:g}")
    for limit in ("max_concurrent_migrations", "max_migrations_per_hour", "vm_cooldown"):
        if getattr(m, limit):
            out.append(f"manager.{limit}={getattr(m, limit):g}")
    tiered = [h.name for h in engine.hosts if h.nic.tiers_bps]
    if tiered:
        out.append(f"VF rate tiers (nic.tiers on {', '.join(tiered)})")
    return out


class BatchController:
    """Every host's agent plus the manager, run as arrays over one :class:`Engine`.

    Drive it like World drives its agents: after each ``engine.tick(t0, t1)`` and
    ``engine.env.run(until=t1)`` call :meth:`poll` (collect finished operations; a freed VF
    is re-planned at once), and every control period :meth:`step` (sense, decide, plan,
    apply, then the manager's round, whose signals act at the next step).
    """

    def __init__(
        self,
        engine: Engine,
        config: ControllerConfig,
        manager: ManagerParams | None = None,
    ) -> None:
        refused = unsupported(config, engine)
        if refused:
            raise ValueError(
                "the batch benchmark harness does not implement "
                + "; ".join(refused)
                + " (run the scenario with sova simulate)"
            )
        self.eng, self.cfg = engine, config
        e = engine
        self.H, self.N = e.H, e.N
        names = np.array(e.vm_names)
        self.name_rank = np.empty(self.N, dtype=np.int64)
        self.name_rank[np.argsort(names, kind="stable")] = np.arange(self.N)
        self.sensor = BatchSensor(
            self.N, config.sensing.window, config.sensing.epsilon, config.sensing.traffic_threshold
        )
        self.pool = np.array([h.nic.vf_pool for h in e.hosts], dtype=np.int64)
        self.since = np.full(self.N, np.nan)
        # Operation VLM (Alg. 1): target host per VM, -1 = none; and the labelling host
        self.agent_mig = np.full(self.N, -1, dtype=np.int64)
        self._mig_src: dict[int, int] = {}
        self.desired = np.zeros(self.N, dtype=bool)
        self.rank = np.full(self.N, -1, dtype=np.int64)
        self.ops_used = np.zeros(self.H, dtype=np.int64)
        self.inflight: dict[int, _InFlight] = {}  # vm -> its one "nic"-channel operation
        self.busy = np.zeros(self.N, dtype=bool)
        self.pending_attach = np.zeros(self.H, dtype=np.int64)
        self.failures: dict[tuple[int, int], int] = {}
        self.blocked_until: dict[tuple[int, int], float] = {}
        self._done: list[Op] = []
        e.on_op_done.append(lambda _t, op: self._done.append(op))
        self._prev_hc: np.ndarray | None = None
        self._prev_t: float | None = None
        self.vm_util = np.zeros((self.N, 3))
        self.vm_util_ok = np.zeros(self.N, dtype=bool)
        self.mgr = manager
        self.detector = (
            HotspotDetector(k=manager.k, n=manager.n, alpha=manager.alpha) if manager else None
        )
        self.manager_on = manager is not None and vf_policy(config.vf_policy).uses_manager
        self.manager_on = self.manager_on and self.H > 1
        hn = self.detector.n if self.detector else 1
        self.load_hist = np.zeros((self.H, hn, 3))
        self.load_count = np.zeros(self.H, dtype=np.int64)
        self.leases: dict[int, _Lease] = {}
        self.signal: dict[int, tuple[int, str | None]] = {}
        self.stats = BatchStats()

    @classmethod
    def for_world(cls, engine: Engine, scn: Scenario, policy: PolicySpec) -> BatchController:
        """Build with the same configuration a World gives its agents and manager."""
        m = scn.controller.manager
        return cls(
            engine,
            agent_config(scn, policy),
            ManagerParams(alpha=m.alpha, k=m.k, n=m.n, metric=m.metric, ceiling=m.ceiling),
        )

    # ----------------------------------------------------------------- operations

    def _collect(self, now: float) -> set[int]:
        """Executor.poll + HostAgent._outcome + the World's lease release, for all hosts.

        Returns the hosts where a VF detach succeeded (they re-plan at once)."""
        freed: set[int] = set()
        done, self._done = self._done, []
        finished: list[tuple[_InFlight, str]] = []
        for op in done:
            i = self.eng.vm_index[op.action.vm]
            rec = self.inflight.get(i)
            if rec is None or rec.op_id != op.op_id:
                continue  # timed out earlier: reconciliation already moved on
            finished.append((rec, op.state))
        for rec in list(self.inflight.values()):
            limit = (
                self.cfg.migration_timeout
                if isinstance(rec.action, Migrate)
                else self.cfg.op_timeout
            )
            if now - rec.submitted_s > limit and all(r is not rec for r, _ in finished):
                finished.append((rec, "timeout"))
        for rec, state in finished:
            a = rec.action
            i = self.eng.vm_index[a.vm]
            del self.inflight[i]
            self.busy[i] = False
            if isinstance(a, AttachVF):
                self.pending_attach[rec.host] -= 1
            key = (rec.host, i)
            if state == "succeeded":
                self.failures.pop(key, None)
            else:
                n = self.failures.get(key, 0) + 1
                self.failures[key] = n
                if n >= self.cfg.max_retries:
                    self.blocked_until[key] = now + min(
                        600.0, 20.0 * 2 ** (n - self.cfg.max_retries)
                    )
            ok = state == "succeeded"
            if ok and isinstance(a, AttachVF):
                self.since[i] = now
                self.stats.vf_attaches += 1
            elif ok and isinstance(a, DetachVF):
                self.since[i] = np.nan
                self.stats.vf_detaches += 1
                freed.add(rec.host)
            elif isinstance(a, Migrate):
                self.agent_mig[i] = -1
                self._mig_src.pop(i, None)
                self.since[i] = np.nan
                self.leases.pop(i, None)
                if ok:
                    self.stats.migrations_done += 1
                else:
                    self.stats.migrations_failed += 1
        return freed

    def _apply(self, h: int, i: int, action: Action, now: float) -> None:
        """Executor.apply: one operation per VM, back-off, never detach without a backup."""
        if i in self.inflight or self.blocked_until.get((h, i), -1.0) > now:
            return
        if int(self.eng.host[i]) != h:
            self.stats.blocked += 1
            return
        if isinstance(action, DetachVF) and not self.eng.ready[i]:
            self.stats.blocked += 1
            return
        op_id = self.eng.submit(self.eng.host_names[h], action)
        self.inflight[i] = _InFlight(op_id, h, action, now)
        self.busy[i] = True
        self.stats.submitted += 1
        if isinstance(action, AttachVF):
            self.pending_attach[h] += 1
        elif isinstance(action, Migrate):
            self.stats.migrations_started += 1

    def _reconcile(self, hosts: np.ndarray, now: float) -> None:
        """HostAgent._reconcile for ``hosts`` (ascending), submitting host by host."""
        e = self.eng
        budget = self.cfg.max_ops_per_period - self.ops_used
        planned = plan_batch(
            hosts,
            e.host,
            self.name_rank,
            self.rank,
            self.desired,
            e.on_vf,
            self.busy,
            self.pool,
            self.pending_attach,
            budget,
        )
        by_host: dict[int, list[tuple[int, Action]]] = {}
        for h, i, kind in planned:
            act: Action = AttachVF(e.vm_names[i]) if kind == "attach" else DetachVF(e.vm_names[i])
            by_host.setdefault(h, []).append((i, act))
        mig = np.flatnonzero(self.agent_mig >= 0)
        on = np.zeros(self.H, dtype=bool)
        on[hosts] = True
        mig_by_host: dict[int, list[int]] = {}
        for i in mig[np.argsort(self.name_rank[mig], kind="stable")]:
            src = self._mig_src.get(int(i))
            if src is not None and on[src]:
                mig_by_host.setdefault(src, []).append(int(i))
        for h in sorted(set(by_host) | set(mig_by_host)):
            acts = by_host.get(h, [])
            for i in mig_by_host.get(h, []):
                if int(e.host[i]) != h:
                    self.agent_mig[i] = -1  # already gone
                    self._mig_src.pop(i, None)
                    continue
                if self.busy[i]:
                    continue
                if e.on_vf[i]:
                    acts.append((i, DetachVF(e.vm_names[i])))
                elif not e.migrating[i]:
                    dst = e.host_names[self.agent_mig[i]]
                    acts.append(
                        (i, Migrate(e.vm_names[i], dst, self.cfg.manager.migration_bandwidth))
                    )
            for i, act in acts:
                self._apply(h, i, act, now)
            self.ops_used[h] += len(acts)

    def poll(self, now: float) -> None:
        """Between periods: collect finished operations; hosts that freed a VF re-plan."""
        if not self.inflight:
            self._done.clear()
            return
        freed = self._collect(now)
        if freed:
            self._reconcile(np.array(sorted(freed), dtype=np.int64), now)

    # ----------------------------------------------------------------- the period

    def _sample(self) -> tuple[np.ndarray, np.ndarray]:
        e = self.eng
        c = np.floor(np.stack((e.cpu_ns, e.steal_ns, e.rx_b, e.tx_b, e.rx_pk, e.tx_pk)))
        hc = np.floor(np.stack((e.h_cpu_ns, e.h_rx_b, e.h_tx_b)))
        return c, hc

    def step(self, now: float) -> None:
        e, cfg = self.eng, self.cfg
        self._collect(now)  # HostAgent.step polls first (no re-plan here)
        self.stats.steps += 1
        host = e.host.copy()
        counters, hc = self._sample()
        obs = self.sensor.observe(now, counters, e.vcpus, host)
        if self._prev_hc is not None and self._prev_t is not None and now > self._prev_t:
            dt = now - self._prev_t
            d = hc - self._prev_hc
            cores = e.cores
            mem_used = np.floor(np.bincount(host, e.mem, minlength=self.H))
            u = np.stack(
                (
                    np.minimum(1.0, d[0] / (dt * NS * cores)),
                    np.minimum(1.0, mem_used / e.host_mem),
                    np.minimum(1.0, 8.0 * np.maximum(d[1], d[2]) / (dt * e.capacity)),
                ),
                axis=1,
            )
            ok = (d >= 0).all(axis=0)
            hist, cnt = self.load_hist, self.load_count
            hist[ok, :-1] = hist[ok, 1:]
            hist[ok, -1] = u[ok]
            cnt[ok] = np.minimum(cnt[ok] + 1, hist.shape[1])
        self._prev_hc, self._prev_t = hc, now
        if obs is not None:
            valid, st, dt = obs
            hh = host
            self.vm_util = np.stack(
                (
                    np.minimum(1.0, st["gotten"] / (dt * NS * e.cores[hh])),
                    np.minimum(1.0, np.floor(e.mem) / e.host_mem[hh]),
                    np.minimum(
                        1.0,
                        8.0 * np.maximum(st["rx_bytes"], st["tx_bytes"]) / (dt * e.capacity[hh]),
                    ),
                ),
                axis=1,
            )
            self.vm_util_ok = valid

        # the manager's signals of the last round: Alg. 1 labels one VM VLM per host
        signals, self.signal = self.signal, {}
        if vf_policy(cfg.vf_policy).uses_manager:
            for h, (dst, vm) in sorted(signals.items()):
                if h in self._mig_src.values():
                    continue  # the agent moves one VM at a time
                loads = self._vm_loads(h)
                chosen = vm if vm in loads else choose_vm(loads, metric=cfg.manager.metric)
                if chosen is not None:
                    i = e.vm_index[chosen]
                    self.agent_mig[i] = dst
                    self._mig_src[i] = h

        holder = e.on_vf.copy()
        if not vf_policy(cfg.vf_policy).grants_vfs:
            self.desired = np.zeros(self.N, dtype=bool)
            self.rank = np.full(self.N, -1, dtype=np.int64)
        else:
            self.since = np.where(holder & np.isnan(self.since), now, self.since)
            f = self.sensor.factors(host, self.H)
            sc = cfg.scheduler.to_config()
            eligible = e.ready & ~e.migrating & (self.agent_mig < 0)
            io = f.io_degree if sc.io_metric == "io_degree" else f.io_factor
            net = f.net_degree if sc.net_metric == "net_degree" else f.net_factor
            dec = schedule_batch(
                host,
                self.name_rank,
                io,
                net,
                f.has_traffic,
                eligible,
                holder,
                self.since,
                self.pool,
                now,
                sc,
            )
            # warm-up: no VM of the host has a measured period: keep eligible holders
            measured = np.bincount(host, f.count > 0, minlength=self.H) > 0
            warm = ~measured[host]
            self.desired = np.where(warm, eligible & holder, dec.pq)
            self.rank = np.where(warm, self.name_rank, dec.rank)
        self.ops_used[:] = 0
        self._reconcile(np.arange(self.H), now)

        if self.manager_on and self.load_count.any():
            self._manager_round(now)

    def _vm_loads(self, h: int) -> dict[str, VMLoad]:
        e = self.eng
        idx = np.flatnonzero((e.host == h) & self.vm_util_ok)
        out: dict[str, VMLoad] = {}
        for i in idx:
            u = self.vm_util[i]
            out[e.vm_names[i]] = VMLoad(
                Utilisation(float(u[0]), float(u[1]), float(u[2])),
                int(e.mem[i]),
                migrating=bool(self.agent_mig[i] >= 0),
            )
        return out

    def _manager_round(self, now: float) -> None:
        """ManagerCore.ingest + plan, with the verdicts of all hosts computed at once."""
        assert self.mgr is not None and self.detector is not None
        e, m = self.eng, self.mgr
        reporting = self.load_count > 0
        # a lease is done when its VM reports from the target
        for i, lease in list(self.leases.items()):
            if int(e.host[i]) == lease.dst and self.vm_util_ok[i] and reporting[lease.dst]:
                del self.leases[i]
        for i, lease in list(self.leases.items()):
            if now - lease.since_s > m.lease_timeout_s:
                del self.leases[i]
        v = assess_batch(self.load_hist, self.load_count, self.detector)
        hot = np.flatnonzero(v.hot & reporting)
        self.stats.hotspots += hot.size
        if hot.size == 0:
            return
        leased = {lease.src for lease in self.leases.values()} | {
            lease.dst for lease in self.leases.values()
        }
        cur = self.load_hist[:, -1, :]
        ok = reporting.copy()
        ok[hot] = False
        if leased:
            ok[list(leased)] = False
        ok &= (cur < self.detector.alpha).all(axis=1)
        cold = np.flatnonzero(ok)
        hn = hotness_batch(cur[cold], m.metric)
        names = np.array(e.host_names, dtype=object)
        cold = cold[np.lexsort((names[cold].astype(str), hn))]
        # The scalar planner decides; we only choose which reports it needs. It walks the
        # hot hosts hottest first and gives each the first cold spot (least hot first) that
        # is not taken and stays below the ceiling after receiving the VM. Replaying that
        # walk on arrays tells how far down the cold list it can reach; the prefix up to the
        # last chosen target yields exactly the same signals (only a refusal's text lists
        # fewer refused hosts). Its answer is checked against the replay, and any mismatch
        # falls back to every cold spot.
        loads = {int(h): self._vm_loads(int(h)) for h in hot}
        predicted, need = self._replay(hot, cold, cur, leased, v, loads)
        signals = self._coordinate(hot, cold[:need], leased, loads)
        got = {
            e.host_index[h]: e.host_index[s.target]
            for h, s in signals.items()
            if s.flag and s.target
        }
        if got != predicted:
            self.stats.coordinate_fallbacks += 1
            signals = self._coordinate(hot, cold, leased, loads)
        for hname, sig in sorted(signals.items()):
            if sig.flag and sig.target and sig.vm:
                src = e.host_index[hname]
                i = e.vm_index[sig.vm]
                self.leases[i] = _Lease(src, e.host_index[sig.target], now)
                self.signal[src] = (e.host_index[sig.target], sig.vm)

    def _replay(
        self,
        hot: np.ndarray,
        cold: np.ndarray,
        cur: np.ndarray,
        leased: set[int],
        v: BatchVerdict,
        loads: Mapping[int, Mapping[str, VMLoad]],
    ) -> tuple[dict[int, int], int]:
        """Alg. 2's target walk on arrays: predicted source -> target, and the cold-list
        prefix length that contains every predicted target."""
        assert self.mgr is not None and self.detector is not None
        m, e = self.mgr, self.eng
        limit = self.detector.alpha if m.ceiling is None else m.ceiling
        hh = hotness_batch(cur[hot], m.metric)
        names = np.array([e.host_names[h] for h in hot])
        order = hot[np.lexsort((names, -hh))]
        avail = np.ones(cold.size, dtype=bool)
        now_cold = cur[cold]
        predicted: dict[int, int] = {}
        need = 0
        res = ("cpu", "mem", "net")
        for h in order:
            h = int(h)
            if h in leased:
                continue
            hot_res = [res[r] for r in range(3) if v.hot_res[h, r]]
            vm = choose_vm(loads[h], metric=m.metric, resources=hot_res)
            if vm is None:
                continue
            share = np.array(loads[h][vm].util.as_tuple())
            fits = avail & ((now_cold + share) < limit).all(axis=1)
            if not fits.any():
                continue
            j = int(np.argmax(fits))
            avail[j] = False
            predicted[h] = int(cold[j])
            need = max(need, j + 1)
        return predicted, need

    def _coordinate(
        self,
        hot: np.ndarray,
        cold: np.ndarray,
        leased: set[int],
        loads: Mapping[int, Mapping[str, VMLoad]],
    ) -> Mapping[str, MigrationSignal]:
        assert self.mgr is not None and self.detector is not None
        e = self.eng
        reports: dict[str, HostReport] = {}
        for h in sorted(set(hot.tolist()) | set(cold.tolist())):
            c = int(self.load_count[h])
            hist = tuple(
                Utilisation(float(x[0]), float(x[1]), float(x[2])) for x in self.load_hist[h, -c:]
            )
            vms = loads.get(h, {})
            reports[e.host_names[h]] = HostReport(hist, vms)
        self.stats.coordinate_calls += 1
        self.stats.coordinate_hosts += len(reports)
        return coordinate(
            reports,
            self.detector,
            metric=self.mgr.metric,
            ceiling=self.mgr.ceiling,
            leased={e.host_names[h] for h in leased},
        )

    # ----------------------------------------------------------------- views

    def holders(self) -> dict[str, frozenset[str]]:
        e = self.eng
        out: dict[str, set[str]] = {h: set() for h in e.host_names}
        for i in np.flatnonzero(e.on_vf):
            out[e.host_names[e.host[i]]].add(e.vm_names[i])
        return {h: frozenset(v) for h, v in out.items()}


__all__ = [
    "BatchController",
    "BatchFactors",
    "BatchSensor",
    "ManagerParams",
    "assess_batch",
    "plan_batch",
    "schedule_batch",
    "volume_batch",
]
