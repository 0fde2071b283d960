"""DSR-IOV VF scheduling: who among a host's VMs holds one of its scarce VFs.

Every VM always has its virtio NIC; the ``p`` VFs go to the most network-intensive VMs
(the *PQ*), everyone else stays on virtio (the *GQ*). Each period (docs/design.md#vf-scheduling):

1. I/O filter — keep VMs whose ``io_degree ≥ θ_io`` (DSR-IOV) or the top-q by IF (Sova
   Alg. 1 ``minIOHeap(q)``): a CPU-bound VM gains little from a VF however much it sends.
2. Drop VMs with no traffic in the window.
3. Rank by network score; scores within a *relative tolerance* rank equal and then the
   more I/O-bound VM wins (both papers' "hybrid VMs lose to pure network VMs": DSR-IOV
   Table 3 at 20 min, Sova Table 2 at 20 min).
4. The top ``p`` form the PQ.

Beyond the papers, because a real VF hot-plug costs seconds and a guest-visible failover:

* **hysteresis** — a current holder's scores count ``(1 + hysteresis)`` times, so two
  nearly equal VMs do not swap the VF on noise;
* **minimum dwell** — a VF granted less than ``min_dwell_s`` ago is not taken back for a
  better candidate (it is still revoked at once when its VM becomes ineligible);
* VMs that are marked for migration, or whose virtio backup is not failover-ready, never
  hold a VF.

Ranking uses tolerance *groups* rather than a pairwise "within tolerance" comparison,
because the pairwise relation is not transitive and would make the order depend on the
sort algorithm. Groups are formed greedily from the highest score down: a VM joins the
current group while its score is within the tolerance of the group's leader.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

IoFilter = Literal["threshold", "top-q"]
NetMetric = Literal["net_degree", "nf"]
IoMetric = Literal["io_degree", "if"]


@dataclass(frozen=True)
class VFSchedulerConfig:
    io_filter: IoFilter = "threshold"
    io_threshold: float = 65.0  # θ_io on io_degree (0..100), or on IF when io_metric="if"
    top_q: int = 0  # for io_filter="top-q"; 0 = all VMs
    io_metric: IoMetric = "io_degree"
    net_metric: NetMetric = "net_degree"
    tolerance: float = 0.10
    hysteresis: float = 0.05
    min_dwell_s: float = 30.0

    def __post_init__(self) -> None:
        if self.tolerance < 0:
            raise ValueError(f"tolerance must be >= 0, got {self.tolerance}")
        if self.hysteresis < 0:
            raise ValueError(f"hysteresis must be >= 0, got {self.hysteresis}")
        if self.min_dwell_s < 0:
            raise ValueError(f"min_dwell_s must be >= 0, got {self.min_dwell_s}")
        if self.top_q < 0:
            raise ValueError(f"top_q must be >= 0, got {self.top_q}")


@dataclass(frozen=True)
class Candidate:
    """What the scheduler knows of one VM this period."""

    vm: str
    io_score: float  # io_degree or IF: higher = more I/O-bound
    net_score: float  # net_degree or NF: higher = more network-intensive
    has_traffic: bool
    eligible: bool = True  # False: marked for migration or virtio not failover-ready


@dataclass(frozen=True)
class VFDecision:
    pq: tuple[str, ...]  # VF holders after this period, best first
    gq: tuple[str, ...]
    ranking: tuple[str, ...]  # every VM that passed the filters, best first
    reasons: Mapping[str, str] = field(default_factory=dict)  # vm -> why it is where it is


def rank(
    candidates: Sequence[Candidate],
    tolerance: float,
    boost: Mapping[str, float] | None = None,
) -> list[str]:
    """Order VMs best first: by net score in tolerance groups, then by I/O score, then name."""
    boost = boost or {}

    def net(c: Candidate) -> float:
        return c.net_score * boost.get(c.vm, 1.0)

    def io(c: Candidate) -> float:
        return c.io_score * boost.get(c.vm, 1.0)

    by_net = sorted(candidates, key=lambda c: (-net(c), c.vm))
    groups: list[list[Candidate]] = []
    leader = 0.0
    for c in by_net:
        if groups and net(c) >= leader / (1.0 + tolerance):
            groups[-1].append(c)
        else:
            groups.append([c])
            leader = net(c)
    ordered: list[str] = []
    for g in groups:
        ordered.extend(c.vm for c in sorted(g, key=lambda c: (-io(c), c.vm)))
    return ordered


def io_filter(
    candidates: Sequence[Candidate],
    config: VFSchedulerConfig,
    boost: Mapping[str, float] | None = None,
) -> list[Candidate]:
    """Keep the I/O-bound VMs. A holder's score is boosted like in :func:`rank`, so a VF
    holder whose io_degree hovers at the threshold does not lose and regain its VF on noise.
    """
    boost = boost or {}

    def io(c: Candidate) -> float:
        return c.io_score * boost.get(c.vm, 1.0)

    if config.io_filter == "threshold":
        return [c for c in candidates if io(c) >= config.io_threshold]
    q = config.top_q or len(candidates)
    return sorted(candidates, key=lambda c: (-io(c), c.vm))[:q]


def schedule(
    candidates: Sequence[Candidate],
    holders: Mapping[str, float],
    vf_count: int,
    now_s: float,
    config: VFSchedulerConfig,
) -> VFDecision:
    """One scheduling period.

    ``holders`` maps each current VF holder to the time it got its VF. The result names
    the holders after this period; the caller turns the difference into actions.
    """
    if vf_count < 0:
        raise ValueError(f"vf_count must be >= 0, got {vf_count}")
    reasons: dict[str, str] = {}
    names = {c.vm for c in candidates}
    for c in candidates:
        if not c.eligible:
            reasons[c.vm] = "ineligible (migrating or no failover backup)"
    boost = {vm: 1.0 + config.hysteresis for vm in holders}
    passed = io_filter([c for c in candidates if c.eligible], config, boost)
    passed_names = {c.vm for c in passed}
    for c in candidates:
        if c.eligible and c.vm not in passed_names:
            reasons[c.vm] = f"filtered: {config.io_metric}={c.io_score:.2f}"
    active = [c for c in passed if c.has_traffic]
    for c in passed:
        if not c.has_traffic:
            reasons[c.vm] = "no traffic in window"

    ranking = rank(active, config.tolerance, boost)

    # A holder still eligible and inside its dwell time keeps its VF whatever its rank.
    eligible_now = set(ranking)
    protected = [
        vm
        for vm in ranking
        if vm in holders and now_s - holders[vm] < config.min_dwell_s and vm in eligible_now
    ]
    protected = protected[:vf_count]
    pq: list[str] = list(protected)
    for vm in ranking:
        if len(pq) >= vf_count:
            break
        if vm not in pq:
            pq.append(vm)
    pq.sort(key=ranking.index)
    for i, vm in enumerate(ranking):
        if vm in pq:
            reasons[vm] = f"rank {i + 1} of {len(ranking)}" + (
                " (dwell)" if vm in protected and i >= vf_count else ""
            )
        else:
            reasons[vm] = f"rank {i + 1} of {len(ranking)}, below the {vf_count} VFs"
    gq = tuple(sorted(names - set(pq)))
    return VFDecision(pq=tuple(pq), gq=gq, ranking=tuple(ranking), reasons=reasons)
