"""One planning round where a sixth of the hosts stay hot and none has a feasible target
(issue 36): the round's cost against hosts and hot hosts.

    .venv/bin/python benchmarks/hot_round.py --hosts 2000 10000 --hot 0.17

Each hot host (net 0.85-0.95) has one VM with half a link that every cold host (net
0.30-0.60) would take above alpha 0.75, so every hot host walks the whole cold ranking and
is refused. Prints the CPU seconds of ``fast_coordinate`` (the manager's round), how many
hot hosts got no target, and the longest decision reason.

Figures on this 2-core machine, shared with seven other jobs (process CPU time, one run):

| hosts | hot | before (per-host Python walk, every refusal listed) | after (array walk, 8 listed) |
|---:|---:|---:|---:|
| 2,000 | 340 | 3.25 s, reasons up to 76 kB | 0.16 s, 529 chars |
| 10,000 | 1,700 | 97.7 s, reasons up to 382 kB | 1.26 s, 530 chars |
"""

from __future__ import annotations

import argparse
import random
import time

from sova.manager.decisions.fastplan import fast_coordinate
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
    print("| hosts | hot | CPU s | hot, no target | longest reason |")
    print("|---:|---:|---:|---:|---:|")
    for hosts in a.hosts:
        reports = build(hosts, a.hot, a.seed)
        t = time.process_time()
        signals = fast_coordinate(reports, det)
        dt = time.process_time() - t
        stuck = sum(1 for s in signals.values() if s.hot_resources and not s.flag)
        longest = max(len(s.reason) for s in signals.values())
        print(f"| {hosts:,} | {int(hosts * a.hot):,} | {dt:.2f} | {stuck:,} | {longest:,} |")


if __name__ == "__main__":
    main()
