"""Load shares: each host's (cpu, mem, net) utilisation over a period and each VM's share
of its host's capacity, what the manager's hotspot detection judges (docs/design.md#hotspots).

With each censored VM's unmet demand added (:func:`demand_loads` for one host,
:func:`demand_load_arrays` for a fleet: docs/design.md#demand-hotspots), they are what the
detector judges. One implementation, the compiled core's (rust/sova-core/src/loads.rs, docs/design.md "The
compiled core"): :func:`load_shares` for every host of a simulated fleet at once, and
:func:`host_load`/:func:`vm_loads` for one host's two samples (the agent, the lab) call it
with the period's counter differences. The agent's differences are taken between Python
integers, so they are exact however large the counters grow, and the core divides them as
the integer-over-float division of Python would. The readable per-host form is kept in
tests/loads_oracle.py as the oracle the core is held to.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Protocol

import numpy as np
import numpy.typing as npt

from sova.model import HostSample
from sova.policy import _core


class CensoredDemand(Protocol):
    """What :func:`demand_loads` reads of a VM's factors (``sensing.VMFactors``)."""

    @property
    def censored(self) -> bool: ...
    @property
    def demand_est_bps(self) -> float: ...
    @property
    def last_rate_bps(self) -> float: ...

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True)
class LoadShares:
    """Utilisation of a host, or one VM's share of its host, over one period; each in [0, 1]."""

    cpu: float
    mem: float
    net: float


@dataclass(frozen=True)
class LoadArrays:
    """:func:`host_load` of every host and :func:`vm_loads` of every VM, one array per share."""

    host_cpu: FloatArray
    host_mem: FloatArray
    host_net: FloatArray
    host_ok: BoolArray  # False where host_load gives None (a counter went back)
    vm_cpu: FloatArray
    vm_mem: FloatArray
    vm_net: FloatArray
    vm_ok: BoolArray  # False where vm_loads leaves the VM out


def _f64(a: npt.ArrayLike) -> FloatArray:
    return np.ascontiguousarray(a, dtype=np.float64).ravel()


def _shares(
    dt: float,
    d_totals: npt.ArrayLike,
    d_counters: npt.ArrayLike,
    moved: npt.ArrayLike,
    host: npt.ArrayLike,
    vm_memory: npt.ArrayLike,
    cores: npt.ArrayLike,
    memory: npt.ArrayLike,
    capacity: npt.ArrayLike,
    host_memory: npt.ArrayLike | None = None,
) -> LoadArrays:
    return LoadArrays(
        *_core.load_shares(
            float(dt),
            _f64(d_totals),
            _f64(d_counters),
            np.ascontiguousarray(moved, dtype=np.bool_).ravel(),
            np.ascontiguousarray(host, dtype=np.int64).ravel(),
            _f64(vm_memory),
            _f64(cores),
            _f64(memory),
            _f64(capacity),
            None if host_memory is None else _f64(host_memory),
        )
    )


def load_shares(
    dt: float,
    prev_totals: FloatArray,
    totals: FloatArray,
    prev_counters: FloatArray,
    counters: FloatArray,
    moved: BoolArray,
    host: IntArray,
    vm_memory: FloatArray,
    cores: FloatArray,
    memory: FloatArray,
    capacity: FloatArray,
) -> LoadArrays:
    """Every host's and VM's load shares over one period, from two whole-number readings:
    ``totals`` (3, H) host cpu_busy_ns, nic rx and tx bytes; ``counters`` (6, N) VM cpu,
    steal, rx_b, tx_b, rx_pk, tx_pk; ``moved``: VMs not on their host at the previous
    reading (its sample has no earlier reading of them). A host's memory in use is the sum
    of its VMs' ``vm_memory``, truncated.

    Every count is a whole number below 2**53, so the differences are exact."""
    return _shares(
        dt, totals - prev_totals, counters - prev_counters, moved, host, vm_memory,
        cores, memory, capacity,
    )


def _one_host(
    dt: float,
    d_totals: list[int],
    d_counters: list[int],
    vm_memory: list[int],
    cores: float,
    memory: float,
    capacity: float,
    host_memory: float,
) -> list[float]:
    """The core on one host, packed: one float64 array in and one out (an agent pays for
    one conversion and one crossing per call, not eighteen). Host cpu, mem, net, ok, then
    each VM's cpu, mem, net and ok (ok as 1.0 or 0.0)."""
    packed = np.array(
        [*d_totals, *d_counters, *vm_memory, cores, memory, capacity, host_memory],
        dtype=np.float64,
    )
    out: list[float] = _core.host_load_shares(float(dt), packed, len(vm_memory)).tolist()
    return out


