"""What a run's decisions bought: VF moves per host-hour, useless moves, moved-back
migrations, each measured on the run's records against the demand it faced.

One definition of each, here, for the decision benchmark (benchmarks/decisions.py) and the
report:

* a **VF move** is an attach (a VM gets a VF); the detach that freed the VF is part of it;
* a move is **useless** when the VM it went to sent no more than virtio carries without loss
  (:func:`virtio_ceiling_bps`, the ceiling the sova policy's gate uses in a simulated world)
  at the attach and over the next :data:`USEFUL_HORIZON_S`, and, where the profile charges
  virtio guests CPU per packet (:func:`freed_cpu_saturation`), its vCPUs were not full on
  virtio then either: the VF bought that VM nothing, and the hot-plug cost it a connectivity
  blip (docs/design.md#useless-move);
* a migration is **moved back** when the VM returns to a host it left within
  ``window_s``.

The blip a hot-plug costs the guest is the nested real-VF tier's measurement (docs/lab.md,
nested tier: ping gaps of 1.95-2.4 s at a plug, 1.3 s at an unplug).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from sova.agent.config import SensingSpec
from sova.record import EventRow, Timeline
from sova.scenario import ProfileSpec

USEFUL_HORIZON_S = 60.0
BLIP_ATTACH_S = 2.2  # docs/lab.md, nested tier: ping gaps 1.95-2.4 s at a plug
BLIP_DETACH_S = 1.3  # docs/lab.md, nested tier: 1.3 s at an unplug
MOVED_BACK_WINDOW_S = 3600.0
PACKET_BYTES = 1448.0  # the workloads' default segment (scenario.Workload.packet_bytes)
CPU_SATURATION = SensingSpec().cpu_saturation  # the sensor's: full vCPUs on virtio


def virtio_ceiling_bps(profile: ProfileSpec, packet_bytes: float = PACKET_BYTES) -> float:
    """What one VM's virtio path carries at most on this hardware: its per-VM flow limit or
    the backend's whole packet rate, whichever is lower."""
    return min(profile.virtio_flow_limit, profile.virtio_pps_limit * packet_bytes * 8.0)


def freed_cpu_saturation(profile: ProfileSpec) -> float | None:
    """The vCPU use at which a VF frees a virtio guest's CPU for more traffic (the sensor's
    ``cpu_saturation``), or None where the profile charges virtio no extra guest CPU per
    packet: there a VF below virtio's ceiling frees nothing."""
    return CPU_SATURATION if profile.virtio_guest_ns_per_packet > 0 else None


@dataclass(frozen=True)
class DemandGrid:
    """Each VM's offered load (bit/s) at each timeline sample of a run."""

    times: np.ndarray  # (P,) sample times, ascending
    vms: list[str]
    offered: np.ndarray  # (V, P) bit/s; 0 where a VM has no sample
    delivered: np.ndarray | None  # (V, P) bit/s sent (None: not read)
    cpu: np.ndarray | None = None  # (V, P) vCPU use 0..1 (the run's; None: not read)

    def index(self, vm: str) -> int:
        return self.vms.index(vm)


def demand_grid(timeline: Timeline, vms: Sequence[str], delivered: bool = True) -> DemandGrid:
    """The run's offered and (``delivered``) delivered load per VM and sample, from its
    timeline a chunk at a time: an hour of 1,000 x 3 read as whole columns (five of 8.6 MB,
    their int64 indices and masks) was the peak of a ``sova simulate`` (+108 MiB over the
    run's); the report reads no delivered load (its grid another 8.6 MB there)."""
    names = timeline.texts("vm")
    where = {v: i for i, v in enumerate(vms)}
    lut = np.array([where.get(str(n), -1) for n in names] + [-1], dtype=np.int64)
    times = timeline.sample_times()
    grid = np.zeros((len(vms), times.size))
    sent = np.zeros((len(vms), times.size)) if delivered else None
    cpu = np.zeros((len(vms), times.size))
    for c in timeline.chunks():  # in row order: a later row of a (VM, time) wins, as before
        cols = c.columns
        row = lut[cols["vm"]]
        ok = row >= 0
        row, col = row[ok], np.searchsorted(times, cols["time_s"][ok])
        offered, usage = cols["offered_mbps"][ok], cols["cpu_usage"][ok]
        grid[row, col] = np.where(np.isfinite(offered), offered, 0.0) * 1e6
        if sent is not None:
            sent[row, col] = cols["tx_mbps"][ok] * 1e6
        cpu[row, col] = np.where(np.isfinite(usage), usage, 0.0)
    return DemandGrid(times, list(vms), grid, sent, cpu)


