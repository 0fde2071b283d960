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


def host_load(
    prev: HostSample, cur: HostSample, cores: int, memory_bytes: int, capacity_bps: float
) -> LoadShares | None:
    """The host's (cpu, mem, net) utilisation vector of docs/design.md#hotspots, or None on a reset.

    Network utilisation is the busier direction: the link is full duplex, and a host is
    hot when either direction saturates.
    """
    a, b = prev.totals, cur.totals
    s = _shares(
        cur.time_s - prev.time_s,
        [b.cpu_busy_ns - a.cpu_busy_ns, b.nic_rx_bytes - a.nic_rx_bytes,
         b.nic_tx_bytes - a.nic_tx_bytes],
        [], [], [], [], [cores], [memory_bytes], [capacity_bps],
        host_memory=[b.memory_used_bytes],
    )
    if not s.host_ok[0]:
        return None
    return LoadShares(float(s.host_cpu[0]), float(s.host_mem[0]), float(s.host_net[0]))


def vm_loads(
    prev: HostSample, cur: HostSample, cores: int, memory_bytes: int, capacity_bps: float
) -> dict[str, LoadShares]:
    """Each VM's share of its host's capacity over the period (what MF is computed from):
    the VMs in both samples whose counters did not go back, in ``cur``'s order."""
    dt = cur.time_s - prev.time_s
    names = [vm for vm in cur.vms if vm in prev.vms]
    if dt <= 0 or not names:
        return {}
    p = [prev.vms[vm] for vm in names]
    c = [cur.vms[vm] for vm in names]
    s = _shares(
        dt,
        [0.0, 0.0, 0.0],
        [
            [x.cpu_time_ns - y.cpu_time_ns for x, y in zip(c, p, strict=True)],
            [x.steal_ns - y.steal_ns for x, y in zip(c, p, strict=True)],
            [x.rx_bytes - y.rx_bytes for x, y in zip(c, p, strict=True)],
            [x.tx_bytes - y.tx_bytes for x, y in zip(c, p, strict=True)],
            [x.rx_packets - y.rx_packets for x, y in zip(c, p, strict=True)],
            [x.tx_packets - y.tx_packets for x, y in zip(c, p, strict=True)],
        ],
        np.zeros(len(names), dtype=np.bool_),
        np.zeros(len(names), dtype=np.int64),
        [x.memory_used_bytes for x in c],
        [cores],
        [memory_bytes],
        [capacity_bps],
        host_memory=[0.0],
    )
    return {
        vm: LoadShares(cpu, mem, net)
        for vm, cpu, mem, net, ok in zip(
            names, s.vm_cpu.tolist(), s.vm_mem.tolist(), s.vm_net.tolist(), s.vm_ok.tolist(),
            strict=True,
        )
        if ok
    }
