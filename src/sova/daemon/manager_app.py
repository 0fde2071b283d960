"""``sova manager``: the cluster's Monitor, Analyse, Plan and Knowledge over HTTP (Sova Fig. 3).

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

Security: every agent call carries its host's bearer token, compared in constant time
(:func:`hmac.compare_digest`); authentication and the body-size limit run in a pure ASGI
middleware *before* the body is parsed, so a request with a missing or wrong token gets 401
and changes nothing, whatever its body. TLS is uvicorn's, configured by file paths.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import hmac
import json
import logging
import math
import sys
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated, Any

from fastapi import FastAPI, Header, Query, Request, Security
from fastapi import Path as PathParam
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.security import HTTPBearer
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from sova import __version__
from sova.daemon.config import ManagerSettings
from sova.daemon.metrics import ManagerMetrics
from sova.daemon.schema import (
    FIELD_NAMES,
    NAME_MAX,
    NAME_PATTERN,
    ClusterView,
    DecisionPage,
    DecisionView,
    Directive,
    Health,
    HostView,
    LeaseView,
    MigrationDone,
    MigrationDoneAck,
    Report,
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
from sova.manager.core import Lease, ManagerCore
from sova.model import MIB
from sova.policy.hotspot import HotspotDetector, MigrationSignal, Utilisation, VMLoad

log = logging.getLogger("sova.manager")

MAX_BUFFERED_REPORTS = 200_000
RESOURCES = ("cpu", "mem", "net")


@dataclass(frozen=True)
class HostState:
    seq: int
    agent_t: float
    received_s: float
    util: tuple[float, float, float]
    vms: dict[str, VMLoad]


class ManagerService:
    """All manager state and behaviour, independent of HTTP (tests drive it directly too)."""

    def __init__(
        self,
        settings: ManagerSettings,
        store: Store,
        *,
        clock: Callable[[], float] | None = None,
        registry: CollectorRegistry | None = None,
    ) -> None:
        self.settings = settings
        self.store = store
        p = settings.planner
        self.core = ManagerCore(
            detector=HotspotDetector(p.k, p.n, p.alpha),
            metric=p.metric,
            ceiling=p.ceiling,
            lease_timeout_s=p.lease_timeout_s,
            restart_window_after_migration=p.restart_window_after_migration,
            return_tabu_s=p.return_tabu_s,
        )
        self.tokens = {h: t.encode() for h, t in settings.tokens().items()}
        self.admin_token = (
            settings.admin_token.get_secret_value().encode() if settings.admin_token else None
        )
        self._clock = clock or time.time
        self.metrics = ManagerMetrics(registry, settings.host_metrics)
        self.hosts: dict[str, HostState] = {}
        self.verdicts: dict[str, tuple[bool, str]] = {}
        self.directives: dict[str, DirectiveRow] = {}
        self.lease_ids: dict[str, int] = {}  # vm -> decision id of its lease
        self.planned_seq: dict[str, int] = {}  # host -> its newest report a round has seen
        self.next_id = 1
        self.rounds = 0
        self.latest_t = 0.0
        self._first_t = -math.inf
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
                self.core.ingest(host, Utilisation(*row.util), vms)
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
        if self.core.return_tabu_s > 0:
            # Which host each VM left, and when: the anti-ping-pong rule survives a restart.
            for m in self.store.migration_rows():
                self.core.departed.setdefault(m["vm"], {})[m["src"]] = float(m["started_s"])
        self.directives = {d.host: d for d in state.directives}
        self.next_id = state.next_id
        self.metrics.hosts.set(len(self.hosts))
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
        expected = self.tokens.get(host)
        # Compare against something even for an unknown host, so timing says nothing.
        ok = hmac.compare_digest(expected or b"\0" * 32, presented or b"")
        return ok and expected is not None and presented is not None

    def check_admin_token(self, presented: bytes | None) -> bool:
        if self.admin_token is None:
            return True
        return presented is not None and hmac.compare_digest(self.admin_token, presented)

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
            log.error("knowledge store write failed: %s", fut.exception())

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
        if last is not None and last.seq == report.s and last.agent_t == report.t:
            self.metrics.reports.labels("duplicate").inc()  # a retry whose first try landed
            return self.directive_for(host)
        if last is not None and report.s < last.seq:
            # The agent restarted (its sequence starts again): its reports are new, not old.
            self.planned_seq[host] = -1
        self.latest_t = max(self.latest_t, report.t)
        now = self.now()
        util = report.utilisation()
        vms = report.vm_loads()
        self.hosts[host] = HostState(report.s, report.t, now, util.as_tuple(), vms)
        if report.d:
            self._ack(host, report.d)
        if len(self._buffer) >= MAX_BUFFERED_REPORTS:
            del self._buffer[: len(self._buffer) // 10]
            self.metrics.dropped_reports.inc(MAX_BUFFERED_REPORTS // 10)
        self._buffer.append(
            ReportRow(
                host,
                report.s,
                report.t,
                now,
                util.as_tuple(),
                {e.n: [*e.u, e.m, e.x] for e in report.v},
            )
        )
        if self._planning:
            self._deferred.append(lambda: self._core_ingest(host, util, vms, now))
        else:
            self._core_ingest(host, util, vms, now)
        self.metrics.reports.labels("accepted").inc()
        if self.metrics.host_metrics:
            self.metrics.set_utilisation(host, dict(zip(RESOURCES, util.as_tuple(), strict=True)))
        if last is None:
            self.metrics.hosts.set(len(self.hosts))
        if self.settings.plan_trigger == "round":
            self._maybe_round()
        return self.directive_for(host)

    def _core_ingest(
        self, host: str, util: Utilisation, vms: dict[str, VMLoad], now: float
    ) -> None:
        before = set(self.core.leases) if self.core.leases else None
        self.core.ingest(host, util, vms)
        if before:
            arrived = before - set(self.core.leases)
            if arrived:
                self._close_leases(arrived, now, "succeeded", f"reported by target {host}")

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
        dr = self.directives.get(host)
        if dr is not None and not dr.acked and did >= dr.id:
            self.directives[host] = replace(dr, acked=True)
            self._write(RoundWrite(acked=[(host, dr.id)]))

    def directive_for(self, host: str) -> Directive:
        dr = self.directives.get(host)
        if dr is None:
            return Directive(i=0, f=False)
        if dr.acked or not dr.flag:
            return Directive(i=dr.id, f=False)
        return Directive(i=dr.id, f=True, t=dr.target, v=dr.vm)

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
        if lease is None or host not in (lease.src, lease.dst):
            return False
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
            src = self.directives.get(lease.src)
            if src is not None and src.id == did and not src.acked:
                self.directives[lease.src] = replace(src, acked=True)
                w.acked.append((lease.src, did))
        self.metrics.migrations.labels(done.result).inc()
        await self._write(w)  # durable before the agent is told it may forget
        return True

    def _release(self, vm: str, ran: bool = True) -> None:
        if ran:
            self.core.release(vm)
        else:
            self.core.leases.pop(vm, None)
        self.metrics.leases.set(len(self.core.leases))

    # ------------------------------------------------------------------ planning

    def _directive_ttl(self) -> float:
        period = self.settings.plan_period_s or 10.0
        return self.settings.planner.directive_ttl_periods * period

    def _expire_directives(self, now: float, w: RoundWrite) -> None:
        ttl = self._directive_ttl()
        for host, dr in sorted(self.directives.items()):
            if not dr.flag or dr.acked or now - dr.issued_s <= ttl:
                continue
            self.directives[host] = replace(dr, acked=True)
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

    async def tick(self, now: float | None = None) -> dict[str, MigrationSignal]:
        """One planning round: Analyse + Plan over every host, persisted, then published."""
        lock, _ = self._primitives()
        async with lock:
            return await self._tick(now)

    async def _tick(self, now: float | None) -> dict[str, MigrationSignal]:
        loop = asyncio.get_running_loop()
        now = self.now() if now is None else now
        started = time.perf_counter()
        w = RoundWrite()
        self._expire_directives(now, w)
        before = dict(self.core.leases)
        seqs = {h: st.seq for h, st in self.hosts.items()}
        self.core.log.clear()
        self._planning = True
        try:
            signals = await loop.run_in_executor(None, self.core.plan, now)
            decisions, self.core.log = self.core.log, []
            flagged: dict[str, int] = {}
            for d in decisions:
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
            after = self.core.leases
            expired = sorted(set(before) - set(after))
            for vm in expired:
                did_or_none = self.lease_ids.pop(vm, None)
                w.dropped_leases.append(vm)
                if did_or_none is not None:
                    w.migration_ends.append(
                        MigrationEnd(did_or_none, now, "expired", "lease timed out")
                    )
                    self.metrics.migrations.labels("expired").inc()
            new = sorted(set(after) - set(before))
            for vm in new:
                lease = after[vm]
                did = flagged[lease.src]
                self.lease_ids[vm] = did
                w.new_leases.append(LeaseRow(vm, lease.src, lease.dst, lease.since_s, did))
                w.directives.append(DirectiveRow(lease.src, did, True, lease.dst, vm, now, False))
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
        hosts = []
        for h in sorted(self.hosts)[offset : offset + limit]:
            st = self.hosts[h]
            hot, reason = self.verdicts.get(h, (False, "not planned yet"))
            d = self.directive_for(h)
            hosts.append(
                HostView(
                    host=h,
                    last_seen_s=st.received_s,
                    seq=st.seq,
                    utilisation=list(st.util),
                    hot=hot,
                    reason=reason,
                    vms={n: list(v.util.as_tuple()) for n, v in sorted(st.vms.items())},
                    directive=d if d.i else None,
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


# --------------------------------------------------------------------------- HTTP glue


def _bearer(headers: list[tuple[bytes, bytes]]) -> bytes | None:
    for k, v in headers:
        if k == b"authorization":
            scheme, _, token = v.partition(b" ")
            if scheme.lower() == b"bearer" and token:
                return token.strip()
    return None


def _header(headers: list[tuple[bytes, bytes]], name: bytes) -> bytes | None:
    for k, v in headers:
        if k == name:
            return v
    return None


ASGIApp = Callable[
    [MutableMapping[str, Any], Callable[[], Awaitable[Any]], Callable[[Any], Awaitable[None]]],
    Awaitable[None],
]


class GuardMiddleware:
    """Authentication, body-size limit and request timing, before FastAPI sees the request.

    Pure ASGI (no BaseHTTPMiddleware): it runs on every report, so it must cost microseconds.
    The body is read here, up to the limit, so that an oversized or unauthenticated request
    is refused before any parsing, and handed on unchanged otherwise.
    """

    def __init__(self, app: ASGIApp, service: ManagerService) -> None:
        self.app = app
        self.service = service

    async def __call__(
        self,
        scope: MutableMapping[str, Any],
        receive: Callable[[], Awaitable[Any]],
        send: Callable[[Any], Awaitable[None]],
    ) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        path: str = scope["path"]
        method: str = scope["method"]
        endpoint = _endpoint(path)
        try:
            await self._handle(scope, receive, send, path, method, endpoint)
        finally:
            self.service.metrics.request_duration.labels(endpoint).observe(
                time.perf_counter() - started
            )

    async def _handle(
        self,
        scope: MutableMapping[str, Any],
        receive: Callable[[], Awaitable[Any]],
        send: Callable[[Any], Awaitable[None]],
        path: str,
        method: str,
        endpoint: str,
    ) -> None:
        svc = self.service
        headers: list[tuple[bytes, bytes]] = scope["headers"]
        token = _bearer(headers)
        parts = path.strip("/").split("/")
        if endpoint in ("report", "directive"):
            host = parts[2] if len(parts) > 2 else ""
            ok = svc.check_host_token(host, token) or (
                endpoint == "directive"
                and svc.admin_token is not None
                and svc.check_admin_token(token)
            )
            if not ok:
                if endpoint == "report":
                    svc.metrics.reports.labels("unauthorized").inc()
                await _send_json(send, 401, {"detail": "missing or invalid token for this host"})
                return
            scope.setdefault("state", {})["sova_host"] = host
        elif endpoint == "done":
            host = (_header(headers, b"x-sova-host") or b"").decode("latin-1")
            if not svc.check_host_token(host, token):
                await _send_json(send, 401, {"detail": "missing or invalid token for this host"})
                return
            scope.setdefault("state", {})["sova_host"] = host
        elif endpoint in ("cluster", "decisions") and not svc.check_admin_token(token):
            await _send_json(send, 401, {"detail": "missing or invalid admin token"})
            return
        if method in ("POST", "PUT", "PATCH"):
            limit = svc.settings.max_report_bytes
            declared = _header(headers, b"content-length")
            if declared is not None and (not declared.isdigit() or int(declared) > limit):
                if endpoint == "report":
                    svc.metrics.reports.labels("too_large").inc()
                await _send_json(send, 413, _too_large(limit))
                return
            chunks: list[bytes] = []
            size = 0
            while True:
                msg = await receive()
                if msg["type"] == "http.disconnect":
                    return
                body = msg.get("body", b"")
                size += len(body)
                if size > limit:
                    if endpoint == "report":
                        svc.metrics.reports.labels("too_large").inc()
                    await _send_json(send, 413, _too_large(limit))
                    return
                chunks.append(body)
                if not msg.get("more_body", False):
                    break
            whole = b"".join(chunks)
            sent = False

            async def replay() -> Any:
                nonlocal sent
                if not sent:
                    sent = True
                    return {"type": "http.request", "body": whole, "more_body": False}
                return await receive()

            await self.app(scope, replay, send)
            return
        await self.app(scope, receive, send)


def _too_large(limit: int) -> dict[str, Any]:
    return {
        "detail": [
            {
                "loc": ["body"],
                "msg": f"request body larger than {limit} bytes",
                "type": "too_large",
                "field": "body",
            }
        ],
        "error": f"body: larger than {limit} bytes",
    }


def _endpoint(path: str) -> str:
    if path.startswith("/v1/hosts/"):
        if path.endswith("/reports"):
            return "report"
        if path.endswith("/directive"):
            return "directive"
        return "other"
    if path.startswith("/v1/migrations/"):
        return "done"
    return {
        "/v1/cluster": "cluster",
        "/v1/decisions": "decisions",
        "/metrics": "metrics",
        "/healthz": "healthz",
    }.get(path, "other")


async def _send_json(send: Callable[[Any], Awaitable[None]], status: int, body: Any) -> None:
    payload = json.dumps(body, separators=(",", ":")).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(payload)).encode()),
    ]
    if status == 401:
        headers.append((b"www-authenticate", b'Bearer realm="sova"'))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": payload})


def _field_name(loc: tuple[Any, ...]) -> str:
    parts = [p for p in loc if p != "body"] if loc and loc[0] == "body" else list(loc)
    if loc and loc[0] in ("path", "query", "header"):
        parts = list(loc[1:])
    name = ""
    for p in parts:
        name += f"[{p}]" if isinstance(p, int) else ("." if name else "") + str(p)
    if not name:
        return "body"
    last = next((p for p in reversed(parts) if isinstance(p, str)), None)
    long = FIELD_NAMES.get(last) if loc and loc[0] == "body" and last else None
    return f"{name} ({long})" if long else name


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    out = []
    for e in exc.errors():
        loc = tuple(e.get("loc", ()))
        item: dict[str, Any] = {
            "loc": list(loc),
            "msg": str(e.get("msg", "")),
            "type": str(e.get("type", "")),
            "field": "body" if e.get("type") == "json_invalid" else _field_name(loc),
        }
        value = e.get("input")
        if isinstance(value, float) and not math.isfinite(value):
            item["input"] = str(value)  # JSON has no inf/nan: show it, do not crash on it
        elif isinstance(value, bool | int | float | str) or value is None:
            item["input"] = value if not isinstance(value, str) else value[:100]
        out.append(item)
    summary = "; ".join(f"{x['field']}: {x['msg']}" for x in out[:5])
    if request.url.path.endswith("/reports"):
        request.app.state.service.metrics.reports.labels("rejected").inc()
    return JSONResponse(status_code=422, content={"detail": out, "error": summary})


HostName = Annotated[str, PathParam(min_length=1, max_length=NAME_MAX, pattern=NAME_PATTERN)]
VMName = Annotated[str, PathParam(min_length=1, max_length=NAME_MAX, pattern=NAME_PATTERN)]

_AUTH_RESPONSES: dict[int | str, dict[str, Any]] = {
    401: {"description": "missing or invalid token; nothing was changed"},
}
_BODY_RESPONSES: dict[int | str, dict[str, Any]] = {
    **_AUTH_RESPONSES,
    413: {"description": "body larger than max_report_bytes; nothing was changed"},
}


def create_app(
    settings: ManagerSettings,
    store: Store,
    *,
    clock: Callable[[], float] | None = None,
    registry: CollectorRegistry | None = None,
    migrate: bool = True,
) -> FastAPI:
    """The manager's ASGI app: migrates the store, restores state, wires the routes."""
    if migrate:
        store.migrate()
    service = ManagerService(settings, store, clock=clock, registry=registry)
    service.restore()

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        bg = asyncio.create_task(service.run_background())
        try:
            yield
        finally:
            bg.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await bg
            await service.close()

    app = FastAPI(
        title="Sova manager",
        version=__version__,
        summary="Cluster manager of Sova: host reports in, migration directives out.",
        description=(
            "Agents POST a compact report each period and get their migration directive "
            "`<flag, target, vm>` in the response. Report fields have one-letter names to "
            "keep a report under 304 bytes; each field's description gives its meaning."
        ),
        lifespan=lifespan,
    )
    app.state.service = service
    app.add_middleware(GuardMiddleware, service=service)
    app.add_exception_handler(RequestValidationError, _validation_error)
    bearer = HTTPBearer(
        auto_error=False,
        description="the host's token (agent endpoints) or the admin token (read endpoints)",
    )
    auth = [Security(bearer)]

    @app.post(
        "/v1/hosts/{host}/reports",
        response_model=Directive,
        dependencies=auth,
        responses=_BODY_RESPONSES,
        tags=["agents"],
        summary="Send a host report; the response is the host's migration directive",
    )
    async def post_report(host: HostName, report: Report) -> Directive:
        return service.ingest(host, report)

    @app.get(
        "/v1/hosts/{host}/directive",
        response_model=Directive,
        dependencies=auth,
        responses=_AUTH_RESPONSES,
        tags=["agents"],
        summary="The host's current directive; with seq, wait for the round that saw it",
    )
    async def get_directive(
        host: HostName,
        seq: Annotated[int | None, Query(ge=0, le=2**53)] = None,
        wait_s: Annotated[float, Query(ge=0, le=30)] = 5.0,
    ) -> Directive:
        if seq is None:
            return service.directive_for(host)
        return await service.wait_directive(host, seq, wait_s)

    @app.post(
        "/v1/migrations/{vm}/done",
        response_model=MigrationDoneAck,
        dependencies=auth,
        responses=_BODY_RESPONSES,
        tags=["agents"],
        summary="The source agent reports a signalled migration's end; releases its lease",
    )
    async def post_migration_done(
        vm: VMName,
        done: MigrationDone,
        request: Request,
        x_sova_host: Annotated[
            str, Header(min_length=1, max_length=NAME_MAX, pattern=NAME_PATTERN)
        ],
    ) -> MigrationDoneAck:
        host = request.state.sova_host
        return MigrationDoneAck(released=await service.migration_done(host, vm, done))

    @app.get(
        "/v1/cluster",
        response_model=ClusterView,
        dependencies=auth,
        responses=_AUTH_RESPONSES,
        tags=["operators"],
        summary="Hosts, their last report, hot verdicts, directives and leases",
    )
    async def get_cluster(
        offset: Annotated[int, Query(ge=0, le=10**6)] = 0,
        limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
    ) -> ClusterView:
        return service.cluster_view(offset, limit)

    @app.get(
        "/v1/decisions",
        response_model=DecisionPage,
        dependencies=auth,
        responses=_AUTH_RESPONSES,
        tags=["operators"],
        summary="The decision log with the inputs of each decision, oldest first",
    )
    async def get_decisions(
        after: Annotated[int, Query(ge=0, le=2**53)] = 0,
        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
        host: Annotated[
            str | None, Query(min_length=1, max_length=NAME_MAX, pattern=NAME_PATTERN)
        ] = None,
    ) -> DecisionPage:
        return await service.decision_page(after, limit, host)

    @app.get(
        "/healthz",
        response_model=Health,
        tags=["operators"],
        responses={503: {"description": "the knowledge store is unreachable"}},
    )
    async def healthz() -> Any:
        ok = await asyncio.get_running_loop().run_in_executor(None, store.ping)
        body = Health(
            status="ok" if ok else "store unreachable",
            hosts=len(service.hosts),
            store=store.dialect,
        )
        if not ok:
            return JSONResponse(status_code=503, content=body.model_dump())
        return body

    @app.get(
        "/metrics",
        tags=["operators"],
        response_class=Response,
        responses={200: {"content": {"text/plain": {}}, "description": "Prometheus metrics"}},
    )
    async def metrics() -> Response:
        data = await asyncio.get_running_loop().run_in_executor(
            None, generate_latest, service.metrics.registry
        )
        return Response(data, media_type=CONTENT_TYPE_LATEST)

    return app


