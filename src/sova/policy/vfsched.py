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

This module holds the scheduler's settings, inputs and decision; the scheduling itself is
the compiled core's (rust/sova-core/src/vfsched.rs), run through :mod:`sova.policy.vfkernel`
for one host (``schedule_one``: the agents' VF policies, Alg. 1's Operation Table) or every
host at once (``schedule_hosts``: the simulator). The readable per-host form it replaced is
kept in tests/vfsched_oracle.py as the oracle it is held to.
"""

from __future__ import annotations

from collections.abc import Mapping
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
