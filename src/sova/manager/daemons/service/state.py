"""What every part of the manager service shares, and the one way it writes to the store.

The service (:mod:`sova.manager.daemons.service.service`) is split by responsibility — report intake,
the directive/lease ledger, planning rounds, the operator desk, views — and every part is
handed this one :class:`ManagerState`. The rule that makes that safe is the service's
"one writer, no locks": all of it is touched only on the event loop. While a planning
round runs (in a worker thread or a forked child), changes to the decision core are queued
with :meth:`ManagerState.on_core` and replayed after it, so the round sees one snapshot.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TypeVar

from sova.manager.daemons.config import ManagerSettings
from sova.manager.daemons.metrics import ManagerMetrics
from sova.manager.daemons.security import TokenBook
from sova.manager.daemons.service.store import RoundWrite, Store
from sova.manager.decisions.core import ManagerCore
from sova.policy.hotspot import HostCapacity, VMLoad

log = logging.getLogger("sova.manager")

T = TypeVar("T")
RESOURCES = ("cpu", "mem", "net")


@dataclass(frozen=True)
class HostState:
    """A host's newest accepted report, as the views and the operator's checks read it."""

    seq: int
    agent_t: float
    received_s: float
    util: tuple[float, float, float]
    vms: dict[str, VMLoad]
    boot: str = ""
    capacity: HostCapacity | None = None


class StoreWriter:
    """Every store write runs on one worker thread, in the order issued: a round's rows, an
    operator's change and a migration's end never overtake each other."""

    def __init__(self, store: Store, metrics: ManagerMetrics) -> None:
        self.store = store
        self.metrics = metrics
        self.ok = True  # the last write succeeded
        self._db = ThreadPoolExecutor(1, thread_name_prefix="sova-store")
        self._writes: set[asyncio.Future[None]] = set()

    def write(self, w: RoundWrite) -> asyncio.Future[None]:
        fut = self.run(self._timed_write, w)
        self._writes.add(fut)
        fut.add_done_callback(self._write_done)
        return fut

    def run(self, fn: Callable[..., T], *args: object) -> asyncio.Future[T]:
        """``fn(*args)`` on the store's thread, after every write issued before it."""
        return asyncio.get_running_loop().run_in_executor(self._db, fn, *args)

    def _timed_write(self, w: RoundWrite) -> None:
        with self.metrics.store_flush.time():
            self.store.write_round(w)

    def _write_done(self, fut: asyncio.Future[None]) -> None:
        self._writes.discard(fut)
        if not fut.cancelled() and fut.exception() is not None:
            self.metrics.store_errors.inc()
            self.ok = False
            log.error("knowledge store write failed: %s", fut.exception())
        elif not fut.cancelled():
            self.ok = True

    async def wait(self) -> None:
        """Every write issued so far has ended (either way)."""
        if self._writes:
            await asyncio.gather(*list(self._writes), return_exceptions=True)

    def close(self) -> None:
        self._db.shutdown(wait=True)


@dataclass(eq=False)
class ManagerState:
    """The manager's shared state: the decision core, the hosts' last reports, the id
    counter, manager time, and the round-in-progress flag."""

    settings: ManagerSettings
    store: Store
    core: ManagerCore
    metrics: ManagerMetrics
    writer: StoreWriter
    tokens: TokenBook
    clock: Callable[[], float] = time.time
    # Intervals (an agent's pace, staleness, leases, the planner's health) on the monotonic
    # clock: a step of the wall clock must neither refuse every report nor make every host
    # stale nor hide a stalled planner. A test that injects only a wall clock moves both.
    mono: Callable[[], float] = time.monotonic
    anchor: tuple[float, float] = field(init=False)  # (wall, monotonic) read at start
    hosts: dict[str, HostState] = field(default_factory=dict)
    planned_seq: dict[str, int] = field(default_factory=dict)  # host -> newest report planned
    next_id: int = 1  # the next decision id (also the directive's and the migration's)
    latest_t: float = 0.0  # the newest agent clock seen (manager time with clock = "agent")
    planning: bool = False
    deferred: list[Callable[[], object]] = field(default_factory=list)
    _sync: tuple[asyncio.AbstractEventLoop, asyncio.Lock, asyncio.Condition] | None = None

    def __post_init__(self) -> None:
        self.anchor = (self.clock(), self.mono())

    @property
    def period_s(self) -> float:
        return self.settings.plan_period_s or 10.0

    def now(self) -> float:
        """Manager time: a steady wall clock, or (``clock = "agent"``) the newest agent clock.

        Steady: the wall clock as read when this process started, advanced by the monotonic
        clock since. It reads as wall time (stored times stay comparable across restarts)
        but a step of the wall clock while the manager runs (NTP after a bad RTC, an
        operator's ``date -s``) does not move it, so intervals measured on it (staleness,
        lease timeouts, tabu windows) stay true. The step is taken at the next start.

        The agent clock is for simulated clusters (``sova demo``), where decision times must
        be simulated seconds so they compare with an in-process ``sova simulate`` run.
        """
        if self.settings.clock == "agent":
            return self.latest_t
        if self.mono is self.clock:  # one injected clock (tests): exactly its readings
            return self.clock()
        return self.anchor[0] + (self.mono() - self.anchor[1])

    def take_id(self) -> int:
        did, self.next_id = self.next_id, self.next_id + 1
        return did

    def on_core(self, change: Callable[[], object]) -> None:
        """Apply ``change`` to the core now, or after the round in progress (its snapshot
        must not change under it)."""
        if self.planning:
            self.deferred.append(change)
        else:
            change()

    def primitives(self) -> tuple[asyncio.Lock, asyncio.Condition]:
        """The round lock and condition of the running loop (a daemon has one; test
        clients may run each request on a loop of its own)."""
        loop = asyncio.get_running_loop()
        if self._sync is None or self._sync[0] is not loop:
            self._sync = (loop, asyncio.Lock(), asyncio.Condition())
        return self._sync[1], self._sync[2]

    def count_hosts(self, now: float) -> None:
        stale = len(self.core.stale(now) & self.hosts.keys())
        self.metrics.hosts.labels("stale").set(stale)
        self.metrics.hosts.labels("fresh").set(len(self.hosts) - stale)


MAX_REASON = 4000


def cap_reason(reason: str) -> str:
    """A reason lists every refused target; over 10,000 hosts that is megabytes per row."""
    if len(reason) <= MAX_REASON:
        return reason
    return reason[:MAX_REASON] + f" ... ({len(reason) - MAX_REASON} more characters)"
