"""``sova agent``: the host agent as a daemon around :class:`sova.agent.loop.HostAgent`.

The loop itself (sense, decide, plan, apply; reconciliation against the driver's actual
inventory each period) is HostAgent's. This module adds what only a long-running process
needs:

* **a clock**: wall time on a real host; on a simulated one, *turns* handed out by the
  world (lockstep, see :mod:`sova.daemon.world_server`) or by a local simulated host;
* **the manager link**: a compact report each period (timeout, bounded retries, no queue),
  the directive in the response applied at most once per id and acknowledged in the next
  report, and each signalled migration's end reported so its lease is released. When the
  manager is unreachable nothing piles up: the agent keeps scheduling VFs and bandwidth
  locally (SPEC §1) and simply resumes reporting when the manager answers again;
* **restart safety**: on start the agent adopts what the driver says is in flight — a VM
  already migrating stays labelled VLM (never re-granted a VF, never migrated twice) until
  the driver shows it gone or back, and current VF holders and rate limits are taken as
  they are, so a restart neither flaps VFs nor re-sends limits;
* **dry run**: every action is decided and logged ("would attach …"), none is submitted;
* **metrics** on a small HTTP port.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import math
import signal as signal_mod
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import httpx

from sova.agent.executor import Outcome
from sova.agent.loop import AgentConfig, HostAgent, StepReport
from sova.daemon.config import AgentSettings, ConfigError
from sova.daemon.metrics import AgentMetrics
from sova.daemon.schema import Directive, MigrationDone, build_report, encode
from sova.driver.base import Driver, DriverError
from sova.model import Action, Migrate, NicKind, SetGuestRateLimit

log = logging.getLogger("sova.agent")

POLL, BANDWIDTH, STEP = 0, 1, 2
PHASE_NAMES = {POLL: "poll", BANDWIDTH: "bandwidth", STEP: "control"}
MAX_PENDING_DONE = 64


# --------------------------------------------------------------------------- manager link


class ManagerUnreachable(RuntimeError):
    """No answer (connection refused, timeout, 5xx) after the bounded retries."""


class ManagerRejected(RuntimeError):
    """The manager answered 4xx: a configuration problem (token, host name, schema)."""


class ManagerClient:
    def __init__(
        self,
        url: str,
        host: str,
        token: str,
        *,
        timeout_s: float = 2.0,
        retries: int = 2,
        ca_file: Path | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.host = host
        self.retries = retries
        self.degraded = False  # after a failure, try once per call until it answers again
        self._client = httpx.Client(
            base_url=url.rstrip("/"),
            timeout=httpx.Timeout(timeout_s, connect=min(1.0, timeout_s)),
            verify=str(ca_file) if ca_file else True,
            headers={
                "authorization": f"Bearer {token}",
                "content-type": "application/json",
                "x-sova-host": host,
            },
            transport=transport,
        )

    def close(self) -> None:
        self._client.close()

    def _request(self, method: str, path: str, **kw: Any) -> httpx.Response:
        attempts = 1 if self.degraded else self.retries + 1
        last = ""
        for i in range(attempts):
            if i:
                time.sleep(min(1.0, 0.1 * 2**i))
            try:
                r = self._client.request(method, path, **kw)
            except httpx.HTTPError as exc:
                last = f"{type(exc).__name__}: {exc}"
                continue
            if r.status_code >= 500:
                last = f"HTTP {r.status_code}"
                continue
            self.degraded = False
            if r.status_code >= 400:
                raise ManagerRejected(f"{method} {path}: HTTP {r.status_code}: {r.text[:300]}")
            return r
        self.degraded = True
        raise ManagerUnreachable(last)

    def report(self, report_body: bytes) -> Directive:
        r = self._request("POST", f"/v1/hosts/{self.host}/reports", content=report_body)
        return Directive.model_validate_json(r.content)

    def wait_directive(self, seq: int, wait_s: float) -> Directive:
        r = self._request(
            "GET",
            f"/v1/hosts/{self.host}/directive",
            params={"seq": seq, "wait_s": wait_s},
            timeout=wait_s + 2.0,
        )
        return Directive.model_validate_json(r.content)

    def migration_done(self, vm: str, done: MigrationDone) -> bool:
        r = self._request("POST", f"/v1/migrations/{vm}/done", content=encode(done))
        return bool(r.json().get("released", False))


# --------------------------------------------------------------------------- clocks


class Ticker(Protocol):
    """Hands the loop its turns: the driver time and the phases due then."""

    def next(self) -> tuple[float, list[int]] | None: ...


@dataclass
class WallTicker:
    """Real time: control and bandwidth periods by the clock, polls in between."""

    driver: Driver
    period_s: float
    bandwidth_period_s: float | None
    poll_interval_s: float
    stop: threading.Event
    _next_step: float | None = None
    _next_bw: float | None = None

    def next(self) -> tuple[float, list[int]] | None:
        now = self.driver.now()
        if self._next_step is None:
            self._next_step = now
            self._next_bw = now if self.bandwidth_period_s else math.inf
        assert self._next_bw is not None
        due = min(self._next_step, self._next_bw)
        if due > now and self.stop.wait(min(due - now, self.poll_interval_s)):
            return None
        now = self.driver.now()
        phases = [POLL]
        if now >= self._next_bw and self.bandwidth_period_s:
            phases.append(BANDWIDTH)
            self._next_bw = _after(self._next_bw, self.bandwidth_period_s, now)
        if now >= self._next_step:
            phases.append(STEP)
            self._next_step = _after(self._next_step, self.period_s, now)
        return now, phases


def _after(due: float, period: float, now: float) -> float:
    """The next due time after ``now``; a stalled loop skips missed periods, never bursts."""
    due += period
    if due <= now:
        due += math.ceil((now - due) / period + 1e-9) * period
    return due


@dataclass
class LockstepTicker:
    """Turns handed out by a world server (``sova demo``): one phase per call."""

    driver: Any  # RemoteDriver
    stop: threading.Event
    wait_s: float = 2.0  # short: a stop request is noticed between long-polls
    _at: float = -1.0
    _phase: int = 0

    def next(self) -> tuple[float, list[int]] | None:
        while not self.stop.is_set():
            try:
                t, phase, done = self.driver.sync(self._at, self._phase, self.wait_s)
            except DriverError as exc:
                log.warning("world unreachable: %s", exc)
                if self.stop.wait(1.0):
                    return None
                continue
            if done:
                return None
            if phase < 0:
                continue
            self._at, self._phase = t, phase
            return t, [phase]
        return None


@dataclass
class LocalSimTicker:
    """A world simulated in this process (``--driver sim``), advanced ``speed`` x real time."""

    world: Any
    tick_s: float
    period_s: float
    bandwidth_period_s: float | None
    until_s: float
    speed: float | None
    stop: threading.Event
    _k: int = 0

    def next(self) -> tuple[float, list[int]] | None:
        if self.stop.is_set() or self.world.now >= self.until_s - 1e-9:
            return None
        started = time.monotonic()
        self.world.advance()
        self._k += 1
        phases = [POLL]
        bw = max(1, round(self.bandwidth_period_s / self.tick_s)) if self.bandwidth_period_s else 0
        if bw and self._k % bw == 0:
            phases.append(BANDWIDTH)
        if self._k % max(1, round(self.period_s / self.tick_s)) == 0:
            phases.append(STEP)
        if self.speed and self.stop.wait(
            max(0.0, self.tick_s / self.speed - (time.monotonic() - started))
        ):
            return None
        return float(self.world.now), phases


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
    wait_for_round: bool = False  # lockstep demo: fetch the directive of our report's round
    directive_wait_s: float = 2.0  # a round ends ms after the last report; never stall long
    recorder: Callable[[str, Any], None] | None = None  # demo: ("step"|"outcome", payload)
    config: AgentConfig | None = None  # a simulated world's own controller config

    def __post_init__(self) -> None:
        cfg = self.config or self.settings.controller.to_agent_config(self.settings.dry_run)
        if self.config is not None and self.settings.dry_run:
            cfg = dataclasses.replace(cfg, dry_run=True)
        self.cfg: AgentConfig = cfg
        if not self.host:
            self.host = self.settings.host or self.driver.capabilities().host
        self.agent = HostAgent(self.driver, cfg, on_outcome=self._on_outcome)
        self.seq = 0
        self.applied = 0  # id of the last directive applied (sent back as the ack)
        self.adopted: dict[str, str] = {}  # VMs found migrating at start -> lease VM
        self.signalled: dict[str, str] = {}  # VM we chose to move -> VM the lease names
        self.awaiting: Directive | None = None  # applied; the next step consumes it
        self.pending_done: collections.deque[_Done] = collections.deque(maxlen=MAX_PENDING_DONE)
        self.wait_seq: int | None = None
        self.manager_up: bool | None = None
        self.last_report: StepReport | None = None
        self.table: dict[str, str] = {}

    # ------------------------------------------------------------------ start

    def reconcile(self) -> None:
        """Adopt the host as the driver shows it, instead of assuming a clean start."""
        inv = self.driver.inventory()
        now = self.driver.now()
        for vm, st in sorted(inv.vms.items()):
            if st.migrating:
                self.adopted[vm] = vm
            if st.nic is NicKind.VF:
                self.agent.vf_since.setdefault(vm, now)
            if st.guest_limit_bps is not None and math.isfinite(st.guest_limit_bps):
                self.agent.limits[vm] = st.guest_limit_bps
        self.table = self._table(inv, set(inv.vf_holders))
        log.info(
            "reconciled %s: %d VM(s), VF holders [%s], migrating [%s]%s",
            self.host,
            len(inv.vms),
            ", ".join(sorted(inv.vf_holders)),
            ", ".join(sorted(self.adopted)),
            " (dry run: nothing will be submitted)" if self.cfg.dry_run else "",
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

    def do_phase(self, phase: int) -> None:
        with self.metrics.loop_duration.labels(PHASE_NAMES[phase]).time():
            if phase == POLL:
                self._fetch_round_directive()
                self.agent.poll()
                self.flush_done()
            elif phase == BANDWIDTH:
                self.agent.bandwidth_step()
            elif phase == STEP:
                rep = self.step()
                self.flush_done()
                self.report(rep)

    def step(self) -> StepReport:
        before = set(self.agent.migrating)
        rep = self.agent.step()
        self.last_report = rep
        self._check_adopted(dict(rep.actual.vms))
        chosen = set(self.agent.migrating) - before
        d, self.awaiting = self.awaiting, None
        if d is not None and d.v is not None:
            if chosen:
                for vm in chosen:
                    self.signalled[vm] = d.v
                    log.info("migrating %s to %s (manager directive %d)", vm, d.t, d.i)
            elif d.v not in self.agent.migrating:
                why = f"no VM to move under vf_policy {self.cfg.vf_policy!r}"
                log.info("declined directive %d: %s", d.i, why)
                self.pending_done.append(_Done(d.v, MigrationDone(result="declined", detail=why)))
        self.table = self._table(rep.actual, set(rep.desired_rates))
        self._export(rep)
        if self.recorder is not None:
            self.recorder("step", rep)
        return rep

    def _table(self, inv: Any, desired: set[str]) -> dict[str, str]:
        """The Operation Table (Alg. 1) as it stands: VF, VNIC or VLM per VM."""
        out = {}
        for vm, st in sorted(inv.vms.items()):
            if vm in self.agent.migrating or vm in self.adopted or st.migrating:
                out[vm] = "VLM"
            elif vm in desired or (not desired and st.nic is NicKind.VF):
                out[vm] = "VF"
            else:
                out[vm] = "VNIC"
        return out

    def operation_table(self) -> dict[str, str]:
        return dict(self.table)

    # ------------------------------------------------------------------ manager

    def report(self, rep: StepReport) -> None:
        if self.client is None:
            return
        hr = self.agent.host_report()
        if hr is None:
            return  # no full period measured yet
        self.seq += 1
        body = build_report(
            self.seq,
            rep.time_s,
            hr.history[-1],
            hr.vms,
            ack=self.applied,
            k=self.settings.report_top_k,
            metric=self.cfg.hotness_metric,
            decimals=self.settings.report_decimals,
        )
        try:
            directive = self.client.report(encode(body))
        except ManagerUnreachable as exc:
            self._manager_state(False, str(exc))
            self.metrics.reports.labels("unreachable").inc()
            return
        except ManagerRejected as exc:
            self.metrics.reports.labels("rejected").inc()
            log.error("manager rejected the report: %s", exc)
            return
        self._manager_state(True)
        self.metrics.reports.labels("sent").inc()
        if self.wait_for_round:
            self.wait_seq = self.seq
        self.apply(directive)

    def _fetch_round_directive(self) -> None:
        if self.client is None or self.wait_seq is None:
            return
        seq, self.wait_seq = self.wait_seq, None
        try:
            self.apply(self.client.wait_directive(seq, self.directive_wait_s))
        except (ManagerUnreachable, ManagerRejected) as exc:
            log.debug("no directive for report %d: %s", seq, exc)

    def _manager_state(self, up: bool, why: str = "") -> None:
        if up and self.manager_up is False:
            log.info("manager reachable again; reporting resumed")
        elif not up and self.manager_up is not False:
            log.warning("manager unreachable (%s); scheduling VFs locally", why)
        self.manager_up = up
        self.metrics.manager_up.set(1.0 if up else 0.0)

    def apply(self, d: Directive) -> None:
        """Apply a directive at most once per id (the manager repeats it until acked)."""
        if not d.f or d.i <= self.applied or d.t is None:
            return
        self.applied = d.i
        busy = set(self.agent.migrating) | set(self.adopted)
        if d.v is not None and d.v in busy:
            log.info("directive %d: %s is already migrating; acknowledged", d.i, d.v)
            return
        if d.v is not None:
            try:
                here = d.v in self.driver.inventory().vms
            except DriverError:
                here = True  # let the next step decide with fresh data
            if not here:
                # The target was checked for this VM only; moving another one instead
                # (e.g. after a restart, for a directive whose VM already left) would
                # move load the manager never placed.
                log.info("directive %d: %s is not on this host; acknowledged", d.i, d.v)
                return
        if self.cfg.dry_run:
            log.info("dry run: would migrate %s to %s (directive %d)", d.v, d.t, d.i)
            if d.v is not None:
                self.pending_done.append(
                    _Done(d.v, MigrationDone(result="declined", detail="agent in dry-run mode"))
                )
            return
        self.agent.signal(True, d.t, d.v)
        self.awaiting = d
        self.metrics.signals.inc()

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
        if o.result == "dry-run":
            log.info("dry run: would %s", _describe(a))
        elif o.result == "succeeded":
            if not isinstance(a, SetGuestRateLimit):
                log.info("%s: %s", _describe(a), o.detail or "done")
        else:
            log.warning("%s %s: %s", _describe(a), o.result, o.detail)
        if isinstance(a, Migrate) and o.result in ("succeeded", "failed", "timeout"):
            lease_vm = self.signalled.pop(a.vm, a.vm)
            self.pending_done.append(
                _Done(
                    lease_vm, MigrationDone(result=o.result, dst=a.dst_host, detail=o.detail[:400])
                )
            )
        if self.recorder is not None:
            self.recorder("outcome", o)

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

    def run(self, ticker: Ticker, stop: threading.Event) -> None:
        self.reconcile()
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
            for phase in phases:
                try:
                    self.do_phase(phase)
                except DriverError as exc:
                    # The host's API failed this once; the next period reads it afresh.
                    log.warning("%s phase failed: %s", PHASE_NAMES[phase], exc)


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


# --------------------------------------------------------------------------- demo records


def world_recorder(remote: Any) -> Callable[[str, Any], None]:
    """Send step records and outcome events to the world, worded as ``sova simulate``'s."""
    from sova.agent.executor import EVENT_KIND
    from sova.model import AttachVF, SetVFRate

    def record(kind: str, payload: Any) -> None:
        if kind == "step":
            rep: StepReport = payload
            rows = []
            for vm, f in sorted(rep.factors.items()):
                st = rep.actual.vms.get(vm)
                if st is None:
                    continue
                on_vf = st.nic is NicKind.VF
                rows.append(
                    {
                        "time_s": round(rep.time_s, 3),
                        "vm": vm,
                        "nic": st.nic.value,
                        "vf_rate_mbps": (st.vf_max_bps / 1e6 if st.vf_max_bps else None)
                        if on_vf
                        else None,
                        "tx_mbps": f.tx_bps / 1e6,
                        "rx_mbps": f.rx_bps / 1e6,
                        "cpu_usage": f.cpu_usage,
                        "io_degree": f.io_degree,
                        "net_factor": f.net_factor,
                        "net_degree": f.net_degree,
                        "io_factor": f.io_factor,
                        "limit_mbps": st.guest_limit_bps / 1e6 if st.guest_limit_bps else None,
                    }
                )
            remote.records(rows, [])
            return
        o: Outcome = payload
        a = o.action
        if isinstance(a, SetGuestRateLimit) and o.result == "succeeded":
            return
        ev = EVENT_KIND.get(type(a), a.kind)
        event = ev if o.result == "succeeded" else f"{ev}_{o.result}"
        detail = o.detail
        if isinstance(a, AttachVF | SetVFRate) and a.max_bps:
            detail = (detail + "; " if detail else "") + f"rate {a.max_bps / 1e6:.0f} Mbit/s"
        dst = a.dst_host if isinstance(a, Migrate) else ""
        if isinstance(a, Migrate) and o.result != "succeeded":
            event = "migrate_failed"
        remote.records(
            [],
            [
                {
                    "time_s": round(o.time_s, 3),
                    "event": event,
                    "vm": a.vm,
                    "dst_host": dst,
                    "detail": detail,
                }
            ],
        )

    return record


