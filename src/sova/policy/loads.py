"""Load shares: each host's (cpu, mem, net) utilisation over a period and each VM's share
of its host's capacity, what the manager's hotspot detection judges (docs/design.md#hotspots).

One implementation, the compiled core's (rust/sova-core/src/loads.rs, docs/design.md "The
compiled core"): :func:`load_shares` for every host of a simulated fleet at once, and
:func:`host_load`/:func:`vm_loads` for one host's two samples (the agent, the lab) call it
with the period's counter differences. The agent's differences are taken between Python
integers, so they are exact however large the counters grow, and the core divides them as
the integer-over-float division of Python would. The readable per-host form is kept in
tests/loads_oracle.py as the oracle the core is held to.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from sova.model import HostSample
from sova.policy import _core

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
