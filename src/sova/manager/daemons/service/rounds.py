"""Planning rounds: Analyse + Plan over every host, persisted, then published.

* **off the event loop**: a round over 10,000 hosts takes a few hundred milliseconds of
  CPU, so it runs in a worker thread or (``fork_planner``) a forked child
  (:func:`plan_in_child`); while it runs, reports are answered at once but their effect on
  the core is deferred and replayed after the round (:meth:`ManagerState.on_core`), so the
  round sees one consistent snapshot and the loop never waits for it;
* **persist, then publish**: a round's decisions, leases and directives are written to the
  knowledge store *before* any agent can see a directive, so an agent never acts on a
  decision the store does not have (and a restarted manager never signals a move twice);
  a round whose write fails is undone and decided again by the next;
* **when**: every ``plan_period_s`` on the wall clock (``plan_trigger = "timer"``), or as
  soon as every live host has reported anew (``"round"``: ``sova demo``'s lockstep).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import pickle
import selectors
import signal
import time
from collections.abc import Callable, Iterator, Mapping, MutableMapping

from sova.manager.daemons.planner_health import PlannerHealth
from sova.manager.daemons.service.fences import expire_fences
from sova.manager.daemons.service.ledger import Ledger
from sova.manager.daemons.service.operator import OperatorDesk
from sova.manager.daemons.service.state import ManagerState, cap_reason
from sova.manager.daemons.service.store import DecisionRow, RoundWrite
from sova.manager.decisions.core import ManagerCore, MigrationDecision, RoundResult
from sova.manager.decisions.fastplan import notable
from sova.policy.hotspot import MigrationSignal

log = logging.getLogger("sova.manager")


class Verdicts(MutableMapping[str, tuple[bool, str]]):
    """host -> (hot, reason) of a round, read from its signals when asked.

    Not a dict built at the round's end: that read every host's signal, and a round's
    signals build a quiet host's "not hot" reason only when it is read (fastplan.Signals),
    so at 10,000 hosts the dict cost ~0.35 s of string formatting on the event loop after
    every round, a stall every report arriving then waited for (the p99 of issue 37).
    :meth:`hot` reads only the notable signals."""

    def __init__(self, signals: Mapping[str, MigrationSignal]) -> None:
        self._signals = signals
        self._gone: set[str] = set()  # hosts forgotten since the round

    def __getitem__(self, host: str) -> tuple[bool, str]:
        if host in self._gone:
            raise KeyError(host)
        s = self._signals[host]
        return bool(s.hot_resources) or s.flag, s.reason

    def __setitem__(self, host: str, verdict: tuple[bool, str]) -> None:
        raise TypeError("a round's verdicts are its signals'")

    def __delitem__(self, host: str) -> None:
        if host in self._gone or host not in self._signals:
            raise KeyError(host)
        self._gone.add(host)

    def __iter__(self) -> Iterator[str]:
        return (h for h in self._signals if h not in self._gone)

    def __len__(self) -> int:
        return len(self._signals) - len(self._gone)  # only hosts it holds are gone

    def __contains__(self, host: object) -> bool:
        return host not in self._gone and host in self._signals

    def hot(self) -> set[str]:
        """The hosts found hot (or flagged), without building a quiet host's verdict."""
        return {
            h
            for h, s in notable(self._signals)
            if (s.hot_resources or s.flag) and h not in self._gone
        }


