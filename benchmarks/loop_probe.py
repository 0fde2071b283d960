"""Where ``sova manager``'s event loop pauses, measured inside it: run the manager through this.

    python benchmarks/loop_probe.py OUT -m sova.cli_daemons manager --config manager.toml

(``manager_load.py --probe OUT`` starts its manager so.) Appends one line per event to
OUT, seconds since start first:

* ``LAG ms``: the loop came back to a 5 ms timer this much late (> 20 ms), with the CPU
  each thread of the process used meanwhile and the time it waited for a core
  (``/proc/self/task/*/schedstat``), so a pause reads as the loop's own work, another
  thread holding the GIL, or no core free;
* ``gcN ms``: a garbage collection of generation N over 5 ms, in which thread, with the
  generations' counts and sizes before it (a size over 90,000 also lists its types);
* ``fork``, ``unpickle``: the planning round's fork and result read (> 5 ms);
* ``round+`` / ``round-`` and ``metrics``: a round's start and end, and its metrics.

It patches the running interpreter only (the gc callback, ``os.fork``, ``pickle.loads``,
:class:`~sova.manager.daemons.service.rounds.Rounds`): no change to the manager's code.
The callbacks cost a little CPU; compare figures with the probe on both sides.
"""

from __future__ import annotations

import asyncio
import collections
import gc
import os
import pickle
import runpy
import sys
import threading
import time
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, TextIO

LAG_MS = 20.0


def _snapshot() -> dict[str, tuple[int, int]]:
    """native thread id -> (ns on a CPU, ns waiting for one)."""
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/schedstat") as fh:
                cpu, wait = fh.read().split()[:2]
        except (OSError, ValueError):
            continue
        out[tid] = (int(cpu), int(wait))
    return out


class Probe:
    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.t0 = time.perf_counter()
        self._gc_start: tuple[float, str] = (0.0, "")

    def log(self, kind: str, seconds: float, what: str = "") -> None:
        thread = threading.current_thread().name[:12]
        self.out.write(
            f"{time.perf_counter() - self.t0:10.3f} {thread:12s} {kind:10s} "
            f"{seconds * 1e3:8.1f} {what}\n"
        )

    def on_gc(self, phase: str, info: Mapping[str, int]) -> None:
        if phase == "start":
            young = gc.get_objects(0)
            sizes = f"counts={gc.get_count()} sizes={len(young)},{len(gc.get_objects(1))}"
            if len(young) > 90_000:
                kinds = collections.Counter(type(o).__name__ for o in young)
                sizes += f" {kinds.most_common(6)}"
            del young
            self._gc_start = (time.perf_counter(), sizes)
        else:
            t, sizes = self._gc_start
            took = time.perf_counter() - t
            if took > 0.005:
                self.log(f"gc{info['generation']}", took, sizes)

    def timed(self, kind: str, fn: Callable[..., Any], floor: float = 0.005) -> Callable[..., Any]:
        def run(*args: Any, **kw: Any) -> Any:
            t = time.perf_counter()
            out = fn(*args, **kw)
            if time.perf_counter() - t > floor:
                self.log(kind, time.perf_counter() - t)
            return out

        return run

    def timed_fork(self, fork: Callable[[], int]) -> Callable[[], int]:
        def run() -> int:
            t = time.perf_counter()
            pid = fork()
            if pid:  # the parent's side; the child logs nothing
                self.log("fork", time.perf_counter() - t)
            return pid

        return run

    async def watch_loop(self) -> None:
        me = str(threading.get_native_id())
        names = {str(t.native_id): t.name[:12] for t in threading.enumerate()}
        while True:
            before, t = _snapshot(), time.perf_counter()
            await asyncio.sleep(0.005)
            late = time.perf_counter() - t - 0.005
            if late * 1e3 <= LAG_MS:
                continue
            after = _snapshot()
            names.update((str(t.native_id), t.name[:12]) for t in threading.enumerate())
            parts = []
            for tid, (cpu, wait) in after.items():
                cpu0, wait0 = before.get(tid, (0, 0))
                if cpu - cpu0 > 2e6 or wait - wait0 > 2e6:
                    who = "LOOP" if tid == me else names.get(tid, tid)
                    parts.append(
                        f"{who}:cpu={(cpu - cpu0) / 1e6:.0f},wait={(wait - wait0) / 1e6:.0f}"
                    )
            self.log("LAG", late, " ".join(parts))


def install(out: TextIO) -> None:
    from sova.manager.daemons.service import rounds

    probe = Probe(out)
    gc.callbacks.append(probe.on_gc)
    os.fork = probe.timed_fork(os.fork)
    pickle.loads = probe.timed("unpickle", pickle.loads)
    tick, publish, planner = (
        rounds.Rounds.tick,
        rounds.Rounds._publish_metrics,
        rounds.Rounds.planner,
    )

    async def timed_tick(self: rounds.Rounds, now: float | None = None) -> Any:
        t = time.perf_counter()
        probe.log("round+", 0.0)
        try:
            return await tick(self, now)
        finally:
            probe.log("round-", time.perf_counter() - t)

    def timed_publish(self: rounds.Rounds, now: float, started: float) -> None:
        t = time.perf_counter()
        publish(self, now, started)
        probe.log("metrics", time.perf_counter() - t)

    def watched_planner(self: rounds.Rounds) -> Coroutine[Any, Any, None]:
        asyncio.get_running_loop().create_task(probe.watch_loop())
        return planner(self)

    rounds.Rounds.tick = timed_tick  # type: ignore[method-assign]
    rounds.Rounds._publish_metrics = timed_publish  # type: ignore[method-assign]
    rounds.Rounds.planner = watched_planner  # type: ignore[method-assign]


def main() -> None:
    if len(sys.argv) < 4 or sys.argv[2] != "-m":
        raise SystemExit(__doc__.splitlines()[2].strip())
    out = open(sys.argv[1], "a", buffering=1)  # noqa: SIM115 - open for the process's life
    install(out)
    module = sys.argv[3]
    sys.argv = [module, *sys.argv[4:]]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
