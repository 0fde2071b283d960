"""Sova's own daemons in the lab: one ``sova manager`` and one ``sova agent`` per lab
hypervisor, started as the processes an operator runs (``python -m sova.cli``), each with
the TOML file it would read in production. Nothing here drives the controller: the
processes do, and this module only writes their configuration, starts and stops them, and
reads back what they logged (JSON lines) and what the manager decided.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sova.lab.loads import _die_with_parent
from sova.lab.scenario import LabScenario
from sova.lab.settings import LAB_HOTPLUG, LAB_MAX_GUESTS, LabSettings

LOOPBACK = "127.0.0.1"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((LOOPBACK, 0))
        return int(sock.getsockname()[1])


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)  # a JSON string is a TOML basic string
    if isinstance(v, list | tuple):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    raise TypeError(f"no TOML for {v!r}")


def to_toml(data: Mapping[str, Any], table: str = "") -> str:
    """A small TOML writer for the daemons' own files (scalars, lists, nested tables;
    None is left out: every daemon key has a default)."""
    flat = [
        f"{k} = {_value(v)}" for k, v in data.items() if v is not None and not isinstance(v, dict)
    ]
    out = ([f"[{table}]"] if table and flat else []) + flat
    for k, v in data.items():
        if isinstance(v, dict):
            sub = to_toml(v, f"{table}.{k}" if table else k)
            if sub:
                out += ["", sub]
    return "\n".join(out)


def libvirt_section(s: LabSettings, scn: LabScenario, host: str) -> dict[str, Any]:
    """The ``[libvirt]`` section of ``host``'s agent: the lab's strategies and, because the
    two daemons share this machine, host totals from its own domains over the declared
    capacity (docs/lab.md#host-totals)."""
    return {
        "host_name": host,
        "fast_path": "lab-nic",
        "failover": "guest-bond",
        "lab_nic_bridge": s.fast_bridge,
        "lab_nic_taps": [s.fast_tap(host, i) for i in range(scn.fast_slots)],
        "lab_nic_speed_mbit": int(scn.tier_mbit * scn.fast_slots),
        "migration_uri_template": s.uri_template(),
        "migration_unsafe": True,
        **LAB_HOTPLUG,
        "host_totals": "domains",
        "host_cpus": scn.hosts.cpus,
        "host_memory_mib": scn.hosts.memory_mib,
    }


def controller_section(scn: LabScenario) -> dict[str, Any]:
    c = scn.controller
    if c.scheduler.io_filter == "top-q" and c.scheduler.top_q == 0:
        c = c.model_copy(
            update={"scheduler": c.scheduler.model_copy(update={"top_q": LAB_MAX_GUESTS})}
        )
    out: dict[str, Any] = c.model_dump(mode="json", exclude_none=True)
    return out


def agent_toml(
    s: LabSettings, scn: LabScenario, host: str, manager_url: str | None, token: str
) -> str:
    """``manager_url`` None: a standalone agent (schedules its fast path, reports nothing)."""
    data: dict[str, Any] = {
        "host": host,
        "driver": "libvirt",
        "connect": s.uri(host),
        "manager_url": manager_url,
        "token": token if manager_url else None,
        "report_timeout_s": 5.0,
        "poll_interval_s": 0.5,
        "log_level": "info",
        "controller": controller_section(scn),
        "libvirt": libvirt_section(s, scn, host),
    }
    return to_toml(data) + "\n"


def manager_toml(
    scn: LabScenario, tokens: Mapping[str, str], db: Path, port: int, admin_token: str | None = None
) -> str:
    """The manager's file: the scenario's detector and anti-thrash limits as [planner]."""
    # The scenario's manager section is the daemon's [planner] as it is (one schema); the
    # bandwidth of a migration's copy is the agents' to apply.
    planner = scn.controller.manager.model_dump(exclude={"migration_bandwidth"})
    data: dict[str, Any] = {
        "listen": LOOPBACK,
        "port": port,
        "database_url": f"sqlite:///{db}",
        "plan_period_s": scn.plan_period_s,
        "log_level": "info",
        **({"admin_token": admin_token} if admin_token else {}),
        "planner": planner,
        "hosts": {h: {"token": t} for h, t in tokens.items()},
    }
    return to_toml(data) + "\n"


@dataclass
class SovaProc:
    name: str
    proc: subprocess.Popen[bytes]
    log: Path


class SovaDaemons:
    """The manager and the agents, started in that order and stopped in reverse."""

    def __init__(self, s: LabSettings, scn: LabScenario, work: Path) -> None:
        self.s = s
        self.scn = scn
        self.work = work
        self.port = free_port()
        self.url = f"http://{LOOPBACK}:{self.port}"
        self.tokens = {h: secrets.token_hex(16) for h in s.hosts}
        self.admin_token = secrets.token_hex(16)  # the run's reads of /v1 (issue 21)
        self.procs: dict[str, SovaProc] = {}

    def _spawn(self, name: str, args: list[str]) -> SovaProc:
        log = self.work / f"{name}.log"
        env = {k: v for k, v in os.environ.items() if not k.startswith("SOVA_")}
        with log.open("wb") as fh:
            proc = subprocess.Popen(
                [sys.executable, "-m", "sova.cli", *args, "--log-format", "json"],
                stdout=fh,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                preexec_fn=_die_with_parent,
            )
        p = SovaProc(name, proc, log)
        self.procs[name] = p
        return p

    def start_manager(self, timeout_s: float = 60.0) -> None:
        cfg = self.work / "manager.toml"
        cfg.write_text(
            manager_toml(
                self.scn, self.tokens, self.work / "manager.db", self.port, self.admin_token
            )
        )
        p = self._spawn("manager", ["manager", "--config", str(cfg)])
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if p.proc.poll() is not None:
                raise RuntimeError(f"sova manager exited {p.proc.returncode}: {tail(p.log)}")
            try:
                self.get("/healthz", 1.0)
                return
            except (OSError, urllib.error.URLError):
                time.sleep(0.3)
        raise RuntimeError(f"sova manager did not answer within {timeout_s:g}s: {tail(p.log)}")

    def start_agent(self, host: str, standalone: bool = False, log_name: str = "") -> SovaProc:
        """``host``'s agent; ``log_name`` gives a restarted agent a log of its own."""
        cfg = self.work / f"agent-{host}.toml"
        url = None if standalone else self.url
        cfg.write_text(agent_toml(self.s, self.scn, host, url, self.tokens[host]))
        name = log_name or f"agent-{host}"
        p = self._spawn(name, ["agent", "--config", str(cfg)])
        return p

    def wait_reported(self, hosts: list[str], timeout_s: float = 180.0) -> float:
        """Wait until every one of ``hosts`` has reported to the manager; the seconds it took.

        A run whose loads start before the agents report measures nothing the manager
        judges: under load an agent's start (imports, the driver's open) took 136 s, and
        the run's phases were over before HV1's first report (docs/lab.md#hotspot-arithmetic).
        """
        t0 = time.monotonic()
        missing = list(hosts)
        while time.monotonic() - t0 < timeout_s:
            if dead := self.check_alive():
                raise RuntimeError(f"a Sova daemon died before reporting: {dead}")
            try:
                seen = {h["host"] for h in self.get("/v1/cluster")["hosts"]}
            except (OSError, urllib.error.URLError):
                seen = set()
            missing = [h for h in hosts if h not in seen]
            if not missing:
                return time.monotonic() - t0
            time.sleep(0.5)
        raise RuntimeError(
            f"agents {', '.join(missing)} did not report to the manager within {timeout_s:g}s"
        )

    def get(self, path: str, timeout_s: float = 5.0) -> Any:
        req = urllib.request.Request(
            self.url + path, headers={"Authorization": f"Bearer {self.admin_token}"}
        )
        with urllib.request.urlopen(req, timeout=timeout_s) as r:
            return json.loads(r.read())

    def check_alive(self) -> str | None:
        for name, p in self.procs.items():
            if p.proc.poll() is not None:
                return f"{name} exited {p.proc.returncode}: {tail(p.log)}"
        return None

    def stop(self, name: str, grace_s: float = 20.0) -> int | None:
        """SIGTERM (the daemon finishes its turn), then SIGKILL past ``grace_s``."""
        p = self.procs.get(name)
        if p is None:
            return None
        if p.proc.poll() is None:
            p.proc.send_signal(signal.SIGTERM)
            try:
                p.proc.wait(grace_s)
            except subprocess.TimeoutExpired:
                p.proc.kill()
                p.proc.wait(5)
        return p.proc.returncode

    def stop_all(self) -> None:
        for name in sorted(self.procs, key=lambda n: n == "manager"):  # agents first
            self.stop(name)


def tail(log: Path, lines: int = 3) -> str:
    try:
        text = log.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return " | ".join(text[-lines:])


def json_lines(log: Path) -> list[dict[str, Any]]:
    out = []
    for line in log.read_text(errors="replace").splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict) and "msg" in rec:
            out.append(rec)
    return out


