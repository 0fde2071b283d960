"""``sova agent``: the host agent as a daemon around :class:`sova.agent.loop.HostAgent`.

The loop itself (sense, decide, plan, apply; reconciliation against the driver's actual
inventory each period) is HostAgent's. This module adds what only a long-running process
needs:

* **a clock**: wall time on a real host; on a simulated one, *turns* handed out by the
  world (lockstep, see :mod:`sova.sim.world_server`) or by a local simulated host;
* **the manager link**: a compact report each period (timeout, bounded retries, no queue),
  the directive in the response applied at most once per id and acknowledged in the next
  report, and each signalled migration's end reported so its lease is released. When the
  manager is unreachable nothing piles up: the agent keeps scheduling VFs and bandwidth
  locally (docs/design.md#loop) and simply resumes reporting when the manager answers again;
* **restart safety**: on start the agent adopts what the driver says is in flight — a VM
  already migrating stays labelled VLM (never re-granted a VF, never migrated twice) until
  the driver shows it gone or back, and current VF holders and rate limits are taken as
  they are, so a restart neither flaps VFs nor re-sends limits;
* **dry run**: every action is decided and logged ("would attach …"), none is submitted;
* **metrics** on a small HTTP port.
"""

from __future__ import annotations

import collections
import logging
import math
import re
import secrets
import signal as signal_mod
import threading
from dataclasses import dataclass, field
from typing import Any

from sova.agent.config import ControllerConfig
from sova.agent.executor import MIGRATION_ENDED, Outcome, Result
from sova.agent.loop import HostAgent, StepReport, operation_table
from sova.agent.schedule import BANDWIDTH, POLL, STEP, Phase, act
from sova.driver.base import Driver, DriverError
from sova.manager.daemons.agent.client import ManagerClient, ManagerRejected, ManagerUnreachable
from sova.manager.daemons.agent.tickers import Ticker
from sova.manager.daemons.agent.wiring import Wiring, build
from sova.manager.daemons.config import AgentSettings, ConfigError
from sova.manager.daemons.logs import fields
from sova.manager.daemons.metrics import AgentMetrics
from sova.manager.daemons.schema import (
    NAME_PATTERN,
    Directive,
    MigrationDone,
    build_report,
    directive_refusal,
    encode,
    epoch_note,
)
from sova.manager.daemons.security import agent_warnings
from sova.model import Action, Migrate, NicKind, SetGuestRateLimit
from sova.orchestrator.base import CloudConfigError
from sova.orchestrator.settings import orchestrate

log = logging.getLogger("sova.agent")

MAX_PENDING_DONE = 64


# --------------------------------------------------------------------------- daemon


@dataclass
class _Done:
    vm: str  # the VM the manager's lease names
    body: MigrationDone


