"""Report intake: each host's report checked for freshness, fed to the core, kept for the store.

* **no decision from replayed or stale input**: inside one agent boot the sequence must grow
  and the clock must not go back; a new boot must be a boot id the host has not used; the
  clock must keep pace with the manager's (:meth:`ReportIntake.check_fresh`);
* **acknowledged means durable**: a report is answered only once its row is committed
  (:meth:`ReportIntake.committed`); the rows of every report that arrives while one write
  is in flight go in the next, one transaction for all (group commit), so the store's cost
  is one commit per write, not per report. A manager killed after its answer has the row
  in the store, and the manager that takes over reads it; a report the store did not take
  is answered 503 and the agent sends it again.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import Protocol

from sova.manager.daemons.schema import Report
from sova.manager.daemons.service.ledger import Ledger
from sova.manager.daemons.service.state import RESOURCES, HostState, ManagerState
from sova.manager.daemons.service.store import ReportRow, StoredState, iter_report_vms
from sova.model import MIB
from sova.policy.hotspot import HostCapacity, Utilisation, VMLoad

log = logging.getLogger("sova.manager")

MAX_BUFFERED_REPORTS = 200_000
MAX_PAST_BOOTS = 16


class ReportRefused(ValueError):
    """A well-formed report the manager must not act on (HTTP ``status``)."""

    def __init__(self, status: int, field: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.field = field


def row_loads(row: ReportRow) -> tuple[Utilisation, dict[str, VMLoad]]:
    """A stored report's host and VM loads (decoded ahead when a warm standby read it)."""
    if row.loads is not None:
        loads: tuple[Utilisation, dict[str, VMLoad]] = row.loads
        return loads
    return Utilisation(*row.util), {
        n: VMLoad(Utilisation(*u), mib * int(MIB), migrating=mig)
        for n, u, mib, mig in iter_report_vms(row.vms)
    }


class ReadAhead(Protocol):
    """Report windows read ahead of a restore (a warm standby's,
    :class:`sova.manager.daemons.service.standby.WarmWindows`)."""

    def windows(self) -> tuple[dict[str, list[ReportRow]], dict[str, list[str]]]: ...


class StoreUnavailable(RuntimeError):
    """The store did not take a report's row: the report is not acknowledged (503)."""


