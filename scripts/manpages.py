"""Write sova(1) from the CLI itself: every command, its help and its options.

    python scripts/manpages.py [DIR]       # default deploy/man; commit the result

The units' ``Documentation=man:sova(1)`` points at this page; the wheel installs it under
``share/man/man1`` and the Ansible role links it into the system's man path.
tests/test_deploy.py fails when the committed page differs from the CLI.

Written here rather than with click-man: Typer ≥ 0.20 carries its own copy of Click, whose
options click-man does not recognise (it renders pages with no options at all).
"""

from __future__ import annotations

import sys
from inspect import cleandoc
from pathlib import Path
from typing import Any

import typer.main

from sova.cli import app

DATE = "2026-01-01"  # fixed, so regenerating yields the same bytes


def _roff(text: str) -> str:
    out = text.replace("\\", "\\e").replace("-", "\\-")
    return "\n".join(
        "\\&" + line if line.startswith((".", "'")) else line for line in out.splitlines()
    )


def _commands(cmd: Any, path: str) -> list[tuple[str, Any]]:
    subs = getattr(cmd, "commands", None)
    if not subs:
        return [(path, cmd)]
    found: list[tuple[str, Any]] = [] if path == "sova" else [(path, cmd)]
    for name in sorted(subs):
        found += _commands(subs[name], f"{path} {name}")
    return found


def render() -> str:
    root = typer.main.get_command(app)
    lines = [
        # No build version: it changes with every commit (setuptools-scm) while the page
        # changes only with the CLI; `sova --version` says which build is installed.
        f'.TH SOVA 1 "{DATE}" "sova" "Sova manual"',
        ".SH NAME",
        "sova \\- autonomic SR\\-IOV VF and bandwidth allocation for KVM/libvirt clusters",
        ".SH SYNOPSIS",
        ".B sova",
        "COMMAND [OPTIONS] [ARGS]...",
        ".SH DESCRIPTION",
        _roff(cleandoc(root.help or "")),
        ".SH COMMANDS",
    ]
    for path, cmd in _commands(root, "sova"):
        lines += [
            ".SS " + _roff(path),
            "\n.PP\n".join(_roff(p) for p in cleandoc(cmd.help or "").split("\n\n")),
        ]
        for param in cmd.params:
            if getattr(param, "hidden", False):
                continue
            decls = (
                ", ".join(param.opts) if param.param_type_name == "option" else param.name.upper()
            )
            lines += [
                ".TP",
                "\\fB" + _roff(decls) + "\\fR",
                _roff(getattr(param, "help", None) or ""),
            ]
    lines += [
        ".SH FILES",
        ".TP",
        "/etc/sova/agent.toml, /etc/sova/manager.toml",
        "Daemon configuration; every key can be overridden by SOVA_* environment variables.",
        ".SH SEE ALSO",
        "systemd.exec(5); the project's docs/deployment.md and docs/operations.md.",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    out = (
        Path(sys.argv[1])
        if len(sys.argv) > 1
        else Path(__file__).resolve().parents[1] / "deploy/man"
    )
    out.mkdir(parents=True, exist_ok=True)
    (out / "sova.1").write_text(render())
    print(f"wrote {out / 'sova.1'}")
