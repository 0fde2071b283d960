"""Load shares' readable per-host form, the oracle the compiled core is held to.

These are ``host_load`` and ``vm_loads`` as the agent ran them before the core
(rust/sova-core/src/loads.rs, behind ``sova.policy.loads``) replaced them: Python integer
differences of two samples, one VM at a time. tests/test_kernels.py asks the core, through
both its fleet form and its per-host form, for the same floats (the core divides the same
exact differences in the same order).
"""

from __future__ import annotations

from sova.model import HostSample
from sova.policy.loads import LoadShares
from sova.policy.sensing import NS, period_stats


def host_load(
    prev: HostSample, cur: HostSample, cores: int, memory_bytes: int, capacity_bps: float
) -> LoadShares | None:
    dt = cur.time_s - prev.time_s
    a, b = prev.totals, cur.totals
    d_cpu = b.cpu_busy_ns - a.cpu_busy_ns
    d_rx = b.nic_rx_bytes - a.nic_rx_bytes
    d_tx = b.nic_tx_bytes - a.nic_tx_bytes
    if dt <= 0 or min(d_cpu, d_rx, d_tx) < 0:
        return None
    return LoadShares(
        cpu=min(1.0, d_cpu / (dt * NS * cores)),
        mem=min(1.0, b.memory_used_bytes / memory_bytes) if memory_bytes > 0 else 0.0,
        net=min(1.0, 8.0 * max(d_rx, d_tx) / (dt * capacity_bps)) if capacity_bps > 0 else 0.0,
    )


def vm_loads(
    prev: HostSample, cur: HostSample, cores: int, memory_bytes: int, capacity_bps: float
) -> dict[str, LoadShares]:
    dt = cur.time_s - prev.time_s
    out: dict[str, LoadShares] = {}
    if dt <= 0:
        return out
    for vm, c in cur.vms.items():
        p = prev.vms.get(vm)
        if p is None:
            continue
        stats = period_stats(p, c, dt)
        if stats is None:
            continue
        mem = c.memory_used_bytes / memory_bytes if memory_bytes > 0 else 0.0
        out[vm] = LoadShares(
            cpu=min(1.0, stats.gotten_ns / (dt * NS * cores)),
            mem=min(1.0, mem),
            net=min(1.0, 8.0 * max(stats.rx_bytes, stats.tx_bytes) / (dt * capacity_bps))
            if capacity_bps > 0
            else 0.0,
        )
    return out