@dataclass
class AgentDaemon:
    """One agent process's state around its HostAgent (tests drive it directly)."""

    settings: AgentSettings
    driver: Driver
    client: ManagerClient | None = None
    metrics: AgentMetrics = field(default_factory=AgentMetrics)
    host: str = ""

    def __post_init__(self) -> None:
        self.cfg: ControllerConfig = self.settings.controller
        if not self.host:
            self.host = self.settings.host or self.driver.capabilities().host
        self.agent = HostAgent(
            self.driver, self.cfg, on_outcome=self._on_outcome, dry_run=self.settings.dry_run
        )
        self.seq = 0
        self.boot = secrets.token_hex(4)  # the manager tells a restart from a replay by it
        self.applied = 0  # id of the last directive applied (sent back as the ack)
        # The VF-freeze list as the manager last sent it, and its version (sent back: the
        # manager leaves the list out of its responses while it is current).
        self.vf_frozen: list[str] = []
        self.vf_frozen_version = 0
        self.adopted: dict[str, str] = {}  # VMs found migrating at start -> lease VM
        self.signalled: dict[str, str] = {}  # VM we chose to move -> VM the lease names
        self.awaiting: Directive | None = None  # applied; the next step consumes it
        self.pending_done: collections.deque[_Done] = collections.deque(maxlen=MAX_PENDING_DONE)
        self.manager_up: bool | None = None
        self.last_report: StepReport | None = None
        self.table: dict[str, str] = {}

    # ------------------------------------------------------------------ start

    def reconcile(self) -> None:
        """Adopt the host as the driver shows it, instead of assuming a clean start."""
        inv = self.agent.snapshot = self.driver.inventory()
        now = self.driver.now()
        for vm, st in sorted(inv.vms.items()):
            if st.migrating:
                self.adopted[vm] = vm
            if st.nic is NicKind.VF:
                self.agent.vf_since.setdefault(vm, now)
            if st.guest_limit_bps is not None and math.isfinite(st.guest_limit_bps):
                self.agent.limits[vm] = st.guest_limit_bps
        # As found: the holders keep their VFs until the first period decides.
        found = operation_table(inv, inv.vf_holders, self.agent.migrating)
        self.table = {vm: op.name for vm, op in found.items()}
        log.info(
            "reconciled %s: %d VM(s), VF holders [%s], migrating [%s]%s",
            self.host,
            len(inv.vms),
            ", ".join(sorted(inv.vf_holders)),
            ", ".join(sorted(self.adopted)),
            " (dry run: nothing will be submitted)" if self.settings.dry_run else "",
        )
        self.metrics.vf_pool.set(inv.host.nic.vf_pool)
        self._export_table()

    def _export_table(self) -> None:
        for vm, current in self.table.items():
            for op in ("VF", "VNIC", "VLM"):
                self.metrics.operation.labels(vm, op).set(1.0 if current == op else 0.0)

    def _check_adopted(self, vms: dict[str, Any]) -> None:
        for vm, lease_vm in list(self.adopted.items()):
            st = vms.get(vm)
            if st is None:
                result, detail = "succeeded", "left this host while the agent was restarting"
            elif not st.migrating:
                result, detail = "failed", "still at the source: rolled back"
            else:
                continue
            del self.adopted[vm]
            log.info("adopted migration of %s ended: %s (%s)", vm, result, detail)
            self.pending_done.append(_Done(lease_vm, MigrationDone(result=result, detail=detail)))

    # ------------------------------------------------------------------ phases

    def do_phase(self, phase: Phase) -> None:
        with self.metrics.loop_duration.labels(phase.label).time():
            if phase == POLL:
                act(self.agent, POLL)
                self.flush_done()
            elif phase == BANDWIDTH:
                act(self.agent, BANDWIDTH)
            elif phase == STEP:
                rep = self.step()
                self.flush_done()
                self.report(rep)

    def step(self) -> StepReport:
        rep = self.agent.step()
        self.last_report = rep
        self._check_adopted(dict(rep.actual.vms))
        d, self.awaiting = self.awaiting, None
        if d is not None and d.vm is not None:
            if rep.migration is not None:
                vm = rep.migration[0]
                self.signalled[vm] = d.vm
                log.info(
                    "migrating %s to %s (manager directive %d)",
                    vm,
                    d.target,
                    d.id,
                    extra=fields(vm=vm, host=self.host or None, directive=d.id),
                )
            elif d.vm not in self.agent.migrating:
                why = f"no VM to move under vf_policy {self.cfg.vf_policy!r}"
                log.info("declined directive %d: %s", d.id, why)
                self.pending_done.append(_Done(d.vm, MigrationDone(result="declined", detail=why)))
        self.table = {vm: op.name for vm, op in rep.operations.items()}
        self._export(rep)
        return rep

    def operation_table(self) -> dict[str, str]:
        return dict(self.table)

    # ------------------------------------------------------------------ manager

    def report(self, rep: StepReport) -> int | None:
        """Report the period to the manager and apply its answer; the report's sequence
        number if the manager took it."""
        if self.client is None:
            return None
        hr = self.agent.host_report()
        if hr is None:
            return None  # no full period measured yet
        self.seq += 1
        body = build_report(
            self.seq,
            rep.time_s,
            hr.history[-1],
            hr.vms,
            ack=self.applied,
            boot=self.boot,
            k=self.settings.report_top_k,
            metric=self.cfg.manager.metric,
            decimals=self.settings.report_decimals,
            capacity=hr.capacity,
            vf_freeze_version=self.vf_frozen_version,
            migrating=bool(self.migrating_now()),
        )
        try:
            directive = self.client.report(encode(body))
        except ManagerUnreachable as exc:
            self._manager_state(False, str(exc))
            self.metrics.reports.labels("unreachable").inc()
            return None
        except ManagerRejected as exc:
            self.metrics.reports.labels("rejected").inc()
            log.error("manager rejected the report: %s", exc)
            return None
        self._manager_state(True)
        self.metrics.reports.labels("sent").inc()
        self.apply(directive)
        return self.seq

    def _manager_state(self, up: bool, why: str = "") -> None:
        if up and self.manager_up is False:
            log.info("manager reachable again; reporting resumed")
        elif not up and self.manager_up is not False:
            log.warning("manager unreachable (%s); scheduling VFs locally", why)
        self.manager_up = up
        self.metrics.manager_up.set(1.0 if up else 0.0)

    def apply(self, d: Directive) -> None:
        """Apply a directive at most once per id (the manager repeats it until acked)."""
        # The operator's VF fences ride on every response, whatever the directive's id; the
        # VM list only when it changed (absent: the one held is current).
        if "vf_freeze_vms" in d.model_fields_set:
            self.vf_frozen, self.vf_frozen_version = d.vf_freeze_vms, d.vf_freeze_version
        if self.agent.set_vf_freeze(d.vf_freeze_host, self.vf_frozen):
            log.warning(
                "VF freeze from the manager: %s",
                "the whole host"
                if d.vf_freeze_host
                else (
                    f"{len(self.vf_frozen)} VM(s): {', '.join(self.vf_frozen[:10])}"
                    + (" …" if len(self.vf_frozen) > 10 else "")
                    if self.vf_frozen
                    else "lifted"
                ),
            )
        if note := epoch_note(self.applied, d.id):
            log.warning(note)
        if not d.flag or d.id <= self.applied:
            return
        self.applied = d.id  # acknowledged either way: a refused one is not repeated
        if (why := directive_refusal(d, self.host)) is not None:
            self._refuse(d, why)
            return
        assert d.target is not None
        busy = self.migrating_now()
        if d.vm is not None and d.vm in busy:
            log.info("directive %d: %s is already migrating; acknowledged", d.id, d.vm)
            return
        if busy:
            # One migration at a time per source, whoever ordered it: a manager that lost
            # the first one's lease (a takeover) must not start a second copy beside it.
            why = f"{self.host} is migrating {', '.join(busy)}: one migration at a time"
            log.warning("declined directive %d (%s -> %s): %s", d.id, d.vm, d.target, why)
            if d.vm is not None:
                self.pending_done.append(_Done(d.vm, MigrationDone(result="declined", detail=why)))
            return
        if d.vm is not None:
            # This period's snapshot (the report it answers was built from it); before
            # the first period nothing was read, so the next step decides with fresh data.
            snap = self.agent.snapshot
            if snap is not None and d.vm not in snap.vms:
                # The target was checked for this VM only; moving another one instead
                # (e.g. after a restart, for a directive whose VM already left) would
                # move load the manager never placed.
                log.info("directive %d: %s is not on this host; acknowledged", d.id, d.vm)
                return
        if self.settings.dry_run:
            log.info("dry run: would migrate %s to %s (directive %d)", d.vm, d.target, d.id)
            if d.vm is not None:
                self.pending_done.append(
                    _Done(d.vm, MigrationDone(result="declined", detail="agent in dry-run mode"))
                )
            return
        self.agent.signal(True, d.target, d.vm)
        self.awaiting = d
        self.metrics.signals.inc()

    def _refuse(self, d: Directive, why: str) -> None:
        """A directive with a field the manager never sends (a compromised or broken
        manager, or something between): nothing is done, and the manager hears why
        through the migration's end (it audits it) when its VM can be named at all."""
        detail = f"refused directive {d.id}: {why}"
        log.error(detail)
        self.metrics.refused.inc()
        if d.vm is not None and re.fullmatch(NAME_PATTERN, d.vm):
            self.pending_done.append(_Done(d.vm, MigrationDone(result="declined", detail=detail)))

    def migrating_now(self) -> list[str]:
        """The VMs leaving this host now, whoever started them: this run (including a
        directive applied and not yet stepped), an earlier run (adopted), or anyone the
        driver shows migrating."""
        out = set(self.agent.migrating) | set(self.adopted)
        if self.awaiting is not None and self.awaiting.vm is not None:
            out.add(self.awaiting.vm)
        snap = self.agent.snapshot
        if snap is not None:
            out.update(vm for vm, st in snap.vms.items() if st.migrating)
        return sorted(out)

    def flush_done(self) -> None:
        """Tell the manager which signalled migrations ended; keep them while it is away."""
        if self.client is None:
            self.pending_done.clear()
            return
        while self.pending_done:
            item = self.pending_done[0]
            try:
                self.client.migration_done(item.vm, item.body)
            except ManagerUnreachable:
                return
            except ManagerRejected as exc:
                log.error("manager refused a migration report: %s", exc)
            self.pending_done.popleft()

    # ------------------------------------------------------------------ outcomes

    def _on_outcome(self, o: Outcome) -> None:
        a = o.action
        self.metrics.actions.labels(a.kind, o.result).inc()
        if o.result is Result.DRY_RUN:
            log.info("dry run: would %s", _describe(a))
        elif o.result is Result.SUCCEEDED:
            if not isinstance(a, SetGuestRateLimit):
                log.info("%s: %s", _describe(a), o.detail or "done")
        else:
            log.warning("%s %s: %s", _describe(a), o.result, o.detail)
        if isinstance(a, Migrate) and o.result in MIGRATION_ENDED:
            lease_vm = self.signalled.pop(a.vm, a.vm)
            self.pending_done.append(
                _Done(
                    lease_vm,
                    MigrationDone(result=o.result.value, dst=a.dst_host, detail=o.detail[:400]),
                )
            )

    # ------------------------------------------------------------------ metrics

    def _export(self, rep: StepReport) -> None:
        m = self.metrics
        inv = rep.actual
        m.vf_holders.set(len(inv.vf_holders))
        m.vf_pool.set(inv.host.nic.vf_pool)
        present = set(inv.vms)
        for vm, st in inv.vms.items():
            m.vf_held.labels(vm).set(1.0 if st.nic is NicKind.VF else 0.0)
            rate = st.vf_max_bps if st.nic is NicKind.VF and st.vf_max_bps else 0.0
            m.vf_rate.labels(vm).set(rate if math.isfinite(rate) else 0.0)
        m.export_sla(inv)
        self._export_table()
        for vm, f in rep.factors.items():
            if vm in present:
                m.io_factor.labels(vm).set(_finite(f.io_factor))
                m.net_factor.labels(vm).set(_finite(f.net_factor))
                m.io_degree.labels(vm).set(_finite(f.io_degree))
                m.net_degree.labels(vm).set(_finite(f.net_degree))
        if rep.load is not None:
            for res in ("cpu", "mem", "net"):
                m.utilisation.labels(res).set(float(getattr(rep.load, res)))
        m.migrating.set(len(set(self.agent.migrating) | set(self.adopted)))
        m.forget_missing(present)

    # ------------------------------------------------------------------ run

    def _try_reconcile(self) -> bool:
        try:
            self.reconcile()
        except DriverError as exc:  # host or cloud down: retried next period, nothing decided
            self.metrics.skipped.labels("reconcile").inc()
            log.warning("reconcile skipped, nothing decided, retried next period: %s", exc)
            return False
        return True

    def run(self, ticker: Ticker, stop: threading.Event) -> None:
        reconciled = self._try_reconcile()
        while not stop.is_set():
            try:
                turn = ticker.next()
            except DriverError as exc:
                log.warning("driver unavailable: %s", exc)
                if stop.wait(1.0):
                    break
                continue
            if turn is None:
                break
            _, phases = turn
            if not reconciled and not (reconciled := self._try_reconcile()):
                continue  # nothing decided on a host not yet adopted as found
            for phase in phases:
                try:
                    self.do_phase(phase)
                except DriverError as exc:
                    # The host's API failed (libvirt down, or a connection the driver could
                    # not replace): nothing is decided from what was read before. The host
                    # is adopted as found again before the next decision, since actions and
                    # events may have been lost meanwhile.
                    self.metrics.skipped.labels(phase.label).inc()
                    log.warning(
                        "%s phase skipped, nothing decided: %s; the host is reconciled "
                        "before the next decision",
                        phase.label,
                        exc,
                    )
                    reconciled = False
                    break


