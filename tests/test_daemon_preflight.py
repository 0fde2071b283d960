"""A daemon that cannot start says why in one line naming the setting and value, exit 2.

Each case runs ``sova manager`` / ``sova agent`` as the operator would, as a subprocess,
with one bad setting (issue 10, finding 9). Before the preflight checks these ended in
80-500-line tracebacks from SQLAlchemy, ssl, httpx, uvicorn or prometheus_client.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from sova.manager.daemons.config import ManagerSettings
from sova.manager.daemons.preflight import check_manager


def sova(*args: str, cwd: Path, env: dict[str, str] | None = None) -> tuple[int, str]:
    proc = subprocess.run(
        [sys.executable, "-m", "sova.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
        env={**os.environ, "COLUMNS": "80", **(env or {})},
        check=False,
    )
    return proc.returncode, proc.stderr


def assert_one_line(rc: int, stderr: str, *needles: str) -> str:
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert rc == 2, (rc, stderr[-2000:])
    assert len(lines) == 1, stderr[-2000:]
    assert "Traceback" not in stderr
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def manager(tmp_path: Path, *args: str, config: str = "") -> tuple[int, str]:
    argv = ["manager", "--port", str(free_port())]
    if config:
        (tmp_path / "manager.toml").write_text(config)
        argv += ["--config", str(tmp_path / "manager.toml")]
    if "--database-url" not in args:
        argv += ["--database-url", f"sqlite:///{tmp_path / 'm.db'}"]
    return sova(*argv, *args, cwd=tmp_path)


def test_unreachable_postgresql(tmp_path: Path) -> None:
    pytest.importorskip("psycopg", reason="the PostgreSQL driver (psycopg) is not installed")
    url = "postgresql+psycopg://sova:s3cret@127.0.0.1:1/sova"
    line = assert_one_line(
        *manager(tmp_path, "--database-url", url), "database_url", "127.0.0.1:1/sova"
    )
    assert "s3cret" not in line  # the password is not printed


def test_malformed_database_url(tmp_path: Path) -> None:
    assert_one_line(
        *manager(tmp_path, "--database-url", "postgres//oops"), "database_url", "postgres//oops"
    )


def test_sqlite_in_a_missing_directory(tmp_path: Path) -> None:
    db = tmp_path / "missing" / "m.db"
    assert_one_line(
        *manager(tmp_path, "--database-url", f"sqlite:///{db}"), "database_url", str(db.parent)
    )
    assert not db.parent.exists()


def test_sqlite_in_a_directory_that_takes_no_files(tmp_path: Path) -> None:
    # /proc takes no new files even for root (a chmod-ed directory would not stop root).
    assert_one_line(
        *manager(tmp_path, "--database-url", "sqlite:////proc/sova-test.db"),
        "database_url",
        "/proc",
    )


def test_missing_tls_files(tmp_path: Path) -> None:
    config = f'tls_certfile = "{tmp_path}/cert.pem"\ntls_keyfile = "{tmp_path}/key.pem"\n'
    assert_one_line(*manager(tmp_path, config=config), "tls_certfile", f"{tmp_path}/cert.pem")


def test_garbage_tls_files(tmp_path: Path) -> None:
    (tmp_path / "cert.pem").write_text("not a certificate\n")
    (tmp_path / "key.pem").write_text("not a key\n")
    config = f'tls_certfile = "{tmp_path}/cert.pem"\ntls_keyfile = "{tmp_path}/key.pem"\n'
    assert_one_line(*manager(tmp_path, config=config), "tls_certfile", f"{tmp_path}/cert.pem")


def test_manager_port_in_use(tmp_path: Path, busy_port: int) -> None:
    assert_one_line(*manager(tmp_path, "--port", str(busy_port)), "port", str(busy_port), "in use")


def agent(tmp_path: Path, config: str, *args: str) -> tuple[int, str]:
    (tmp_path / "agent.toml").write_text(config)
    return sova(
        "agent",
        "--config",
        str(tmp_path / "agent.toml"),
        "--driver",
        "mock",
        "--manager-url",
        "https://127.0.0.1:1",
        *args,
        cwd=tmp_path,
        env={"SOVA_TOKEN": "t" * 32},
    )


def test_agent_missing_ca_file(tmp_path: Path) -> None:
    ca = tmp_path / "nope" / "ca.pem"
    assert_one_line(*agent(tmp_path, f'ca_file = "{ca}"\n'), "ca_file", str(ca))


def test_agent_garbage_ca_file(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_bytes(b"\x00\xffgarbage\n")
    assert_one_line(*agent(tmp_path, f'ca_file = "{ca}"\n'), "ca_file", str(ca))


def test_agent_metrics_port_in_use(tmp_path: Path, busy_port: int) -> None:
    assert_one_line(
        *agent(tmp_path, f"metrics_port = {busy_port}\n"), "metrics_port", str(busy_port)
    )


def test_good_settings_pass_preflight_and_touch_nothing(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    check_manager(ManagerSettings(database_url=f"sqlite:///{db}", port=free_port()))
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("config", "setting", "shown"),
    [
        # 3 x 1 s = 3 s <= 1 s + 2 s: the second measurement (period 1, lease 4)
        ("plan_period_s = 1\nleader_lease_s = 4\n", "planner.directive_ttl_periods", "3 s"),
        # 2 x 2 s = 4 s <= 2 s + 2 s
        ("plan_period_s = 2\n[planner]\ndirective_ttl_periods = 2\n", "directive_ttl", "4 s"),
        # the TTL holds (3 x 2 = 6 s > 4 s) but staleness does not (1.5 x 2 = 3 s)
        ("plan_period_s = 2\n[planner]\nstale_after_periods = 1.5\n", "stale_after", "3 s"),
    ],
)
def test_timers_a_takeover_cannot_keep_are_refused(
    tmp_path: Path, config: str, setting: str, shown: str
) -> None:
    """Issue 37 (High, d): active/standby managers whose directive TTL or staleness bound
    is not longer than one period plus an agent's 2 s report timeout. Before, they started,
    and a takeover ended the lease of a migration in flight."""
    url = "postgresql+psycopg://sova@127.0.0.1:1/sova"  # refused before it is dialled
    assert_one_line(*manager(tmp_path, "--database-url", url, config=config), setting, shown)


def test_timers_a_takeover_keeps_pass() -> None:
    from sova.manager.daemons.preflight import check_takeover_timers

    url = "postgresql+psycopg://sova@127.0.0.1:1/sova"
    # 3 x 2 s = 6 s > 2 s + 2 s: the measured scenario's settings (default lease and TTL)
    check_takeover_timers(ManagerSettings(database_url=url, plan_period_s=2))
    # SQLite (one manager, no standby) and simulated time are not checked
    check_takeover_timers(ManagerSettings(plan_period_s=0.1))
    check_takeover_timers(ManagerSettings(database_url=url, plan_period_s=0.1, clock="agent"))
