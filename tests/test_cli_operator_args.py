"""The operator CLI's global options work wherever an operator types them, and the audit log
prints times an operator reads (issue 24)."""

from __future__ import annotations

import pytest
import typer.main

from sova.cli import app
from sova.cli_operator import audit_line, hoist_group_options


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        # After the subcommand: moved before it, where the group's callback reads them.
        (
            ["plans", "list", "--token-file", "/t", "--state", "proposed"],
            ["plans", "--token-file", "/t", "list", "--state", "proposed"],
        ),
        (
            ["fence", "set", "maintenance", "hv1", "--manager-url=http://m:8700", "--json"],
            ["fence", "--manager-url=http://m:8700", "--json", "set", "maintenance", "hv1"],
        ),
        # Already before the subcommand: unchanged.
        (["mode", "--timeout", "3", "show"], ["mode", "--timeout", "3", "show"]),
        # Not an operator group: unchanged.
        (["simulate", "x.yaml", "--json"], ["simulate", "x.yaml", "--json"]),
        # After `--`, arguments are not options.
        (["plans", "show", "--", "--json"], ["plans", "show", "--", "--json"]),
    ],
)
def test_group_options_after_the_subcommand_are_hoisted(
    argv: list[str], expected: list[str]
) -> None:
    assert hoist_group_options(argv, typer.main.get_command(app)) == expected


def test_an_option_the_subcommand_has_itself_stays_where_it_is() -> None:
    # `sova plans approve ID --by alice`: approve takes --by itself.
    cmd = typer.main.get_command(app)
    argv = ["plans", "approve", "7", "--by", "alice"]
    sub = cmd.commands["plans"].commands["approve"]  # type: ignore[attr-defined]
    if any("--by" in p.opts for p in sub.params):
        assert hoist_group_options(argv, cmd) == argv
    else:
        assert hoist_group_options(argv, cmd) == ["plans", "--by", "alice", "approve", "7"]


def test_audit_times_are_iso_8601_utc() -> None:
    # 1763900412 s after the epoch = 2025-11-23 12:20:12 UTC.
    line = audit_line(
        {
            "id": 41,
            "time_s": 1763900412.4,
            "who": "alice",
            "action": "approve",
            "subject": "plan 7",
            "detail": "checked",
        }
    )
    assert "2025-11-23T12:20:12Z" in line and "t=" not in line, line
