"""Run a scenario once per compared policy (and per sweep point) and collect the records.

Each policy gets a fresh :class:`~sova.sim.world.World` built from the same seed; the
workload random stream does not depend on the policy, so every policy faces exactly the
same offered load and differences in the output come from the policy alone.

A sweep's (point, policy) runs are independent, so :func:`run_points` hands them to local
worker processes (``concurrent.futures``) or to a Dask distributed cluster; the results
come back in the serial order whatever order they finish in, and a run computes the same
records in any process (its random streams come from the scenario's seed alone), so the
output files are byte-identical to a serial run's.
"""

from __future__ import annotations

import gc
import multiprocessing
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, wait
from typing import Any

from sova.clock import Environment
from sova.record import EventRow, TimelineRow
from sova.scenario import Scenario
from sova.sim.world import PolicyRun, World, agent_config

__all__ = [
    "EventRow",
    "Interrupted",
    "PolicyRun",
    "TimelineRow",
    "agent_config",
    "portable",
    "run_points",
    "run_policy",
    "run_scenario",
    "total_ticks",
]

Point = tuple[Scenario, list[PolicyRun]]


def run_policy(
    scn: Scenario,
    policy: str,
    progress: Callable[[int], None] | None = None,
    threads: int = 1,
) -> PolicyRun:
    """One policy's run; ``threads``: how many the compiled core shares each tick's VMs
    and hosts among (the same outputs for any number)."""
    spec = next(p for p in scn.policy_specs if p.name == policy)
    return World(scn, spec, threads=threads).run_until(scn.duration, progress)


def run_scenario(scn: Scenario, progress: Callable[[int], None] | None = None) -> list[PolicyRun]:
    return [run_policy(scn, p, progress) for p in scn.policies]


def total_ticks(scn: Scenario) -> int:
    return int(round(scn.duration / scn.tick)) * len(scn.policies)


def ticks(scn: Scenario) -> int:
    return int(round(scn.duration / scn.tick))


def portable(run: PolicyRun) -> PolicyRun:
    """The finished run without what only a running world needs — pending events and the
    world's listeners (closures over agents) — so it can travel back from a worker
    process. Nothing the outputs read is dropped."""
    eng = run.engine
    if eng is not None:
        eng.env = Environment(eng.env.now)
        eng.on_op_done = []
        eng.on_submit = []
    return run


def _task(scn: Scenario, policy: str, threads: int = 1) -> PolicyRun:
    return portable(run_policy(scn, policy, threads=threads))


class Interrupted(KeyboardInterrupt):
    """Ctrl-C during :func:`run_points`; ``completed`` holds the runs that finished:
    for one point, its completed policies; for a sweep, its completed points."""

    def __init__(self, completed: list[Point]) -> None:
        super().__init__()
        self.completed = completed


def run_points(
    points: Sequence[Scenario],
    policies: Sequence[str],
    *,
    workers: int = 1,
    dask: str | None = None,
    on_tick: Callable[[int], None] | None = None,
    on_start: Callable[[Scenario, str], None] | None = None,
    threads: int = 1,
) -> list[Point]:
    """Every (point, policy) run, in the serial order.

    ``workers`` > 1 runs a sweep's runs in that many local processes; ``dask`` (a
    scheduler address, or ``"local"`` for a local cluster of ``workers`` processes) runs
    them on Dask distributed. A single point always runs here, ticking ``on_tick``.
    ``threads``: each run's compiled-core threads (:func:`run_policy`).
    """
    tasks = [(k, p) for k in range(len(points)) for p in policies]
    if dask is None and (workers <= 1 or len(points) <= 1):
        return _serial(points, policies, on_tick, on_start, threads)
    done: dict[tuple[int, str], PolicyRun] = {}
    try:
        if dask is not None:
            _on_dask(dask, workers, points, tasks, done, on_tick, threads)
        else:
            _on_processes(workers, points, tasks, done, on_tick, threads)
    except KeyboardInterrupt:
        complete = [k for k in range(len(points)) if all((k, p) in done for p in policies)]
        raise Interrupted(
            [(points[k], [done[(k, p)] for p in policies]) for k in complete]
        ) from None
    return [(scn, [done[(k, p)] for p in policies]) for k, scn in enumerate(points)]


def _serial(
    points: Sequence[Scenario],
    policies: Sequence[str],
    on_tick: Callable[[int], None] | None,
    on_start: Callable[[Scenario, str], None] | None,
    threads: int = 1,
) -> list[Point]:
    results: list[Point] = []
    for scn in points:
        runs: list[PolicyRun] = []
        try:
            for p in policies:
                if on_start is not None:
                    on_start(scn, p)
                runs.append(portable(run_policy(scn, p, on_tick, threads)))
                # the finished world's agents and listeners refer to each other: free them
                # now rather than at a later full pass, before the next run or the report
                gc.collect()
        except KeyboardInterrupt:
            sweep = scn.sweep is not None
            # a sweep keeps whole points (its tables compare policies at each point)
            partial = [] if sweep or not runs else [(scn, runs)]
            raise Interrupted(results + partial) from None
        results.append((scn, runs))
    return results


def _on_processes(
    workers: int,
    points: Sequence[Scenario],
    tasks: list[tuple[int, str]],
    done: dict[tuple[int, str], PolicyRun],
    on_tick: Callable[[int], None] | None,
    threads: int = 1,
) -> None:
    # spawn, not fork: the parent may run threads (the progress bar's refresh thread)
    ctx = multiprocessing.get_context("spawn")
    pool = ProcessPoolExecutor(max_workers=min(workers, len(tasks)), mp_context=ctx)
    try:
        futures: dict[Future[PolicyRun], tuple[int, str]] = {
            pool.submit(_task, points[k], p, threads): (k, p) for k, p in tasks
        }
        pending = set(futures)
        while pending:
            finished, pending = wait(pending, return_when="FIRST_COMPLETED")
            for f in finished:
                key = futures[f]
                done[key] = f.result()
                if on_tick is not None:
                    on_tick(ticks(points[key[0]]))
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _on_dask(
    address: str,
    workers: int,
    points: Sequence[Scenario],
    tasks: list[tuple[int, str]],
    done: dict[tuple[int, str], PolicyRun],
    on_tick: Callable[[int], None] | None,
    threads: int = 1,
) -> None:
    import importlib

    # dask.distributed is untyped: one Any-typed handle instead of ignores at every call
    dd: Any = importlib.import_module("dask.distributed")
    cluster: Any = None
    if address == "local":
        cluster = dd.LocalCluster(
            n_workers=max(1, workers), threads_per_worker=1, processes=True, dashboard_address=None
        )
        client = dd.Client(cluster)
    else:
        client = dd.Client(address)
    try:
        futures = {
            client.submit(_task, points[k], p, threads, pure=False): (k, p) for k, p in tasks
        }
        for f in dd.as_completed(list(futures)):
            key = futures[f]
            done[key] = f.result()
            if on_tick is not None:
                on_tick(ticks(points[key[0]]))
    finally:
        client.close()
        if cluster is not None:
            cluster.close()