# --------------------------------------------------------------------------- wiring


class _ToyHost:
    """``--driver mock``: a static 4-VM host whose ops succeed at once (smoke tests)."""

    def __init__(self, name: str = "mock-host") -> None:
        from sova import model

        self.model = model
        nic = model.NIC("pf0", 10e9, 2)
        self.host = model.Host(name, 16, 64 * 2**30, nic)
        self.vms = {
            f"vm{i}": model.VMState(model.VM(f"vm{i}", 2, 2 * 2**30, created_seq=i))
            for i in range(1, 5)
        }
        self.t0 = time.monotonic()
        self.ops = 0

    def __call__(self, req: Any) -> Any:
        from sova.driver.base import Capabilities, OpState, OpStatus

        m = self.model
        now = time.monotonic() - self.t0
        if req.method == "now":
            return now
        if req.method == "capabilities":
            return Capabilities(self.host.name, 2, 2, m.NICCapabilities())
        if req.method == "inventory":
            return m.Inventory(self.host, dict(self.vms))
        if req.method == "sample":
            vms = {
                n: m.VMCounters(
                    n, 2, int(now * 1e9 * 0.2 * i), 0, 0, int(now * 1e8 * i), 0, int(now * 1e4 * i)
                )
                for i, n in enumerate(sorted(self.vms), 1)
            }
            return m.HostSample(self.host.name, now, vms, m.HostCounters(int(now * 1e9), 0, 0, 0))
        if req.method == "submit":
            a = req.args[0]
            st = self.vms.get(a.vm)
            if st is not None and isinstance(a, m.AttachVF):
                self.vms[a.vm] = m.VMState(st.vm, m.NicKind.VF, 0, a.max_bps)
            elif st is not None and isinstance(a, m.DetachVF):
                self.vms[a.vm] = m.VMState(st.vm)
            self.ops += 1
            return f"op{self.ops}"
        if req.method == "poll":
            return OpStatus(req.args[0], OpState.SUCCEEDED)
        raise ValueError(req.method)


