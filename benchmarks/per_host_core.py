"""What an agent's period and a small manager round pay for the compiled core's per-host
forms: ``host_load`` + ``vm_loads`` of one host's two samples, and
``HotspotDetector.assess`` of one host's window, against the readable Python forms they
replaced (tests/loads_oracle.py, tests/verdicts_oracle.py). Prints microseconds per call
(process CPU time, the best of ``--reps`` rounds of ``--calls`` calls: the machine is
shared, so the minimum is the steadiest figure) and the ratio.

    .venv/bin/python benchmarks/per_host_core.py --vms 3 20 100

Issue 36's session, on the shared 2-core machine (load average 10-15; two runs, best of 5
rounds of 2,000 calls and of 3 rounds of 1,000), microseconds per call:

| per host | readable Python | core |
|---|---:|---:|
| host_load + vm_loads, 3 VMs | 13.4, 15.9 | 11.4, 15.6 |
| host_load + vm_loads, 20 VMs | 78.0, 85.2 | 33.6, 44.0 |
| host_load + vm_loads, 100 VMs | 394, 497 | 137, 141 |
| HotspotDetector.assess, window of 5 | 15.9, 15.5 | 9.6, 9.6 |

Before the agent's form packed its inputs into one array (ten arrays in, eight out), the
core cost 21-26 µs at 3 VMs, more than the Python it replaced.

Issue 36, sensing / Sova allocator / VF scheduling moved (load average 1.5, best of 5
rounds of 400 calls), microseconds per call against the readable forms now in tests/:

| per host | readable Python | core |
|---|---:|---:|
| HostSensor observe + factors, 3 / 20 / 100 VMs | 61 / 394 / 1,971 | 20 / 60 / 245 |
| VF scheduling, 3 / 20 / 100 VMs | 13 / 31 / 144 | 18 / 27 / 69 |
| SovaAllocator.allocate, 3 / 20 / 100 VMs | 5 / 88 / 227 | 34 / 52 / 123 |

The agents did not run those readable forms: they ran the numpy kernels, which cost
138 / 177 / 414 µs (``schedule_one``) and 47 / 196 / 189 µs (``sova_allocate`` of one
host, Groups included) at 3 / 20 / 100 VMs, against 18 / 26 / 68 and 25 / 31 / 34 now.
The registered ``SovaAllocator`` object pays its arrays and layout (~30 µs) for a few
flows; the agents' and the simulator's bandwidth step call ``sova_allocate`` instead.

Issue 36, branch bw36 (2026-12-07, load average 5-13): an agent's whole bandwidth period
(``HostAgent.bandwidth_step``, last row) is the core's one period call for its host (a fleet
of one) instead of six numpy kernels around ``sova_allocate``; best of 5 rounds of 200
periods, before = main eb56be1 with the same measurement: 197 -> 141 µs at 3 VMs, 640 -> 501
at 20, 4,110 -> 3,741 at 100 (the rest is the driver's sample and inventory and the
executor).
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Protocol

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the oracles live in tests/

from tests import bandwidth_oracle, loads_oracle, sensing_oracle, verdicts_oracle, vfsched_oracle

from sova.model import SLA, HostCounters, HostSample, ResourceTuple, VMCounters
from sova.policy.bandwidth import FlowDemand, SovaAllocator
from sova.policy.hotspot import HotspotDetector, Utilisation
from sova.policy.loads import host_load, vm_loads
from sova.policy.sensing import HostSensor
from sova.policy.vfkernel import schedule_one
from sova.policy.vfsched import Candidate, VFSchedulerConfig


def samples(vms: int, seed: int) -> tuple[HostSample, HostSample]:
    """Two samples 5 s apart: every counter grew (no reset), as in a steady period."""
    rng = random.Random(seed)
    base = [[rng.randint(10**9, 10**12) for _ in range(6)] for _ in range(vms)]
    grown = [[c + rng.randint(0, 5 * 10**9) for c in row] for row in base]

    def host(t: float, rows: list[list[int]], totals: HostCounters) -> HostSample:
        return HostSample("h", t, {
            f"vm{i}": VMCounters(f"vm{i}", 4, *row, memory_used_bytes=2 * 2**30)
            for i, row in enumerate(rows)
        }, totals)  # fmt: skip

    return (
        host(0.0, base, HostCounters(10**12, 10**9, 10**9, 2**33)),
        host(5.0, grown, HostCounters(10**12 + 4 * 10**10, 2 * 10**9, 3 * 10**9, 2**33)),
    )


def per_call_us(fn: Callable[[], object], calls: int, reps: int) -> float:
    best = float("inf")
    for _ in range(reps):
        t = time.process_time()
        for _ in range(calls):
            fn()
        best = min(best, time.process_time() - t)
    return best / calls * 1e6


def stream(vms: int, periods: int, seed: int) -> list[HostSample]:
    """A host's readings 5 s apart, every counter growing (steady periods)."""
    rng = random.Random(seed)
    rows = [[rng.randint(10**9, 10**12) for _ in range(6)] for _ in range(vms)]
    out = []
    for k in range(periods):
        rows = [[c + rng.randint(0, 5 * 10**9) for c in row] for row in rows]
        vm = {f"vm{i}": VMCounters(f"vm{i}", 4, *row) for i, row in enumerate(rows)}
        out.append(HostSample("h", 5.0 * k, vm, HostCounters(0, 0, 0, 0)))
    return out


class Sensor(Protocol):
    def observe(
        self, sample: HostSample, ceilings: Mapping[str, float], virtio: Collection[str]
    ) -> None: ...
    def factors(self) -> object: ...


