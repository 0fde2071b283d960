"""Load shares' readable per-host form, the oracle the compiled core is held to.

These are ``host_load`` and ``vm_loads`` as the agent ran them before the core
(rust/sova-core/src/loads.rs, behind ``sova.policy.loads``) replaced them: Python integer
differences of two samples, one VM at a time; ``demand_loads`` likewise, and
``demand_load_arrays`` the numpy form the simulator ran for every host. tests/test_kernels.py asks the core, through
both its fleet form and its per-host form, for the same floats (the core divides the same
exact differences in the same order).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import numpy as np
from tests.sensing_oracle import NS, period_stats

from sova.model import HostSample
from sova.policy.loads import LoadArrays, LoadShares
from sova.policy.sensing import VMFactors


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


def demand_loads(
    host: LoadShares,
    vms: Mapping[str, LoadShares],
    factors: Mapping[str, VMFactors],
    capacity_bps: float,
) -> tuple[LoadShares, dict[str, LoadShares]]:
    """The loads a hotspot detector should judge: each censored VM's unmet demand (its
    demand estimate above its latest rate) added to its own net share and its host's, at
    most the whole link (docs/design.md#demand-hotspots). What got through understates a
    host whose VMs their paths hold back; the manager sees only these numbers."""
    out = dict(vms)
    extra = 0.0
    if capacity_bps > 0:
        for vm, share in vms.items():
            f = factors.get(vm)
            if f is None or not f.censored:
                continue
            unmet = max(0.0, f.demand_est_bps - f.last_rate_bps) / capacity_bps
            if unmet > 0.0:
                out[vm] = LoadShares(share.cpu, share.mem, min(1.0, share.net + unmet))
                extra += unmet
    if extra == 0.0:
        return host, out
    return LoadShares(host.cpu, host.mem, min(1.0, host.net + extra)), out



def demand_load_arrays(
    loads: LoadArrays,
    host: np.ndarray,
    censored: np.ndarray,
    demand_est_bps: np.ndarray,
    last_rate_bps: np.ndarray,
    capacity: np.ndarray,
) -> LoadArrays:
    """:func:`~sova.policy.sensing.demand_loads` of every host and VM at once: each
    censored VM's unmet demand added to its net share and its host's, at most 1."""
    has_cap = capacity[host] > 0
    unmet = np.where(
        censored & has_cap,
        np.maximum(0.0, demand_est_bps - last_rate_bps) / np.where(has_cap, capacity[host], 1.0),
        0.0,
    )
    if not unmet.any():
        return loads
    # a VM without a load share this period adds nothing (vm_loads leaves it out)
    unmet = np.where(loads.vm_ok, unmet, 0.0)
    extra = np.bincount(host, unmet, minlength=len(loads.host_net))
    return replace(
        loads,
        host_net=np.where(extra > 0.0, np.minimum(1.0, loads.host_net + extra), loads.host_net),
        vm_net=np.where(unmet > 0.0, np.minimum(1.0, loads.vm_net + unmet), loads.vm_net),
    )