@dataclass
class Wiring:
    driver: Driver
    ticker_factory: Callable[[threading.Event], Ticker]
    lockstep: bool = False
    remote: Any = None
    config: AgentConfig | None = None  # from the scenario (sim) or the world (remote)


def build(
    settings: AgentSettings, *, speed: float | None = None, policy: str | None = None
) -> Wiring:
    """The driver and clock for ``settings.driver``; libvirt is imported only when chosen."""
    c = settings.controller
    bw = c.bandwidth_period_s if c.bandwidth_policy != "none" else None
    if settings.driver == "libvirt":
        try:
            from sova.driver.libvirt_driver import LibvirtDriver
        except ImportError as exc:  # pragma: no cover - depends on the host
            from sova.install import install_hint

            raise ConfigError(
                f"driver: 'libvirt' needs libvirt-python ({exc}); {install_hint('agent')}"
            ) from None
        drv = LibvirtDriver.open(settings.connect or "qemu:///system", read_only=settings.dry_run)
        return Wiring(
            drv, lambda stop: WallTicker(drv, c.period_s, bw, settings.poll_interval_s, stop)
        )
    if settings.driver == "mock":
        from sova.driver.base import MockDriver

        mdrv = MockDriver(_ToyHost(settings.host or "mock-host"))
        return Wiring(
            mdrv, lambda stop: WallTicker(mdrv, c.period_s, bw, settings.poll_interval_s, stop)
        )
    if settings.driver == "remote":
        from sova.daemon.remote_driver import RemoteDriver

        if not settings.connect or not settings.host:
            raise ConfigError("driver 'remote' needs connect (the world URL) and host")
        rdrv = RemoteDriver(settings.connect, settings.host)
        return Wiring(
            rdrv,
            lambda stop: LockstepTicker(rdrv, stop),
            lockstep=True,
            remote=rdrv,
            config=rdrv.agent_config(),
        )
    # sim: one host of a scenario, simulated in this process
    from sova.daemon.world_server import make_world
    from sova.scenario import ScenarioError, load_scenario

    if not settings.connect:
        raise ConfigError("driver 'sim' needs connect = the scenario file")
    try:
        scn = load_scenario(settings.connect)
    except ScenarioError as exc:
        raise ConfigError(str(exc)) from None
    from sova.sim.world import agent_config

    world, spec = make_world(scn, policy)
    host = settings.host or world.hosts[0]
    if host not in world.hosts:
        raise ConfigError(f"host: {host!r} is not in {settings.connect} ({world.hosts})")
    sdrv = world.driver(host)
    cfg = agent_config(scn, spec)
    bw = cfg.bandwidth_period_s if cfg.bandwidth_policy != "none" else None
    return Wiring(
        sdrv,
        lambda stop: LocalSimTicker(world, scn.tick, cfg.period_s, bw, scn.duration, speed, stop),
        config=cfg,
    )


