"""The console scripts ``sova`` and ``sova-agent``: which command line runs.

- ``sova-agent ...`` always runs the agent through :mod:`sova.cli_agent` (argparse);
- ``sova ...`` goes to the full command line (:mod:`sova.cli`, typer and rich) where it is
  installed; where it is not (a hypervisor with only the ``agent`` extra), ``sova agent ...``
  runs through :mod:`sova.cli_agent` and any other command says in one line which extra to
  install.
"""

from __future__ import annotations

import importlib.util
import sys

from sova.cli_agent import AgentExit, error_line, parser, run_agent_command

# A command of the full CLI -> the extra that brings it (with typer and rich), for the
# one-line hint on a host that has only the agent's extra.
COMMAND_EXTRA = {
    "simulate": "sim",
    "validate": "sim",
    "scenarios": "sim",
    "demo": "sim,manager",
    "manager": "manager",
    "store": "manager",
    "testbed": "testbed",
    "lab": "lab",
}
CLI_EXTRA = "cli"  # the operator commands (plans, fence, mode, audit, ...) and --help


def _missing_module_exit(exc: ModuleNotFoundError) -> int:
    from sova.install import MissingExtra, missing_module_hint

    if isinstance(exc, MissingExtra):
        error_line(str(exc))
        return 2
    hint = missing_module_hint(exc.name)
    if hint is None:
        raise exc
    error_line(f"{exc}; {hint}")
    return 2


def agent_main(argv: list[str] | None = None, prog: str = "sova-agent") -> int:
    """``sova-agent ARGS`` (and ``sova agent ARGS`` without the full CLI)."""
    args = parser(prog).parse_args(argv)
    try:
        return run_agent_command(**vars(args))
    except AgentExit as stop:
        if stop.message:
            error_line(stop.message)
        return stop.code
    except ModuleNotFoundError as exc:
        return _missing_module_exit(exc)
    except KeyboardInterrupt:
        return 130


def full_cli_installed() -> bool:
    """typer and rich importable (the ``cli`` extra, in every extra but ``agent``)."""
    return all(importlib.util.find_spec(m) is not None for m in ("typer", "rich"))


def main() -> None:
    """The ``sova`` console script."""
    argv = sys.argv[1:]
    if full_cli_installed():
        from sova.cli import main as full

        full()
        return
    if argv[:1] == ["agent"]:
        sys.exit(agent_main(argv[1:], prog="sova agent"))
    if argv == ["--version"]:  # what an inventory or a bug report asks any host
        from sova import __version__

        print(f"sova {__version__}")
        return
    from sova.install import install_hint

    command = next((a for a in argv if not a.startswith("-")), None)
    extra = COMMAND_EXTRA.get(command or "", CLI_EXTRA)
    what = f"`sova {command}`" if command else "this command"
    print(
        f"error: {what} needs the full command line (typer, rich), not installed with "
        f"the agent's extra; {install_hint(extra)} (here: sova agent, sova-agent)",
        file=sys.stderr,
    )
    sys.exit(2)


def agent_script() -> None:
    """The ``sova-agent`` console script."""
    sys.exit(agent_main(sys.argv[1:]))
