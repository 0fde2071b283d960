"""One planning round of ``ManagerCore.plan`` with and without placement rules, at fleet scale.

    .venv/bin/python benchmarks/placement_round.py --hosts 10000 --vms 20 --hot 0.02

Builds a core with ``--hosts`` hosts of ``--vms`` VMs each (three reports per host, a share
``--hot`` of them hot), then times ``plan`` (best of ``--repeat``, each on a fresh copy) for:
no rules; anti-affinity pairs and a must-rule; the same plus two migration domains (a rule
on every VM). Prints the seconds per round and the moves each decided.
"""

from __future__ import annotations

import argparse
import copy
import random
import time

from sova.manager.decisions.core import ManagerCore
from sova.manager.decisions.placement import Placement, PlacementSpec
from sova.policy.hotspot import HotspotDetector, Utilisation, VMLoad

GIB = 2**30


def build(hosts: int, vms: int, hot: float, seed: int) -> ManagerCore:
    rng = random.Random(seed)
    core = ManagerCore(detector=HotspotDetector(3, 5, 0.75), keep_log=False)
    for i in range(hosts):
        h = f"h{i:05d}"
        is_hot = rng.random() < hot
        loads = {
            f"v{i}-{j}": VMLoad(
                Utilisation(rng.uniform(0, 0.05), rng.uniform(0, 0.05), rng.uniform(0, 0.08)),
                rng.choice((1, 2, 8)) * GIB,
            )
            for j in range(vms)
        }
        for t in range(3):
            net = rng.uniform(0.8, 0.95) if is_hot else rng.uniform(0.05, 0.6)
            core.ingest(h, Utilisation(rng.uniform(0, 0.5), rng.uniform(0, 0.5), net), loads, at=t)
    return core


def rules(core: ManagerCore, domains: bool, seed: int) -> Placement:
    rng = random.Random(seed)
    names = sorted(core.history)
    every = [vm for vms in core.vms.values() for vm in vms]
    spec = {
        "host_groups": {
            "a": names[: len(names) // 2],
            "b": names[len(names) // 2 :],
            "rack": rng.sample(names, len(names) // 3),
        },
        "migration_domains": ["a", "b"] if domains else [],
        "rules": [
            {"name": f"pair{k}", "kind": "anti-affinity", "vms": rng.sample(every, 2)}
            for k in range(len(names) // 10)
        ]
        + [
            {"name": "must", "kind": "vm-host-must", "vms": rng.sample(every, 200), "group": "rack"}
        ],
    }
    return Placement.from_spec(PlacementSpec.model_validate(spec))


def timed(core: ManagerCore, repeat: int) -> tuple[float, int]:
    best, moves = float("inf"), 0
    for _ in range(repeat):
        c = copy.deepcopy(core)
        t0 = time.perf_counter()
        r = c.plan(10.0)
        best = min(best, time.perf_counter() - t0)
        moves = len(r.opened)
    return best, moves


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=10_000)
    ap.add_argument("--vms", type=int, default=20)
    ap.add_argument("--hot", type=float, default=0.02)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    base = build(a.hosts, a.vms, a.hot, a.seed)
    base.max_concurrent_migrations = 0
    base.max_migrations_per_hour = 0
    for label, placement in (
        ("no rules", Placement()),
        ("anti-affinity + must", rules(base, False, a.seed)),
        ("+ migration domains", rules(base, True, a.seed)),
    ):
        core = copy.deepcopy(base)
        core.placement = placement
        s, moves = timed(core, a.repeat)
        print(f"{label:<22} {s * 1000:8.1f} ms/round  {moves} move(s)")


if __name__ == "__main__":
    main()
