"""One planning round where a sixth of the hosts stay hot and none has a feasible target
(issue 36): the round's cost against hosts and hot hosts.

    .venv/bin/python benchmarks/hot_round.py --hosts 2000 10000 --hot 0.17

Each hot host (net 0.85-0.95) has one VM with half a link that every cold host (net
0.30-0.60) would take above alpha 0.75, so every hot host is screened against the whole
cold ranking and refused. Prints the CPU seconds of ``fast_coordinate`` (the round from
host reports, windows built from their objects), of ``coordinate_windows`` alone (the
manager daemon's round: its windows are already arrays, ``WindowArrays``), how many hot
hosts got no target, and the longest decision reason.

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
"""

from __future__ import annotations

import argparse
import random
import time

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
    a = p.parse_args()
    det = HotspotDetector(3, 5, 0.75)
    print("| hosts | hot | CPU s | from window arrays | hot, no target | longest reason |")
    print("|---:|---:|---:|---:|---:|---:|")
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
        print(
            f"| {hosts:,} | {int(hosts * a.hot):,} | {dt:.2f} | {dt_arrays:.2f} | {stuck:,} "
            f"| {longest:,} |"
        )


if __name__ == "__main__":
    main()