def openapi_document(app: FastAPI) -> str:
    return json.dumps(app.openapi(), indent=2, sort_keys=True) + "\n"


def run_manager(settings: ManagerSettings) -> None:
    """Serve until SIGINT/SIGTERM (uvicorn's handlers), then flush the store and exit."""
    import uvicorn

    from sova.daemon.logs import configure as configure_logging
    from sova.daemon.systemd import notifying_uvicorn_server

    configure_logging(settings.log_level)
    # A planning round runs in a worker thread; with the default 5 ms GIL switch interval it
    # can hold up a report for tens of ms. 1 ms keeps the event loop responsive during it.
    sys.setswitchinterval(0.001)
    store = Store(settings.database_url)
    app = create_app(settings, store)
    # The manager keeps ~100 objects per host alive (windows, VM loads) and every report
    # makes short-lived garbage; with CPython's default thresholds a full collection walks
    # all of them every few seconds (tens of ms at 10,000 hosts). Collect young objects
    # as usual, full passes rarely; restored state is frozen out of the collector.
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 50, 1000)
    config = uvicorn.Config(
        app,
        host=settings.listen,
        port=settings.port,
        ssl_certfile=str(settings.tls_certfile) if settings.tls_certfile else None,
        ssl_keyfile=str(settings.tls_keyfile) if settings.tls_keyfile else None,
        log_level=settings.log_level,
        log_config=None,  # uvicorn logs through the handler configure_logging installed
        access_log=False,  # 1,000 reports/s would drown the journal
        timeout_keep_alive=30,
        limit_concurrency=4096,
    )
    log.info(
        "sova manager %s on %s://%s:%d, store %s",
        __version__,
        "https" if settings.tls_certfile else "http",
        settings.listen,
        settings.port,
        store.dialect,
    )
    try:
        notifying_uvicorn_server(config).run()
    finally:
        store.close()


def main(argv: list[str] | None = None) -> None:
    """``python -m sova.daemon.manager_app --openapi docs/openapi.json`` publishes the spec."""
    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("--openapi", type=Path, required=True)
    args = ap.parse_args(argv)
    app = create_app(ManagerSettings(), Store("sqlite://"))
    args.openapi.write_text(openapi_document(app))


if __name__ == "__main__":
    main()
