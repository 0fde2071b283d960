"""The tick's offer on one thread or two: the same bits (issue 36, build point 6).

The core shares the VMs among threads in runs of 2,048 (rust/sova-core/src/parallel.rs);
every draw is a function of its key and every VM's arithmetic its own, so the outputs and
the advanced duty cycles must not depend on how many threads ran them. A world of 9,000
VMs (five runs; every kind of load, cycles renewed inside the tick, requests on both sides
of the Poisson's switch at a mean of 10, ingress limits) through the facade the simulator
calls, once per thread count, from the same state.
"""

from __future__ import annotations

import numpy as np
import pytest

from sova.policy.tick import Cycles, Load, Offered, OfferParams, offer_load

N = 9_000


def world(seed: int) -> tuple[Cycles, Cycles, Load]:
    rng = np.random.default_rng(seed)

    def cycles() -> Cycles:
        duty = rng.uniform(0.0, 1.2, N)
        live = np.flatnonzero((duty > 0.0) & (duty < 1.0))
        return Cycles(
            start=rng.uniform(7.0, 9.5, N),  # cycles of 0.5-2 s ending before, in, after (9, 10]
            length=rng.uniform(0.5, 2.0, N),
            live=live,
            duty=duty[live],
            frac=np.where(duty >= 1.0, 1.0, 0.0),
        )

    kind = rng.integers(0, 4, N)  # duty, bulk, requests, file
    asks = np.flatnonzero(kind == 2)
    load = Load(
        rate=rng.uniform(1e8, 6e8, N),
        streams=rng.integers(1, 4, N).astype(np.float64),
        streamy=kind <= 1,
        resp_bytes=rng.choice([4e3, 1.6e4], N),
        backlog_bits=rng.uniform(0.0, 1e4, N),
        is_req=kind == 2,
        is_file=kind == 3,
        ingress=(rng.choice([np.inf, 4e6], N), np.full(N, 8e3)),
        asks=asks,
        ask_means=rng.uniform(0.0, 30.0, asks.size),
    )
    return cycles(), cycles(), load


def run(threads: int) -> tuple[Offered, Cycles, Cycles]:
    net, cpu, load = world(7)
    p = OfferParams(3, 9, 9.0, 10.0, 0.5, 2.0, 0.05, 0.03, True, 2e4, threads=threads)
    return offer_load(net, cpu, load, p), net, cpu


def test_one_thread_or_two_give_the_same_bits() -> None:
    one, net1, cpu1 = run(1)
    two, net2, cpu2 = run(2)
    for name in ("offered", "jit", "cj", "arrivals", "req_bits", "arrival_cost"):
        assert getattr(one, name).tobytes() == getattr(two, name).tobytes(), name
    for a, b in ((net1, net2), (cpu1, cpu2)):
        for name in ("start", "length", "frac"):
            assert getattr(a, name).tobytes() == getattr(b, name).tobytes(), name
    # the world moved: cycles renewed inside the tick, requests arrived, offers made
    assert (net1.start > 9.0).sum() > 1000 and (cpu1.start > 9.0).sum() > 1000
    assert (one.arrivals > 0).sum() > 1000 and (one.offered > 0).sum() > N // 2


def test_zero_threads_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match=r"^threads: 0, not a count of threads >= 1$"):
        run(0)
