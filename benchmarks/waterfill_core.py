"""Water-filling every link of a fleet: the compiled core against the numpy form it replaced.

    .venv/bin/python benchmarks/waterfill_core.py --hosts 1000 --vms 3 20 --repeat 200

For each fleet shape (``--hosts`` links, ``--vms`` flows on each), the simulator's three
calls per tick — ``links_waterfill`` with whole weights on a cached layout (the fair share
of every NIC), the same over a member subset (virtio flows' packet rates), and
``floored_waterfill`` (DAQS floors) — on links about 1.3x over-subscribed so every fill
sorts. Prints microseconds per call (best of ``--repeat``) for the numpy form kept in
tests/waterfill_oracle.py and for sova.policy.waterfill (the core), and their ratio. The
two forms' outputs are checked equal bit for bit before timing.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the oracle lives in tests/

from tests import waterfill_oracle as old

from sova.policy import waterfill as new


def best_us(fn: Callable[[], object], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=1000)
    ap.add_argument("--vms", type=int, nargs="+", default=[3, 20])
    ap.add_argument("--repeat", type=int, default=200)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    print(f"{'calls':<28} {'hosts':>6} {'vms':>4} {'numpy us':>10} {'core us':>9} {'ratio':>6}")
    # the numpy form's floors divide by a link's zero commitment where np.where discards it
    with np.errstate(over="ignore", divide="ignore"):
        for vms in args.vms:
            run(args.hosts, vms, args.repeat, rng)


def run(hosts: int, vms: int, repeat: int, rng: np.random.Generator) -> None:
    n = hosts * vms
    g = np.repeat(np.arange(hosts), vms).astype(np.int64)
    d = rng.random(n) * 10e9 / vms * 1.3 * 2  # mean 1.3x the link
    w = rng.integers(1, 5, n).astype(np.float64)
    cap = np.full(hosts, 10e9)
    member = rng.random(n) < 0.5
    floors = d * rng.random(n) * (rng.random(n) < 0.3)
    lo, ln = old.Links.of(g, hosts), new.Links.of(g, hosts)
    cases: list[tuple[str, Callable[[], object], Callable[[], object]]] = [
        (
            "links_waterfill",
            lambda: old.links_waterfill(cap, lo, d, w, whole=True),
            lambda: new.links_waterfill(cap, ln, d, w, whole=True),
        ),
        (
            "links_waterfill member=",
            lambda: old.links_waterfill(cap, lo, d, member=member),
            lambda: new.links_waterfill(cap, ln, d, member=member),
        ),
        (
            "floored_waterfill",
            lambda: old.floored_waterfill(cap, g, d, w, floors),
            lambda: new.floored_waterfill(cap, g, d, w, floors),
        ),
    ]
    for name, f_old, f_new in cases:
        if not np.array_equal(f_old(), f_new()):  # type: ignore[arg-type]
            raise SystemExit(f"{name}: the core's floats differ from the numpy form's")
        t_old, t_new = best_us(f_old, repeat), best_us(f_new, repeat)
        print(f"{name:<28} {hosts:>6} {vms:>4} {t_old:>10.0f} {t_new:>9.0f} {t_old / t_new:>5.1f}x")


if __name__ == "__main__":
    main()