def plan_in_child(
    core: ManagerCore, now: float, timeout_s: float = 60.0, first_id: int = 1
) -> RoundResult:
    """``core.plan(now, first_id)`` in a forked copy of this process; ``core`` is unchanged.

    Why: a round over 10,000 hosts is still ~0.4 s of Python; in a thread it holds the GIL
    against the HTTP loop (every syscall of every request waits for it), which made the
    p99 of reports hundreds of ms. The child has the state by copy-on-write (nothing is
    serialised on the way in), runs on the other core, and sends back only the result.
    The child touches no lock, file or socket of the parent; it exits with ``os._exit``.
    """
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child's coverage is not collected
        code = 1
        try:
            os.close(r)
            data = pickle.dumps(core.plan(now, first_id), protocol=pickle.HIGHEST_PROTOCOL)
            with os.fdopen(w, "wb") as f:
                f.write(data)
            code = 0
        finally:
            os._exit(code)
    os.close(w)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    # A selector, not select(): select() refuses a descriptor numbered 1,024 or more, and a
    # manager holding a thousand agent connections numbers its pipe past that.
    with os.fdopen(r, "rb", buffering=0) as f, selectors.DefaultSelector() as sel:
        sel.register(f, selectors.EVENT_READ)
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not sel.select(left):
                os.kill(pid, signal.SIGKILL)  # hung: a round must never stall planning
                os.waitpid(pid, 0)
                raise TimeoutError(f"planning process gave no result in {timeout_s:.0f} s")
            chunk = f.read(1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
    data = b"".join(chunks)
    _, status = os.waitpid(pid, 0)
    if status != 0 or not data:
        raise RuntimeError(f"planning process failed (wait status {status})")
    result: RoundResult = pickle.loads(data)
    return result


class Rounds:
    """The planning rounds and what the last one concluded per host."""

    def __init__(
        self, st: ManagerState, ledger: Ledger, desk: OperatorDesk, fork_planner: bool = False
    ) -> None:
        self.st = st
        self.ledger = ledger
        self.desk = desk
        self.fork_planner = fork_planner and hasattr(os, "fork")
        # When this manager started leading (the app is made right after the takeover,
        # before the restore): the timer's first round is due a period after it at most.
        self._led = time.monotonic()
        self.count = 0  # rounds completed
        self.verdicts = Verdicts({})  # host -> (hot, reason) of the last round
        self._was_hot: set[str] = set()
        self._round_task: asyncio.Task[Mapping[str, MigrationSignal]] | None = None
        self._first_t = -math.inf
        self.before_round: Callable[[], object] = lambda: None  # the timer's, each wake
        timer = st.settings.plan_trigger == "timer"
        self.health = PlannerHealth(
            st.settings.plan_period_s if timer else 0.0, monotonic=st.mono, wall=st.clock
        )

    async def tick(self, now: float | None = None) -> Mapping[str, MigrationSignal]:
        """One planning round: Analyse + Plan over every host, persisted, then published."""
        lock, _ = self.st.primitives()
        async with lock:
            started = self.st.mono()
            try:
                signals = await self._tick(now)
            except Exception as exc:
                self.health.failed(exc)
                self.st.metrics.round_failed()
                raise
            self.health.completed(self.st.mono() - started)
            self.st.metrics.round_completed(self.health)
            return signals

    async def _tick(self, now: float | None) -> Mapping[str, MigrationSignal]:
        st, core, ledger, desk = self.st, self.st.core, self.ledger, self.desk
        loop = asyncio.get_running_loop()
        now = st.now() if now is None else now
        started = time.perf_counter()
        w = RoundWrite()
        ledger.expire_directives(now, w)
        desk.expire_plans(now, w)
        expire_fences(desk.ops.fences, now, w, desk.sync_fences)
        core.recommend = desk.ops.recommend_hosts(st.hosts)
        seqs = {h: hs.seq for h, hs in st.hosts.items()}
        st.planning = True
        try:
            first = st.next_id
            if self.fork_planner:
                result = await loop.run_in_executor(None, plan_in_child, core, now, 60.0, first)
                core.apply_round(result)
            else:
                result = await loop.run_in_executor(None, core.plan, now, first)
            st.next_id = max([first, *(d.id + 1 for d in result.decisions)])
            signals = result.signals
            decided: dict[str, MigrationDecision] = {}
            for d in result.decisions:
                decided[d.host] = d
                sig = d.signal
                w.decisions.append(
                    DecisionRow(
                        d.id,
                        d.time_s,
                        d.host,
                        sig.flag,
                        sig.target,
                        sig.vm,
                        cap_reason(sig.reason),
                        tuple(sig.hot_resources),
                        d.inputs,
                    )
                )
                st.metrics.decisions.labels("migrate" if sig.flag else "no_migration").inc()
            plans_before = dict(desk.ops.open_plans)
            for lease in result.proposed:
                desk.propose(lease, decided[lease.src], now, w)
            ledger.record_round(result, now, w)
            try:
                await st.writer.write(w)
            except Exception:
                # Not in the store means not decided: undo so the next round decides again.
                ledger.undo(result.opened)
                desk.ops.open_plans = plans_before
                raise
            ledger.publish(w)
            self.verdicts = Verdicts(signals)
            st.planned_seq.update(seqs)
            self.count += 1
        finally:
            st.planning = False
            deferred, st.deferred = st.deferred, []
            for fn in deferred:
                fn()
            ledger.round_done()
        self._publish_metrics(now, started)
        _, cond = st.primitives()
        async with cond:
            cond.notify_all()
        return signals

    def _publish_metrics(self, now: float, started: float) -> None:
        m = self.st.metrics
        m.rounds.inc()
        hot = self.verdicts.hot()
        m.hotspots.set(len(hot))
        if m.host_metrics:
            # Only the changes: 10,000 label lookups per round would stall the event loop.
            # A host's 0 is set when it first reports (ReportIntake), not by its first
            # round: that made the first round after start 10,000 labels, ~90 ms on the
            # loop (issue 37).
            for h in hot ^ self._was_hot:
                m.host_hot.labels(h).set(1.0 if h in hot else 0.0)
        self._was_hot = hot
        m.leases.set(len(self.st.core.leases))
        m.open_plans.set(len(self.desk.ops.open_plans))
        self.st.count_hosts(now)
        m.plan_duration.observe(time.perf_counter() - started)

    def maybe_round(self) -> None:
        """``plan_trigger = "round"``: plan as soon as every known host has reported anew."""
        if self._round_task is not None and not self._round_task.done():
            return
        st = self.st
        # Expected in this round: every known host that has reported within the last
        # 1.5 periods. A host whose agent died (or has not come up) is waited for that
        # long and then left out, so it cannot stall planning for everyone else.
        period = st.period_s
        if not math.isfinite(self._first_t):
            self._first_t = st.latest_t
        horizon = st.latest_t - 1.5 * period
        known = st.tokens.keys() or st.hosts.keys()
        expected = [
            h for h in known if (st.hosts[h].agent_t if h in st.hosts else self._first_t) >= horizon
        ]
        # Fresh: a report of this period that no round has seen yet (a report left over
        # from a period whose round never ran does not count).
        now_from = st.latest_t - 0.5 * period
        fresh = [
            h in st.hosts
            and st.hosts[h].seq > st.planned_seq.get(h, -1)
            and st.hosts[h].agent_t >= now_from
            for h in expected
        ]
        if fresh and all(fresh):
            self._round_task = asyncio.get_running_loop().create_task(self.tick())

    async def planner(self) -> None:
        """``plan_trigger = "timer"``: a round every period."""
        period = self.st.settings.plan_period_s
        # The first round within a period of leading (issue 37): the next boundary can be
        # up to a period plus the restore away. Then the boundaries, skipping one that
        # comes less than half a period after that first round.
        first_due = max(0.0, period - (time.monotonic() - self._led))
        # Aligned to the wall clock so a restarted manager keeps the same phase.
        wait = period - time.time() % period
        if first_due < wait:
            await asyncio.sleep(first_due)
            await self._timed_round()
            wait = period - time.time() % period
            if wait < period / 2:
                wait += period
        while True:
            await asyncio.sleep(wait)
            await self._timed_round()
            wait = period - time.time() % period

    async def _timed_round(self) -> None:
        try:
            self.before_round()
            await self.tick()
        except Exception:
            log.exception("planning round failed; retrying next period")

    async def close(self) -> None:
        if self._round_task is not None:
            with contextlib.suppress(Exception):
                await self._round_task
