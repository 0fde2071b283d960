"""A hypervisor's install (``sova-sriov[agent]``) has no typer or rich; its ``sova agent`` works.

The agent-only install is reproduced by making the other extras' modules unimportable
(``sys.modules[name] = None``, which ``import`` then reports as missing); the packaging tier
(``-m packaging``, test_install.py) does the same with a real fresh venv from the wheel.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sova.cli_agent import parser

# What `sova-sriov[agent]` does not install (pyproject.toml: the cli, manager, sim extras).
NOT_ON_AGENTS = [
    "typer",
    "rich",
    "click",
    "matplotlib",
    "fastapi",
    "uvicorn",
    "sqlalchemy",
    "alembic",
    "psycopg",
    "yaml",  # PyYAML is the cli extra's: scenario files, not the agent's TOML
]

RUN = """
import sys
blocked = sys.argv[1].split(",") if sys.argv[1] else []
for name in blocked:
    sys.modules[name] = None
sys.argv = [sys.argv[2], *sys.argv[3:]]
from sova.console import agent_script, main
agent_script() if sys.argv[0] == "sova-agent" else main()
"""


def _sova(
    *args: str, blocked: list[str], tmp_path: Path, prog: str = "sova"
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", RUN, ",".join(blocked), prog, *args],
        cwd=str(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_argparse_agent_takes_the_full_clis_options() -> None:
    """Two front ends, one command: they must not drift apart (an option added to one)."""
    import typer.main

    from sova.cli import app

    full = typer.main.get_command(app).commands["agent"]  # type: ignore[attr-defined]
    typer_opts = {o for p in full.params for o in p.opts if o.startswith("--")}
    argparse_opts = {o for a in parser()._actions for o in a.option_strings if o.startswith("--")}
    assert typer_opts - {"--help"} == argparse_opts - {"--help"}


@pytest.mark.parametrize("prog", ["sova", "sova-agent"])
def test_agent_help_without_typer_or_rich(prog: str, tmp_path: Path) -> None:
    args = ("agent", "--help") if prog == "sova" else ("--help",)
    r = _sova(*args, blocked=NOT_ON_AGENTS, tmp_path=tmp_path, prog=prog)
    assert r.returncode == 0, r.stderr
    assert "--manager-url" in r.stdout and "--dry-run" in r.stdout, r.stdout


def test_version_without_typer_or_rich(tmp_path: Path) -> None:
    import sova

    r = _sova("--version", blocked=NOT_ON_AGENTS, tmp_path=tmp_path)
    assert (r.returncode, r.stdout.strip()) == (0, f"sova {sova.__version__}"), r.stderr


def test_agent_bad_option_value_is_one_line_without_typer_or_rich(tmp_path: Path) -> None:
    r = _sova("agent", "--log-format", "loud", blocked=NOT_ON_AGENTS, tmp_path=tmp_path)
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines() == [
        "error: --log-format: 'loud' is not one of auto, journal, json, text"
    ], r.stderr


def test_agent_bad_config_is_one_line_naming_the_field(tmp_path: Path) -> None:
    (tmp_path / "agent.toml").write_text('driver = "mock"\nmetrics_port = "eighty"\n')
    r = _sova("-c", "agent.toml", blocked=NOT_ON_AGENTS, tmp_path=tmp_path, prog="sova-agent")
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert lines[0].startswith("error: ") and "metrics_port" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize(
    ("command", "hint"),
    [
        (["simulate", "sova-fig5"], "pip install 'sova-sriov[sim]'"),
        (["manager"], "pip install 'sova-sriov[manager]'"),
        (["plans", "list"], "pip install 'sova-sriov[cli]'"),
        (["--help"], "pip install 'sova-sriov[cli]'"),
    ],
)
def test_other_commands_without_the_full_cli_name_the_extra(
    command: list[str], hint: str, tmp_path: Path
) -> None:
    r = _sova(*command, blocked=NOT_ON_AGENTS, tmp_path=tmp_path)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and hint in lines[0], r.stderr


def test_the_agents_modules_import_without_the_full_cli() -> None:
    code = (
        "import sys\n"
        f"for n in {NOT_ON_AGENTS!r}: sys.modules[n] = None\n"
        "import sova.cli_agent, sova.console, sova.manager.daemons.agent.daemon, "
        "sova.driver.inventory_report\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize(
    ("package", "blocked", "message"),
    [
        ("sova.sim", ["numpy"], "sova.sim needs numpy: pip install 'sova-sriov[sim]'"),
        (
            "sova.sim",
            ["matplotlib"],
            "sova.sim needs matplotlib: pip install 'sova-sriov[sim]'",
        ),
        (
            "sova.testbed",
            ["pyroute2"],
            "sova.testbed needs pyroute2: pip install 'sova-sriov[testbed]'",
        ),
        ("sova.lab", ["fastapi"], "sova.lab needs fastapi: pip install 'sova-sriov[lab]'"),
    ],
)
def test_world_code_without_its_extra_names_the_extra(
    package: str, blocked: list[str], message: str
) -> None:
    code = (
        "import sys\n"
        f"for n in {blocked!r}: sys.modules[n] = None\n"
        "try:\n"
        f"    import {package}\n"
        "except ModuleNotFoundError as exc:\n"
        "    print(exc)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.stdout.strip() == message, (r.stdout, r.stderr)


def test_simulate_without_the_simulator_prints_the_extra_in_one_line(tmp_path: Path) -> None:
    """With the full CLI but no numpy (a manager-and-cli install): the guard's line."""
    r = _sova("simulate", "sova-fig5", blocked=["numpy"], tmp_path=tmp_path)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "pip install 'sova-sriov[sim]'" in lines[0], r.stderr
