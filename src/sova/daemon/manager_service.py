"""The manager service: all of ``sova manager``'s state and behaviour, without HTTP.

The routes are in :mod:`sova.daemon.manager_app`, the token/body guard in
:mod:`sova.daemon.manager_guard`, directive delivery in :mod:`sova.daemon.manager_directives`.
The decisions are :class:`sova.manager.core.ManagerCore`'s, exactly as the simulator runs
them; this module adds what a daemon needs around them:

* **one writer, no locks**: every piece of state is touched only on the event loop. A
  planning round over 10,000 hosts takes a few hundred milliseconds of CPU, so it runs in a
  worker thread; while it runs, reports are answered at once but their effect on the core is
  deferred and replayed after the round, so the round sees one consistent snapshot and the
  loop never waits for it;
* **persist, then publish**: a round's decisions, leases and directives are written to the
  knowledge store *before* any agent can see a directive, so an agent never acts on a
  decision the store does not have (and a restarted manager never signals a move twice);
* **directives that survive loss**: a flagged directive is repeated in every response until
  the source acknowledges it (``d`` in its report), is applied by the agent at most once per
  id, and is withdrawn — releasing its lease — if the source stays silent for
  ``directive_ttl_periods`` rounds;
* **cheap reports**: report rows are written behind, in batches, from a bounded buffer;
  losing the last second of history in a crash costs nothing the next reports do not refill.

Tokens are compared as digests in constant time (:mod:`sova.daemon.manager_security`).

Why one module of ~750 lines: it is one class whose every method touches the same state on
the one event loop (the "one writer, no locks" rule above); the parts that stand alone —
directives, the HTTP guard, connection limits, security, the vectorised round — are
modules of their own.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import pickle
import select
import signal
import time
from collections import deque
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry

from sova.daemon.config import ConfigError, ManagerSettings
from sova.daemon.manager_directives import DirectiveBook
from sova.daemon.manager_security import TokenBook
from sova.daemon.metrics import ManagerMetrics
from sova.daemon.schema import (
    EPOCH_SHIFT,
    ClusterView,
    DecisionPage,
    DecisionView,
    Directive,
    HostView,
    LeaseView,
    MigrationDone,
    Report,
    ResourceUse,
    epoch_of,
)
from sova.daemon.store import (
    DecisionRow,
    DirectiveRow,
    LeaseRow,
    MigrationEnd,
    ReportRow,
    RoundWrite,
    Store,
    iter_report_vms,
)
from sova.manager.core import Lease, ManagerCore, RoundResult
from sova.model import MIB
from sova.policy.hotspot import HotspotDetector, MigrationSignal, Utilisation, VMLoad

log = logging.getLogger("sova.manager")

MAX_BUFFERED_REPORTS = 200_000
RESOURCES = ("cpu", "mem", "net")


class NotTheSource(PermissionError):
    """A migration's end reported by a host other than its source."""


@dataclass(frozen=True)
class HostState:
    seq: int
    agent_t: float
    received_s: float
    util: tuple[float, float, float]
    vms: dict[str, VMLoad]
    boot: str = ""