def _finite(x: float) -> float:
    return float(x) if math.isfinite(x) else 0.0


def _describe(a: Action) -> str:
    args = {k: v for k, v in vars(a).items() if k != "vm" and v is not None}
    text = ", ".join(
        f"{k}={v / 1e6:.0f}Mbit/s"
        if k.endswith("bps") and isinstance(v, int | float)
        else f"{k}={v}"
        for k, v in args.items()
    )
    return f"{a.kind} {a.vm}" + (f" ({text})" if text else "")


def run_agent(
    settings: AgentSettings,
    *,
    speed: float | None = None,
    policy: str | None = None,
    stop: threading.Event | None = None,
    wiring: Wiring | None = None,
) -> int:
    """Run until SIGTERM/SIGINT (or the simulated run ends). Returns the exit code.

    ``wiring`` (driver and clock) is built from ``settings.driver`` unless given.
    """
    from sova.manager.daemons import systemd
    from sova.manager.daemons.logs import configure as configure_logging

    configure_logging(settings.log_level)
    stop = stop or threading.Event()
    for warning in agent_warnings(settings):
        log.warning(warning)
    wiring = wiring or build(settings, speed=speed, policy=policy)
    if wiring.config is not None:  # a simulated world's own controller
        settings = settings.model_copy(update={"controller": wiring.config})
    try:  # orchestrator = "openstack": sense on the host, act through Nova and Neutron
        wiring.driver = orchestrate(wiring.driver, settings, settings.host)
    except CloudConfigError as exc:
        raise ConfigError(str(exc)) from None
    token = settings.resolved_token()
    host = settings.host or wiring.driver.capabilities().host
    client = _manager_client(settings, host, token)
    metrics = AgentMetrics()
    if settings.metrics_port is not None:
        from prometheus_client import start_http_server

        start_http_server(settings.metrics_port, settings.metrics_addr, registry=metrics.registry)
    make = wiring.make_daemon or AgentDaemon
    daemon: AgentDaemon = make(settings, wiring.driver, client=client, metrics=metrics, host=host)

    def _stop(signum: int, _frame: Any) -> None:
        log.info("signal %d: stopping after the current turn", signum)
        stop.set()

    if threading.current_thread() is threading.main_thread():
        signal_mod.signal(signal_mod.SIGTERM, _stop)
        signal_mod.signal(signal_mod.SIGINT, _stop)
    log.info(
        "sova agent for %s: driver %s, policy %s, manager %s%s",
        host,
        settings.driver,
        settings.controller.vf_policy,
        ", ".join(settings.manager_url_list()) or "none (standalone)",
        ", DRY RUN" if settings.dry_run else "",
    )
    watchdog = systemd.Watchdog(metrics.turns).start()
    systemd.ready(f"driver {settings.driver}")
    try:
        daemon.run(wiring.ticker_factory(stop), stop)
    finally:
        systemd.stopping()
        watchdog.stop()
        if client is not None:
            client.close()
    return 0


def _manager_client(settings: AgentSettings, host: str, token: str | None) -> ManagerClient | None:
    """The client of the configured managers (None: standalone); a token and a host name
    the manager accepts are required then."""
    if not settings.manager_url_list():
        return None
    if not token:
        raise ConfigError("token: required when manager_url is set (or SOVA_TOKEN)")
    if not re.match(NAME_PATTERN, host):
        raise ConfigError(
            f"host = {host!r} (from the driver): the manager accepts only names matching "
            f"{NAME_PATTERN}; set host in the agent's config"
        )
    return ManagerClient(
        settings.manager_url_list(),
        host,
        token,
        timeout_s=settings.report_timeout_s,
        retries=settings.report_retries,
        ca_file=settings.ca_file,
        patience_s=(
            settings.report_patience_s
            if settings.report_patience_s is not None
            else settings.controller.period / 2
        ),
    )
