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

Beyond the papers, because on real fleets a VF moved on noise costs more than it buys
(docs/design.md#vf-cost-benefit); both off in the papers' configuration
(:meth:`VFSchedulerConfig.papers`), which the ``dsr-iov`` baseline always runs:

* **top senders** (``top_senders``) — the I/O filter never drops a VM whose demand
  estimate is among the host's ``p`` highest: a VM busy on CPU *and* network at once keeps
  its VF at its peak, when it needs it most;
* **cost and benefit** (``cost_benefit``) — a VM whose demand estimate is at or below
  ``virtio_lossless`` (virtio carries it without loss) is not ranked unless it holds a VF
  (unplugging it would buy nothing by itself), and each change of
  holder must pay: a VM taking a free VF gains ``horizon·gain`` (its demand above
  ``virtio_lossless``) against the traffic a plug interrupts (``hotplug_blip·demand``);
  a VM displacing a holder gains the difference of their gains against both blips. A
  change is made only where the benefit beats the cost by ``benefit_margin``; the others
  keep the VFs where they are.

Ranking uses tolerance *groups* rather than a pairwise "within tolerance" comparison,
because the pairwise relation is not transitive and would make the order depend on the
sort algorithm. Groups are formed greedily from the highest score down: a VM joins the
current group while its score is within the tolerance of the group's leader.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
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
    # docs/design.md#vf-cost-benefit; off here: the papers' scheduler, which the dsr-iov
    # baseline always runs (the controller's schema turns them on for sova)
    top_senders: bool = False
    cost_benefit: bool = False
    # virtio's per-VM ceiling, bit/s: a VF carries only demand above it
    # (docs/design.md#useless-move)
    virtio_lossless: float = 100e6
    hotplug_blip: float = 2.0  # s of connectivity a plug or an unplug costs the guest
    horizon: float = 60.0  # s over which a move's gain is counted
    benefit_margin: float = 1.0  # a move is made when benefit > (1 + margin) x cost

    def papers(self) -> VFSchedulerConfig:
        """This configuration without what the papers' scheduler does not have."""
        return replace(self, top_senders=False, cost_benefit=False)

    def __post_init__(self) -> None:
        if self.tolerance < 0:
            raise ValueError(f"tolerance must be >= 0, got {self.tolerance}")
        if self.hysteresis < 0:
            raise ValueError(f"hysteresis must be >= 0, got {self.hysteresis}")
        if self.min_dwell_s < 0:
            raise ValueError(f"min_dwell_s must be >= 0, got {self.min_dwell_s}")
        if self.top_q < 0:
            raise ValueError(f"top_q must be >= 0, got {self.top_q}")
        for name in ("virtio_lossless", "hotplug_blip", "benefit_margin"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if not self.horizon > 0:
            raise ValueError(f"horizon must be > 0, got {self.horizon}")


@dataclass(frozen=True)
class Candidate:
    """What the scheduler knows of one VM this period."""

    vm: str
    io_score: float  # io_degree or IF: higher = more I/O-bound
    net_score: float  # net_degree or NF: higher = more network-intensive
    has_traffic: bool
    eligible: bool = True  # False: marked for migration or virtio not failover-ready
    demand_bps: float = 0.0  # demand estimate (VMFactors.demand_est_bps): censored counts more


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
    vf_count: int = 0,
) -> list[Candidate]:
    """Keep the I/O-bound VMs. A holder's score is boosted like in :func:`rank`, so a VF
    holder whose io_degree hovers at the threshold does not lose and regain its VF on noise.
    With ``top_senders`` the ``vf_count`` VMs with traffic and the highest (boosted) demand
    estimates pass whatever their I/O score. The result keeps the candidates' order
    (threshold) or the I/O order (top-q); the top senders the filter dropped follow, by
    name.
    """
    boost = boost or {}

    def io(c: Candidate) -> float:
        return c.io_score * boost.get(c.vm, 1.0)

    if config.io_filter == "threshold":
        kept = [c for c in candidates if io(c) >= config.io_threshold]
    else:
        q = config.top_q or len(candidates)
        kept = sorted(candidates, key=lambda c: (-io(c), c.vm))[:q]
    if not config.top_senders:
        return kept
    senders = [c for c in candidates if c.has_traffic]
    senders.sort(key=lambda c: (-(c.demand_bps * boost.get(c.vm, 1.0)), c.vm))
    names = {c.vm for c in kept}
    extra = sorted((c for c in senders[:vf_count] if c.vm not in names), key=lambda c: c.vm)
    return kept + extra


def gain(demand_bps: float, config: VFSchedulerConfig) -> float:
    """What a VF carries for a VM that virtio would not, bit/s."""
    return max(0.0, demand_bps - config.virtio_lossless)


def worth_it(gain_in: float, gain_out: float, blip_bps: float, config: VFSchedulerConfig) -> bool:
    """Whether a change of holder pays: the gain it adds over the horizon against the
    traffic its plugs interrupt (``blip_bps``: the demand of the VMs plugged or unplugged),
    by ``benefit_margin``."""
    benefit = config.horizon * (gain_in - gain_out)
    return benefit > (1.0 + config.benefit_margin) * (config.hotplug_blip * blip_bps)


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
    passed = io_filter([c for c in candidates if c.eligible], config, boost, vf_count)
    passed_names = {c.vm for c in passed}
    for c in candidates:
        if c.eligible and c.vm not in passed_names:
            reasons[c.vm] = f"filtered: {config.io_metric}={c.io_score:.2f}"
    active = [c for c in passed if c.has_traffic]
    for c in passed:
        if not c.has_traffic:
            reasons[c.vm] = "no traffic in window"
    if config.cost_benefit:
        # a holder stays ranked: unplugging it buys nothing unless an entrant pays for it
        served = [c for c in active if gain(c.demand_bps, config) <= 0.0 and c.vm not in holders]
        for c in sorted(served, key=lambda c: c.vm):
            reasons[c.vm] = "virtio serves it (demand at or below virtio_lossless)"
        active = [c for c in active if c not in served]

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
    kept_back: set[str] = set()
    if config.cost_benefit:
        demand = {c.vm: c.demand_bps for c in candidates}
        pq, kept_back = _pay_for_moves(pq, ranking, holders, vf_count, demand, config)
    pq.sort(key=ranking.index)
    for i, vm in enumerate(ranking):
        if vm in pq:
            reasons[vm] = f"rank {i + 1} of {len(ranking)}" + (
                " (dwell)" if vm in protected and i >= vf_count else ""
            )
            if vm in kept_back:
                reasons[vm] += " (a move would not pay)"
        elif vm in kept_back:
            reasons[vm] = f"rank {i + 1} of {len(ranking)}, a move would not pay"
        else:
            reasons[vm] = f"rank {i + 1} of {len(ranking)}, below the {vf_count} VFs"
    gq = tuple(sorted(names - set(pq)))
    return VFDecision(pq=tuple(pq), gq=gq, ranking=tuple(ranking), reasons=reasons)


def _pay_for_moves(
    pq: list[str],
    ranking: Sequence[str],
    holders: Mapping[str, float],
    vf_count: int,
    demand: Mapping[str, float],
    config: VFSchedulerConfig,
) -> tuple[list[str], set[str]]:
    """The PQ after the cost-benefit gate (docs/design.md#vf-cost-benefit), and the VMs
    whose place a move that did not pay decided (a holder kept, an entrant left out).

    Entrants (in the PQ, not holders) in rank order first take the VFs nobody holds, each
    if its own gain pays for its plug. The rest are paired in rank order with the ranked
    holders the PQ leaves out, lowest gain (then name) first: a pair swaps only if the
    entrant's gain over the leaver's pays for both blips; otherwise the leaver keeps its
    VF. Holders beyond the pool (it shrank) leave first, lowest gain first, unpaired.
    Unranked holders (ineligible, filtered, quiet) leave as before.
    """
    in_pq = set(pq)
    kept = [vm for vm in pq if vm in holders]
    entrants = [vm for vm in pq if vm not in holders]
    leavers = [vm for vm in ranking if vm in holders and vm not in in_pq]
    leavers.sort(key=lambda vm: (gain(demand[vm], config), vm))
    overflow = max(0, len(kept) + len(leavers) - vf_count)
    free = vf_count - len(kept) - (len(leavers) - overflow)
    out = list(kept)
    held_back: set[str] = set()
    for j, vm in enumerate(entrants):
        g, d = gain(demand[vm], config), demand[vm]
        if j < free:
            if worth_it(g, 0.0, d, config):
                out.append(vm)
            else:
                held_back.add(vm)
            continue
        # (k < len(leavers): the PQ is at most the pool, so entrants <= free + pairs)
        lv = leavers[overflow + j - free]
        if worth_it(g, gain(demand[lv], config), d + demand[lv], config):
            out.append(vm)
        else:
            out.append(lv)
            held_back |= {vm, lv}
    return out, held_back
