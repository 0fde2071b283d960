"""The simulated world's tick, where it is pure arithmetic: the compiled core's kernels.

The simulator (:mod:`sova.sim.engine`) calls these once per tick for every VM of every
host; the core evaluates the numpy form's expressions in its order, one VM at a time, so
every value is the same float (rust/sova-core/src/tick.rs; tests/test_tick_forms.py holds
the engine's state to the readable numpy form byte for byte after every tick). The random
draws stay in the simulator: the seed's contract fixes their order.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from sova.policy import _core

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True)
class Counted:
    """The tick's figures beside the counters it advanced."""

    cpu_use: FloatArray  # each VM's CPU use, a share of its vCPUs
    host_cpu_util: FloatArray
    host_net_util: FloatArray


@dataclass(frozen=True)
class OnTime:
    """The duty cycles' first pass over a tick (see :func:`on_time`)."""

    on: FloatArray  # on-time (s) of each live process's current cycle inside the tick
    renew: IntArray  # positions in ``live`` of the processes whose cycle ends by t1
    end: FloatArray  # where each renewed process's next cycle starts


def on_time(
    start: FloatArray, length: FloatArray, live: IntArray, duty: FloatArray, t0: float, t1: float
) -> OnTime:
    """Each live on/off process's on-time in ``(t0, t1]`` within its current cycle (VM
    ``live[j]`` on for the first ``duty[j]`` of its cycle of ``length`` from ``start``),
    and the processes whose cycle ends inside the tick: their next cycles need draws."""
    on, renew, end = _core.tick_on_time(
        np.ascontiguousarray(start, dtype=np.float64),
        np.ascontiguousarray(length, dtype=np.float64),
        np.ascontiguousarray(live, dtype=np.int64),
        np.ascontiguousarray(duty, dtype=np.float64),
        float(t0),
        float(t1),
    )
    return OnTime(on, renew, end)


@dataclass(frozen=True)
class VmTick:
    """What each VM sent and what it cost this tick (one value per VM)."""

    host: IntArray
    tx: FloatArray
    rx: FloatArray
    pkts_per_bit: FloatArray
    ns_pkt: FloatArray
    ns_per_byte: FloatArray
    cpu_busy: FloatArray
    arrival_cost: FloatArray
    host_scale_vm: FloatArray
    vcpus: FloatArray
    need: FloatArray
    virt: BoolArray
    pkt_bits: FloatArray
    paused: BoolArray | None  # None: no VM is paused


@dataclass(frozen=True)
class HostTick:
    """Each host's figures of the tick (one value per host)."""

    backend_vm_frac: FloatArray
    tx_host: FloatArray
    rx_host: FloatArray
    host_need: FloatArray
    cores: FloatArray
    capacity: FloatArray


@dataclass(frozen=True)
class Counters:
    """The cumulative counters a driver reads: float64 arrays, advanced in place."""

    cpu_ns: FloatArray
    steal_ns: FloatArray
    tx_b: FloatArray
    rx_b: FloatArray
    tx_pk: FloatArray
    rx_pk: FloatArray
    h_cpu_ns: FloatArray
    h_tx_b: FloatArray
    h_rx_b: FloatArray


def count(
    vm: VmTick,
    hosts: HostTick,
    counters: Counters,
    dt: float,
    virtio_host_ns_per_packet: float,
    ack_bits: float,
    steal: bool,
) -> Counted:
    """Advance the counters by one tick of ``dt`` seconds and return its figures: each
    VM's CPU time, steal (counted only when ``steal``: some host's cores are
    oversubscribed), bytes and packets each way; each host's CPU (vCPUs and the virtio
    backend at ``virtio_host_ns_per_packet``) and bytes. ``ack_bits``: bits per ACK."""

    def f(a: npt.ArrayLike) -> FloatArray:
        return np.ascontiguousarray(a, dtype=np.float64)

    def b(a: npt.ArrayLike) -> BoolArray:
        return np.ascontiguousarray(a, dtype=np.bool_)

    c = counters
    cpu_use, host_cpu_util, host_net_util = _core.tick_count(
        np.ascontiguousarray(vm.host, dtype=np.int64),
        f(vm.tx),
        f(vm.rx),
        f(vm.pkts_per_bit),
        f(vm.ns_pkt),
        f(vm.ns_per_byte),
        f(vm.cpu_busy),
        f(vm.arrival_cost),
        f(vm.host_scale_vm),
        f(vm.vcpus),
        f(vm.need),
        b(vm.virt),
        f(vm.pkt_bits),
        None if vm.paused is None else b(vm.paused),
        f(hosts.backend_vm_frac),
        f(hosts.tx_host),
        f(hosts.rx_host),
        f(hosts.host_need),
        f(hosts.cores),
        f(hosts.capacity),
        c.cpu_ns,
        c.steal_ns,
        c.tx_b,
        c.rx_b,
        c.tx_pk,
        c.rx_pk,
        c.h_cpu_ns,
        c.h_tx_b,
        c.h_rx_b,
        float(dt),
        float(virtio_host_ns_per_packet),
        float(ack_bits),
        bool(steal),
    )
    return Counted(cpu_use, host_cpu_util, host_net_util)
