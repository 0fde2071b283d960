"""``sova demo``: a scenario's cluster run through the real daemons, all on loopback.

Why not just ``sova simulate``: the demo is the system an operator deploys — a manager
process with its store and HTTP API, one agent process per host, reports and directives over
HTTP — with only the hypervisors simulated (one world process, see
:mod:`sova.sim.world_server`). Because the world hands out turns in the same order as
the in-process simulator, the demo's events equal ``sova simulate``'s for the same scenario
and policy, which is how the tests check that the daemons add transport, not behaviour.

Processes (all ``sys.executable``, all bound to 127.0.0.1 on free ports)::

    world   python -m sova.sim.world_server SCENARIO --out OUT
    manager python -m sova.cli_daemons manager --config <generated manager.toml>
    agents  python -m sova.cli_daemons agent --driver remote --connect WORLD --host H  (x hosts)

Why one module over 500 lines: it is the composition point, the only module that may put
two worlds together (the layers contract), so the process orchestration, the live view
and the baseline comparison stay here rather than leak into a world.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

# httpx (with ssl, ~6 MiB) is imported where the demo talks to its daemons: `sova` registers
# this command on every run, `sova simulate` included, which never needs it.
import typer
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table

from sova.agent.registry import vf_policy
from sova.scenario import PolicySpec, Scenario, ScenarioError, load_scenario

DEFAULT_SCENARIO = Path("scenarios/sova-tour.yaml")
LOOPBACK = "127.0.0.1"


def sim_agent_wiring(settings: Any, *, speed: float | None, policy: str | None) -> Any:
    """``sova agent --driver sim``: one host of a scenario, simulated in this process.

    Lives here, not in the agent daemon, because it composes two worlds: the production
    daemon never imports the simulator.
    """
    from sova.manager.daemons.agent.tickers import LocalSimTicker
    from sova.manager.daemons.agent.wiring import Wiring
    from sova.manager.daemons.config import ConfigError
    from sova.sim.world import agent_config
    from sova.sim.world_server import make_world

    if not settings.connect:
        raise ConfigError("driver 'sim' needs connect = the scenario file")
    try:
        scn = load_scenario(settings.connect)
    except ScenarioError as exc:
        raise ConfigError(str(exc)) from None
    world, spec = make_world(scn, policy)
    host = settings.host or world.hosts[0]
    if host not in world.hosts:
        raise ConfigError(f"host: {host!r} is not in {settings.connect} ({world.hosts})")
    sdrv = world.driver(host)
    cfg = agent_config(scn, spec)
    bw = cfg.bandwidth_period if cfg.bandwidth_policy != "none" else None
    return Wiring(
        sdrv,
        lambda stop: LocalSimTicker(world, scn.tick, cfg.period, bw, scn.duration, speed, stop),
        config=cfg,
    )


def remote_wiring(settings: Any, **_: Any) -> Any:
    """``sova agent --driver remote``: one host of the demo's world process, in lockstep.

    The agent daemon is the production one; what only the demo needs (its turns, the
    scenario's controller, records sent to the world, the directive of the report's own
    round) is added here, so that neither the daemon nor the remote driver knows of it.
    """
    from functools import partial

    from sova.manager.daemons.agent.tickers import LockstepTicker
    from sova.manager.daemons.agent.wiring import Wiring
    from sova.manager.daemons.config import ConfigError
    from sova.sim.world_server import WorldHost

    if not settings.connect or not settings.host:
        raise ConfigError("driver 'remote' needs connect (the world URL) and host")
    drv = WorldHost(settings.connect, settings.host)
    return Wiring(
        drv,
        lambda stop: LockstepTicker(drv, stop),
        config=drv.agent_config(),
        make_daemon=partial(_lockstep_daemon, world=drv, record=settings.record_to_world),
    )


def _lockstep_daemon(*args: Any, world: Any, record: bool, **kw: Any) -> Any:
    from sova.agent.schedule import POLL
    from sova.manager.daemons.agent.client import ManagerRejected, ManagerUnreachable
    from sova.manager.daemons.agent.daemon import AgentDaemon
    from sova.sim.world_server import world_recorder

    recorder = world_recorder(world) if record else None

    class LockstepAgentDaemon(AgentDaemon):
        """The production daemon, plus the demo's lockstep: the directive of the round its
        report joined is fetched before the next turn, and its records go to the world."""

        directive_wait_s = 2.0  # a round ends ms after the last report; never stall long
        wait_seq: int | None = None

        def do_phase(self, phase: Any) -> None:
            if phase == POLL:
                self._fetch_round_directive()
            super().do_phase(phase)

        def report(self, rep: Any) -> int | None:
            self.wait_seq = super().report(rep)
            return self.wait_seq

        def _fetch_round_directive(self) -> None:
            if self.client is None or self.wait_seq is None:
                return
            seq, self.wait_seq = self.wait_seq, None
            try:
                self.apply(self.client.wait_directive(seq, self.directive_wait_s))
            except (ManagerUnreachable, ManagerRejected) as exc:
                logging.getLogger("sova.agent").debug("no directive for report %d: %s", seq, exc)

        def step(self) -> Any:
            rep = super().step()
            if recorder is not None:
                recorder("step", rep)
            return rep

        def _on_outcome(self, o: Any) -> None:
            super()._on_outcome(o)
            if recorder is not None:
                recorder("outcome", o)

    return LockstepAgentDaemon(*args, **kw)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOOPBACK, 0))
        return int(s.getsockname()[1])


def pick_policy(scn: Scenario, name: str | None) -> PolicySpec:
    specs = scn.policy_specs
    if name is not None:
        for p in specs:
            if p.name == name:
                return p
        raise ValueError(f"--policy: {name!r} is not in {[p.name for p in specs]}")
    # The demo's point is the control plane: prefer a policy that uses the manager, and
    # among those one that also schedules VFs (the whole loop).
    users = [p for p in specs if vf_policy(p.vf).uses_manager]
    users.sort(key=lambda p: not vf_policy(p.vf).grants_vfs)
    return users[0] if users else specs[-1]


def pick_baseline(scn: Scenario, chosen: PolicySpec) -> PolicySpec | None:
    """What the demo's policy is compared with: the first compared policy that neither
    grants VFs nor allocates bandwidth nor uses the manager (doing nothing), if any."""
    for p in scn.policy_specs:
        vf = vf_policy(p.vf)
        quiet = not vf.grants_vfs and not vf.uses_manager and p.bandwidth == "none"
        if quiet and p.name != chosen.name:
            return p
    return None


def manager_toml(
    scn: Scenario, tokens: dict[str, str], db: Path, port: int, admin_token: str | None = None
) -> str:
    # The scenario's manager section is the daemon's [planner] as it is (one schema); the
    # bandwidth of a migration's copy is the agents' to apply.
    planner = scn.controller.manager.model_dump(exclude={"migration_bandwidth"})
    lines = [
        f'listen = "{LOOPBACK}"',
        *([f'admin_token = "{admin_token}"'] if admin_token else []),
        f"port = {port}",
        f'database_url = "sqlite:///{db}"',
        f"plan_period_s = {scn.controller.period}",
        'plan_trigger = "round"',
        'clock = "agent"',
        "host_metrics = true",
        'log_level = "warning"',
        "",
        "[planner]",
        *(f"{k} = {json.dumps(v)}" for k, v in planner.items() if v is not None),
    ]
    for h, tok in tokens.items():
        lines += ["", f'[hosts."{h}"]', f'token = "{tok}"']
    return "\n".join(lines) + "\n"


@dataclass
class Cluster:
    """The demo's processes; stops them all on exit, whatever happened."""

    scn_path: Path
    scn: Scenario
    policy: PolicySpec
    out: Path
    workdir: Path
    speed: float | None = None
    agent_timeout_s: float = 5.0
    log_dir: Path | None = None
    world_port: int = field(default_factory=free_port)
    manager_port: int = field(default_factory=free_port)
    tokens: dict[str, str] = field(default_factory=dict)
    # The demo's operator credential (role admin): its own reads of the manager, and
    # `sova plans|fence|mode` against a demo (SOVA_ADMIN_TOKEN; in workdir/admin-token).
    admin_token: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    uses_manager: bool = False
    agent_metrics: bool = False  # give each agent a Prometheus port (fault tests read it)
    manager_env: dict[str, str] = field(default_factory=dict)  # SOVA_MANAGER_* overrides
    manager_extra_toml: str = ""  # appended to manager.toml (e.g. a [placement] section)
    metrics_ports: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        hosts = [h.name for h in self.scn.hosts]
        self.tokens = {h: secrets.token_urlsafe(24) for h in hosts}
        self.uses_manager = vf_policy(self.policy.vf).uses_manager and len(hosts) > 1
        self.log_dir = self.log_dir or self.workdir / "logs"
        self.log_dir.mkdir(parents=True, exist_ok=True)

    @property
    def world_url(self) -> str:
        return f"http://{LOOPBACK}:{self.world_port}"

    @property
    def admin_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.admin_token}"}

    @property
    def manager_url(self) -> str:
        return f"http://{LOOPBACK}:{self.manager_port}"

    def _spawn(self, name: str, args: list[str], env: dict[str, str] | None = None) -> None:
        assert self.log_dir is not None
        logf = (self.log_dir / f"{name}.log").open("ab")
        full_env = {**os.environ, **(env or {})}
        self.procs[name] = subprocess.Popen(
            [sys.executable, *args], stdout=logf, stderr=subprocess.STDOUT, env=full_env
        )

    def start_world(self) -> None:
        args = [
            "-m",
            "sova.sim.world_server",
            str(self.scn_path),
            "--port",
            str(self.world_port),
            "--policy",
            self.policy.name,
            "--out",
            str(self.out),
            "--agent-timeout",
            str(self.agent_timeout_s),
        ]
        if self.speed:
            args += ["--speed", str(self.speed)]
        self._spawn("world", args)

    def start_manager(self) -> None:
        cfg = self.workdir / "manager.toml"
        cfg.write_text(
            manager_toml(
                self.scn,
                self.tokens,
                self.workdir / "manager.db",
                self.manager_port,
                self.admin_token,
            )
            + self.manager_extra_toml
        )
        token_file = self.workdir / "admin-token"
        token_file.write_text(self.admin_token + "\n")
        token_file.chmod(0o600)
        self._spawn(
            "manager",
            ["-m", "sova.cli_daemons", "manager", "--config", str(cfg)],
            self.manager_env,
        )

    def start_agent(self, host: str) -> None:
        # Full precision: the demo must decide exactly as the in-process run does, and its
        # hosts carry few VMs, so the 304-byte budget never trims a candidate.
        env = {
            "SOVA_TOKEN": self.tokens[host],
            "SOVA_RECORD_TO_WORLD": "true",
            "SOVA_REPORT_DECIMALS": "17",
        }
        args = [
            "-m",
            "sova.cli_daemons",
            "agent",
            "--driver",
            "remote",
            "--connect",
            self.world_url,
            "--host",
            host,
        ]
        if self.uses_manager:
            args += ["--manager-url", self.manager_url]
        if self.agent_metrics:
            self.metrics_ports[host] = free_port()
            args += ["--metrics-port", str(self.metrics_ports[host])]
        self._spawn(f"agent-{host}", args, env)

    def kill(self, name: str, sig: int = signal.SIGKILL, timeout_s: float = 15.0) -> int:
        """Signal one process and wait for it (fault tests: kill -9, SIGTERM)."""
        p = self.procs[name]
        p.send_signal(sig)
        return p.wait(timeout_s)

    def pause(self, paused: bool = True) -> None:
        import httpx

        httpx.post(self.world_url + "/v1/world/pause", json={"paused": paused}, timeout=5.0)

    def pause_at_migration(self) -> None:
        """Arm the world's breakpoint: it pauses itself at the end of the first tick in which
        a VM is migrating (fault tests act mid-migration without racing the world)."""
        import httpx

        r = httpx.post(self.world_url + "/v1/world/pause", json={"at": "migration"}, timeout=5.0)
        r.raise_for_status()

    def wait_ready(self, url: str, what: str, timeout_s: float = 30.0) -> None:
        import httpx

        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for name, p in self.procs.items():
                if p.poll() is not None:
                    raise RuntimeError(f"{name} exited with {p.returncode}; see {self.log_dir}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url, timeout=1.0).status_code == 200:
                    return
            time.sleep(0.1)
        raise RuntimeError(f"{what} did not answer at {url} within {timeout_s:.0f} s")

    def start(self, *, pause_at_migration: bool = False, paused: bool = False) -> None:
        self.start_world()
        self.wait_ready(self.world_url + "/v1/world", "world")
        if pause_at_migration:  # armed before any agent runs, so no migration can slip past
            self.pause_at_migration()
        if paused:  # the world waits at its first tick until pause(False)
            self.pause()
        if self.uses_manager:
            self.start_manager()
            self.wait_ready(self.manager_url + "/healthz", "manager")
        for h in self.scn.hosts:
            self.start_agent(h.name)

    def stop(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 10.0
        for p in self.procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(max(0.1, deadline - time.monotonic()))
            if p.poll() is None:
                p.kill()
                p.wait(5.0)

    def view(self) -> tuple[dict[str, Any], dict[str, Any] | None]:
        import httpx

        world = httpx.get(self.world_url + "/v1/world/view", timeout=2.0).json()
        cluster = None
        if self.uses_manager:
            with contextlib.suppress(httpx.HTTPError):
                cluster = httpx.get(
                    self.manager_url + "/v1/cluster", headers=self.admin_headers, timeout=2.0
                ).json()
        return world, cluster

    def decisions(self) -> list[dict[str, Any]]:
        import httpx

        if not self.uses_manager:
            return []
        out: list[dict[str, Any]] = []
        after = 0
        while True:
            page = httpx.get(
                self.manager_url + "/v1/decisions",
                params={"after": after, "limit": 1000},
                headers=self.admin_headers,
                timeout=10.0,
            ).json()
            out += page["decisions"]
            if not page["decisions"]:
                return out
            after = page["next_after"]

    def finish(self, baseline: str | None = None) -> None:
        import httpx

        body: dict[str, Any] = {"decisions": self.decisions()}
        if baseline is not None:
            body["baseline"] = baseline  # simulated by the world, in-process, for the report
        r = httpx.post(self.world_url + "/v1/world/finish", json=body, timeout=300.0)
        r.raise_for_status()


def render(world: dict[str, Any], cluster: dict[str, Any] | None, policy: str) -> Table:
    hot = {}
    util = {}
    if cluster:
        for h in cluster["hosts"]:
            hot[h["host"]] = h["hot"]
            util[h["host"]] = h["utilisation"]
    t = Table(
        title=f"sova demo [{policy}]  t = {world['now']:.0f} / {world['until']:.0f} s"
        + ("  (done)" if world["done"] else ""),
    )
    for col in ("host", "link use", "cpu", "hotspot", "VFs", "VMs (* = on a VF, > = migrating)"):
        t.add_column(col)
    link = world.get("link", {})
    for h, info in world["hosts"].items():
        u = util.get(h)
        vms = " ".join(
            ("[bold cyan]*" + n + "[/]" if v["nic"] == "vf" else n)
            + (">" if v["migrating"] else "")
            for n, v in info["vms"].items()
        )
        used = sum(1 for v in info["vms"].values() if v["nic"] == "vf")
        t.add_row(
            h,
            f"{link[h]:.0%}" if h in link else "-",
            f"{u['cpu']:.2f}" if u else "-",
            "[red]HOT[/]" if hot.get(h) else "",
            f"{used}/{info.get('vf_pool', '?')}",
            vms,
        )
    return t


def guarantees_table(world: dict[str, Any]) -> Table:
    t = Table(title="SLA guarantees (rate over the last period; held = share of the time so far)")
    for col in ("VM", "guarantee", "rate now", "held"):
        t.add_column(col)
    for vm, g in world.get("guarantees", {}).items():
        held = g["held"]
        ok = held is not None and held >= 0.9
        t.add_row(
            vm,
            f"{g['guarantee_mbps'] / 1000:.1f} Gbit/s",
            f"{g['rate_mbps'] / 1000:.2f} Gbit/s",
            "-" if held is None else f"[{'green' if ok else 'red'}]{held:.0%}[/]",
        )
    return t


def migrations_table(world: dict[str, Any], cluster: dict[str, Any] | None) -> Table:
    t = Table(title="migrations (done, and leases in flight)")
    for col in ("t (s)", "VM", "from", "to", "downtime", "copied"):
        t.add_column(col)
    for m in world.get("migrations", []):
        t.add_row(
            f"{m['start_s']:.0f}",
            m["vm"],
            m["src"],
            m["dst"],
            f"{m['downtime_ms']:.0f} ms",
            f"{m['copied_mib']:.0f} MiB",
        )
    for lease in (cluster or {}).get("leases", []):
        t.add_row(f"{lease['since_s']:.0f}", lease["vm"], lease["src"], lease["dst"], "...", "")
    return t


def events_table(world: dict[str, Any]) -> Table:
    t = Table(title="recent VF and migration events")
    for col in ("t (s)", "event", "VM", "host", "to"):
        t.add_column(col)
    for e in world.get("recent_events", [])[-8:]:
        t.add_row(f"{e['time_s']:.0f}", e["event"], e["vm"], e["src"], e["dst"])
    return t


def live_view(world: dict[str, Any], cluster: dict[str, Any] | None, policy: str) -> Group:
    return Group(
        render(world, cluster, policy),
        guarantees_table(world),
        migrations_table(world, cluster),
        events_table(world),
    )


def headline(summary: dict[str, Any]) -> list[str]:
    """The demo's last words: what the policy did and what it bought over the baseline."""
    from sova.sim.report import compare_lines

    return compare_lines(summary)


@contextlib.contextmanager
def running(cluster: Cluster) -> Iterator[Cluster]:
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


def run_demo(
    scenario: Path,
    out: Path,
    policy: str | None = None,
    speed: float | None = None,
    live: bool = True,
    timeout_s: float = 600.0,
    console: Console | None = None,
    baseline: str | None = None,
) -> dict[str, Any]:
    """Run the demo to the scenario's end; returns the world's final view.

    With ``baseline`` (a compared policy), the world also simulates it in-process at the
    end, and the files compare the two.
    """
    import httpx

    console = console or Console(stderr=True)
    scn = load_scenario(scenario)
    spec = pick_policy(scn, policy)
    with tempfile.TemporaryDirectory(prefix="sova-demo-") as tmp:
        cluster = Cluster(scenario, scn, spec, out, Path(tmp), speed=speed, log_dir=out / "logs")
        with running(cluster):
            deadline = time.monotonic() + timeout_s
            final: dict[str, Any] = {}
            with Live(console=console, refresh_per_second=4, transient=False) as lv:
                while time.monotonic() < deadline:
                    try:
                        world, cl = cluster.view()
                    except httpx.TimeoutException:
                        # A busy machine can delay the world's answer: skip this frame (the
                        # processes are checked below, the deadline bounds the wait).
                        world, cl = {}, None
                    if not world:
                        for name, p in cluster.procs.items():
                            if p.poll() is not None:
                                raise RuntimeError(
                                    f"{name} exited with {p.returncode}; see {out}/logs"
                                )
                        time.sleep(0.25)
                        continue
                    final = world
                    if live:
                        lv.update(live_view(world, cl, spec.name))
                    if world["done"]:
                        break
                    for name, p in cluster.procs.items():
                        if p.poll() is not None:
                            raise RuntimeError(f"{name} exited with {p.returncode}; see {out}/logs")
                    time.sleep(0.25)
                else:
                    raise RuntimeError(f"the demo did not finish within {timeout_s:.0f} s")
            cluster.finish(baseline)
    return final


def demo(
    scenario: Annotated[
        Path, typer.Argument(help="Scenario YAML [default: scenarios/sova-tour.yaml].")
    ] = DEFAULT_SCENARIO,
    out: Annotated[
        Path | None,
        typer.Option("--out", "-o", help="Output directory [default: out/demo-<scenario>]."),
    ] = None,
    policy: Annotated[
        str | None,
        typer.Option("--policy", "-p", help="Policy to run [default: the one using the manager]."),
    ] = None,
    speed: Annotated[
        float | None,
        typer.Option("--speed", help="Max simulated seconds per real second [default: no limit]."),
    ] = None,
    live: Annotated[bool, typer.Option(help="Show the live terminal view.")] = True,
    baseline: Annotated[
        bool,
        typer.Option(
            help="Also simulate the scenario's do-nothing policy (in-process, same seed) "
            "and compare with it in the report."
        ),
    ] = True,
) -> None:
    """Run a scenario through the real daemons: a world, the manager and one agent per host.

    Everything runs on 127.0.0.1 in separate processes, in simulated time faster than real
    time. Writes the same files as `sova simulate` (timeline.csv, events.csv, summary.json,
    report.md) plus the daemons' logs under --out/logs.
    """
    from sova.install import install_hint, missing_extras

    # The world and the reports need the simulator, the daemons the manager's stack; the
    # processes would otherwise die one by one after start-up.
    missing = missing_extras(("sim", "manager"))
    if missing:
        Console(stderr=True, highlight=False, soft_wrap=True).print(
            f"error: sova demo runs the simulator and the manager: {install_hint(','.join(missing))}",
            markup=False,
        )
        raise typer.Exit(2)
    from sova.shipped import resolve_scenario

    scenario = resolve_scenario(scenario)  # a shipped name, or the default outside the repo
    try:
        scn = load_scenario(scenario)
        spec = pick_policy(scn, policy)
    except (ScenarioError, ValueError) as exc:
        Console(stderr=True).print(f"[red]error:[/red] {exc}", highlight=False)
        raise typer.Exit(2) from None
    out_dir = out or Path("out") / f"demo-{scn.name}"
    out_dir.mkdir(parents=True, exist_ok=True)
    base = pick_baseline(scn, spec) if baseline else None
    final = run_demo(
        scenario, out_dir, spec.name, speed, live, baseline=base.name if base else None
    )
    events = out_dir / "events.csv"
    migrations = [line for line in events.read_text().splitlines()[1:] if ",migrate_end," in line]
    typer.echo(f"{len(migrations)} migration(s); VM placement at the end:")
    for h, info in final.get("hosts", {}).items():
        typer.echo(f"  {h}: {', '.join(info['vms']) or '-'}")
    summary = json.loads((out_dir / "summary.json").read_text())
    for line in headline(summary):
        typer.echo(line)
    if final.get("violation_count"):
        typer.echo(f"INVARIANT VIOLATIONS: {final['violation_count']} (see world-check.json)")
    typer.echo(f"report: {out_dir / 'report.md'}")
