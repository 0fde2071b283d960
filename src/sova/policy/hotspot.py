"""Hotspot detection and migration planning (docs/design.md#hotspots; Sova §3.3.3-3.4, Alg. 1 lines 3-9, Alg. 2).

Pure functions over plain values: the manager keeps the history (Knowledge) and the agents'
reports, this module only decides. Where the paper is wrong or silent:

* **Hotness.** Sova eq. 5, ``sqrt(sum((r_i / mean(r) - 1)^2))``, is printed as "volume" and
  described as the "sheer volume" of CPU, memory and network, but it is Xiao et al.'s
  *skewness*: it measures how *unevenly* a host is loaded and is 0 for a host saturated on
  every resource. We provide it under its true name (:func:`skewness`), provide Sandpiper's
  real volume ``1 / ((1-cpu)(1-mem)(1-net))`` (:func:`volume`) and default to volume.

* **What α is compared with.** Alg. 2 compares "volume" values with α, yet volume is
  unbounded (>= 1) and skewness is scale-free, so neither can carry a load threshold. α here
  is a *utilisation* threshold in (0, 1], applied per resource, as in Sandpiper and the
  paper's own footnote 1 ("a hotspot occurs if the aggregate CPU or network utilization
  exceeds a set threshold"); the hot hosts of Fig. 5 are hot in network bandwidth. The
  hotness metric only *ranks*: the VM to move (MF) and the cold spot to move it to.

* **AR(1).** ``x̂ = μ + φ(x_p - μ)`` with μ the window mean and φ the window's lag-1
  autocorrelation; the noise term has mean 0 and is dropped. With φ in [-1, 1] the forecast
  never extrapolates a trend: it lies between μ and x_p for φ >= 0. A load that steps onto a
  plateau above α is therefore flagged when the window has filled with the plateau (5 reports
  = 50 s at the 10 s period, which is exactly when Fig. 5 flags HM1), not earlier.

* **Cold spot.** Alg. 2 line 8 only checks that the target is *currently* below α; Sova
  requires it to stay below α *after receiving* the VM. We check both: the target must be
  below α now on every resource and below ``ceiling`` on every resource after receiving the
  VM, where ``ceiling`` defaults to α (docs/design.md#cold-spot, which never creates a new hotspot).
  Caution: with ceiling = α, Sova Table 3 cannot reproduce Fig. 5 stage 3. There HM2 would go
  to 50 % + 40 % = 90 % net, above the 80 % that made HM3 hot, so any after-receiving rule
  with ceiling below 90 % must refuse the move. The paper only made it because it checks the
  target's current load. ``ceiling=1.0`` ("the VM fits") reproduces all three stages.

* **Candidate load.** The manager only names source and target (the source's Effector picks
  the VM), but it cannot check "stays below α after receiving" without the VM's size. Each
  host report therefore carries its VMs' loads (:class:`HostReport`). The manager runs the
  same deterministic :func:`choose_vm` that the Effector runs, checks the target against
  that VM, and names it in the signal (:attr:`MigrationSignal.vm`) so that the Effector moves
  the VM the target was checked for.

* **Rescaling.** VM loads are fractions of the *source* host's capacity (what a host can
  measure). On heterogeneous hosts pass :class:`HostCapacity` per host. A VM's share on the
  target is then ``share_src · cap_src / cap_dst`` per resource. Without capacities, hosts
  are taken as identical.

The values it reads (utilisation, VM load, capacity, hotness) are in
:mod:`sova.policy.hotness` and the cold-spot screening in :mod:`sova.policy.cold_spots`;
this module keeps detection (AR(1), k-of-n), the VM's migration factor and relief, and the
round that joins them (:func:`coordinate`), in Alg. 2's reading order.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

import numpy as np
import numpy.typing as npt

from sova.policy.cold_spots import RankedHosts, Screened, ScreenQuery, screen_round
from sova.policy.hotness import (
    RESOURCES,
    UTILISATION_SLACK,
    VOLUME_CLAMP,
    HostCapacity,
    HotnessMetric,
    Utilisation,
    VMLoad,
    hotness,
    hotness_rows,
    skewness,
    volume,
)
from sova.policy.verdicts import VerdictArrays, verdict_arrays

# The values a caller hands the policy are importable from here, where most callers
# (the manager, the simulator, the Watcher plugin, the tests) have always taken them.
__all__ = [
    "PAPERS_MOVE",
    "RESOURCES",
    "UTILISATION_SLACK",
    "VOLUME_CLAMP",
    "HostCapacity",
    "HostReport",
    "HotnessMetric",
    "HotspotDetector",
    "HotspotVerdict",
    "MigrationSignal",
    "MoveCost",
    "Mover",
    "ResourceVerdict",
    "Utilisation",
    "VMLoad",
    "ar1_coefficient",
    "ar1_forecast",
    "choose_vm",
    "coordinate",
    "hotness",
    "migration_factor",
    "rank_movers",
    "skewness",
    "volume",
]

# --------------------------------------------------------------------------- forecast


def _series_verdict(series: Sequence[float]) -> VerdictArrays:
    if not series:
        raise ValueError("series must not be empty")
    if not all(math.isfinite(x) for x in series):
        raise ValueError("series must be finite")
    return verdict_arrays(np.asarray(series, dtype=np.float64).reshape(1, -1, 1), 1.0, 1)


def ar1_coefficient(series: Sequence[float]) -> float:
    """Lag-1 sample autocorrelation of the window (Box-Jenkins estimator), in [-1, 1].

    A window with no variance (constant, or a single value) has no measurable dependence.
    φ is then 0, so the forecast falls back to the mean, which equals the constant. The
    clamp to [-1, 1] (Cauchy-Schwarz's bound in exact arithmetic) guards against rounding
    and keeps the documented contract (docs/design.md#ar1).
    """
    return float(_series_verdict(series).phi[0, 0])


def ar1_forecast(series: Sequence[float]) -> float:
    """AR(1) one-step forecast ``μ + φ(x_p - μ)`` of the next observation (Sova eq. 6)."""
    return float(_series_verdict(series).forecast[0, 0])


# --------------------------------------------------------------------------- detection


@dataclass(frozen=True)
class ResourceVerdict:
    """Why one resource is (not) hot: the k-of-n count and the forecast that were compared."""

    resource: str
    over: int  # observations above α in the window
    window: int  # observations in the window (< n while history is short)
    forecast: float
    hot: bool


@dataclass(frozen=True)
class HotspotVerdict:
    hot: bool
    alpha: float
    k: int
    n: int
    resources: tuple[ResourceVerdict, ...]

    @property
    def hot_resources(self) -> tuple[str, ...]:
        return tuple(r.resource for r in self.resources if r.hot)

    @property
    def reason(self) -> str:
        if not self.resources:
            return "no observations"
        parts = [
            f"{r.resource} {r.over}/{r.window} over {self.alpha:g}, forecast {r.forecast:.3f}"
            for r in self.resources
        ]
        return ("hot: " if self.hot else "not hot: ") + "; ".join(parts)


@dataclass(frozen=True)
class HotspotDetector:
    """Sandpiper/Sova hotspot test, per resource.

    A resource is hot when at least ``k`` of the last ``n`` observations exceed ``alpha``
    AND the AR(1) forecast of the next one (fitted on the same window) exceeds ``alpha``.
    A host is hot when any resource is.
    """

    k: int = 3
    n: int = 5
    alpha: float = 0.75

    def __post_init__(self) -> None:
        if not 1 <= self.k <= self.n:
            raise ValueError(f"k must satisfy 1 <= k <= n, got k={self.k}, n={self.n}")
        if not (math.isfinite(self.alpha) and 0.0 < self.alpha <= 1.0):
            raise ValueError(f"alpha must be a utilisation in (0, 1], got {self.alpha!r}")

    def assess(self, history: Sequence[Utilisation]) -> HotspotVerdict:
        """Judge a host from its history (oldest first). Only the last ``n`` entries count.

        A short history is judged as it is: missing observations count as "not over α", so a
        host cannot be hot before ``k`` observations exist.
        """
        window = history[-self.n :]
        if not window:
            return HotspotVerdict(hot=False, alpha=self.alpha, k=self.k, n=self.n, resources=())
        rows = [u.as_tuple() for u in window]
        v = verdict_arrays(np.array(rows, dtype=np.float64)[None], self.alpha, self.k)
        return self.verdicts(v, [0], len(rows))[0]

    def verdicts(self, v: VerdictArrays, at: Sequence[int], n_obs: int) -> list[HotspotVerdict]:
        """The verdicts of rows ``at`` of ``v`` (windows of ``n_obs`` observations)."""
        out = []
        for over, forecast, hot in zip(
            v.over[at].tolist(), v.forecast[at].tolist(), v.hot[at].tolist(), strict=True
        ):
            windows = [n_obs for _ in RESOURCES]
            resources = tuple(
                ResourceVerdict(*r)
                for r in zip(RESOURCES, over, windows, forecast, hot, strict=True)
            )
            out.append(
                HotspotVerdict(
                    hot=any(hot), alpha=self.alpha, k=self.k, n=self.n, resources=resources
                )
            )
        return out


# --------------------------------------------------------------------------- VM choice


def migration_factor(vm: VMLoad, metric: HotnessMetric | str = HotnessMetric.VOLUME) -> float:
    """MF = hotness / memory size: load relieved per byte copied (Sova §3.3.3)."""
    return hotness(vm.util, metric) / vm.memory_bytes


def choose_vm(
    vms: Mapping[str, VMLoad],
    *,
    metric: HotnessMetric | str = HotnessMetric.VOLUME,
    resources: Collection[str] | None = None,
) -> str | None:
    """The VM to migrate off a hot host: largest MF, ties broken by name (Alg. 1 lines 3-9).

    VMs already migrating are skipped. When ``resources`` is given (the host's hot
    resources), only VMs with a positive share of one of them are candidates. Volume is >= 1
    even for an idle VM, so without this filter a small idle VM can out-score a large busy one,
    and moving it relieves nothing.
    """
    if resources is not None:
        unknown = set(resources) - set(RESOURCES)
        if unknown:
            raise ValueError(f"unknown resources {sorted(unknown)}; expected {RESOURCES}")
    best: tuple[float, str] | None = None
    for name, vm in vms.items():
        if vm.migrating:
            continue
        if resources is not None:
            shares = dict(zip(RESOURCES, vm.util.as_tuple(), strict=True))
            if not any(shares[r] > 0.0 for r in resources):
                continue
        key = (-migration_factor(vm, metric), name)
        if best is None or key < best:
            best = key
    return None if best is None else best[1]


# --------------------------------------------------------------------------- relief


@dataclass(frozen=True)
class MoveCost:
    """What a migration must buy to be worth its cost (docs/design.md#relief).

    A mover must remove at least ``min_relief`` of the host's overload on some hot resource
    (its share of that resource over the overload, ``max(now, forecast) - alpha``), and
    the relief, counted as the fraction of the overload removed times ``horizon_s``, must
    beat the time the move costs: its memory copied at ``copy_rate_bps`` plus
    ``downtime_s``. ``min_relief = 0`` and ``horizon_s = 0`` are the papers' rule: any VM
    with a share of a hot resource may move, whatever it costs (:data:`PAPERS_MOVE`).
    """

    min_relief: float = 0.25
    horizon_s: float = 600.0
    copy_rate_bps: float = 1e9
    downtime_s: float = 0.5
    # Movers tried per hot host when the best has no cold spot. 1 by default: a second-best
    # mover off a host whose best fits nowhere is a move the papers' runs never make (in
    # sova-fig5 it sends VM3 off HM2 after stage 3), and each try is another screening.
    tries: int = 1

    def __post_init__(self) -> None:
        if not (math.isfinite(self.min_relief) and 0.0 <= self.min_relief <= 1.0):
            raise ValueError(f"min_relief must be in [0, 1], got {self.min_relief!r}")
        if not (math.isfinite(self.horizon_s) and self.horizon_s >= 0.0):
            raise ValueError(f"horizon_s must be >= 0, got {self.horizon_s!r}")
        if not (math.isfinite(self.copy_rate_bps) and self.copy_rate_bps > 0.0):
            raise ValueError(f"copy_rate_bps must be > 0, got {self.copy_rate_bps!r}")
        if not (math.isfinite(self.downtime_s) and self.downtime_s >= 0.0):
            raise ValueError(f"downtime_s must be >= 0, got {self.downtime_s!r}")
        if self.tries < 1:
            raise ValueError(f"tries must be >= 1, got {self.tries!r}")

    def seconds(self, vm: VMLoad) -> float:
        """What moving ``vm`` costs, in seconds of copy and pause."""
        return vm.memory_bytes * 8.0 / self.copy_rate_bps + self.downtime_s


PAPERS_MOVE: Final = MoveCost(min_relief=0.0, horizon_s=0.0)


# each resource's column in a utilisation tuple
_INDEX: Final = {r: i for i, r in enumerate(RESOURCES)}


@dataclass(frozen=True)
class Mover:
    """A VM whose move relieves a hot host, and what it buys."""

    vm: str
    relief: float  # the largest fraction of a hot resource's overload it removes (<= 1)
    cost_s: float
    crosses_hot_link: bool  # it carries none of the net heat, yet its copy loads the link


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
    One host of :class:`_Ranking`, the form a round uses for all its hot hosts at once.
    """
    ranking = _Ranking([vms], [verdict], [now.as_tuple()], cost, metric)
    return ranking.movers(0), ranking.refusals(0)


_NET: Final = _INDEX["net"]


def _mover_columns(
    vms: Mapping[str, VMLoad] | Sequence[tuple[str, VMLoad]],
) -> tuple[list[str], list[float], list[int]]:
    """A host's VMs not migrating, in report order, as :class:`_Ranking` reads them: their
    names, their shares (cpu, mem, net of each, flat) and their memory. A report that
    keeps its loads as columns (an agent's, ``mover_columns``) gives them without its
    VMLoad objects; any other mapping, or (name, VMLoad) pairs, from its VMLoads."""
    columns = getattr(vms, "mover_columns", None)
    if columns is not None:
        got: tuple[list[str], list[float], list[int]] | None = columns()
        if got is not None:
            return got
    names: list[str] = []
    shares: list[float] = []
    memory: list[int] = []
    for n, v in vms.items() if isinstance(vms, Mapping) else vms:
        if not v.migrating:
            names.append(n)
            u = v.util
            shares += (u.cpu, u.mem, u.net)
            memory.append(v.memory_bytes)
    return names, shares, memory


def _hot_excess(
    verdicts: Sequence[HotspotVerdict], nows: npt.ArrayLike
) -> tuple[np.ndarray, np.ndarray]:
    """Each host's hot resources (cpu, mem, net) and how far each stands over its alpha:
    the larger of its load now and the verdict's forecast, less alpha."""
    hot = np.zeros((len(verdicts), 3), dtype=bool)
    forecast = np.zeros((len(verdicts), 3), dtype=np.float64)
    for j, verdict in enumerate(verdicts):
        for r in verdict.resources:
            if r.hot:
                hot[j, _INDEX[r.resource]] = True
                forecast[j, _INDEX[r.resource]] = r.forecast
    alpha = np.array([v.alpha for v in verdicts], dtype=np.float64)[:, None]
    excess = np.maximum(np.asarray(nows, dtype=np.float64).reshape(-1, 3), forecast) - alpha
    return hot, excess


class _Ranking:
    """:func:`rank_movers` of several hot hosts at once: their VMs' loads as arrays, each
    VM's relief, cost, net benefit and migration factor computed for all of them in a few
    array operations, ordered per host by one sort. A round (:func:`plan_hot`) asks only
    each host's first ``cost.tries`` movers, and the refusals' text only of a host with none.
    """

    def __init__(
        self,
        vms: Sequence[Mapping[str, VMLoad] | Sequence[tuple[str, VMLoad]]],
        verdicts: Sequence[HotspotVerdict],
        nows: npt.ArrayLike,
        cost: MoveCost,
        metric: HotnessMetric | str,
    ) -> None:
        self.cost = cost
        # the VMs not migrating, in each host's report order: their names, shares (cpu, mem,
        # net flat) and memory; an agent's report gives them as columns (mover_columns)
        # without the VMLoad objects, ~1.5 us a VM of every hot host each round
        self.names: list[list[str]] = []
        flat_shares: list[float] = []
        flat_memory: list[int] = []
        for host in vms:
            cols = _mover_columns(host)
            self.names.append(cols[0])
            flat_shares += cols[1]
            flat_memory += cols[2]
        counts = [len(h) for h in self.names]
        self.start = np.concatenate(([0], np.cumsum(counts))).tolist()
        m = len(flat_memory)
        shares = np.array(flat_shares, dtype=np.float64).reshape(m, 3)
        self.shares = flat_shares
        memory = np.array(flat_memory, dtype=np.float64)
        owner = np.repeat(np.arange(len(counts)), counts)
        hot, excess = _hot_excess(verdicts, nows)
        # the hot resources with an overload: each VM's relief of them, 0 of the others
        over_h = hot & (excess > 0.0)
        over = over_h[owner]
        e = np.where(over_h, excess, 1.0)[owner]
        per = np.where(over, np.minimum(1.0, shares / e), 0.0)
        relief = np.where(
            over.any(axis=1), np.where(over, per, -np.inf).max(axis=1, initial=-np.inf), 0.0
        )
        cost_s = memory * 8.0 / cost.copy_rate_bps + cost.downtime_s
        gain = relief * cost.horizon_s - cost_s
        weak = (relief <= 0.0) | (relief < cost.min_relief)
        dear = ~weak & (cost.horizon_s > 0.0) & (gain < 0.0)
        # The papers' rule (min_relief 0) has no such preference: MF alone orders.
        hot_link = (cost.min_relief > 0.0) & hot[owner, _NET] & (per[:, _NET] < cost.min_relief)
        mf = hotness_rows(shares, metric) / memory if m else np.zeros(0)
        ok = ~(weak | dear)
        names = np.array([n for host in self.names for n in host], dtype=str)
        keyed = np.flatnonzero(ok)
        by = -gain[keyed] if cost.horizon_s > 0.0 else np.zeros(len(keyed))
        order = (
            keyed[
                np.lexsort((names[keyed], -mf[keyed], by, hot_link[keyed], owner[keyed]))
            ].tolist()
            if m
            else []
        )
        self.order = order
        self.per, self.weak = per, weak.tolist()
        self.ok = ok.tolist()
        self.relief_l, self.cost_l, self.link_l = (
            relief.tolist(),
            cost_s.tolist(),
            hot_link.tolist(),
        )
        self.hot = hot
        # each host's movers' span of ``order`` (sorted by host first)
        by_host = owner[order] if order else np.zeros(0, dtype=np.int64)
        hosts = np.arange(len(counts))
        self.span = list(
            zip(
                np.searchsorted(by_host, hosts, "left").tolist(),
                np.searchsorted(by_host, hosts, "right").tolist(),
                strict=True,
            )
        )

    def movers(self, host: int, limit: int | None = None) -> list[Mover]:
        """Host ``host``'s movers, best first (the first ``limit`` of them)."""
        a, b = self.span[host]
        if limit is not None:
            b = min(b, a + limit)
        out = []
        for at in self.order[a:b]:
            name = self.names[host][at - self.start[host]]
            out.append(Mover(name, self.relief_l[at], self.cost_l[at], self.link_l[at]))
        return out

    def has_movers(self, host: int) -> bool:
        a, b = self.span[host]
        return bool(b > a)

    def refusals(self, host: int, limit: int | None = None) -> list[str]:
        """Why host ``host``'s other VMs were not candidates, in its report order."""
        cost, out = self.cost, list[str]()
        hot = [r for i, r in enumerate(RESOURCES) if self.hot[host, i]]
        for k, name in enumerate(self.names[host]):
            if limit is not None and len(out) >= limit:
                break
            at = self.start[host] + k
            if self.ok[at]:
                continue
            relief = self.relief_l[at]
            if self.weak[at]:
                per = self.per[at].tolist()
                worst = max(hot, key=lambda r: (per[_INDEX[r]], r), default="")
                share = self.shares[3 * at : 3 * at + 3]
                out.append(
                    f"{name}: carries {share[_INDEX[worst]] if worst else 0.0:.4f} of "
                    f"{worst or 'no hot resource'} (removes {relief:.0%} of the overload, "
                    f"< {cost.min_relief:.0%})"
                )
            else:
                out.append(
                    f"{name}: relief {relief:.0%} x {cost.horizon_s:g}s < cost "
                    f"{self.cost_l[at]:.1f}s"
                )
        return out


# --------------------------------------------------------------------------- Algorithm 2


@dataclass(frozen=True)
class HostReport:
    """What the manager knows about one host at the start of a round.

    ``history`` is oldest first, and its last entry is the current utilisation. ``vms`` is the
    agent's per-VM load report, from which the manager derives the candidate VM.
    """

    history: tuple[Utilisation, ...]
    vms: Mapping[str, VMLoad] = field(default_factory=dict)
    capacity: HostCapacity | None = None


@dataclass(frozen=True)
class MigrationSignal:
    """Alg. 2's ``<flag, target>`` plus what the manager and Effector need to act and log."""

    flag: bool
    target: str | None
    reason: str
    vm: str | None = None  # the VM the target was checked for; the Effector should move it
    hot_resources: tuple[str, ...] = ()


def _refusal(verdict: HotspotVerdict, why: str, vm: str | None = None) -> MigrationSignal:
    return MigrationSignal(False, None, f"{verdict.reason}; {why}", vm, verdict.hot_resources)


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
    verdicts = {name: detector.assess(rep.history) for name, rep in reports.items()}
    signals = {
        name: MigrationSignal(False, None, v.reason) for name, v in verdicts.items() if not v.hot
    }
    current = {name: rep.history[-1] for name, rep in reports.items() if rep.history}
    capacities = _capacities(reports)
    hot = {name: v for name, v in verdicts.items() if v.hot}
    if hot:
        signals |= plan_hot(
            hot,
            RankedHosts.of(current, metric, detector.alpha, capacities),
            lambda h: reports[h].vms,
            metric=metric,
            ceiling=ceiling,
            leased=leased,
            barred=barred,
            fenced=fenced,
            cost=cost,
            prefer=prefer,
        )
    return dict(sorted(signals.items()))


def plan_hot(
    hot: Mapping[str, HotspotVerdict],
    ranked: RankedHosts,
    vms_of: Callable[[str], Mapping[str, VMLoad]],
    *,
    metric: HotnessMetric | str = HotnessMetric.VOLUME,
    ceiling: float | None = None,
    leased: Collection[str] = frozenset(),
    barred: Mapping[str, Collection[str]] | None = None,
    fenced: Mapping[str, str] | None = None,
    cost: MoveCost = PAPERS_MOVE,
    prefer: Mapping[str, tuple[str, str]] | None = None,
) -> dict[str, MigrationSignal]:
    """The signals of the hot hosts of a :func:`coordinate` round, given their verdicts,
    every observed host ranked (marked taken here: the hot, leased and fenced) and each hot
    host's VMs: the movers chosen here, the screening for all of them in one call of the
    core (:func:`screen_round`). The manager's round over arrays calls it too."""
    fenced, barred, prefer = fenced or {}, barred or {}, prefer or {}
    ranked.take((*hot, *leased, *fenced))
    signals: dict[str, MigrationSignal] = {}
    queries: list[ScreenQuery] = []
    plans: list[tuple[str, HotspotVerdict, list[Mover]]] = []
    # the hot hosts that may send, hottest first, and their VMs: ranked all at once
    sending: list[str] = []
    for name in sorted(hot, key=lambda h: (-ranked.heat[h], h)):
        if name in fenced:
            signals[name] = _refusal(hot[name], f"skipped: {fenced[name]}")
        elif name in leased:
            signals[name] = _refusal(hot[name], "skipped: a migration of this host is in progress")
        else:
            sending.append(name)
    vms = [vms_of(name) for name in sending]
    verdicts = [hot[name] for name in sending]
    now = ranked.now
    pos = ranked.pos
    nows = now[[pos[name] for name in sending]] if sending else np.zeros((0, 3))
    ranking = _Ranking(vms, verdicts, nows, cost, metric)
    for j, name in enumerate(sending):
        verdict = verdicts[j]
        if not ranking.has_movers(j):
            why = "no VM to move (none reported with load on a hot resource)"
            if cost != PAPERS_MOVE:
                unhelpful = ranking.refusals(j, 4)
                if unhelpful:
                    why = "no VM whose move relieves the overload (" + "; ".join(unhelpful) + ")"
            signals[name] = _refusal(verdict, why)
            continue
        tries = ranking.movers(j, cost.tries)
        host_vms = vms[j]
        # (an agent's report builds only its movers' VMLoads: vm_load)
        load_of = getattr(host_vms, "vm_load", host_vms.__getitem__)
        moves = [(m.vm, load_of(m.vm), barred.get(m.vm, ())) for m in tries]
        queries.append(ScreenQuery(name, moves, prefer.get(name)))
        plans.append((name, verdict, tries))
    screened = screen_round(ranked, queries, ceiling)
    for (name, verdict, tries), got in zip(plans, screened, strict=True):
        signals[name] = _screened_signal(verdict, tries, got, cost.horizon_s)
    return signals


def _screened_signal(
    verdict: HotspotVerdict, tries: Sequence[Mover], got: Screened, horizon_s: float
) -> MigrationSignal:
    """A hot host's signal from its screening: last round's move kept, a move, or why none."""
    if got.target is not None and got.vm is not None:
        if got.kept:
            why = f"move {got.vm} to {got.target} (as proposed before)"
        else:
            mover = next(m for m in tries if m.vm == got.vm)
            relief = "" if horizon_s <= 0.0 else f" (removes {mover.relief:.0%} of the overload)"
            if mover.crosses_hot_link:
                relief += "; it carries none of the net heat, but no VM that does can go"
            why = f"move {got.vm} to {got.target}{relief}"
        return MigrationSignal(
            True, got.target, f"{verdict.reason}; {why}", got.vm, verdict.hot_resources
        )
    tried = []
    for mover in tries:
        refused = got.refused.get(mover.vm, [])
        detail = "; ".join(refused) if refused else "no other host available"
        tried.append(f"{mover.vm} ({detail})")
    return _refusal(verdict, "no cold spot for " + "; for ".join(tried), tries[0].vm)


def _capacities(reports: Mapping[str, HostReport]) -> dict[str, HostCapacity] | None:
    """Every host's capacity, or None when no report gives one (hosts taken as identical)."""
    capacities = {name: rep.capacity for name, rep in reports.items() if rep.capacity is not None}
    if capacities and len(capacities) != len(reports):
        missing = sorted(set(reports) - set(capacities))
        raise ValueError(f"capacity given for some hosts but not for {missing}")
    return capacities or None