def host_load(
    prev: HostSample, cur: HostSample, cores: int, memory_bytes: int, capacity_bps: float
) -> LoadShares | None:
    """The host's (cpu, mem, net) utilisation vector of docs/design.md#hotspots, or None on a reset.

    Network utilisation is the busier direction: the link is full duplex, and a host is
    hot when either direction saturates.
    """
    a, b = prev.totals, cur.totals
    d = [b.cpu_busy_ns - a.cpu_busy_ns, b.nic_rx_bytes - a.nic_rx_bytes,
         b.nic_tx_bytes - a.nic_tx_bytes]
    cpu, mem, net, ok = _one_host(
        cur.time_s - prev.time_s, d, [], [], cores, memory_bytes, capacity_bps,
        b.memory_used_bytes,
    )
    return LoadShares(cpu, mem, net) if ok else None


def vm_loads(
    prev: HostSample, cur: HostSample, cores: int, memory_bytes: int, capacity_bps: float
) -> dict[str, LoadShares]:
    """Each VM's share of its host's capacity over the period (what MF is computed from):
    the VMs in both samples whose counters did not go back, in ``cur``'s order."""
    dt = cur.time_s - prev.time_s
    names = [vm for vm in cur.vms if vm in prev.vms]
    if dt <= 0 or not names:
        return {}
    pairs = [(cur.vms[vm], prev.vms[vm]) for vm in names]
    d = [x.cpu_time_ns - y.cpu_time_ns for x, y in pairs]
    d += [x.steal_ns - y.steal_ns for x, y in pairs]
    d += [x.rx_bytes - y.rx_bytes for x, y in pairs]
    d += [x.tx_bytes - y.tx_bytes for x, y in pairs]
    d += [x.rx_packets - y.rx_packets for x, y in pairs]
    d += [x.tx_packets - y.tx_packets for x, y in pairs]
    out = _one_host(
        dt, [0, 0, 0], d, [x.memory_used_bytes for x, _ in pairs], cores, memory_bytes,
        capacity_bps, 0,
    )
    n = len(names)
    cpu, mem, net, ok = (out[4 + k * n : 4 + (k + 1) * n] for k in range(4))
    return {
        vm: LoadShares(c, m, v)
        for vm, c, m, v, good in zip(names, cpu, mem, net, ok, strict=True)
        if good
    }


def demand_load_arrays(
    loads: LoadArrays,
    host: IntArray,
    censored: BoolArray,
    demand_est_bps: FloatArray,
    last_rate_bps: FloatArray,
    capacity: FloatArray,
) -> LoadArrays:
    """:func:`demand_loads` of every host and VM at once: each censored VM's unmet demand
    added to its net share and its host's, at most 1."""
    host_net, vm_net = _core.demand_loads(
        np.ascontiguousarray(host, dtype=np.int64),
        np.ascontiguousarray(censored, dtype=np.bool_),
        _f64(demand_est_bps),
        _f64(last_rate_bps),
        np.ascontiguousarray(loads.vm_ok, dtype=np.bool_),
        _f64(capacity),
        _f64(loads.host_net),
        _f64(loads.vm_net),
    )
    return replace(loads, host_net=host_net, vm_net=vm_net)


def demand_loads(
    host: LoadShares,
    vms: Mapping[str, LoadShares],
    factors: Mapping[str, CensoredDemand],
    capacity_bps: float,
) -> tuple[LoadShares, dict[str, LoadShares]]:
    """The loads a hotspot detector should judge: each censored VM's unmet demand (its
    demand estimate above its latest rate) added to its own net share and its host's, at
    most the whole link (docs/design.md#demand-hotspots). What got through understates a
    host whose VMs their paths hold back; the manager sees only these numbers."""
    out = dict(vms)
    names = [vm for vm in vms if vm in factors and factors[vm].censored]
    if not names or not capacity_bps > 0:
        return host, out
    f = [factors[vm] for vm in names]
    n = len(names)
    host_net, vm_net = _core.demand_loads(
        np.zeros(n, dtype=np.int64),
        np.ones(n, dtype=np.bool_),
        np.array([x.demand_est_bps for x in f], dtype=np.float64),
        np.array([x.last_rate_bps for x in f], dtype=np.float64),
        np.ones(n, dtype=np.bool_),
        np.array([capacity_bps], dtype=np.float64),
        np.array([host.net], dtype=np.float64),
        np.array([vms[vm].net for vm in names], dtype=np.float64),
    )
    for vm, net in zip(names, vm_net.tolist(), strict=True):
        share = vms[vm]
        if net != share.net:
            out[vm] = LoadShares(share.cpu, share.mem, net)
    new_host = float(host_net[0])
    if new_host == host.net:
        return host, out
    return LoadShares(host.cpu, host.mem, new_host), out
