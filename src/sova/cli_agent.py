"""``sova agent`` on a hypervisor: the agent's command line without typer or rich.

A hypervisor installs ``sova-sriov[agent]``, which carries neither typer nor rich (with
click, pygments and markdown-it, ~15 MB a host agent does not need; docs/deployment.md,
"Installing"). ``sova-agent`` and, where the full CLI is not installed, ``sova agent`` parse
their options here (:mod:`sova.console`). The agent's work itself
(:func:`run_agent_command`) is shared with the full CLI's ``sova agent``, so both front
ends take the same options (tests/packaging/test_agent_cli.py compares them) and do the
same thing.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any


class AgentExit(Exception):
    """The agent command ends with ``code`` after printing ``message`` (if any) as an error."""

    def __init__(self, code: int, message: str | None = None) -> None:
        super().__init__(message or "")
        self.code = code
        self.message = message


def error_line(msg: str) -> None:
    """One error line on stderr: an ``err`` journal entry under systemd, else plain text."""
    from sova.manager.daemons.logs import stderr_is_journal

    prefix = "<3>error: " if stderr_is_journal() else "error: "
    print(prefix + msg, file=sys.stderr, flush=True)


def parser(prog: str = "sova agent") -> argparse.ArgumentParser:
    """The agent's options, as the full CLI's ``sova agent`` takes them."""
    p = argparse.ArgumentParser(
        prog=prog,
        description="Run the host agent: local VF scheduling and bandwidth allocation, "
        "reports to the manager. Keeps scheduling when the manager is unreachable. With "
        "--driver libvirt --dry-run it opens libvirt read-only, prints the host and the "
        "actions it would take, and exits.",
        epilog="Exit codes: 0 done; 1 the agent failed; 2 bad input (a config or option, "
        "named in the one-line error); 130 interrupted.",
    )
    p.add_argument("--config", "-c", type=Path, help="Agent TOML file (see deploy/agent.toml).")
    p.add_argument("--driver", help="libvirt | sim | mock | remote (sim: --connect scenario.yaml).")
    p.add_argument("--connect", help="libvirt URI, scenario file (sim) or world URL (remote).")
    p.add_argument("--host", help="This host's name at the manager.")
    p.add_argument("--manager-url", help="Manager base URL; omit to run standalone.")
    p.add_argument(
        "--dry-run", action="store_true", help="Decide and log every action; submit none."
    )
    p.add_argument(
        "--loop",
        action="store_true",
        help="With --driver libvirt --dry-run: keep running and logging instead of printing "
        "the inventory once.",
    )
    p.add_argument("--metrics-port", type=int, help="Serve Prometheus metrics on this port.")
    p.add_argument(
        "--metrics-addr",
        help="Address the metrics port binds [default: 127.0.0.1; 0.0.0.0 or :: for a "
        "central Prometheus].",
    )
    p.add_argument("--speed", type=float, help="--driver sim: simulated seconds per real second.")
    p.add_argument("--policy", help="--driver sim/remote: the scenario policy to run.")
    p.add_argument(
        "--log-format",
        help="auto (journal under systemd, else text) | journal | json | text "
        "[env: SOVA_LOG_FORMAT].",
    )
    return p


def run_agent_command(
    *,
    config: Path | None = None,
    driver: str | None = None,
    connect: str | None = None,
    host: str | None = None,
    manager_url: str | None = None,
    dry_run: bool = False,
    loop: bool = False,
    metrics_port: int | None = None,
    metrics_addr: str | None = None,
    speed: float | None = None,
    policy: str | None = None,
    log_format: str | None = None,
) -> int:
    """Run the agent as ``sova agent`` does; returns its exit code, or raises
    :class:`AgentExit` with the one-line error (2 bad input, 1 the agent stopped)."""
    import os

    from sova.manager.daemons.config import ConfigError, load_agent_settings
    from sova.manager.daemons.logs import FORMATS

    if log_format is not None:
        if log_format not in FORMATS:
            raise AgentExit(2, f"--log-format: {log_format!r} is not one of {', '.join(FORMATS)}")
        os.environ["SOVA_LOG_FORMAT"] = log_format
    overrides: dict[str, Any] = {
        "driver": driver,
        "connect": connect,
        "host": host,
        "manager_url": manager_url,
        "metrics_port": metrics_port,
        "metrics_addr": metrics_addr,
    }
    if dry_run:
        overrides["dry_run"] = True
    try:
        settings = load_agent_settings(config, overrides=overrides)
    except ConfigError as exc:
        raise AgentExit(2, str(exc)) from None
    if settings.driver == "libvirt" and settings.dry_run and not loop:
        return _libvirt_dry_run(settings)
    from sova.manager.daemons.agent.daemon import run_agent
    from sova.manager.daemons.preflight import check_agent

    try:
        wiring = None
        if settings.driver == "sim":  # composes the agent with the simulator
            from sova.install import require_extra

            require_extra("--driver sim", "sim", ("numpy", "matplotlib", "typer", "rich"))
            from sova.demo import sim_agent_wiring

            wiring = sim_agent_wiring(settings, speed=speed, policy=policy)
        check_agent(settings)
        from sova.manager.daemons.logs import dump_stacks_on_signal

        dump_stacks_on_signal()
        return run_agent(settings, speed=speed, policy=policy, wiring=wiring)
    except ConfigError as exc:
        raise AgentExit(2, str(exc)) from None
    except ModuleNotFoundError:
        raise  # a missing extra: the console script names it
    except Exception as exc:
        import logging

        logging.getLogger("sova.agent").debug("fatal error", exc_info=exc)
        first = (str(exc).strip().splitlines() or [""])[0]
        raise AgentExit(1, f"sova agent stopped: {type(exc).__name__}: {first}") from None


def _libvirt_dry_run(settings: Any) -> int:
    """One read-only look at the host: inventory, capabilities, planned actions."""
    import time

    from sova.agent.executor import Outcome
    from sova.agent.loop import HostAgent
    from sova.driver.inventory_report import dry_run
    from sova.manager.daemons.agent.wiring import libvirt_options
    from sova.model import Action

    cfg = settings.controller

    def plan(drv: Any) -> list[Action | tuple[Action, str]]:
        verdicts: dict[Action, str] = {}

        def note(o: Outcome) -> None:
            if o.result != "dry-run":  # e.g. blocked: the executor would refuse it
                verdicts[o.action] = f"{o.result}: {o.detail}"

        agent = HostAgent(drv, cfg, on_outcome=note, dry_run=True)
        agent.step()
        time.sleep(min(2.0, cfg.period))  # a second sample gives the sensor one period
        verdicts.clear()
        planned = agent.step().planned
        return [(a, verdicts[a]) if a in verdicts else a for a in planned]

    return dry_run(
        settings.connect or "qemu:///system", plan, sys.stdout, **libvirt_options(settings)
    )
