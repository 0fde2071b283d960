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
from dataclasses import dataclass, replace
from typing import Any

from prometheus_client import CollectorRegistry

from sova.daemon.config import ConfigError, ManagerSettings
from sova.daemon.manager_control import (
    CLUSTER,
    FENCE_KINDS,
    OperatorBook,
    PlanConflict,
    PlanNotFound,
    expected_effect,
)
from sova.daemon.manager_directives import DirectiveBook
from sova.daemon.manager_security import TokenBook
from sova.daemon.metrics import ManagerMetrics
from sova.daemon.schema import (
    EPOCH_SHIFT,
    AuditPage,
    AuditView,
    ClusterView,
    DecisionPage,
    DecisionView,
    Directive,
    FenceView,
    HostView,
    LeaseView,
    MigrationDone,
    ModeView,
    PlanAction,
    PlanPage,
    PlanView,
    Report,
    ResourceUse,
    epoch_of,
)
from sova.daemon.store import (
    AuditRow,
    DecisionRow,
    DirectiveRow,
    FenceRow,
    LeaseRow,
    MigrationEnd,
    ModeRow,
    PlanRow,
    ReportRow,
    RoundWrite,
    Store,
    iter_report_vms,
)
from sova.manager.core import Lease, ManagerCore, RoundResult
from sova.model import MIB
from sova.orchestrator.base import Actuator
from sova.policy.hotspot import (
    HostCapacity,
    HotspotDetector,
    MigrationSignal,
    Utilisation,
    VMLoad,
    choose_target,
)

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
    capacity: HostCapacity | None = None