def run_agent(
    settings: AgentSettings,
    *,
    speed: float | None = None,
    policy: str | None = None,
    stop: threading.Event | None = None,
) -> int:
    """Run until SIGTERM/SIGINT (or the simulated run ends). Returns the exit code."""
    from sova.daemon import systemd
    from sova.daemon.logs import configure as configure_logging

    configure_logging(settings.log_level)
    stop = stop or threading.Event()
    wiring = build(settings, speed=speed, policy=policy)
    token = settings.resolved_token()
    host = settings.host or wiring.driver.capabilities().host
    client = None
    if settings.manager_url:
        if not token:
            raise ConfigError("token: required when manager_url is set (or SOVA_TOKEN)")
        client = ManagerClient(
            settings.manager_url,
            host,
            token,
            timeout_s=settings.report_timeout_s,
            retries=settings.report_retries,
            ca_file=settings.ca_file,
        )
    metrics = AgentMetrics()
    if settings.metrics_port is not None:
        from prometheus_client import start_http_server

        start_http_server(settings.metrics_port, settings.metrics_addr, registry=metrics.registry)
    recorder = None
    if wiring.lockstep and settings.record_to_world:
        recorder = world_recorder(wiring.remote)
    daemon = AgentDaemon(
        settings,
        wiring.driver,
        client=client,
        metrics=metrics,
        host=host,
        wait_for_round=wiring.lockstep,
        recorder=recorder,
        config=wiring.config,
    )

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
        (wiring.config.vf_policy if wiring.config else settings.controller.vf_policy),
        settings.manager_url or "none (standalone)",
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