def sensing_period_us(make: Callable[[], Sensor], samples: list[HostSample], reps: int) -> float:
    """An agent's sensing per period: observe the reading (path ceilings, half the VMs on
    virtio) and read every VM's factors, windows full (the first 6 readings untimed)."""
    ceilings = dict.fromkeys(samples[0].vms, 1e10)
    virtio = set(list(samples[0].vms)[::2])
    best = float("inf")
    for _ in range(reps):
        sensor = make()
        for s in samples[:7]:
            sensor.observe(s, ceilings, virtio)
        t = time.process_time()
        for s in samples[7:]:
            sensor.observe(s, ceilings, virtio)
            sensor.factors()
        best = min(best, time.process_time() - t)
    return best / (len(samples) - 7) * 1e6


def main() -> None:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--vms", type=int, nargs="+", default=[3, 20, 100])
    p.add_argument("--calls", type=int, default=2000)
    p.add_argument("--reps", type=int, default=5)
    a = p.parse_args()
    args = (32, 2**38, 2.5e10)
    print("| per host | readable Python µs | core µs | readable / core |")
    print("|---|---:|---:|---:|")
    for vms in a.vms:
        prev, cur = samples(vms, vms)

        def readable(prev: HostSample = prev, cur: HostSample = cur) -> object:
            return loads_oracle.host_load(prev, cur, *args), loads_oracle.vm_loads(
                prev, cur, *args
            )

        def core(prev: HostSample = prev, cur: HostSample = cur) -> object:
            return host_load(prev, cur, *args), vm_loads(prev, cur, *args)

        assert readable() == core()
        old, new = (per_call_us(f, a.calls, a.reps) for f in (readable, core))
        print(f"| host_load + vm_loads, {vms} VMs | {old:.1f} | {new:.1f} | {old / new:.2f} |")
    rng = random.Random(1)
    history = [Utilisation(rng.random(), rng.random(), rng.random()) for _ in range(5)]
    det = HotspotDetector(3, 5, 0.75)
    old = per_call_us(lambda: verdicts_oracle.assess(3, 5, 0.75, history), a.calls, a.reps)
    new = per_call_us(lambda: det.assess(history), a.calls, a.reps)
    print(f"| HotspotDetector.assess, window of 5 | {old:.1f} | {new:.1f} | {old / new:.2f} |")
    for vms in a.vms:
        readings = stream(vms, min(a.calls, 400) + 7, vms)
        old, new = (
            sensing_period_us(make, readings, a.reps)
            for make in (sensing_oracle.HostSensor, HostSensor)
        )
        print(f"| HostSensor observe + factors, {vms} VMs | {old:.1f} | {new:.1f} | {old / new:.2f} |")
    for vms in a.vms:
        rng = random.Random(vms)
        cands = [
            Candidate(f"vm{i}", rng.uniform(0, 100), rng.uniform(0, 100), rng.random() < 0.9,
                      demand_bps=rng.uniform(0, 1e9))
            for i in range(vms)
        ]  # fmt: skip
        holders = {f"vm{i}": 0.0 for i in range(0, vms, 4)}
        conf = VFSchedulerConfig(cost_benefit=True, top_senders=True)
        args4 = (cands, holders, 4, 100.0, conf)
        old = per_call_us(lambda x=args4: vfsched_oracle.schedule(*x), a.calls, a.reps)
        new = per_call_us(lambda x=args4: schedule_one(*x), a.calls, a.reps)
        print(f"| VF scheduling (schedule_one), {vms} VMs | {old:.1f} | {new:.1f} | {old / new:.2f} |")
    for vms in a.vms:
        rng = random.Random(vms)
        flows = [
            FlowDemand(f"vm{i}", rng.uniform(0, 2e9),
                       SLA(bandwidth=ResourceTuple(minimum=rng.choice([0.0, 2e8]))), 1500.0, i)
            for i in range(vms)
        ]  # fmt: skip
        mine, spec = SovaAllocator(), bandwidth_oracle.SovaAllocator()
        assert mine.allocate(1e10, flows) == spec.allocate(1e10, flows)
        old = per_call_us(lambda s=spec, f=flows: s.allocate(1e10, f), a.calls, a.reps)
        new = per_call_us(lambda m=mine, f=flows: m.allocate(1e10, f), a.calls, a.reps)
        print(f"| SovaAllocator.allocate, {vms} VMs | {old:.1f} | {new:.1f} | {old / new:.2f} |")
    for vms in a.vms:
        print(f"| HostAgent.bandwidth_step, {vms} VMs | - | {bandwidth_step_us(vms, a):.1f} | - |")


def bandwidth_step_us(vms: int, a: argparse.Namespace) -> float:
    """An agent's whole bandwidth period (the driver's sample and inventory, the core's
    period for its host, the limits through its executor) on a MockDriver host whose VMs
    send 0.2-1.1x a fair share of the 10 Gbit/s link."""
    from tests.test_agent import HostWorld, Load

    from sova.agent.config import ControllerConfig
    from sova.agent.loop import HostAgent
    from sova.driver.base import MockDriver

    share = 10e9 / vms
    loads = {f"vm{i:03d}": Load(cpu=0.1, bytes_per_s=(0.2 + i % 7 * 0.15) * share) for i in range(vms)}
    world = HostWorld(loads)
    agent = HostAgent(MockDriver(world), ControllerConfig(bandwidth_policy="sova"))

    def period() -> None:
        agent.bandwidth_step()
        world.advance(1.0)

    return per_call_us(period, min(a.calls, 200), a.reps)


if __name__ == "__main__":
    main()
