"""`sova --help` and every subcommand's help: literal brackets, visible defaults, exit codes.

The help strings write their computed defaults as ``[default: out/<scenario name>]``; a
renderer that parses them as markup silently drops them (the text read "Output directory ."
once), so every bracketed phrase in an option's help must come out verbatim.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from sova.cli import app


def _commands() -> list[tuple[list[str], Any]]:
    root = typer.main.get_command(app)
    # typer vendors its own click: walk by duck type rather than isinstance.
    out: list[tuple[list[str], Any]] = [([], root)]
    todo: list[tuple[list[str], Any]] = [([], root)]
    while todo:
        path, cmd = todo.pop()
        if hasattr(cmd, "commands"):
            for name, sub in cmd.commands.items():
                out.append(([*path, name], sub))
                todo.append(([*path, name], sub))
    return out


def _flat(text: str) -> str:
    return re.sub(r"\s+", " ", text)


COMMANDS = _commands()


@pytest.mark.parametrize(
    ("path", "cmd"), COMMANDS, ids=[" ".join(p) or "sova" for p, _ in COMMANDS]
)
def test_help_shows_brackets_and_defaults(path: list[str], cmd: Any) -> None:
    res = CliRunner().invoke(app, [*path, "--help"], terminal_width=200)
    assert res.exit_code == 0, res.output
    shown = _flat(res.output)
    for param in cmd.params:
        help_text = getattr(param, "help", None) or ""
        for phrase in re.findall(r"\[[^\]]+\]", help_text):
            assert _flat(phrase) in shown, f"{' '.join(path)} {param.name}: {phrase!r} was eaten"
        default = param.default
        if (
            param.param_type_name == "option"
            and not param.is_flag
            and default not in (None, (), [])
            and not callable(default)
            and "[default:" not in help_text
        ):
            assert "[default:" in shown.split(param.opts[0], 1)[1], (
                f"{' '.join(path)} {param.opts[0]}: default {default!r} not shown"
            )


def test_root_help_documents_exit_codes() -> None:
    res = CliRunner().invoke(app, ["--help"], terminal_width=200)
    shown = _flat(res.output)
    for code in ("0", "1", "2", "130"):
        assert re.search(rf"\b{code}\b", shown.split("Exit codes", 1)[-1]), res.output
    assert "Exit codes" in shown


def test_shell_completion_is_offered() -> None:
    res = CliRunner().invoke(app, ["--help"], terminal_width=200)
    assert "--show-completion" in res.output


SIMULATE_ALONE = """
import sys
sys.argv = ["sova", *sys.argv[1:]]
from sova.console import main
try:
    main()
except SystemExit:
    pass
print(sorted(m for m in ("sova.cli_operator", "sova.cli_client", "sova.demo") if m in sys.modules))
"""


@pytest.mark.parametrize("command", ["simulate", "validate", "scenarios"])
def test_the_simulator_commands_do_not_load_the_operator_client_or_the_demo(command: str) -> None:
    # They cost 0.1-0.3 s of imports on every `sova simulate`; the command's own help
    # (and run) is the same without them (tests above walk the whole CLI).
    import subprocess
    import sys

    r = subprocess.run(
        [sys.executable, "-c", SIMULATE_ALONE, command, "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert r.stdout.splitlines()[-1] == "[]", r.stdout[-500:]
    assert "Usage: sova " + command in r.stdout


def test_the_other_commands_still_have_the_whole_command_line() -> None:
    import subprocess
    import sys

    r = subprocess.run(
        [sys.executable, "-c", SIMULATE_ALONE, "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert "plans" in r.stdout and "demo" in r.stdout
