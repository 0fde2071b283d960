"""The readable per-host form of sensing, kept as the oracle the compiled core is held to.

This was ``sova.policy.sensing`` before the windows and factors moved into the compiled core
(rust/sova-core/src/sensing.rs, docs/design.md "The compiled core"): per-VM deques of period
objects and the factors computed from them in Python, one VM at a time. The agents and the
simulator now run the core through ``sova.policy.sensing``; tests/test_kernels.py holds the
core's factors equal to these, float for float, on random heterogeneous clusters, and
tests/test_sensing.py keeps the arithmetic of each factor readable here. The formulas and
the papers' errors they fix are in ``sova.policy.sensing``'s docstring.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from sova.model import HostSample, VMCounters
from sova.policy.sensing import (
    DEFAULT_CENSOR_MARGIN,
    DEFAULT_CPU_SATURATION,
    DEFAULT_TRAFFIC_THRESHOLD_BPS,
    VMFactors,
)

NS = 1e9
# An idle VM has gotten ≈ 0; flooring gotten at 0.1 % of the period's vCPU time caps its
# IF near 1000 instead of dividing by zero, far above any I/O-bound VM's (Sova Table 1: ≤ 214).
# The core's own constant: rust/sova-core/src/sensing.rs.
GOTTEN_FLOOR_FRACTION = 1e-3


@dataclass(frozen=True)
class PeriodStats:
    """One VM over one sampling period, derived from two cumulative readings."""

    dt_s: float
    vcpus: int
    cpu_usage: float  # fraction of the VM's own vCPU time, [0, 1]
    gotten_ns: float
    blocked_ns: float
    rx_bytes: int
    tx_bytes: int
    packets: int
    censored: bool = False  # the path held the VM back this period (module docstring)

    @property
    def bytes(self) -> int:
        return self.rx_bytes + self.tx_bytes

    @property
    def rate_bps(self) -> float:
        return 8.0 * self.bytes / self.dt_s if self.dt_s > 0 else 0.0

    def has_traffic(self, threshold_bps: float = DEFAULT_TRAFFIC_THRESHOLD_BPS) -> bool:
        return self.rate_bps >= threshold_bps


def period_stats(prev: VMCounters, cur: VMCounters, dt_s: float) -> PeriodStats | None:
    """Difference of two readings; ``None`` when any counter went backwards (a reset)."""
    if dt_s <= 0:
        raise ValueError(f"dt_s must be > 0, got {dt_s}")
    d_cpu = cur.cpu_time_ns - prev.cpu_time_ns
    d_steal = cur.steal_ns - prev.steal_ns
    d_rx = cur.rx_bytes - prev.rx_bytes
    d_tx = cur.tx_bytes - prev.tx_bytes
    # Each counter separately: a reset of one packet counter can hide in a growing sum.
    d_rxp = cur.rx_packets - prev.rx_packets
    d_txp = cur.tx_packets - prev.tx_packets
    if min(d_cpu, d_steal, d_rx, d_tx, d_rxp, d_txp) < 0:
        return None
    d_pk = d_rxp + d_txp
    vcpus = max(1, cur.vcpus)
    capacity_ns = dt_s * NS * vcpus
    cpu_usage = min(1.0, d_cpu / capacity_ns)
    blocked = max(0.0, capacity_ns - d_cpu - d_steal)
    return PeriodStats(
        dt_s=dt_s,
        vcpus=vcpus,
        cpu_usage=cpu_usage,
        gotten_ns=float(d_cpu),
        blocked_ns=blocked,
        rx_bytes=d_rx,
        tx_bytes=d_tx,
        packets=d_pk,
    )


def censored(
    stats: PeriodStats,
    ceiling_bps: float,
    on_virtio: bool,
    margin: float = DEFAULT_CENSOR_MARGIN,
    saturation: float = DEFAULT_CPU_SATURATION,
    threshold_bps: float = DEFAULT_TRAFFIC_THRESHOLD_BPS,
) -> bool:
    """Whether the VM's path held it back over this period: it sent (tx: what a VF rate,
    a guest limit or the line caps) at its ceiling, or on virtio with full vCPUs."""
    tx_bps = 8.0 * stats.tx_bytes / stats.dt_s
    if tx_bps >= (1.0 - margin) * ceiling_bps:
        return True
    return on_virtio and stats.cpu_usage >= saturation and stats.has_traffic(threshold_bps)


def demand_estimate(window: Sequence[PeriodStats], margin: float = DEFAULT_CENSOR_MARGIN) -> float:
    """Mean rate over the window, a censored period counted ``(1 + margin)`` times."""
    return _mean(s.rate_bps * (1.0 + margin) if s.censored else s.rate_bps for s in window)


# --------------------------------------------------------------------------- factors


def io_degree(window: Sequence[PeriodStats]) -> float:
    """DSR-IOV I/O factor, 0 (always busy) … 100 (never on CPU)."""
    if not window:
        return 100.0
    return 100.0 * (1.0 - sum(s.cpu_usage for s in window) / len(window))


def io_factor(window: Sequence[PeriodStats]) -> float:
    """Sova IF: mean blocked/gotten. Large for I/O-bound VMs, ≪ 1 for CPU-bound ones."""
    if not window:
        return 0.0
    total = 0.0
    for s in window:
        floor = GOTTEN_FLOOR_FRACTION * s.dt_s * NS * s.vcpus
        total += s.blocked_ns / max(s.gotten_ns, floor)
    return total / len(window)


def traffic_freq(
    window: Sequence[PeriodStats], threshold_bps: float = DEFAULT_TRAFFIC_THRESHOLD_BPS
) -> float:
    if not window:
        return 0.0
    return sum(1 for s in window if s.has_traffic(threshold_bps)) / len(window)


def net_degree(
    window: Sequence[PeriodStats],
    epsilon: float = 0.7,
    threshold_bps: float = DEFAULT_TRAFFIC_THRESHOLD_BPS,
) -> float:
    """DSR-IOV network factor: ε·(mean kB/s) + (1−ε)·(share of periods with traffic)."""
    if not window:
        return 0.0
    data_avg_kBps = sum(s.bytes / s.dt_s for s in window) / len(window) / 1000.0
    return epsilon * data_avg_kBps + (1.0 - epsilon) * traffic_freq(window, threshold_bps)


def network_factors(
    windows: Mapping[str, Sequence[PeriodStats]],
    epsilon: float = 0.7,
    threshold_bps: float = DEFAULT_TRAFFIC_THRESHOLD_BPS,
) -> dict[str, float]:
    """Sova NF for every VM of one host, normalised together (see module docstring)."""
    active = [
        s.packets / s.dt_s for w in windows.values() for s in w if s.has_traffic(threshold_bps)
    ]
    lo, hi = (min(active), max(active)) if active else (0.0, 0.0)
    span = hi - lo
    result: dict[str, float] = {}
    for vm, w in windows.items():
        busy = [s.packets / s.dt_s for s in w if s.has_traffic(threshold_bps)]
        freq = len(busy) / len(w) if w else 0.0
        # span == 0: one busy level on the whole host, every active sample is the maximum.
        norm = [(x - lo) / span if span > 0 else 1.0 for x in busy]
        avg = sum(norm) / len(norm) if norm else 0.0
        result[vm] = epsilon * freq + (1.0 - epsilon) * avg
    return result


# --------------------------------------------------------------------------- windows


class HostSensor:
    """Keeps the last ``num`` periods per VM from successive host samples.

    Pure state machine: feed it :class:`HostSample` objects in time order, read factors.
    VMs that disappear from a sample (migrated away, destroyed) are forgotten; a VM that
    appears starts with an empty window.
    """

    def __init__(
        self,
        num: int = 6,
        epsilon: float = 0.7,
        traffic_threshold_bps: float = DEFAULT_TRAFFIC_THRESHOLD_BPS,
        censor_margin: float = DEFAULT_CENSOR_MARGIN,
        cpu_saturation: float = DEFAULT_CPU_SATURATION,
    ) -> None:
        if num < 1:
            raise ValueError(f"window num must be >= 1, got {num}")
        if not 0.0 <= epsilon <= 1.0:
            raise ValueError(f"epsilon must be in [0, 1], got {epsilon}")
        self.num = num
        self.epsilon = epsilon
        self.threshold_bps = traffic_threshold_bps
        self.censor_margin, self.cpu_saturation = censor_margin, cpu_saturation
        self._last: HostSample | None = None
        self._windows: dict[str, deque[PeriodStats]] = {}
        self.resets = 0

    def observe(
        self,
        sample: HostSample,
        ceilings: Mapping[str, float] | None = None,
        virtio: Collection[str] = (),
    ) -> None:
        """Take a reading. ``ceilings``: each VM's path ceiling in bit/s (the lowest of its
        VF max rate, guest limit and the line rate; a VM not named has none); ``virtio``:
        the VMs on virtio. Both as the host is when the reading is taken: a path changed
        inside the period is judged by its new ceiling for that one period."""
        prev = self._last
        if prev is not None and sample.time_s <= prev.time_s:
            # A repeated or out-of-order reading carries no new information: ignore it
            # entirely, or the next period would be measured from the wrong reading.
            return
        self._last = sample
        for gone in set(self._windows) - set(sample.vms):
            del self._windows[gone]
        if prev is None:
            for vm in sample.vms:
                self._windows.setdefault(vm, deque(maxlen=self.num))
            return
        dt = sample.time_s - prev.time_s
        for vm, cur in sample.vms.items():
            window = self._windows.setdefault(vm, deque(maxlen=self.num))
            before = prev.vms.get(vm)
            if before is None:
                continue
            stats = period_stats(before, cur, dt)
            if stats is None:
                self.resets += 1
                continue
            ceiling = ceilings.get(vm, math.inf) if ceilings else math.inf
            if censored(
                stats,
                ceiling,
                vm in virtio,
                self.censor_margin,
                self.cpu_saturation,
                self.threshold_bps,
            ):
                stats = replace(stats, censored=True)
            window.append(stats)

    def windows(self) -> dict[str, Sequence[PeriodStats]]:
        return {vm: tuple(w) for vm, w in self._windows.items()}

    def factors(self) -> dict[str, VMFactors]:
        windows = self.windows()
        nf = network_factors(windows, self.epsilon, self.threshold_bps)
        out: dict[str, VMFactors] = {}
        for vm, w in windows.items():
            last = w[-1] if w else None
            out[vm] = VMFactors(
                vm=vm,
                cpu_usage=last.cpu_usage if last else 0.0,
                io_degree=io_degree(w),
                io_factor=io_factor(w),
                net_degree=net_degree(w, self.epsilon, self.threshold_bps),
                net_factor=nf[vm],
                has_traffic=any(s.has_traffic(self.threshold_bps) for s in w),
                demand_bps=_mean(s.rate_bps for s in w),
                last_rate_bps=last.rate_bps if last else 0.0,
                tx_bps=8.0 * last.tx_bytes / last.dt_s if last else 0.0,
                rx_bps=8.0 * last.rx_bytes / last.dt_s if last else 0.0,
                censored=last.censored if last else False,
                demand_est_bps=demand_estimate(w, self.censor_margin),
            )
        return out


def _mean(values: Iterable[float]) -> float:
    vals = list(values)
    return sum(vals) / len(vals) if vals else 0.0
