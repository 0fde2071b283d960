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
* ``round+`` / ``round-`` and ``metrics``: a round's start and end, and its metrics;
* ``store``: every report write (``Store.add_reports``, any length), its rows and its parts
  in ms, each as wall/CPU of the store's thread: ``queue`` from the loop's call to the
  thread starting it, ``pool`` (the pool's checkout, its pre-ping), ``checkout`` (up to
  the first statement), each statement (``fence``, ``insert``, ``other``: from sending it
  to sending the next) and ``commit``, then ``back``: from its end until the loop ran the
  code awaiting it; a write in one round trip (PostgreSQL since issue 37) is one part,
  ``write``. Wall minus CPU is waiting: for the server, the network, a core, the GIL.

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


def install_store(probe: Probe) -> None:
    """Time every report write's parts (see the module's docstring, ``store``)."""
    import sqlalchemy as sa

    from sova.manager.daemons.service import reports, store

    add, flush = store.Store.add_reports, reports.ReportIntake.flush
    parts: list[tuple[str, float, float]] = []  # (name, wall, thread CPU) marks, one write
    hooked: set[int] = set()
    last: dict[str, float] = {}

    def mark(name: str) -> None:
        parts.append((name, time.perf_counter(), time.thread_time()))

    def before(_c: Any, _cur: Any, statement: str, *_a: Any) -> None:
        kind = "fence" if "leader" in statement else "insert" if "INSERT" in statement else "other"
        mark(f"pre-{kind}")

    def after(_c: Any, _cur: Any, statement: str, *_a: Any) -> None:
        mark("sql")

    def timed_add(self: store.Store, rows: Any) -> None:
        if id(self.engine) not in hooked:
            hooked.add(id(self.engine))
            sa.event.listen(self.engine, "before_cursor_execute", before)
            sa.event.listen(self.engine, "after_cursor_execute", after)
            sa.event.listen(self.engine, "commit", lambda _c: mark("pre-commit"))
            sa.event.listen(self.engine.pool, "checkout", lambda *_a: mark("checkout"))
        parts.clear()
        mark("start")
        try:
            add(self, rows)
        finally:
            mark("end")
            # Before the first statement: the pool's checkout (and pre-ping) where there is
            # one; a write that sends nothing through SQLAlchemy is one part, the whole.
            first = "pool" if any(n == "checkout" for n, _, _ in parts) else "write"
            text, (_, w0, c0), name = [], parts[0], first
            for nxt, w, c in parts[1:]:
                if nxt.startswith("pre-"):  # the time up to a statement is its client's
                    text.append(f"{name}={(w - w0) * 1e3:.2f}/{(c - c0) * 1e3:.2f}")
                    name, w0, c0 = nxt[4:], w, c
                elif nxt in ("checkout", "end"):
                    text.append(f"{name}={(w - w0) * 1e3:.2f}/{(c - c0) * 1e3:.2f}")
                    name, w0, c0 = nxt, w, c
            last["start"], last["end"] = parts[0][1], parts[-1][1]
            probe.log("store", parts[-1][1] - parts[0][1], f"rows={len(rows)} " + " ".join(text))

    async def timed_flush(self: reports.ReportIntake) -> int:
        called = time.perf_counter()
        last.clear()
        n = await flush(self)
        if "start" in last:
            probe.log(
                "storeq",
                last["start"] - called,
                f"back={(time.perf_counter() - last['end']) * 1e3:.2f}",
            )
        return n

    store.Store.add_reports = timed_add  # type: ignore[method-assign]
    reports.ReportIntake.flush = timed_flush  # type: ignore[method-assign]


def install(out: TextIO) -> None:
    from sova.manager.daemons.service import rounds

    probe = Probe(out)
    install_store(probe)
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