# An outcome as the agent logs it: "<kind> <vm>[ (args)][ <result>]: <detail>".
_OUTCOME = re.compile(
    r"^(?P<kind>vf_attach|vf_detach|migrate|tier_change) (?P<vm>\S+)(?: \((?P<args>[^)]*)\))?"
    r"(?: (?P<result>failed|timeout|rejected))?: (?P<detail>.*)$",
    re.S,
)
_SIGNALLED = re.compile(r"^migrating (?P<vm>\S+) to (?P<dst>\S+) \(manager directive (?P<id>\d+)\)")


def agent_events(log: Path) -> list[dict[str, Any]]:
    """What an agent did, from its own log lines: each outcome, and each migration it
    started on a manager's directive (``signal``), with the epoch time it logged it."""
    out: list[dict[str, Any]] = []
    for rec in json_lines(log):
        msg = str(rec["msg"])
        if m := _SIGNALLED.match(msg):
            out.append(
                {
                    "ts": rec["ts"],
                    "event": "migrate_start",
                    "vm": m["vm"],
                    "dst": m["dst"],
                    "detail": f"manager directive {m['id']}",
                }
            )
        elif m := _OUTCOME.match(msg):
            kind = m["kind"]
            result = m["result"]
            event = (
                kind
                if result is None
                else ("migrate_failed" if kind == "migrate" else f"{kind}_{result}")
            )
            dst = ""
            if kind == "migrate" and m["args"]:
                dm = re.search(r"dst_host=(\S+?)(?:,|$)", m["args"])
                dst = dm.group(1) if dm else ""
            out.append(
                {
                    "ts": rec["ts"],
                    "event": event,
                    "vm": m["vm"],
                    "dst": dst,
                    "detail": m["detail"].strip()[:300],
                }
            )
    return out