@dataclass(frozen=True)
class Moves:
    """A run's VF moves against the demand it faced, read from its timeline once for a
    whole report: the holders' plot, the holding plot and the decisions table each built
    the run's VM x period demand grids (three of 8.6 MB on an hour of 3,000 VMs) before."""

    attaches: list[EventRow]
    useless: list[EventRow]
    mean_offered_bps: np.ndarray  # per VM of ``vms``, over the timeline's samples
    samples: int  # timeline samples (periods kept)


def run_moves(
    timeline: Timeline, events: Sequence[EventRow], vms: Sequence[str], profile: ProfileSpec
) -> Moves:
    """:class:`Moves` of a run (its timeline and events) on this hardware profile."""
    grid = demand_grid(timeline, vms, delivered=False)
    plugs = attaches(events)
    useless = useless_attaches(
        plugs,
        grid,
        virtio_ceiling_bps(profile),
        cpu_saturation=freed_cpu_saturation(profile),
    )
    mean = grid.offered.mean(axis=1) if grid.times.size else np.zeros(len(vms))
    return Moves(plugs, useless, mean, int(grid.times.size))


def attaches(events: Iterable[EventRow]) -> list[EventRow]:
    return [e for e in events if e.event == "vf_attach"]


def useless_attaches(
    events: Iterable[EventRow],
    grid: DemandGrid,
    ceiling_bps: float,
    horizon_s: float = USEFUL_HORIZON_S,
    cpu_saturation: float | None = None,
) -> list[EventRow]:
    """The VF attaches to a VM whose demand, from the sample before the attach to
    ``horizon_s`` after it, never exceeded what its virtio path carries, nor (with
    ``cpu_saturation``, :func:`freed_cpu_saturation`) ran its vCPUs full on virtio while
    sending: ``grid`` is then a run with every VM on virtio (do-nothing's)."""
    period = float(np.median(np.diff(grid.times))) if grid.times.size > 1 else 0.0
    where = {v: i for i, v in enumerate(grid.vms)}
    out = []
    for e in attaches(events):
        i = where.get(e.vm, -1)
        if i < 0:
            continue
        lo = np.searchsorted(grid.times, e.time_s - period, side="left")
        hi = np.searchsorted(grid.times, e.time_s + horizon_s, side="right")
        peak = float(grid.offered[i, lo:hi].max()) if hi > lo else 0.0
        if peak > ceiling_bps:
            continue
        if cpu_saturation is not None and grid.cpu is not None and hi > lo:
            full = grid.cpu[i, lo:hi] >= cpu_saturation
            if (full & (grid.offered[i, lo:hi] > 0)).any():
                continue
        out.append(e)
    return out


def moved_back(events: Iterable[EventRow], window_s: float = MOVED_BACK_WINDOW_S) -> int:
    """Migrations that took a VM back to a host it had left less than ``window_s`` before."""
    left: dict[tuple[str, str], float] = {}  # (vm, host) -> when the VM last left it
    n = 0
    for e in sorted((e for e in events if e.event == "migrate_end"), key=lambda e: e.time_s):
        since = left.get((e.vm, e.dst_host))
        if since is not None and e.time_s - since <= window_s:
            n += 1
        left[(e.vm, e.src_host)] = e.time_s
    return n


def blip_cost_mbit(events: Iterable[EventRow], grid: DemandGrid) -> float:
    """The traffic the hot-plugs' blips would cost the guests (Mbit): each attach and
    detach silences the VM for its blip at the rate it was sending then."""
    where = {v: i for i, v in enumerate(grid.vms)}
    total = 0.0
    for e in events:
        blip = {"vf_attach": BLIP_ATTACH_S, "vf_detach": BLIP_DETACH_S}.get(e.event)
        if blip is None or e.vm not in where:
            continue
        k = min(int(np.searchsorted(grid.times, e.time_s)), grid.times.size - 1)
        total += blip * float(grid.offered[where[e.vm], k]) / 1e6
    return total
