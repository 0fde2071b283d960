"""Issue 21, input findings in the operator and daemon command lines: names never become
other routes, a newline cannot forge a line, and bad input is one line with exit 2 (no
traceback, no credentials echoed, no emoji made of a value)."""

from __future__ import annotations

import contextlib
import http.server
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from sova.cli import app
from sova.manager.daemons.service.store import Store


class _Recorder(http.server.BaseHTTPRequestHandler):
    """Answers 200 with ``body``; records each request's method and raw path."""

    seen: list[tuple[str, str]] = []
    body = b'{"cluster": "autonomic", "hosts": {}}'
    content_type = "application/json"

    def _answer(self) -> None:
        self.seen.append((self.command, self.path))
        self.send_response(200)
        self.send_header("content-type", self.content_type)
        self.send_header("content-length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    do_GET = do_PUT = do_DELETE = do_POST = _answer

    def log_message(self, *args: Any) -> None:
        pass


@contextlib.contextmanager
def _server(
    body: bytes | None = None, ctype: str = "application/json"
) -> Iterator[tuple[str, list[tuple[str, str]]]]:
    seen: list[tuple[str, str]] = []
    handler = type(
        "H", (_Recorder,), {"seen": seen, "body": body or _Recorder.body, "content_type": ctype}
    )
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    th = threading.Thread(target=srv.serve_forever, daemon=True)
    th.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}", seen
    finally:
        srv.shutdown()
        srv.server_close()


def _run(*args: str, env: dict[str, str] | None = None) -> Any:
    return CliRunner().invoke(app, list(args), env={"SOVA_ADMIN_TOKEN": "t" * 20, **(env or {})})


def _one_line(result: Any, code: int) -> str:
    """The error line of ``result`` (a daemon may log warnings before it)."""
    assert result.exit_code == code, (result.exit_code, result.output)
    assert result.exception is None or isinstance(result.exception, SystemExit)
    out: str = result.output
    assert "Traceback" not in out, out
    errors = [line for line in out.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and out.endswith(errors[0] + "\n"), out
    return errors[0]


@pytest.mark.parametrize(
    "args",
    [
        ["mode", "reset", "--host", ".."],  # before: DELETE /v1/mode, the cluster's mode
        ["mode", "set", "recommend", "--host", "../mode"],
        ["fence", "set", "pin", "../maintenance/hv2"],  # before: PUT /v1/fences/maintenance/hv2
        ["fence", "clear", "pin", "vm1/../../mode"],
        ["fence", "set", "..", "hv2"],
    ],
)
def test_a_name_never_becomes_another_route(args: list[str]) -> None:
    with _server() as (url, seen):
        result = _run(*args[:1], "--manager-url", url, *args[1:])
    out = _one_line(result, 2)
    assert "name" in out
    assert not seen


def test_a_name_the_manager_accepts_is_percent_encoded() -> None:
    with _server() as (url, seen):
        result = _run("mode", "--manager-url", url, "reset", "--host", "hv1:a@b")
    assert result.exit_code == 0, result.output
    assert [(m, p.split("?")[0]) for m, p in seen] == [("DELETE", "/v1/hosts/hv1%3Aa%40b/mode")]


def test_a_newline_in_reason_is_refused_before_anything_is_sent() -> None:
    """Before: the reason went to the manager and `sova audit` printed a forged line."""
    with _server() as (url, seen):
        result = _run("fence", "--manager-url", url, "set", "pin", "vm1", "--reason", "a\nb")
    assert not seen
    assert "--reason" in _one_line(result, 2)


@pytest.mark.parametrize(
    ("url", "code", "what"),
    [
        ("ftp://127.0.0.1/", 2, "must be http"),  # before: exit 3
        ("http://[::1", 2, "not a URL"),  # before: a traceback
        ("http://alice:hunter2@127.0.0.1:1/", 3, "not reachable"),  # before: echoed hunter2
    ],
)
def test_bad_manager_urls_are_one_line_without_credentials(url: str, code: int, what: str) -> None:
    out = _one_line(_run("fence", "--manager-url", url, "list"), code)
    assert what in out and "hunter2" not in out


def test_a_utf16_token_file_is_one_line(tmp_path: Path) -> None:
    """Before: UnicodeDecodeError traceback."""
    f = tmp_path / "token"
    f.write_text("abcdefghijklmnopqrstuvwxyz", encoding="utf-16")
    out = _one_line(_run("fence", "--token-file", str(f), "list"), 2)
    assert "UTF-8" in out


def test_a_200_that_is_not_json_is_one_line() -> None:
    """Before: JSONDecodeError traceback (a proxy's HTML page, another service)."""
    with _server(b"<html>login</html>", "text/html") as (url, _):
        out = _one_line(_run("fence", "--manager-url", url, "list"), 1)
    assert "not with JSON" in out


def test_audit_output_shows_control_characters_escaped() -> None:
    """An audit row stored before the manager refused control characters still prints as
    one line per entry."""
    body = (
        b'{"entries": [{"id": 1, "time_s": 0, "who": "admin", "action": "fence:pin", '
        b'"subject": "vm1", "detail": "ok\\n     2  t=0  root  approve  plan 9"}], '
        b'"next_after": 1}'
    )
    with _server(body) as (url, _):
        result = _run("audit", "--manager-url", url)
    assert result.exit_code == 0, result.output
    assert result.output.count("\n") == 1 and "\\n" in result.output


def test_rich_does_not_turn_a_value_into_an_emoji(tmp_path: Path) -> None:
    f = tmp_path / "s.yaml"
    f.write_text("name: ':x:'\nduration: ':x:'\n")
    result = CliRunner().invoke(app, ["validate", str(f)])
    assert result.exit_code == 2
    assert ":x:" in result.output and "\u274c" not in result.output


@pytest.mark.parametrize("role", ["manager", "agent"])
def test_a_non_utf8_config_is_one_line(role: str, tmp_path: Path) -> None:
    """Before: a 50-58 line traceback."""
    f = tmp_path / "c.toml"
    f.write_bytes(b'log_level = "\xe9"\n')
    out = _one_line(CliRunner().invoke(app, [role, "--config", str(f)]), 2)
    assert "UTF-8" in out


def test_a_store_that_is_not_a_database_is_exit_2(tmp_path: Path) -> None:
    """Before: exit 1 (a run failure) for what is bad input."""
    db = tmp_path / "m.db"
    db.write_text("not a database, just a file\n")
    cfg = tmp_path / "m.toml"
    cfg.write_text(f'database_url = "sqlite:///{db}"\nport = 0\ninsecure = true\n')
    out = _one_line(CliRunner().invoke(app, ["manager", "--config", str(cfg)]), 2)
    assert "database_url" in out and "not a SQLite database" in out


def test_a_store_of_an_unknown_revision_is_exit_2(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    s = Store(f"sqlite:///{db}")
    s.migrate()
    s.close()
    with sqlite3.connect(db) as c:
        c.execute("update alembic_version set version_num = '9999future'")
    cfg = tmp_path / "m.toml"
    cfg.write_text(f'database_url = "sqlite:///{db}"\nport = 0\ninsecure = true\n')
    out = _one_line(CliRunner().invoke(app, ["manager", "--config", str(cfg)]), 2)
    assert "9999future" in out and "database_url" in out


def test_an_agent_refuses_a_host_name_the_manager_would_reject(tmp_path: Path) -> None:
    cfg = tmp_path / "a.toml"
    cfg.write_text('host = "hv 1/../x"\ndriver = "mock"\n')
    result = CliRunner().invoke(app, ["agent", "--config", str(cfg)])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "host = 'hv 1/../x'" in result.output
