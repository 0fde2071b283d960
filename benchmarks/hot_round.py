"""One planning round where a sixth of the hosts stay hot and none has a feasible target
(issue 36): the round's cost against hosts and hot hosts.

    .venv/bin/python benchmarks/hot_round.py --hosts 2000 10000 --hot 0.17

Each hot host (net 0.85-0.95) has one VM with half a link that every cold host (net
0.30-0.60) would take above alpha 0.75, so every hot host is screened against the whole
cold ranking and refused. Prints the CPU seconds of ``fast_coordinate`` (the round from
host reports, windows built from their objects), of ``coordinate_windows`` alone (the
manager daemon's screening: its windows are already arrays, ``WindowArrays``), of the
daemon's whole round (``ManagerCore.plan``: every pipeline stage and the decision records,
after the reports went in through the core's intake; median and range of ``--rounds``), how
many hot hosts got no target, and the longest decision reason.

Figures on this 2-core machine, shared with other jobs (process CPU time; the first table
one run each):

| hosts | hot | before (per-host Python walk, every refusal listed) | after (array walk, 8 listed) |
|---:|---:|---:|---:|
| 2,000 | 340 | 3.25 s, reasons up to 76 kB | 0.16 s, 529 chars |
| 10,000 | 1,700 | 97.7 s, reasons up to 382 kB | 1.26 s, 530 chars |

Then the screening of every hot host in one call of the compiled core (issue 36: a
segment tree over the ranked hosts, rust/sova-core/src/coldspots.rs; the verdicts from
the round's arrays, no full re-run of ``coordinate``). Median of 3 interleaved runs
each, load average 10-16 (five jobs on two cores):

| hosts | hot | before (a walk per mover, 55ddf42) | after, from reports | after, from window arrays |
|---:|---:|---:|---:|---:|
| 2,000 | 340 | 0.14 s | 0.02 s | 0.03 s |
| 10,000 | 1,700 | 0.94 s | 0.19 s | 0.16 s |

The compiled screening itself takes ~5 ms of that at 10,000 hosts; the rest is Python
around it: each hot host's mover choice (~25 µs), its verdict and reason, and the
reports' windows read into arrays (``fast_coordinate`` only).

The manager daemon's whole round (``ManagerCore.plan``, every stage and a decision record
per hot host; the collector set as the daemon sets it), 7 rounds per size, load average
2.4-2.9 (five helpers' work on both cores), 2026-12-07:

| hosts | hot | daemon's round, median (range) |
|---:|---:|---:|
| 2,000 | 340 | 0.026 s (0.025-0.032) |
| 10,000 | 1,700 | 0.169 s (0.158-0.180) |

With CPython's default collector thresholds and the benchmark's report objects unfrozen,
the same 10,000-host round took 0.31-0.40 s: the young collections its garbage sets off
then walk every live window object, which the daemon's frozen heap and paced collections
(sova.manager.daemons.gc_pacing) avoid.
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import time

from sova.manager.daemons.gc_pacing import thresholds
from sova.manager.decisions.core import ManagerCore
from sova.manager.decisions.fastplan import WindowArrays, coordinate_windows, fast_coordinate
from sova.policy.hotspot import HostReport, HotspotDetector, Utilisation, VMLoad


def build(hosts: int, hot: float, seed: int) -> dict[str, HostReport]:
    rng = random.Random(seed)
    n_hot = int(hosts * hot)
    reports = {}
    for i in range(hosts):
        is_hot = i < n_hot
        net = rng.uniform(0.85, 0.95) if is_hot else rng.uniform(0.3, 0.6)
        history = tuple(Utilisation(0.2, 0.3, net) for _ in range(5))
        vms = {
            f"v{i}-{j}": VMLoad(
                Utilisation(0.05, 0.05, 0.5 if j == 0 and is_hot else 0.02), 2 * 2**30
            )
            for j in range(3)
        }
        reports[f"h{i:05d}"] = HostReport(history, vms)
    return reports


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--hosts", type=int, nargs="+", default=[2000, 10000])
    p.add_argument("--hot", type=float, default=0.17)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--rounds", type=int, default=7, help="daemon rounds timed per size")
    a = p.parse_args()
    if a.rounds < 1:
        p.error(f"--rounds must be at least 1, got {a.rounds}")
    det = HotspotDetector(3, 5, 0.75)
    print(
        "| hosts | hot | CPU s | from window arrays | daemon's round, median (range) "
        "| hot, no target | longest reason |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for hosts in a.hosts:
        reports = build(hosts, a.hot, a.seed)
        t = time.process_time()
        signals = fast_coordinate(reports, det)
        dt = time.process_time() - t
        names = list(reports)
        arrays = WindowArrays(det.n)
        history = {h: arrays.window(h) for h in names}
        for h in names:
            for u in reports[h].history:
                history[h].append(u)
        groups, last = arrays.windows(names, history)
        t = time.process_time()
        again = coordinate_windows(names, groups, last, reports.__getitem__, det)
        dt_arrays = time.process_time() - t
        assert dict(again) == dict(signals)
        stuck = sum(1 for s in signals.values() if s.hot_resources and not s.flag)
        longest = max(len(s.reason) for s in signals.values())
        rounds = daemon_rounds(reports, det, a.rounds)
        print(
            f"| {hosts:,} | {int(hosts * a.hot):,} | {dt:.2f} | {dt_arrays:.2f} "
            f"| {statistics.median(rounds):.3f} ({min(rounds):.3f}-{max(rounds):.3f}) "
            f"| {stuck:,} | {longest:,} |"
        )


def daemon_rounds(reports: dict[str, HostReport], det: HotspotDetector, rounds: int) -> list[float]:
    """CPU seconds of the manager daemon's whole round, ``ManagerCore.plan`` (every stage of
    the pipeline, the decision records included), after the reports went in through the
    core's own intake as the daemon's do; a round per entry. The round is repeated on the
    same windows: no host has a feasible target, so each round decides the same. The
    collector is set as the daemon sets it once its state is loaded (service/app.py: a full
    pass, the survivors frozen, gc_pacing's thresholds), so a round pays for the young
    collections its own garbage sets off, as in the daemon, not for walking the benchmark's
    other objects."""
    core = ManagerCore(detector=det, keep_log=False)
    for k in range(det.n):
        core.ingest_many(((h, r.history[k], r.vms, None) for h, r in reports.items()), at=float(k))
    old = gc.get_threshold()
    gc.collect()
    gc.freeze()
    gc.set_threshold(*thresholds())
    try:
        return _timed_rounds(core, reports, det, rounds)
    finally:
        gc.set_threshold(*old)
        gc.unfreeze()


def _timed_rounds(
    core: ManagerCore, reports: dict[str, HostReport], det: HotspotDetector, rounds: int
) -> list[float]:
    times = []
    for k in range(rounds):
        t = time.process_time()
        result = core.plan(float(det.n + k))
        times.append(time.process_time() - t)
        hot = sum(1 for s in result.signals.values() if s.hot_resources)
        assert hot == sum(1 for r in reports.values() if r.history[-1].net > det.alpha)
        assert not result.opened  # nothing fits: the round's worst case is every hot host
    return times


if __name__ == "__main__":
    main()