class ReportRefused(ValueError):
    """A well-formed report the manager must not act on (HTTP ``status``)."""

    def __init__(self, status: int, field: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.field = field


MAX_PAST_BOOTS = 16
MAX_VF_FROZEN_VMS = 4096  # every agent is told the whole list (reports name only a few VMs)


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
        actuator_for: Callable[[str], Actuator] | None = None,
    ) -> None:
        self.settings = settings
        # Set (orchestrator = "openstack"): an approved plan is carried out through this
        # source host's actuator (Nova) by the manager itself, not sent to the agent.
        self.actuator_for = actuator_for
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
        self.ops = OperatorBook(settings.mode, dict(settings.host_modes))
        self._vf_frozen_hosts: set[str] = set()
        self._vf_frozen_vms: list[str] = []
        self._executions: set[asyncio.Task[None]] = set()

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
                cap = HostCapacity(*row.capacity) if row.capacity else None
                self.core.ingest(host, Utilisation(*row.util), vms, at=row.received_s, capacity=cap)
            last = all_rows[-1]
            if not rows:
                self.core.vms[host] = {
                    n: VMLoad(Utilisation(*u), mib * int(MIB), migrating=mig)
                    for n, u, mib, mig in iter_report_vms(last.vms)
                }
            if last.capacity:
                self.core.capacity[host] = HostCapacity(*last.capacity)
            self.hosts[host] = HostState(
                last.seq,
                last.agent_t,
                last.received_s,
                last.util,
                dict(self.core.vms[host]),
                boot=last.boot,
                capacity=self.core.capacity.get(host),
            )
            self.latest_t = max(self.latest_t, last.agent_t)
        # Leases after the windows: replaying old reports must not "arrive" a live lease.
        self.core.leases = {r.vm: Lease(r.vm, r.src, r.dst, r.since_s) for r in state.leases}
        self.lease_ids = {r.vm: r.decision_id for r in state.leases}
        # Which host each VM left, and when: the anti-thrash rules survive a restart.
        for m in sorted(self.store.migration_rows(), key=lambda m: float(m["started_s"])):
            self.core.note_start(m["vm"], m["src"], float(m["started_s"]))
        self.directives = DirectiveBook({d.host: d for d in state.directives})
        for host, boots in state.past_boots.items():
            self._past_boots[host] = deque(boots[-MAX_PAST_BOOTS:], maxlen=MAX_PAST_BOOTS)
        self.ops = OperatorBook.restore(
            self.settings.mode,
            self.settings.host_modes,
            state.modes,
            state.fences,
            state.plans,
        )
        self._sync_fences()
        stored = self.ops.modes.get(CLUSTER)
        if stored is not None and stored.mode != self.settings.mode:
            log.warning(
                "cluster mode is %s (set by %s through the API), not the config file's %s; "
                "`sova mode reset` returns to the file's",
                stored.mode,
                stored.set_by,
                self.settings.mode,
            )
        epoch = max(int(self._clock()), epoch_of(state.next_id - 1) + 1)
        self.next_id = max(state.next_id, (epoch << EPOCH_SHIFT) + 1)
        for host, st in self.hosts.items():
            self.core.seen[host] = st.received_s
            self.metrics.last_report.labels(host).set(st.received_s)
        self._count_hosts(self.now())
        self.metrics.leases.set(len(self.core.leases))
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
        cap = report.host_capacity()
        self.hosts[host] = HostState(
            report.seq, report.time_s, now, util.as_tuple(), vms, report.boot, cap
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
                cap.as_tuple() if cap is not None else None,
                report.boot,
            )
        )
        if self._planning:
            self._deferred.append(lambda: self._core_ingest(host, util, vms, now, cap))
        else:
            self._core_ingest(host, util, vms, now, cap)
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
        self,
        host: str,
        util: Utilisation,
        vms: dict[str, VMLoad],
        now: float,
        capacity: HostCapacity | None = None,
    ) -> None:
        arrived = self.core.ingest(host, util, vms, at=now, capacity=capacity)
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
        d = self.directives.view(host)
        # Every agent gets the whole VM list: reports name only a few of a host's VMs.
        whole, vms = host in self._vf_frozen_hosts, self._vf_frozen_vms
        if whole or vms:
            return d.model_copy(update={"vf_freeze_host": whole, "vf_freeze_vms": vms})
        return d

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
        for p in self.ops.expire(now):
            w.plans.append(p)
            w.audit.append(AuditRow(now, "sova", "expire", f"plan {p.id}", p.detail))
            self.metrics.plans.labels("expired").inc()
        self.core.recommend = self.ops.recommend_hosts(self.hosts)
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
            decided: dict[str, tuple[int, Any]] = {}  # host -> (decision id, decision)
            for d in result.decisions:
                did, self.next_id = self.next_id, self.next_id + 1
                decided[d.host] = (did, d)
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
            plans_before = dict(self.ops.open_plans)
            for lease in result.proposed:
                self._propose(lease, decided[lease.src], now, w)
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
                self.ops.open_plans = plans_before
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
        m.open_plans.set(len(self.ops.open_plans))
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

    # ------------------------------------------------------------------ operator control

    def _propose(self, lease: Lease, decided: tuple[int, Any], now: float, w: RoundWrite) -> None:
        """A recommend-mode decision becomes a plan (or keeps the identical open one)."""
        did, d = decided
        src = self.hosts.get(lease.src)
        dst = self.hosts.get(lease.dst)
        vm = src.vms.get(lease.vm) if src is not None else None
        expected: dict[str, Any] = {}
        if src is not None and dst is not None and vm is not None:
            expected = expected_effect(src.util, dst.util, vm.util)
        plan = PlanRow(
            did,
            now,
            now + self.settings.plan_ttl_s,
            lease.src,
            lease.vm,
            lease.dst,
            "proposed",
            _cap(d.signal.reason),
            d.inputs,
            expected,
        )
        new, superseded = self.ops.propose(plan, now)
        for old in superseded:
            w.plans.append(old)
            w.audit.append(AuditRow(now, "sova", "supersede", f"plan {old.id}", old.detail))
            self.metrics.plans.labels("superseded").inc()
        if new is not None:
            w.plans.append(new)
            w.audit.append(
                AuditRow(
                    now,
                    "sova",
                    "propose",
                    f"plan {new.id}",
                    f"migrate {new.vm} {new.host} -> {new.dst}",
                )
            )
            self.metrics.plans.labels("proposed").inc()
            log.info(
                "proposed plan %d: migrate %s %s -> %s (recommend mode; expires in %.0f s)",
                new.id,
                new.vm,
                new.host,
                new.dst,
                self.settings.plan_ttl_s,
            )

    def _sync_fences(self) -> None:
        self.core.maintenance = self.ops.maintenance()
        self.core.pinned = self.ops.names("pin")
        # Read for every report's response: derived once per fence change, not per report.
        self._vf_frozen_hosts = self.ops.names("vf-freeze-host")
        self._vf_frozen_vms = sorted(self.ops.names("vf-freeze-vm"))
        for kind in FENCE_KINDS:
            self.metrics.fences.labels(kind).set(len(self.ops.names(kind)))

    async def _operator_write(self, w: RoundWrite) -> None:
        """Persist an operator's change (with its audit row) before it takes effect."""
        lock, _ = self._primitives()
        async with lock:  # never in the middle of a round
            await self._write(w)

    async def set_fence(self, kind: str, name: str, by: str, reason: str) -> FenceView:
        if kind not in FENCE_KINDS:
            raise ValueError(f"kind = {kind!r}: one of {', '.join(FENCE_KINDS)}")
        if kind == "vf-freeze-vm" and len(self.ops.names(kind)) >= MAX_VF_FROZEN_VMS:
            raise ValueError(f"vf-freeze-vm: at most {MAX_VF_FROZEN_VMS} VMs may be frozen")
        now = self.now()
        row = FenceRow(kind, name, by, now, reason)
        detail = reason or ""
        await self._operator_write(
            RoundWrite(fences_set=[row], audit=[AuditRow(now, by, f"fence:{kind}", name, detail)])
        )
        self.ops.fences[(kind, name)] = row
        self._sync_fences()
        log.warning("%s set %s on %s%s", by, kind, name, f" ({reason})" if reason else "")
        return _fence_view(row)

    async def clear_fence(self, kind: str, name: str, by: str, reason: str) -> bool:
        if kind not in FENCE_KINDS:
            raise ValueError(f"kind = {kind!r}: one of {', '.join(FENCE_KINDS)}")
        if (kind, name) not in self.ops.fences:
            return False
        now = self.now()
        await self._operator_write(
            RoundWrite(
                fences_cleared=[(kind, name)],
                audit=[AuditRow(now, by, f"unfence:{kind}", name, reason)],
            )
        )
        self.ops.fences.pop((kind, name), None)
        self._sync_fences()
        log.warning("%s cleared %s on %s", by, kind, name)
        return True

    def fence_views(self) -> list[FenceView]:
        return [_fence_view(f) for _, f in sorted(self.ops.fences.items())]

    async def set_mode(self, scope: str, mode: str | None, by: str, reason: str) -> ModeView:
        """``scope`` = "*" (the cluster) or a host; ``mode`` None = back to the config's."""
        now = self.now()
        subject = "cluster" if scope == CLUSTER else scope
        w = RoundWrite(audit=[AuditRow(now, by, "mode", subject, f"{mode or 'reset'} {reason}")])
        if mode is None:
            w.modes_cleared.append(scope)
        else:
            w.modes_set.append(ModeRow(scope, mode, by, now))
        await self._operator_write(w)
        if mode is None:
            self.ops.modes.pop(scope, None)
        else:
            self.ops.modes[scope] = w.modes_set[0]
        log.warning("%s set the mode of %s to %s", by, subject, mode or "the config file's")
        return self.mode_view()

    def mode_view(self) -> ModeView:
        row = self.ops.modes.get(CLUSTER)
        hosts = sorted(set(self.hosts) | set(self.ops.modes) | set(self.ops.default_host_modes))
        return ModeView(
            cluster=self.ops.cluster_mode,
            cluster_set_by=row.set_by if row is not None else None,
            hosts={
                h: self.ops.mode_of(h)
                for h in hosts
                if h != CLUSTER and self.ops.mode_of(h) != self.ops.cluster_mode
            },
        )

    async def plan_page(self, after: int, limit: int, state: str | None) -> PlanPage:
        loop = asyncio.get_running_loop()
        rows = await loop.run_in_executor(None, self.store.plans, after, limit, state)
        views = [_plan_view(r) for r in rows]
        return PlanPage(plans=views, next_after=views[-1].id if views else after)

    async def _plan_row(self, plan_id: int) -> PlanRow:
        """Plan ``plan_id``: an open one from memory, any other from the store."""
        row = self.ops.open_plans.get(plan_id)
        if row is None:
            loop = asyncio.get_running_loop()
            row = await loop.run_in_executor(None, self.store.plan, plan_id)
        if row is None:
            raise PlanNotFound(f"no plan {plan_id}")
        return row

    async def plan_view(self, plan_id: int) -> PlanView:
        return _plan_view(await self._plan_row(plan_id))

    async def audit_page(self, after: int, limit: int) -> AuditPage:
        loop = asyncio.get_running_loop()
        rows = await loop.run_in_executor(None, self.store.audit_rows, after, limit)
        views = [
            AuditView(
                id=r.id,
                time_s=r.time_s,
                who=r.who,
                action=r.action,
                subject=r.subject,
                detail=r.detail,
            )
            for r in rows
        ]
        return AuditPage(entries=views, next_after=views[-1].id if views else after)

    async def _require_open(self, plan_id: int) -> None:
        """PlanNotFound, or PlanConflict saying what became of it, unless the plan is open."""
        row = await self._plan_row(plan_id)
        if row.state != "proposed":
            raise PlanConflict(
                f"plan {plan_id} is {row.state}"
                + (f" ({row.decided_by}: {row.detail})" if row.detail else "")
            )

    async def reject_plan(self, plan_id: int, by: str, reason: str) -> PlanView:
        await self._require_open(plan_id)
        now = self.now()
        lock, _ = self._primitives()
        async with lock:
            plan = self.ops.open_plans.get(plan_id)
            if plan is None:
                raise PlanConflict(f"plan {plan_id} was closed meanwhile")
            done = replace(
                plan, state="rejected", decided_by=by, decided_s=now, detail=reason or "rejected"
            )
            await self._write(
                RoundWrite(
                    plans=[done], audit=[AuditRow(now, by, "reject", f"plan {plan_id}", reason)]
                )
            )
            self.ops.close(plan_id)
        self.metrics.plans.labels("rejected").inc()
        self.metrics.open_plans.set(len(self.ops.open_plans))
        log.warning("plan %d rejected by %s%s", plan_id, by, f": {reason}" if reason else "")
        return _plan_view(done)

    def _precondition(self, plan: PlanRow, now: float) -> str | None:
        """Why ``plan`` cannot be carried out now (Watcher's pre-condition), or None."""
        stale = self.core.stale(now)
        for role, h in (("source", plan.host), ("target", plan.dst)):
            if h not in self.hosts:
                return f"{role} {h} has never reported"
            if h in stale:
                return f"{role} {h} is stale (no report for {now - self.hosts[h].received_s:.0f} s)"
            if ("maintenance", h) in self.ops.fences:
                return f"{role} {h} is in maintenance"
        if plan.vm in self.ops.names("pin"):
            return f"{plan.vm} is pinned"
        vm = self.hosts[plan.host].vms.get(plan.vm)
        if vm is None:
            return f"{plan.vm} is not in {plan.host}'s last report"
        if vm.migrating or plan.vm in self.core.leases:
            return f"{plan.vm} is already migrating"
        busy = self.core.leased_hosts() & {plan.host, plan.dst}
        if busy:
            return f"{', '.join(sorted(busy))} already sending or receiving a migration"
        held = self.core.hold(plan.vm, now)
        if held is not None:
            return held
        # The planner's own screening, on the two hosts' latest reports.
        util = {h: Utilisation(*self.hosts[h].util) for h in (plan.host, plan.dst)}
        core = self.core
        alpha = core.detector.alpha
        if (
            choose_target(util, plan.host, vm, alpha, metric=core.metric, ceiling=core.ceiling)
            is None
        ):
            return f"target {plan.dst} is no longer a cold spot for {plan.vm}"
        return None

    async def approve_plan(self, plan_id: int, by: str, reason: str) -> PlanView:
        """Carry out an open plan through the normal directive path (or the actuator)."""
        await self._require_open(plan_id)
        lock, _ = self._primitives()
        async with lock:  # the round's state is consistent between rounds only
            plan = self.ops.open_plans.get(plan_id)
            if plan is None:
                raise PlanConflict(f"plan {plan_id} was closed meanwhile")
            now = self.now()
            if now >= plan.expires_s:
                raise PlanConflict(f"plan {plan_id} expired at t={plan.expires_s:.0f}")
            why = self._precondition(plan, now)
            if why is not None:
                failed = replace(
                    plan, state="failed", decided_by=by, decided_s=now, detail=f"not run: {why}"
                )
                await self._write(
                    RoundWrite(
                        plans=[failed],
                        audit=[AuditRow(now, by, "approve", f"plan {plan_id}", failed.detail)],
                    )
                )
                self.ops.close(plan_id)
                self.metrics.plans.labels("failed").inc()
                raise PlanConflict(f"plan {plan_id} cannot run now: {why}")
            did, self.next_id = self.next_id, self.next_id + 1
            lease = Lease(plan.vm, plan.host, plan.dst, now)
            via = "openstack" if self.actuator_for is not None else f"directive {did}"
            approved = replace(
                plan,
                state="approved",
                decided_by=by,
                decided_s=now,
                detail=f"approved; carried out as migration {did} ({via})",
            )
            hot = tuple(plan.inputs.get("hot_resources", ()))
            w = RoundWrite(
                decisions=[
                    DecisionRow(
                        did,
                        now,
                        plan.host,
                        True,
                        plan.dst,
                        plan.vm,
                        f"plan {plan_id} approved by {by}: move {plan.vm} to {plan.dst}",
                        hot,
                        {**plan.inputs, "plan": plan_id, "approved_by": by},
                    )
                ],
                new_leases=[LeaseRow(plan.vm, plan.host, plan.dst, now, did)],
                plans=[approved],
                audit=[AuditRow(now, by, "approve", f"plan {plan_id}", reason)],
            )
            directive = DirectiveRow(plan.host, did, True, plan.dst, plan.vm, now, False)
            if self.actuator_for is None:
                w.directives.append(directive)
            await self._write(w)  # persisted before anything can act on it
            self.ops.close(plan_id)
            self.core.leases[plan.vm] = lease
            self.core.note_start(plan.vm, plan.host, now)
            self.lease_ids[plan.vm] = did
            if self.actuator_for is None:
                self.directives[plan.host] = directive
            self.metrics.migrations.labels("signalled").inc()
            self.metrics.plans.labels("approved").inc()
            self.metrics.leases.set(len(self.core.leases))
            self.metrics.open_plans.set(len(self.ops.open_plans))
        log.warning(
            "plan %d approved by %s: migrating %s %s -> %s (%s)",
            plan_id,
            by,
            plan.vm,
            plan.host,
            plan.dst,
            via,
        )
        if self.actuator_for is not None:
            task = asyncio.get_running_loop().create_task(self._execute(approved, did))
            self._executions.add(task)
            task.add_done_callback(self._executions.discard)
        return _plan_view(approved)

    async def _execute(self, plan: PlanRow, did: int) -> None:
        """Run an approved plan through the source's actuator (Nova), bounded; record the end."""
        from sova.orchestrator.recommend import Proposal, execute_approved, to_watcher_action_plan

        assert self.actuator_for is not None
        wplan = to_watcher_action_plan(
            [Proposal(plan.vm, plan.host, plan.dst, plan.reason, plan.vm)],
            audit_uuid=str(plan.id),
        )
        action = wplan["actions"][0]["uuid"]
        timeout = self.settings.openstack.migration_timeout_s
        loop = asyncio.get_running_loop()
        try:
            ex = await loop.run_in_executor(
                None,
                lambda: execute_approved(wplan, action, self.actuator_for, timeout_s=timeout),  # type: ignore[arg-type]
            )
            result, detail = ex.result, ex.detail
        except Exception as exc:  # an API or credential error ends the run, not the manager
            result, detail = "failed", f"{type(exc).__name__}: {exc}"
        now = self.now()
        self.lease_ids.pop(plan.vm, None)
        if self._planning:  # the round's snapshot must not change under it
            self._deferred.append(lambda: self._release(plan.vm, True))
        else:
            self._release(plan.vm, ran=True)
        end = replace(
            plan,
            state="executed" if result == "succeeded" else "failed",
            detail=f"{plan.detail}; {result}" + (f": {detail}" if detail else ""),
        )
        await self._write(
            RoundWrite(
                dropped_leases=[plan.vm],
                migration_ends=[MigrationEnd(did, now, result, detail or "via openstack")],
                plans=[end],
                # the plan's fate, as for expiry and supersession (issue 21)
                audit=[AuditRow(now, "sova", end.state, f"plan {plan.id}", end.detail)],
            )
        )
        self.metrics.migrations.labels(result).inc()
        log.info("plan %d through openstack: %s %s", plan.id, result, detail)

    # ------------------------------------------------------------------ views

    def cluster_view(self, offset: int = 0, limit: int = 1000) -> ClusterView:
        now = self.now()
        stale = self.core.stale(now)
        maint = self.ops.maintenance()
        pinned = self.ops.names("pin")
        frozen = self.ops.names("vf-freeze-vm")
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
                    mode=self.ops.mode_of(h),
                    maintenance=maint.get(h),
                    vf_frozen=("vf-freeze-host", h) in self.ops.fences,
                    pinned_vms=sorted(pinned & st.vms.keys()),
                    vf_frozen_vms=sorted(frozen & st.vms.keys()),
                )
            )
        leases = [
            LeaseView(vm=vm, src=lease.src, dst=lease.dst, since_s=lease.since_s)
            for vm, lease in sorted(self.core.leases.items())
        ]
        return ClusterView(
            now_s=self.now(),
            rounds=self.rounds,
            hosts=hosts,
            leases=leases,
            mode=self.ops.cluster_mode,
            fences=self.fence_views(),
            open_plans=len(self.ops.open_plans),
        )

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
        for task in list(self._executions):
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(task), 5.0)
        if self._round_task is not None:
            with contextlib.suppress(Exception):
                await self._round_task
        await self.drain()
        self._db.shutdown(wait=True)


MAX_REASON = 4000


def _fence_view(f: FenceRow) -> FenceView:
    return FenceView(kind=f.kind, name=f.name, set_by=f.set_by, since_s=f.since_s, reason=f.reason)


def _plan_view(p: PlanRow) -> PlanView:
    return PlanView(
        id=p.id,
        state=p.state,
        created_s=p.created_s,
        expires_s=p.expires_s,
        host=p.host,
        reason=p.reason,
        actions=[PlanAction(action="migrate", vm=p.vm, src=p.host, dst=p.dst)],
        inputs=dict(p.inputs),
        expected=dict(p.expected),
        decided_by=p.decided_by,
        decided_s=p.decided_s,
        detail=p.detail,
    )


def _cap(reason: str) -> str:
    """A reason lists every refused target; over 10,000 hosts that is megabytes per row."""
    if len(reason) <= MAX_REASON:
        return reason
    return reason[:MAX_REASON] + f" ... ({len(reason) - MAX_REASON} more characters)"
