"""One writer per SQLite store; backup and restore; a store newer than the code (issue 20)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from .conftest import REPO, TOKENS, free_port, wait_until


def _manager_config(tmp_path: Path, db: Path, name: str) -> tuple[Path, int]:
    port = free_port()
    lines = [
        'listen = "127.0.0.1"',
        f"port = {port}",
        f'database_url = "sqlite:///{db}"',
        "plan_period_s = 10",
        'log_level = "warning"',
    ]
    for h, t in TOKENS.items():
        lines += [f'[hosts."{h}"]', f'token = "{t}"']
    cfg = tmp_path / f"{name}.toml"
    cfg.write_text("\n".join(lines) + "\n")
    return cfg, port


def _manager(cfg: Path, log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "sova.cli_daemons", "manager", "--config", str(cfg)],
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        cwd=REPO,
    )


def test_a_second_manager_on_one_sqlite_store_exits_2_naming_the_store_and_holder(
    tmp_path: Path,
) -> None:
    """Before, both started and both reported ready (split brain)."""
    db = tmp_path / "m.db"
    cfg1, port1 = _manager_config(tmp_path, db, "one")
    cfg2, port2 = _manager_config(tmp_path, db, "two")
    first = _manager(cfg1, tmp_path / "one.log")
    try:
        wait_until(
            lambda: httpx.get(f"http://127.0.0.1:{port1}/readyz", timeout=1).status_code == 200,
            30,
            "the first manager",
        )
        second = subprocess.run(
            [sys.executable, "-m", "sova.cli_daemons", "manager", "--config", str(cfg2)],
            capture_output=True,
            text=True,
            cwd=REPO,
            timeout=60,
            env={"COLUMNS": "400", "PATH": "/usr/bin:/bin"},
        )
        assert second.returncode == 2, second.stdout + second.stderr
        lines = second.stderr.strip().splitlines()
        assert len(lines) == 1, second.stderr
        assert str(db) in lines[0] and f"pid {first.pid}" in lines[0], lines[0]
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"http://127.0.0.1:{port2}/healthz", timeout=1)
    finally:
        first.terminate()
        first.wait(15)
    # The holder is gone (however it ended): the next manager takes the store.
    third = _manager(cfg2, tmp_path / "three.log")
    try:
        wait_until(
            lambda: httpx.get(f"http://127.0.0.1:{port2}/readyz", timeout=1).status_code == 200,
            30,
            "a manager after the first exited",
        )
    finally:
        third.kill()
        third.wait(15)