class ReportIntake:
    """Reports in: freshness, the hosts' last reports, the core's windows, the row buffer."""

    def __init__(self, st: ManagerState, ledger: Ledger) -> None:
        self.st = st
        self.ledger = ledger
        self._live_t = 0.0  # newest agent clock accepted by this process (clock = "agent")
        self._past_boots: dict[str, deque[str]] = {}
        self._pace: dict[str, float] = {}  # host -> agent clock - monotonic clock, this boot
        self._buffer: list[ReportRow] = []
        # Reports waiting for their rows to be committed (group commit, :meth:`committed`)
        self._waiting: list[asyncio.Future[None]] = []
        self._committer: asyncio.Task[None] | None = None
        self._writing = asyncio.Lock()  # one report write at a time: see flush

    def ingest(self, host: str, report: Report) -> bool:
        """One host report (Monitor). False: a retry whose first try landed (nothing new)."""
        st = self.st
        last = st.hosts.get(host)
        if (
            last is not None
            and last.boot == report.boot
            and last.seq == report.seq
            and last.agent_t == report.time_s
        ):
            st.metrics.reports.labels("duplicate").inc()
            return False
        try:
            restarted = self.check_fresh(host, last, report)
        except ReportRefused as exc:
            st.metrics.reports.labels("replayed" if exc.status == 409 else "rejected").inc()
            raise
        if restarted and last is not None:
            # The agent restarted (its sequence starts again): its reports are new, not old.
            st.planned_seq[host] = -1
            self._past_boots.setdefault(host, deque(maxlen=MAX_PAST_BOOTS)).append(last.boot)
            # Marks only which open leases lost their source's memory (a round in progress
            # reads none of it), so it need not wait for the round.
            st.core.source_restarted(host)
        st.latest_t = max(st.latest_t, report.time_s)
        self._live_t = max(self._live_t, report.time_s)
        now = st.now()
        util = report.utilisation()
        vms = report.vm_loads()
        cap = report.host_capacity()
        st.hosts[host] = HostState(
            report.seq, report.time_s, now, util.as_tuple(), vms, report.boot, cap
        )
        if report.ack:
            self.ledger.ack(host, report.ack)
        if len(self._buffer) >= MAX_BUFFERED_REPORTS:
            del self._buffer[: len(self._buffer) // 10]
            st.metrics.dropped_reports.inc(MAX_BUFFERED_REPORTS // 10)
        self._buffer.append(
            ReportRow(
                host,
                report.seq,
                report.time_s,
                now,
                util.as_tuple(),
                {e.name: [*e.util, e.memory_mib, e.migrating] for e in report.vms},
                cap.as_tuple() if cap is not None else None,
                report.boot,
            )
        )
        moving = report.migrating
        st.on_core(lambda: self._core_ingest(host, util, vms, now, cap, moving))
        st.metrics.reports.labels("accepted").inc()
        if st.metrics.host_metrics:
            st.metrics.set_utilisation(host, dict(zip(RESOURCES, util.as_tuple(), strict=True)))
        st.metrics.last_report.labels(host).set(now)
        if last is None:
            # A new host is fresh; the stale count is refreshed every round. Counting every
            # host here instead made 10,000 hosts' first period quadratic.
            st.metrics.hosts.labels("fresh").inc()
            st.metrics.new_host(host)
        return True

    def _core_ingest(
        self,
        host: str,
        util: Utilisation,
        vms: dict[str, VMLoad],
        now: float,
        capacity: HostCapacity | None = None,
        migrating: bool = False,
    ) -> None:
        core = self.st.core
        if migrating:
            core.migrating_hosts.add(host)
        else:
            core.migrating_hosts.discard(host)
        arrived = core.ingest(host, util, vms, at=now, capacity=capacity)
        if arrived:
            self.ledger.record_arrivals(arrived, now, host)

    def check_fresh(self, host: str, last: HostState | None, report: Report) -> bool:
        """Refuse replayed, old and future reports; True if the agent restarted.

        A restart is explicit: a boot id the host has not used before. Inside one boot the
        sequence must grow and the clock must not go back (409 otherwise), so a captured
        report sent again, or a huge ``s`` followed by a small one, changes nothing. The
        clock must keep pace with the manager's within ``max_clock_skew_s`` (422), so one
        report cannot move the manager's time or the detector's window into the future.
        """
        settings = self.st.settings
        t, skew = report.time_s, settings.max_clock_skew_s
        restarted = last is None or last.boot != report.boot
        if last is not None:
            if not restarted and (report.seq <= last.seq or t < last.agent_t):
                raise ReportRefused(
                    409,
                    "s",
                    f"report s={report.seq} t={t} is not newer than s={last.seq} "
                    f"t={last.agent_t} of the same agent boot: replayed or out of order",
                )
            if restarted and (not report.boot or report.boot in self._past_boots.get(host, ())):
                raise ReportRefused(
                    409, "b", f"boot id {report.boot!r} is not new: a replay of an older boot"
                )
            if restarted and settings.clock == "agent" and t < last.agent_t:
                raise ReportRefused(
                    409, "t", f"t={t} is older than this host's last report (t={last.agent_t})"
                )
        if settings.clock == "agent":
            bound = self._live_t + max(skew, 2 * self.st.period_s)
            if self._live_t > 0 and t > bound:
                raise ReportRefused(
                    422, "t", f"t={t} is more than {bound - self._live_t:.0f} s ahead"
                )
            return restarted
        pace = t - self.st.mono()  # the agent's clock is monotonic too (Driver.now)
        if restarted or host not in self._pace:
            self._pace[host] = pace
        elif abs(pace - self._pace[host]) > skew:
            raise ReportRefused(
                422,
                "t",
                f"t={t} drifted {pace - self._pace[host]:+.0f} s from this agent's clock "
                f"(max_clock_skew_s = {skew:g})",
            )
        return restarted

    # ------------------------------------------------------------------ store

    def drop(self, host: str) -> int:
        """Forget ``host``'s buffered rows (the host is being forgotten); returns how many."""
        keep = [r for r in self._buffer if r.host != host]
        dropped, self._buffer = len(self._buffer) - len(keep), keep
        return dropped

    async def committed(self) -> None:
        """Return once every row buffered so far is committed (raises
        :class:`StoreUnavailable` if the write failed: the rows stay buffered for the next).

        Group commit: a write takes every row buffered when it starts; reports arriving
        while it is in flight wait for the next one. So at 1,000 reports/s a store that
        commits in 10 ms takes ~10 rows per transaction, and a report waits at most two
        commits."""
        fut = asyncio.get_running_loop().create_future()
        self._waiting.append(fut)
        if self._committer is None or self._committer.done():
            self._committer = asyncio.create_task(self._commit_loop())
        await fut

    async def _commit_loop(self) -> None:
        while self._waiting:
            await self.flush()

    async def flush(self) -> int:
        """Write buffered report rows; returns how many.

        One write at a time (``_writing``): a report waiting in :meth:`committed` is
        answered by the first write that *started* after its row was buffered, and any
        earlier write that held the row has by then either committed it or put it back."""
        async with self._writing:
            batch, self._buffer = self._buffer, []
            waiting, self._waiting = self._waiting, []
            error: Exception | None = None
            if batch:
                metrics = self.st.metrics
                try:
                    with metrics.store_flush.time():
                        await self.st.writer.run(self.st.store.add_reports, batch)
                except Exception as exc:
                    metrics.store_errors.inc()
                    log.error("cannot write %d report row(s): %s", len(batch), exc)
                    self._buffer = (batch + self._buffer)[-MAX_BUFFERED_REPORTS:]
                    error = exc
            for fut in waiting:
                if fut.done():  # the request went away (client gone)
                    continue
                if error is None:
                    fut.set_result(None)
                else:
                    first = str(error).strip().splitlines()[0] if str(error).strip() else ""
                    fut.set_exception(
                        StoreUnavailable(
                            f"the store did not take the report ({type(error).__name__}: "
                            f"{first[:200]}); send it again"
                        )
                    )
            return 0 if error is not None else len(batch)

    def restore(self, state: StoredState, restarted: dict[str, float]) -> set[str]:
        """Detector windows and the hosts' last reports from the store; ``restarted``:
        host -> manager time of the last migration that ended there. Returns the hosts
        whose next report is still to be dropped (it will span that migration's copy)."""
        core = self.st.core
        drop_next: set[str] = set()
        for host, all_rows in state.windows.items():
            rows = all_rows
            if host in restarted:
                # The live core cleared this window when a migration ended and dropped the
                # next report (it spans the copy); do the same to the stored one.
                newer = [r for r in all_rows if r.received_s > restarted[host]]
                rows = newer[1:]
                if not newer:
                    drop_next.add(host)  # the drop is still to come
            core.history.setdefault(host, deque(maxlen=core.detector.n))
            for row in rows:
                cap = HostCapacity(*row.capacity) if row.capacity else None
                util, vms = row_loads(row)
                core.ingest(host, util, vms, at=row.received_s, capacity=cap)
            last = all_rows[-1]
            if not rows:
                core.vms[host] = dict(row_loads(last)[1])
                core.locate(host, core.vms[host])
            if last.capacity:
                core.capacity[host] = HostCapacity(*last.capacity)
            self.st.hosts[host] = HostState(
                last.seq,
                last.agent_t,
                last.received_s,
                last.util,
                dict(core.vms[host]),
                boot=last.boot,
                capacity=core.capacity.get(host),
            )
            self.st.latest_t = max(self.st.latest_t, last.agent_t)
            self.st.metrics.new_host(host)
        for host, boots in state.past_boots.items():
            self._past_boots[host] = deque(boots[-MAX_PAST_BOOTS:], maxlen=MAX_PAST_BOOTS)
        return drop_next
