"""The simulated world's tick, where it is pure arithmetic: the compiled core's kernels.

The simulator (:mod:`sova.sim.engine`) calls these once per tick for every VM of every
host; the core evaluates the numpy form's expressions in its order, one VM at a time, so
every value is the same float (rust/sova-core/src/tick.rs; tests/test_tick_forms.py holds
the engine's state to the readable numpy form byte for byte after every tick). The random
draws are the core's too (rust/sova-core/src/rng.rs): counter-based, each a function of the
seed and its key, so the same seed gives the same world whatever order or threads draw.

The dataclasses built every tick (the calls' arguments and results) are not frozen: a
frozen dataclass sets each field through ``object.__setattr__``, ~5x the time of a plain
one, and the ~70 fields of offer's and count's objects were ~12 us of every tick. Nothing
writes them after they are built; the ones kept for a run (Counters, Sums) stay frozen.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from sova.policy import _core

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


@dataclass  # not frozen: built every tick (module docstring)
class Counted:
    """The tick's figures beside the counters it advanced."""

    cpu_use: FloatArray  # each VM's CPU use, a share of its vCPUs
    host_cpu_util: FloatArray
    host_net_util: FloatArray


# The random streams of the simulated world (rust/sova-core/src/rng.rs): a draw is a
# function of (seed, stream, VM, counter, draw), never of the order VMs draw in.
STREAMS = {
    "rate_jitter": _core.STREAM_RATE_JITTER,
    "cpu_jitter": _core.STREAM_CPU_JITTER,
    "arrivals": _core.STREAM_ARRIVALS,
    "net_cycle": _core.STREAM_NET_CYCLE,
    "cpu_cycle": _core.STREAM_CPU_CYCLE,
    "reset": _core.STREAM_RESET,
}


@dataclass  # not frozen: built every tick (module docstring)
class Cycles:
    """One kind of on/off process (network or CPU) of every VM: VM ``live[j]`` is on for
    the first ``duty[j]`` of its cycle of ``length`` from ``start`` (float64 arrays, C-
    contiguous: advanced in place when a cycle ends inside the tick); ``frac`` holds the
    other VMs' share (1 or 0) and receives every VM's on-time share of the tick."""

    start: FloatArray
    length: FloatArray
    live: IntArray
    duty: FloatArray
    frac: FloatArray


@dataclass  # not frozen: built every tick (module docstring)
class Load:
    """Each VM's workload parameters as the tick reads them."""

    rate: FloatArray
    streams: FloatArray
    streamy: BoolArray  # duty cycles and bulk streams
    resp_bytes: FloatArray
    backlog_bits: FloatArray
    is_req: BoolArray
    is_file: BoolArray | None  # file transfers with bytes left; None: there are none
    ingress: tuple[FloatArray, FloatArray] | None  # (limit bit/s, 8·max(request bytes, 1))
    asks: IntArray  # VMs with a request rate
    ask_means: FloatArray  # their mean arrivals this tick


@dataclass  # not frozen: built every tick (module docstring)
class OfferParams:
    seed: int
    tick: int  # the tick's number, from 0
    t0: float
    t1: float
    cycle_min: float
    cycle_max: float
    rate_jitter: float
    cpu_jitter: float
    any_req: bool  # some VM serves requests
    guest_ns_per_request: float
    # threads sharing the VMs: the same bits for any number (each draw is a function of
    # its key, each VM's arithmetic its own). One by default: the call is ~1 ms at 20,000
    # VMs, a second thread halves its wall but adds CPU, and the simulator's acceptance
    # is VM-steps per CPU-second (benchmarks/simulate_scale.py has the figures)
    threads: int = 1


@dataclass  # not frozen: built every tick (module docstring)
class Offered:
    """What each VM offers this tick, before the host and the network have their say."""

    offered: FloatArray  # bit/s
    jit: FloatArray  # rate jitter factor
    cj: FloatArray  # CPU jitter factor
    arrivals: FloatArray  # requests arrived and admitted
    req_bits: FloatArray  # response bits of this tick's requests
    arrival_cost: FloatArray  # guest CPU of the arrivals (cores)


def offer_load(net: Cycles, cpu: Cycles, load: Load, p: OfferParams) -> Offered:
    """One tick's offered load in one core call: both on/off processes' on-time shares
    (their cycles renewed where they end, lengths from their own streams), the tick's
    draws (:func:`draws`), requests above an ingress limit dropped, and each VM's offer:
    ``frac · rate · streams · jitter`` for streams, responses and backlog over the tick
    for request VMs, the full rate for a file with bytes left."""

    def f(a: FloatArray) -> FloatArray:
        return np.ascontiguousarray(a, dtype=np.float64)

    def b(a: BoolArray) -> BoolArray:
        return np.ascontiguousarray(a, dtype=np.bool_)

    def i(a: IntArray) -> IntArray:
        return np.ascontiguousarray(a, dtype=np.int64)

    ing = load.ingress
    got = _core.tick_offer(
        net.start, net.length, i(net.live), f(net.duty), net.frac,
        cpu.start, cpu.length, i(cpu.live), f(cpu.duty), cpu.frac,
        f(load.rate), f(load.streams), b(load.streamy), f(load.resp_bytes),
        f(load.backlog_bits), b(load.is_req),
        None if load.is_file is None else b(load.is_file),
        None if ing is None else f(ing[0]), None if ing is None else f(ing[1]),
        i(load.asks), f(load.ask_means),
        int(p.seed), int(p.tick), float(p.t0), float(p.t1), float(p.cycle_min),
        float(p.cycle_max), float(p.rate_jitter), float(p.cpu_jitter), bool(p.any_req),
        float(p.guest_ns_per_request), int(p.threads),
    )  # fmt: skip
    return Offered(*got)