class ReportRefused(ValueError):
    """A well-formed report the manager must not act on (HTTP ``status``)."""

    def __init__(self, status: int, field: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.field = field


MAX_PAST_BOOTS = 16


def plan_in_child(core: ManagerCore, now: float, timeout_s: float = 60.0) -> RoundResult:
    """``core.plan(now)`` in a forked copy of this process; ``core`` itself is unchanged.

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
            data = pickle.dumps(core.plan(now), protocol=pickle.HIGHEST_PROTOCOL)
            with os.fdopen(w, "wb") as f:
                f.write(data)
            code = 0
        finally:
            os._exit(code)
    os.close(w)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    with os.fdopen(r, "rb", buffering=0) as f:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([f], [], [], left)[0]:
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


class ManagerService:
    """All manager state and behaviour, independent of HTTP (tests drive it directly too)."""

    def __init__(
        self,
        settings: ManagerSettings,
        store: Store,
        *,
        clock: Callable[[], float] | None = None,
        registry: CollectorRegistry | None = None,
        fork_planner: bool = False,
    ) -> None:
        self.settings = settings
        self.fork_planner = fork_planner and hasattr(os, "fork")
        self.store = store
        p = settings.planner
        self.core = ManagerCore(
            detector=HotspotDetector(p.k, p.n, p.alpha),
            metric=p.metric,
            ceiling=p.ceiling,
            lease_timeout_s=p.lease_timeout_s,
            restart_window_after_migration=p.restart_window_after_migration,
            return_tabu_s=p.return_tabu_s,
            max_concurrent_migrations=p.max_concurrent_migrations,
            max_migrations_per_hour=p.max_migrations_per_hour,
            vm_cooldown_s=p.vm_cooldown_s,
            keep_log=False,
            close_on_arrival=False,
            stale_after_s=p.stale_after_periods * (settings.plan_period_s or 10.0),
        )
        self.tokens = TokenBook.load(settings)
        self._clock = clock or time.time
        self.metrics = ManagerMetrics(registry, settings.host_metrics)
        self.hosts: dict[str, HostState] = {}
        self.verdicts: dict[str, tuple[bool, str]] = {}
        self.directives = DirectiveBook()
        self.lease_ids: dict[str, int] = {}  # vm -> decision id of its lease
        self.planned_seq: dict[str, int] = {}  # host -> its newest report a round has seen
        self.next_id = 1
        self.rounds = 0
        self.latest_t = 0.0
        self._first_t = -math.inf
        self.store_ok = True  # the last write to the store succeeded
        self._live_t = 0.0  # newest agent clock accepted by this process (clock = "agent")
        self._past_boots: dict[str, deque[str]] = {}
        self._pace: dict[str, float] = {}  # host -> agent clock - wall clock, this boot
        self._was_hot: set[str] = set()
        self._hot_known: set[str] = set()
        self._buffer: list[ReportRow] = []
        self._planning = False
        self._deferred: list[Callable[[], None]] = []
        self._db = ThreadPoolExecutor(1, thread_name_prefix="sova-store")
        self._writes: set[asyncio.Future[None]] = set()
        self._sync: tuple[asyncio.AbstractEventLoop, asyncio.Lock, asyncio.Condition] | None = None
        self._round_task: asyncio.Task[Any] | None = None

    # ------------------------------------------------------------------ loop

    def _primitives(self) -> tuple[asyncio.Lock, asyncio.Condition]:
        """The round lock and condition of the running loop (a daemon has one; test
        clients may run each request on a loop of its own)."""
        loop = asyncio.get_running_loop()
        if self._sync is None or self._sync[0] is not loop:
            self._sync = (loop, asyncio.Lock(), asyncio.Condition())
        return self._sync[1], self._sync[2]

    # ------------------------------------------------------------------ time

    def now(self) -> float:
        """Manager time: the wall clock, or (``clock = "agent"``) the newest agent clock.

        The agent clock is for simulated clusters (``sova demo``), where decision times must
        be simulated seconds so they compare with an in-process ``sova simulate`` run.
        """
        return self.latest_t if self.settings.clock == "agent" else self._clock()

    # ------------------------------------------------------------------ restore

    def restore(self) -> None:
        """Rebuild detector windows, leases and pending directives from the store."""
        state = self.store.load_state(self.settings.planner.n)
        restarted = self._window_restarts() if self.core.restart_window_after_migration else {}
        for host, all_rows in state.windows.items():
            rows = all_rows
            if host in restarted:
                # The live core cleared this window when a migration ended and dropped the
                # next report (it spans the copy); do the same to the stored one.
                newer = [r for r in all_rows if r.received_s > restarted[host]]
                rows = newer[1:]
                if not newer:
                    self.core._skip[host] = 1  # noqa: SLF001 - the drop is still to come
            self.core.history.setdefault(host, deque(maxlen=self.core.detector.n))
            for row in rows:
                vms = {
                    n: VMLoad(Utilisation(*u), mib * int(MIB), migrating=mig)
                    for n, u, mib, mig in iter_report_vms(row.vms)
                }
                self.core.ingest(host, Utilisation(*row.util), vms, at=row.received_s)
            last = all_rows[-1]
            if not rows:
                self.core.vms[host] = {
                    n: VMLoad(Utilisation(*u), mib * int(MIB), migrating=mig)
                    for n, u, mib, mig in iter_report_vms(last.vms)
                }
            self.hosts[host] = HostState(
                last.seq, last.agent_t, last.received_s, last.util, dict(self.core.vms[host])
            )
            self.latest_t = max(self.latest_t, last.agent_t)
        # Leases after the windows: replaying old reports must not "arrive" a live lease.
        self.core.leases = {r.vm: Lease(r.vm, r.src, r.dst, r.since_s) for r in state.leases}
        self.lease_ids = {r.vm: r.decision_id for r in state.leases}
        # Which host each VM left, and when: the anti-thrash rules survive a restart.
        for m in sorted(self.store.migration_rows(), key=lambda m: float(m["started_s"])):
            self.core.note_start(m["vm"], m["src"], float(m["started_s"]))
        self.directives = DirectiveBook({d.host: d for d in state.directives})
        epoch = max(int(self._clock()), epoch_of(state.next_id - 1) + 1)
        self.next_id = max(state.next_id, (epoch << EPOCH_SHIFT) + 1)
        for host, st in self.hosts.items():
            self.core.seen[host] = st.received_s
            self.metrics.last_report.labels(host).set(st.received_s)
        self._count_hosts(self.now())
        self.metrics.leases.set(len(self.core.leases))
        if state.windows or state.leases:
            log.info(
                "restored %d host window(s), %d lease(s), %d directive(s) from the store",
                len(state.windows),
                len(state.leases),
                len(state.directives),
            )

    def _window_restarts(self) -> dict[str, float]:
        """Host -> manager time of the last migration that ended there (for restore)."""
        out: dict[str, float] = {}
        for m in self.store.migration_rows():
            if m["ended_s"] is None or m["result"] not in ("succeeded", "failed", "timeout"):
                continue
            for h in (m["src"], m["dst"]):
                out[h] = max(out.get(h, -1e300), float(m["ended_s"]))
        return out

    # ------------------------------------------------------------------ auth

    def check_host_token(self, host: str, presented: bytes | None) -> bool:
        return self.tokens.check_host(host, presented)

    def check_admin_token(self, presented: bytes | None) -> bool:
        return self.tokens.check_admin(presented)

    @property
    def admin_token_set(self) -> bool:
        return self.tokens.admin is not None

    def reload_tokens(self) -> bool:
        """SIGHUP: read the tokens again; a file that does not load changes nothing."""
        try:
            book = TokenBook.load(self.settings)
        except ConfigError as exc:
            log.error("tokens not reloaded, the old ones stay in force: %s", exc)
            return False
        self.tokens = book
        log.info("reloaded tokens: %d host(s)", len(book.hosts))
        return True

    # ------------------------------------------------------------------ store writes

    def _write(self, w: RoundWrite) -> asyncio.Future[None]:
        loop = asyncio.get_running_loop()
        fut = loop.run_in_executor(self._db, self._timed_write, w)
        self._writes.add(fut)
        fut.add_done_callback(self._write_done)
        return fut

    def _timed_write(self, w: RoundWrite) -> None:
        with self.metrics.store_flush.time():
            self.store.write_round(w)

    def _write_done(self, fut: asyncio.Future[None]) -> None:
        self._writes.discard(fut)
        if not fut.cancelled() and fut.exception() is not None:
            self.metrics.store_errors.inc()
            self.store_ok = False
            log.error("knowledge store write failed: %s", fut.exception())
        elif not fut.cancelled():
            self.store_ok = True

    async def ready(self) -> tuple[bool, str]:
        """Readiness: the store takes a write now (a failed write earlier is retried by
        the next round; what matters is whether a decision made now could be persisted)."""
        loop = asyncio.get_running_loop()
        if not await loop.run_in_executor(None, self.store.can_write):
            return False, "store cannot be written"
        return True, "ok"

    async def flush(self) -> int:
        """Write buffered report rows; returns how many."""
        batch, self._buffer = self._buffer, []
        if not batch:
            return 0
        loop = asyncio.get_running_loop()
        try:
            with self.metrics.store_flush.time():
                await loop.run_in_executor(self._db, self.store.add_reports, batch)
        except Exception as exc:
            self.metrics.store_errors.inc()
            log.error("cannot write %d report row(s): %s", len(batch), exc)
            self._buffer = (batch + self._buffer)[-MAX_BUFFERED_REPORTS:]
            return 0
        return len(batch)

    async def drain(self) -> None:
        """Wait for every store write issued so far (tests, shutdown)."""
        await self.flush()
        if self._writes:
            await asyncio.gather(*list(self._writes), return_exceptions=True)

    # ------------------------------------------------------------------ reports

    def ingest(self, host: str, report: Report) -> Directive:
        """One host report (Monitor); returns the host's current directive."""
        last = self.hosts.get(host)
        if (
            last is not None
            and last.boot == report.boot
            and last.seq == report.seq
            and last.agent_t == report.time_s
        ):
            self.metrics.reports.labels("duplicate").inc()  # a retry whose first try landed
            return self.directive_for(host)
        try:
            restarted = self._check_fresh(host, last, report)
        except ReportRefused as exc:
            self.metrics.reports.labels("replayed" if exc.status == 409 else "rejected").inc()
            raise
        if restarted and last is not None:
            # The agent restarted (its sequence starts again): its reports are new, not old.
            self.planned_seq[host] = -1
            self._past_boots.setdefault(host, deque(maxlen=MAX_PAST_BOOTS)).append(last.boot)
            self.core.source_restarted(host)
        self.latest_t = max(self.latest_t, report.time_s)
        self._live_t = max(self._live_t, report.time_s)
        now = self.now()
        util = report.utilisation()
        vms = report.vm_loads()
        self.hosts[host] = HostState(
            report.seq, report.time_s, now, util.as_tuple(), vms, report.boot
        )
        if report.ack:
            self._ack(host, report.ack)
        if len(self._buffer) >= MAX_BUFFERED_REPORTS:
            del self._buffer[: len(self._buffer) // 10]
            self.metrics.dropped_reports.inc(MAX_BUFFERED_REPORTS // 10)
        self._buffer.append(
            ReportRow(
                host,
                report.seq,
                report.time_s,
                now,
                util.as_tuple(),
                {e.name: [*e.util, e.memory_mib, e.migrating] for e in report.vms},
            )
        )
        if self._planning:
            self._deferred.append(lambda: self._core_ingest(host, util, vms, now))
        else:
            self._core_ingest(host, util, vms, now)
        self.metrics.reports.labels("accepted").inc()
        if self.metrics.host_metrics:
            self.metrics.set_utilisation(host, dict(zip(RESOURCES, util.as_tuple(), strict=True)))
        self.metrics.last_report.labels(host).set(now)
        if last is None:
            self._count_hosts(now)
        if self.settings.plan_trigger == "round":
            self._maybe_round()
        return self.directive_for(host)

    def _core_ingest(
        self, host: str, util: Utilisation, vms: dict[str, VMLoad], now: float
    ) -> None:
        arrived = self.core.ingest(host, util, vms, at=now)
        if arrived:
            self._close_leases(
                {e.lease.vm for e in arrived}, now, "succeeded", f"reported by target {host}"
            )

    def _check_fresh(self, host: str, last: HostState | None, report: Report) -> bool:
        """Refuse replayed, old and future reports; True if the agent restarted.

        A restart is explicit: a boot id the host has not used before. Inside one boot the
        sequence must grow and the clock must not go back (409 otherwise), so a captured
        report sent again, or a huge ``s`` followed by a small one, changes nothing. The
        clock must keep pace with the manager's within ``max_clock_skew_s`` (422), so one
        report cannot move the manager's time or the detector's window into the future.
        """
        t, skew = report.time_s, self.settings.max_clock_skew_s
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
            if restarted and self.settings.clock == "agent" and t < last.agent_t:
                raise ReportRefused(
                    409, "t", f"t={t} is older than this host's last report (t={last.agent_t})"
                )
        if self.settings.clock == "agent":
            period = self.settings.plan_period_s or 10.0
            bound = self._live_t + max(skew, 2 * period)
            if self._live_t > 0 and t > bound:
                raise ReportRefused(
                    422, "t", f"t={t} is more than {bound - self._live_t:.0f} s ahead"
                )
            return restarted
        pace = t - self._clock()
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

    def _count_hosts(self, now: float) -> None:
        stale = len(self.core.stale(now) & self.hosts.keys())
        self.metrics.hosts.labels("stale").set(stale)
        self.metrics.hosts.labels("fresh").set(len(self.hosts) - stale)

    def _close_leases(self, vms: set[str], now: float, result: str, detail: str) -> None:
        w = RoundWrite(dropped_leases=sorted(vms))
        for vm in sorted(vms):
            did = self.lease_ids.pop(vm, None)
            if did is not None:
                w.migration_ends.append(MigrationEnd(did, now, result, detail))
                self.metrics.migrations.labels(result).inc()
        self.metrics.leases.set(len(self.core.leases))
        self._write(w)

    def _ack(self, host: str, did: int) -> None:
        dr = self.directives.ack(host, did)
        if dr is None:
            return
        w = RoundWrite(acked=[(host, dr.id)])
        # The agent acks a newer store's directive: this one (restored from an older
        # store) was never applied, so its lease must not hold both hosts.
        superseded = epoch_of(did) != epoch_of(dr.id)
        if superseded and dr.vm is not None and self.lease_ids.get(dr.vm) == dr.id:
            self.lease_ids.pop(dr.vm)
            self.core.leases.pop(dr.vm, None)
            w.dropped_leases.append(dr.vm)
            w.migration_ends.append(
                MigrationEnd(dr.id, self.now(), "expired", "superseded by a newer store epoch")
            )
            self.metrics.leases.set(len(self.core.leases))
        self._write(w)

    def directive_for(self, host: str) -> Directive:
        return self.directives.view(host)

    async def wait_directive(self, host: str, seq: int, timeout_s: float) -> Directive:
        """The directive of the first round that has seen this host's report ``seq``."""
        _, cond = self._primitives()
        async with cond:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    cond.wait_for(lambda: self.planned_seq.get(host, -1) >= seq), timeout_s
                )
        return self.directive_for(host)

    # ------------------------------------------------------------------ migrations

    async def migration_done(self, host: str, vm: str, done: MigrationDone) -> bool:
        lease = self.core.leases.get(vm)
        if lease is None:
            return False
        if host != lease.src:
            # Only the source runs (or declines) the migration; a target or bystander
            # saying so would free the hosts of a copy still in flight.
            raise NotTheSource(f"{host} is not the source of {vm}'s migration")
        now = self.now()
        did = self.lease_ids.pop(vm, None)
        # A migration that ran (either way) restarts the windows, as in ManagerCore; a
        # declined signal only frees the hosts.
        ran = done.result != "declined"
        if self._planning:
            self._deferred.append(lambda: self._release(vm, ran))
        else:
            self._release(vm, ran)
        w = RoundWrite(dropped_leases=[vm])
        if did is not None:
            detail = done.detail or f"reported by {host}"
            w.migration_ends.append(MigrationEnd(did, now, done.result, detail))
            if self.directives.settle(lease.src, did):
                w.acked.append((lease.src, did))
        self.metrics.migrations.labels(done.result).inc()
        await self._write(w)  # durable before the agent is told it may forget
        return True

    def _release(self, vm: str, ran: bool = True) -> None:
        self.core.release(vm, ran=ran)
        self.metrics.leases.set(len(self.core.leases))

    # ------------------------------------------------------------------ planning

    def _directive_ttl(self) -> float:
        period = self.settings.plan_period_s or 10.0
        return self.settings.planner.directive_ttl_periods * period

    def _expire_directives(self, now: float, w: RoundWrite) -> None:
        ttl = self._directive_ttl()
        for dr in self.directives.overdue(now, ttl, self.core.stale(now)):
            host = dr.host
            w.acked.append((host, dr.id))
            if dr.vm is not None and self.lease_ids.get(dr.vm) == dr.id:
                self.lease_ids.pop(dr.vm)
                self.core.leases.pop(dr.vm, None)  # never started: windows stay
                w.dropped_leases.append(dr.vm)
                w.migration_ends.append(
                    MigrationEnd(dr.id, now, "expired", f"{host} never acknowledged the signal")
                )
                self.metrics.migrations.labels("expired").inc()
            log.warning(
                "withdrew directive %d for %s: not acknowledged in %.0f s", dr.id, host, ttl
            )

    async def tick(self, now: float | None = None) -> Mapping[str, MigrationSignal]:
        """One planning round: Analyse + Plan over every host, persisted, then published."""
        lock, _ = self._primitives()
        async with lock:
            return await self._tick(now)

    async def _tick(self, now: float | None) -> Mapping[str, MigrationSignal]:
        loop = asyncio.get_running_loop()
        now = self.now() if now is None else now
        started = time.perf_counter()
        w = RoundWrite()
        self._expire_directives(now, w)
        seqs = {h: st.seq for h, st in self.hosts.items()}
        self._planning = True
        try:
            if self.fork_planner:
                result = await loop.run_in_executor(None, plan_in_child, self.core, now)
                self.core.apply_round(result)
            else:
                result = await loop.run_in_executor(None, self.core.plan, now)
            signals = result.signals
            flagged: dict[str, int] = {}
            for d in result.decisions:
                did, self.next_id = self.next_id, self.next_id + 1
                sig = d.signal
                w.decisions.append(
                    DecisionRow(
                        did,
                        d.time_s,
                        d.host,
                        sig.flag,
                        sig.target,
                        sig.vm,
                        _cap(sig.reason),
                        tuple(sig.hot_resources),
                        d.inputs,
                    )
                )
                if sig.flag:
                    flagged[d.host] = did
                self.metrics.decisions.labels("migrate" if sig.flag else "no_migration").inc()
            for end in result.closed:
                vm = end.lease.vm
                did_or_none = self.lease_ids.pop(vm, None)
                w.dropped_leases.append(vm)
                if did_or_none is not None:
                    why = (
                        "lease timed out"
                        if end.why == "timeout"
                        else f"source {end.lease.src} went silent"
                    )
                    w.migration_ends.append(MigrationEnd(did_or_none, now, "expired", why))
                    self.metrics.migrations.labels("expired").inc()
            new = [lease.vm for lease in result.opened]
            for lease in result.opened:
                did = flagged[lease.src]
                self.lease_ids[lease.vm] = did
                w.new_leases.append(LeaseRow(lease.vm, lease.src, lease.dst, lease.since_s, did))
                w.directives.append(
                    DirectiveRow(lease.src, did, True, lease.dst, lease.vm, now, False)
                )
                self.metrics.migrations.labels("signalled").inc()
            try:
                await self._write(w)
            except Exception:
                # Not in the store means not decided: undo so the next round decides again.
                for vm in new:
                    self.core.leases.pop(vm, None)
                    self.lease_ids.pop(vm, None)
                raise
            for dr in w.directives:
                self.directives[dr.host] = dr
            self.verdicts = {
                h: (bool(s.hot_resources) or s.flag, s.reason) for h, s in signals.items()
            }
            self.planned_seq.update(seqs)
            self.rounds += 1
        finally:
            self._planning = False
            deferred, self._deferred = self._deferred, []
            for fn in deferred:
                fn()
        m = self.metrics
        m.rounds.inc()
        hot = {h for h, (is_hot, _) in self.verdicts.items() if is_hot}
        m.hotspots.set(len(hot))
        if m.host_metrics:
            # Only the changes: 10,000 label lookups per round would stall the event loop.
            for h in hot ^ self._was_hot:
                m.host_hot.labels(h).set(1.0 if h in hot else 0.0)
            for h in self.verdicts.keys() - self._hot_known:
                if h not in hot:
                    m.host_hot.labels(h).set(0.0)
            self._hot_known |= self.verdicts.keys()
        self._was_hot = hot
        m.leases.set(len(self.core.leases))
        self._count_hosts(now)
        m.plan_duration.observe(time.perf_counter() - started)
        _, cond = self._primitives()
        async with cond:
            cond.notify_all()
        return signals

    def _maybe_round(self) -> None:
        """``plan_trigger = "round"``: plan as soon as every known host has reported anew."""
        if self._round_task is not None and not self._round_task.done():
            return
        # Expected in this round: every known host that has reported within the last
        # 1.5 periods. A host whose agent died (or has not come up) is waited for that
        # long and then left out, so it cannot stall planning for everyone else.
        period = self.settings.plan_period_s or 10.0
        if not math.isfinite(self._first_t):
            self._first_t = self.latest_t
        horizon = self.latest_t - 1.5 * period
        known = self.tokens.keys() or self.hosts.keys()
        expected = [
            h
            for h in known
            if (self.hosts[h].agent_t if h in self.hosts else self._first_t) >= horizon
        ]
        # Fresh: a report of this period that no round has seen yet (a report left over
        # from a period whose round never ran does not count).
        now_from = self.latest_t - 0.5 * period
        fresh = [
            h in self.hosts
            and self.hosts[h].seq > self.planned_seq.get(h, -1)
            and self.hosts[h].agent_t >= now_from
            for h in expected
        ]
        if fresh and all(fresh):
            self._round_task = asyncio.get_running_loop().create_task(self.tick())

    # ------------------------------------------------------------------ views

    def cluster_view(self, offset: int = 0, limit: int = 1000) -> ClusterView:
        now = self.now()
        stale = self.core.stale(now)
        hosts = []
        for h in sorted(self.hosts)[offset : offset + limit]:
            st = self.hosts[h]
            hot, reason = self.verdicts.get(h, (False, "not planned yet"))
            d = self.directive_for(h)
            hosts.append(
                HostView(
                    host=h,
                    last_seen_s=st.received_s,
                    age_s=round(now - st.received_s, 3),
                    state="stale" if h in stale else "fresh",
                    seq=st.seq,
                    utilisation=ResourceUse(**dict(zip(RESOURCES, st.util, strict=True))),
                    hot=hot,
                    reason=reason,
                    vms={
                        n: ResourceUse(**dict(zip(RESOURCES, v.util.as_tuple(), strict=True)))
                        for n, v in sorted(st.vms.items())
                    },
                    directive=d if d.id else None,
                )
            )
        leases = [
            LeaseView(vm=vm, src=lease.src, dst=lease.dst, since_s=lease.since_s)
            for vm, lease in sorted(self.core.leases.items())
        ]
        return ClusterView(now_s=self.now(), rounds=self.rounds, hosts=hosts, leases=leases)

    async def decision_page(self, after: int, limit: int, host: str | None) -> DecisionPage:
        loop = asyncio.get_running_loop()
        rows = await loop.run_in_executor(None, self.store.decisions, after, limit, host)
        views = [
            DecisionView(
                id=r.id,
                time_s=r.time_s,
                host=r.host,
                flag=r.flag,
                target=r.target,
                vm=r.vm,
                reason=r.reason,
                hot_resources=list(r.hot_resources),
                inputs=dict(r.inputs),
            )
            for r in rows
        ]
        return DecisionPage(decisions=views, next_after=views[-1].id if views else after)

    # ------------------------------------------------------------------ background

    async def run_background(self) -> None:
        """Planner (``plan_trigger = "timer"``), report flusher and history pruner."""
        tasks = [asyncio.create_task(self._flusher()), asyncio.create_task(self._pruner())]
        if self.settings.plan_period_s > 0 and self.settings.plan_trigger == "timer":
            tasks.append(asyncio.create_task(self._planner()))
        try:
            await asyncio.gather(*tasks)
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _planner(self) -> None:
        period = self.settings.plan_period_s
        while True:
            # Aligned to the wall clock so a restarted manager keeps the same phase.
            await asyncio.sleep(period - (time.time() % period))
            try:
                await self.tick()
            except Exception:
                log.exception("planning round failed; retrying next period")

    async def _flusher(self) -> None:
        while True:
            await asyncio.sleep(self.settings.flush_interval_s)
            await self.flush()

    async def _pruner(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(60.0)
            before = self.now() - self.settings.report_retention_s
            try:
                n = await loop.run_in_executor(
                    self._db, self.store.prune, before, self.settings.planner.n
                )
                if n:
                    log.debug("pruned %d old report row(s)", n)
            except Exception as exc:
                log.error("pruning report history failed: %s", exc)

    async def close(self) -> None:
        if self._round_task is not None:
            with contextlib.suppress(Exception):
                await self._round_task
        await self.drain()
        self._db.shutdown(wait=True)


MAX_REASON = 4000


def _cap(reason: str) -> str:
    """A reason lists every refused target; over 10,000 hosts that is megabytes per row."""
    if len(reason) <= MAX_REASON:
        return reason
    return reason[:MAX_REASON] + f" ... ({len(reason) - MAX_REASON} more characters)"
