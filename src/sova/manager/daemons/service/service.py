"""The manager service: ``sova manager``'s state and behaviour, without HTTP.

The routes are in the routers (``sova.manager.daemons.service.routes_*``), the token/body guard in
:mod:`sova.manager.daemons.service.guard`. The decisions are
:class:`sova.manager.decisions.core.ManagerCore`'s, exactly as the simulator runs them (the core also
owns every lease's life); what a daemon needs around them is split by responsibility,
one module each, all sharing one :class:`~sova.manager.daemons.service.state.ManagerState`:

==============================  ========================================================
:mod:`~.reports`        report intake: freshness, windows, the report-row buffer
:mod:`~.ledger`         directives and the leases they carry: persisted, delivered
:mod:`~.rounds`         planning rounds (in a thread or a forked child), triggers
:mod:`~.operator`       the operator desk: fences, modes, plans, approvals, audit
:mod:`~.views`          what operators read
==============================  ========================================================

This class wires them together, restores them from the store at start and runs the
background loops; its methods are the API the routes call, each delegating to one part.
A new responsibility gets a module of its own beside these and a line here. Where the
next ones fit: whether this process may plan at all (leadership) gates
:meth:`Rounds.tick` and the loops of :meth:`run_background`; a new way for a lease to end
(an operator withdrawing a directive) is a core method plus a ledger method
(:mod:`~.ledger` says how); who may call what stays in the guard.

* **one writer, no locks**: every piece of state is touched only on the event loop;
* **persist, then publish**: nothing an agent or operator sees precedes its store write;
* **directives that survive loss**: a flagged directive is repeated in every response until
  the source acknowledges it (``d`` in its report), is applied by the agent at most once per
  id, and is withdrawn — releasing its lease — if the source stays silent for
  ``directive_ttl_periods`` rounds.

Tokens are compared as digests in constant time (:mod:`sova.manager.daemons.security`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable, Mapping

import sqlalchemy as sa
from prometheus_client import CollectorRegistry

from sova.manager.daemons.config import AGENT_REPORT_TIMEOUT_S, ConfigError, ManagerSettings
from sova.manager.daemons.metrics import ManagerMetrics
from sova.manager.daemons.planner_health import PlannerHealth
from sova.manager.daemons.schema import (
    EPOCH_SHIFT,
    AuditPage,
    ClusterView,
    DecisionPage,
    Directive,
    FenceView,
    MigrationDone,
    ModeView,
    PlanPage,
    PlanView,
    Report,
    epoch_of,
)
from sova.manager.daemons.security import TokenBook
from sova.manager.daemons.service.directives import DirectiveBook
from sova.manager.daemons.service.fleet import Fleet
from sova.manager.daemons.service.ledger import Ledger, NotTheSource
from sova.manager.daemons.service.operator import OperatorDesk
from sova.manager.daemons.service.peers import (
    CREDENTIAL_PULSE_S,
    book_json,
    credential_files,
    settings_digest,
)
from sova.manager.daemons.service.reports import (
    ReadAhead,
    ReportIntake,
    ReportRefused,
    StoreUnavailable,
)
from sova.manager.daemons.service.rounds import Rounds, plan_in_child
from sova.manager.daemons.service.state import HostState, ManagerState, StoreWriter
from sova.manager.daemons.service.store import Deposed, Store
from sova.manager.daemons.service.store_rows import LogSlice
from sova.manager.daemons.service.views import ClusterHistory, Views, fence_view, plan_view
from sova.manager.daemons.service.webhooks import Webhooks
from sova.manager.decisions.core import ManagerCore
from sova.manager.decisions.placement import Placement
from sova.orchestrator.base import Actuator
from sova.policy.hotspot import MigrationSignal

__all__ = [
    "HostState",
    "ManagerService",
    "NotTheSource",
    "ReportRefused",
    "StoreUnavailable",
    "manager_core",
    "plan_in_child",
]

log = logging.getLogger("sova.manager")

# How often the stall watch looks at the clock: a stall is the time between two looks
# beyond this.
STALL_PULSE_S = 0.25
# How long /readyz waits for the store to take a write before it answers 503 (a probe's
# own timeout is often 1-2 s).
READY_STORE_S = 1.0


def manager_core(settings: ManagerSettings) -> ManagerCore:
    """The decision core as a daemon runs it (see ``ManagerCore.from_spec``)."""
    p = settings.planner
    core = ManagerCore.from_spec(
        p,
        keep_log=False,
        close_on_arrival=False,
        stale_after_s=p.stale_after_periods * (settings.plan_period_s or 10.0),
    )
    core.placement = Placement.from_spec(settings.placement)
    return core


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
        actuator_for: Callable[[str], Actuator] | None = None,
        monotonic: Callable[[], float] | None = None,
    ) -> None:
        self.settings = settings
        self.store = store
        metrics = ManagerMetrics(registry, settings.host_metrics)
        self.state = ManagerState(
            settings,
            store,
            manager_core(settings),
            metrics,
            StoreWriter(store, metrics),
            TokenBook.load(settings),
            clock=clock or time.time,
            mono=monotonic or (time.monotonic if clock is None else clock),
        )
        self._files = credential_files(settings)  # what the tokens were loaded from
        self._publish_due = False
        self.ledger = Ledger(self.state)
        self.intake = ReportIntake(self.state, self.ledger)
        self.desk = OperatorDesk(self.state, self.ledger, actuator_for)
        self.planner = Rounds(self.state, self.ledger, self.desk, fork_planner)
        self._write_check: asyncio.Future[bool] | None = None  # readiness's, in flight
        self.views = Views(self.state, self.ledger, self.desk, self.planner)
        self._pulse = 0.0  # the stall watch's last look (monotonic); 0: not yet
        self.fleet = Fleet(
            self.state, self.ledger, self.desk, self.planner, self.intake.flush, self.intake.drop
        )
        self.webhooks = Webhooks.configured(settings.webhooks, store, metrics.registry)

    # ------------------------------------------------------------------ shared state

    @property
    def core(self) -> ManagerCore:
        return self.state.core

    @property
    def metrics(self) -> ManagerMetrics:
        return self.state.metrics

    @property
    def hosts(self) -> dict[str, HostState]:
        return self.state.hosts

    @property
    def directives(self) -> DirectiveBook:
        return self.ledger.directives

    @property
    def rounds(self) -> int:
        return self.planner.count

    @property
    def planning(self) -> bool:
        """A round is running now (the systemd watchdog follows rounds, not HTTP)."""
        return self.state.planning

    @property
    def planner_health(self) -> PlannerHealth:
        return self.planner.health

    @property
    def store_ok(self) -> bool:
        return self.state.writer.ok

    def now(self) -> float:
        return self.state.now()

    # ------------------------------------------------------------------ restore

    def restore(self, warm: ReadAhead | None = None) -> None:
        """Rebuild detector windows, leases and pending directives from the store (the
        windows from ``warm`` when a standby read them ahead: only new rows are read)."""
        st = self.state
        state = self.store.load_state(self.settings.planner.n, windows=warm is None)
        if warm is not None:
            windows, past_boots = warm.windows()
            state = dataclasses.replace(state, windows=windows, past_boots=past_boots)
        restarted = self._window_restarts() if st.core.restart_window_after_migration else {}
        drop_next = self.intake.restore(state, restarted)
        self.ledger.restore(state, drop_next)
        self.desk.restore(state)
        epoch = max(int(st.clock()), epoch_of(state.next_id - 1) + 1)
        st.next_id = max(state.next_id, (epoch << EPOCH_SHIFT) + 1)
        for host, hs in st.hosts.items():
            st.core.seen[host] = hs.received_s
            self.metrics.last_report.labels(host).set(hs.received_s)
        if st.hosts:
            heard = max(hs.received_s for hs in st.hosts.values())
            self.ledger.restart_timers(heard, self.now())
        st.count_hosts(self.now())
        if state.windows or state.leases or state.fences or state.plans or state.modes:
            log.info(
                "restored %d host window(s), %d lease(s), %d directive(s), %d fence(s), "
                "%d open plan(s), %d mode setting(s) from the store",
                len(state.windows),
                len(state.leases),
                len(state.directives),
                len(state.fences),
                len(state.plans),
                len(state.modes),
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

    @property
    def tokens(self) -> TokenBook:
        return self.state.tokens

    def check_host_token(self, host: str, presented: bytes | None) -> bool:
        return self.state.tokens.check_host(host, presented)

    def reload_tokens(self) -> bool:
        """SIGHUP: read the tokens again; a file that does not load changes nothing. The
        new credentials are published for the standbys at once (:meth:`publish_peers`)."""
        self._files = credential_files(self.settings)
        try:
            book = TokenBook.load(self.settings)
        except ConfigError as exc:
            log.error("tokens not reloaded, the old ones stay in force: %s", exc)
            return False
        self.state.tokens = book
        log.info("reloaded tokens: %d host(s)", len(book.hosts))
        self.publish_peers()
        return True

    def publish_peers(self) -> bool:
        """Publish this leader's operator credentials (digests) and settings digest for
        its standbys (:mod:`sova.manager.daemons.service.peers`); a failed write is retried by the next
        :meth:`_credential_watch` pulse."""
        book = self.state.tokens
        try:
            gen = self.store.publish_peer_config(
                book_json(book.operators), settings_digest(self.settings, book), self.now()
            )
        except (sa.exc.SQLAlchemyError, Deposed) as exc:
            self._publish_due = True
            log.error("credentials not published for the standbys (retried): %s", exc)
            return False
        self._publish_due = False
        log.info("published credentials and settings digest for the standbys (generation %d)", gen)
        return True

    async def _credential_watch(self) -> None:
        """The operators and tokens files changing on disk are reloaded (and published)
        within a pulse, as a SIGHUP would: an operator removed from the file must not stay
        valid on any manager until someone remembers the reload."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(CREDENTIAL_PULSE_S)
            files = credential_files(self.settings)
            if files != self._files:
                log.info("a credentials file changed on disk: reloading")
                await loop.run_in_executor(None, self.reload_tokens)
            elif self._publish_due:
                await loop.run_in_executor(None, self.publish_peers)

    # ------------------------------------------------------------------ store

    async def ready(self) -> tuple[bool, str]:
        """Readiness: the store takes a write now (a failed write earlier is retried by
        the next round; what matters is whether a decision made now could be persisted),
        and the planner completes its rounds (none failing, none overdue by 2 periods)."""
        loop = asyncio.get_running_loop()
        # A stalled store held the probe until it came back (a timeout, not a 503: issue
        # 37); bounded now, and probes meanwhile wait on the check already in flight.
        check = self._write_check
        if check is None or check.done() or check.get_loop() is not loop:
            check = self._write_check = loop.run_in_executor(None, self.store.can_write)
        try:
            ok = await asyncio.wait_for(asyncio.shield(check), READY_STORE_S)
        except TimeoutError:
            return False, f"store did not take a write within {READY_STORE_S:g} s"
        if not ok:
            return False, "store cannot be written"
        return self.planner.health.verdict()

    async def flush(self) -> int:
        """Write buffered report rows; returns how many."""
        return await self.intake.flush()

    async def drain(self) -> None:
        """Wait for every store write issued so far (tests, shutdown)."""
        await self.intake.flush()
        await self.state.writer.wait()

    # ------------------------------------------------------------------ agents

    def ingest(self, host: str, report: Report) -> Directive:
        """One host report (Monitor); returns the host's current directive. Its row may
        not be in the store yet: the HTTP route answers through :meth:`report`."""
        self._take(host, report)
        return self.ledger.deliver(host)

    async def report(self, host: str, report: Report) -> Directive:
        """:meth:`ingest`, answered once the report's row is committed (acknowledged means
        durable; :class:`StoreUnavailable` if the store did not take it)."""
        self._take(host, report)
        await self.intake.committed()
        return self.ledger.deliver(host)

    def _take(self, host: str, report: Report) -> None:
        if self.intake.ingest(host, report):
            self.desk.withdrawals.on_report(host, report)
            if self.settings.plan_trigger == "round":
                self.planner.maybe_round()

    def directive_for(self, host: str) -> Directive:
        """The host's directive, as its agent reads it."""
        return self.ledger.deliver(host)

    async def wait_directive(
        self, host: str, seq: int, timeout_s: float, *, deliver: bool = True
    ) -> Directive:
        return await self.ledger.wait_directive(host, seq, timeout_s, deliver=deliver)

    async def migration_done(self, host: str, vm: str, done: MigrationDone) -> bool:
        return await self.ledger.migration_done(host, vm, done)

    async def tick(self, now: float | None = None) -> Mapping[str, MigrationSignal]:
        """One planning round: Analyse + Plan over every host, persisted, then published."""
        return await self.planner.tick(now)

    # ------------------------------------------------------------------ operators

    async def set_fence(
        self, kind: str, name: str, by: str, reason: str, until_s: float | None = None
    ) -> FenceView:
        return fence_view(await self.desk.set_fence(kind, name, by, reason, until_s))

    async def clear_fence(self, kind: str, name: str, by: str, reason: str) -> bool:
        return await self.desk.clear_fence(kind, name, by, reason)

    def fence_views(self) -> list[FenceView]:
        return self.views.fences()

    async def set_mode(self, scope: str, mode: str | None, by: str, reason: str) -> ModeView:
        """``scope`` = "*" (the cluster) or a host; ``mode`` None = back to the config's."""
        await self.desk.set_mode(scope, mode, by, reason)
        return self.views.modes()

    def mode_view(self) -> ModeView:
        return self.views.modes()

    async def plan_page(self, sl: LogSlice) -> PlanPage:
        return await self.views.plan_page(sl)

    async def plan_view(self, plan_id: int) -> PlanView:
        return plan_view(await self.desk.plan_row(plan_id))

    async def approve_plan(self, plan_id: int, by: str, reason: str) -> PlanView:
        """Carry out an open plan through the normal directive path (or the actuator)."""
        return plan_view(await self.desk.approve_plan(plan_id, by, reason))

    async def reject_plan(self, plan_id: int, by: str, reason: str) -> PlanView:
        return plan_view(await self.desk.reject_plan(plan_id, by, reason))

    async def audit_page(self, sl: LogSlice) -> AuditPage:
        return await self.views.audit_page(sl)

    # ------------------------------------------------------------------ views

    def cluster_view(self, offset: int = 0, limit: int = 1000) -> ClusterView:
        return self.views.cluster(offset, limit)

    def cluster_history(self, offset: int = 0, limit: int = 1000) -> ClusterHistory:
        return self.views.history(offset, limit)

    async def decision_page(self, sl: LogSlice) -> DecisionPage:
        return await self.views.decision_page(sl)

    # ------------------------------------------------------------------ background

    async def run_background(self) -> None:
        """Planner (``plan_trigger = "timer"``), report flusher and history pruner."""
        tasks = [
            asyncio.create_task(self._flusher()),
            asyncio.create_task(self._pruner()),
            asyncio.create_task(self._stall_watch()),
            asyncio.create_task(self._credential_watch()),
        ]
        self.planner.before_round = self.check_stall
        if self.settings.plan_period_s > 0 and self.settings.plan_trigger == "timer":
            tasks.append(asyncio.create_task(self.planner.planner()))
        if self.webhooks is not None:
            tasks.append(asyncio.create_task(self.webhooks.run()))
        try:
            await asyncio.gather(*tasks)
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _stall_watch(self) -> None:
        while True:
            await asyncio.sleep(STALL_PULSE_S)
            self.check_stall()

    def check_stall(self) -> float:
        """Whether this process heard nothing for longer than an agent waits for an
        answer (frozen, its host suspended, a stop-the-world pause): agents gave up on it
        meanwhile and need time to come back, so the hosts and directives it heard until
        the stall are timed from now (:meth:`Ledger.restart_timers`). Called by a pulse
        and before every timed round, whichever wakes first. Returns the stall (0: none)."""
        mono = self.state.mono()
        last, self._pulse = self._pulse, mono
        stall = mono - last - STALL_PULSE_S
        if last and stall > AGENT_REPORT_TIMEOUT_S:
            now = self.now()
            n = self.ledger.restart_timers(now - stall, now)
            self.metrics.stalls.inc()
            log.warning(
                "this manager heard nothing for %.1f s (stopped or starved): %d host(s) and "
                "directive(s) timed from now, so agents that gave up on it can come back",
                stall,
                n,
            )
            return stall
        return 0.0

    async def _flusher(self) -> None:
        while True:
            await asyncio.sleep(self.settings.flush_interval_s)
            await self.intake.flush()

    async def _pruner(self) -> None:
        while True:
            await asyncio.sleep(60.0)
            before = self.now() - self.settings.report_retention_s
            try:
                n = await self.state.writer.run(self.store.prune, before, self.settings.planner.n)
                if n:
                    log.debug("pruned %d old report row(s)", n)
            except Exception as exc:
                log.error("pruning report history failed: %s", exc)

    async def close(self) -> None:
        await self.desk.close()
        await self.planner.close()
        await self.drain()
        self.state.writer.close()