@dataclass(frozen=True)
class Draws:
    """One tick's random draws, one value per VM."""

    jit: FloatArray  # rate jitter factor, lognormal(0, rate_jitter)
    cj: FloatArray  # CPU jitter factor, 1 + normal(0, cpu_jitter)
    arrivals: FloatArray  # requests arriving, Poisson (0 for VMs that do not ask)


def draws(
    seed: int,
    tick: int,
    n: int,
    rate_jitter: float,
    cpu_jitter: float,
    asks: IntArray,
    means: FloatArray,
) -> Draws:
    """The draws of tick number ``tick`` for ``n`` VMs: each VM's rate and CPU jitter
    (factors of 1 where the jitter is 0) and the arrivals of VMs ``asks`` at ``means``."""
    jit, cj, arrivals = _core.tick_draws(
        int(seed),
        int(tick),
        int(n),
        float(rate_jitter),
        float(cpu_jitter),
        np.ascontiguousarray(asks, dtype=np.int64),
        np.ascontiguousarray(means, dtype=np.float64),
    )
    return Draws(jit, cj, arrivals)


def uniforms(seed: int, stream: str, vms: IntArray, counters: IntArray, draw: int) -> FloatArray:
    """Uniform draw number ``draw`` on [0, 1) of ``stream`` for each VM ``vms[j]`` at its
    own ``counters[j]`` (its reset number, or the tick number)."""
    return _core.uniforms(
        int(seed),
        STREAMS[stream],
        np.ascontiguousarray(vms, dtype=np.int64),
        np.ascontiguousarray(counters, dtype=np.int64),
        int(draw),
    )


@dataclass  # not frozen: built every tick (module docstring)
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


@dataclass  # not frozen: built every tick (module docstring)
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
    threads: int = 1,
) -> Counted:
    """Advance the counters by one tick of ``dt`` seconds and return its figures: each
    VM's CPU time, steal (counted only when ``steal``: some host's cores are
    oversubscribed), bytes and packets each way; each host's CPU (vCPUs and the virtio
    backend at ``virtio_host_ns_per_packet``) and bytes. ``ack_bits``: bits per ACK.
    ``threads``: how many share the VMs (the same bits for any number)."""

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
        int(threads),
    )
    return Counted(cpu_use, host_cpu_util, host_net_util)


@dataclass(frozen=True)
class Sums:
    """A run's per-tick statistics (float64 arrays, C-contiguous, advanced in place): per
    VM the bits each way, the requests served and their total response time, the ticks a
    guaranteed VM offered its guarantee and those it was served it; per host the bits
    sent; and the requests by response-time bin."""

    tx_bits: FloatArray
    rx_bits: FloatArray
    host_tx_bits: FloatArray
    req_weight: FloatArray
    req_time: FloatArray
    resp_hist: FloatArray
    guar_intervals: FloatArray
    guar_met: FloatArray


@dataclass(frozen=True)
class Guarantees:
    """The VMs with a bandwidth guarantee (``pos``), the guarantee (bit/s) and what counts
    as served it (the guarantee less its tolerance)."""

    pos: BoolArray
    guarantee: FloatArray
    held: FloatArray


def tally(
    tx: FloatArray,
    rx: FloatArray,
    tx_by_host: FloatArray,
    served_req: FloatArray,
    resp_s: FloatArray,
    offered: FloatArray,
    g: Guarantees | None,
    edges: FloatArray,
    sums: Sums,
    dt: float,
    measure: bool,
) -> None:
    """Add one tick of ``dt`` seconds to ``sums`` in one core call: every VM's bits
    (``tx``, ``rx``: bit/s) and each host's (``tx_by_host``); when ``measure`` (the
    response times count from this tick) and some VM served requests, the requests
    ``served_req``, their time at ``resp_s`` each and their bins (``searchsorted(edges,
    resp_s) - 1``, clipped to the histogram); the guarantees ``g`` (None: no VM has one)
    offered (``offered >= guarantee``) and served (``tx >= held``). The readable form:
    tests/test_tick_forms.py ``ref_accumulate``."""

    def f(a: FloatArray) -> FloatArray:
        return np.ascontiguousarray(a, dtype=np.float64)

    s = sums
    _core.tick_stats(
        f(tx), f(rx), f(tx_by_host), f(served_req), f(resp_s), f(offered),
        None if g is None else np.ascontiguousarray(g.pos, dtype=np.bool_),
        None if g is None else f(g.guarantee), None if g is None else f(g.held), f(edges),
        s.tx_bits, s.rx_bits, s.host_tx_bits, s.req_weight, s.req_time, s.resp_hist,
        s.guar_intervals, s.guar_met, float(dt), bool(measure),
    )  # fmt: skip
