"""The daemons under systemd: READY=1 once serving, watchdog pings, journal-priority logs.

systemd is stood in for by what it gives a service: a datagram socket in $NOTIFY_SOCKET,
$WATCHDOG_USEC, and stderr connected to the file named by $JOURNAL_STREAM (dev:inode).
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sova.manager.daemons import systemd
from sova.manager.daemons.logs import configure

SOVA = [sys.executable, "-m", "sova.cli"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _pings_after_ready(got: list[str]) -> int:
    ready = [i for i, m in enumerate(got) if m.startswith("READY=1")]
    return sum(m == "WATCHDOG=1" for m in got[ready[0] :]) if ready else 0


def _serve_under_fake_systemd(
    args: list[str], tmp_path: Path, pings: int, seconds: float = 120
) -> tuple[list[str], str]:
    """Run ``sova ARGS`` as systemd would until it has sent READY=1 and then ``pings``
    watchdog pings (at most ``seconds``: start-up is slow on a loaded CI machine); the
    datagrams and stderr it wrote."""
    sock_path = tmp_path / "notify"
    rx = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    rx.bind(str(sock_path))
    rx.settimeout(0.2)
    log = tmp_path / "stderr.log"
    with log.open("w") as err:
        st = os.fstat(err.fileno())
        env = {
            **os.environ,
            "NOTIFY_SOCKET": str(sock_path),
            "WATCHDOG_USEC": "2000000",
            "JOURNAL_STREAM": f"{st.st_dev}:{st.st_ino}",
        }
        env.pop("WATCHDOG_PID", None)
        proc = subprocess.Popen([*SOVA, *args], cwd=tmp_path, env=env, stderr=err)
        got: list[str] = []
        deadline = time.monotonic() + seconds
        try:
            while (
                time.monotonic() < deadline
                and proc.poll() is None
                and _pings_after_ready(got) < pings
            ):
                with contextlib.suppress(TimeoutError):
                    got.append(rx.recv(4096).decode())
        finally:
            proc.terminate()
            proc.wait(timeout=30)
            rx.close()
    return got, log.read_text()


def _check_journal_lines(text: str) -> None:
    lines = [ln for ln in text.splitlines() if ln]
    assert lines, "no log output"
    for ln in lines:
        assert re.match(r"<[2-7]>", ln), f"no priority prefix: {ln!r}"
        assert not re.search(r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d", ln), f"second timestamp: {ln!r}"


def test_manager_reports_ready_pings_the_watchdog_and_logs_for_the_journal(
    tmp_path: Path,
) -> None:
    port = _free_port()
    got, text = _serve_under_fake_systemd(
        [
            "manager",
            "--listen",
            "127.0.0.1",
            "--port",
            str(port),
            "--database-url",
            f"sqlite:///{tmp_path / 'm.db'}",
        ],
        tmp_path,
        pings=4,
    )
    assert any(m.startswith("READY=1") for m in got), got
    # WatchdogSec=2 s: pinged every 0.5 s once running.
    assert _pings_after_ready(got) >= 4, got
    _check_journal_lines(text)
    assert "uvicorn" in text  # uvicorn's own lines in the same format
    assert "sova manager" in text
    # The store migrates its schema on start-up; Alembic's INFO lines stay out of the log.
    assert not re.search(r"^<[67]>alembic", text, re.M), text


def test_agent_reports_ready_and_pings_while_its_loop_runs(tmp_path: Path) -> None:
    cfg = tmp_path / "agent.toml"
    cfg.write_text('driver = "mock"\nhost = "hv1"\n[controller]\nperiod = "0.2s"\n')
    got, text = _serve_under_fake_systemd(["agent", "--config", str(cfg)], tmp_path, pings=3)
    assert any(m.startswith("READY=1") for m in got), got
    assert _pings_after_ready(got) >= 3, got
    _check_journal_lines(text)


def test_watchdog_stops_pinging_when_the_loop_stalls(monkeypatch: pytest.MonkeyPatch) -> None:
    sent: list[str] = []
    monkeypatch.setattr(systemd, "notify", lambda state: sent.append(state) or True)
    now = [0.0]
    turns = [0]
    wd = systemd.Watchdog(lambda: turns[0], interval=10.0, clock=lambda: now[0])
    for _ in range(3):  # the loop advances: pings
        now[0] += 2.5
        turns[0] += 1
        assert wd.check()
    now[0] += 9.0  # no progress, still within the interval
    assert wd.check()
    now[0] += 2.0  # 11 s without progress
    assert not wd.check()
    turns[0] += 1  # the loop recovers
    assert wd.check()
    assert sent == ["WATCHDOG=1"] * 5


def test_notify_without_systemd_is_a_no_op(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    monkeypatch.delenv("WATCHDOG_USEC", raising=False)
    assert systemd.notify("READY=1") is False
    assert systemd.watchdog_interval() is None


def test_json_log_format(capsys: pytest.CaptureFixture[str]) -> None:
    import json
    import logging

    configure("info", "json")
    try:
        logging.getLogger("sova.test").warning("disk %s", "full")
        logging.getLogger("alembic.runtime.migration").info("Context impl SQLiteImpl.")
    finally:
        root = logging.getLogger()
        for h in [h for h in root.handlers if h.get_name() == "sova"]:
            root.removeHandler(h)
    lines = capsys.readouterr().err.splitlines()
    assert [json.loads(ln)["msg"] for ln in lines] == ["disk full"]
    assert json.loads(lines[0])["level"] == "warning"


def test_manager_watchdog_follows_planning_rounds_not_the_http_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A planning round that hangs stops the pings; an idle planner does not (issue 24).

    The real manager service on a real store, its planner stuck in a round whose planning
    call never returns (as a wedged store or a deadlock would); the HTTP event loop stays
    free meanwhile, which is why pinging from it proved nothing.
    """
    import asyncio
    import threading

    from sova.manager.daemons.config import ManagerSettings
    from sova.manager.daemons.service.app import create_app
    from sova.manager.daemons.service.store import Store

    sent: list[str] = []
    monkeypatch.setattr(systemd, "notify", lambda state: sent.append(state) or True)
    store = Store(f"sqlite:///{tmp_path / 'm.db'}")
    app = create_app(ManagerSettings.model_validate({"plan_period_s": 0}), store)
    svc = app.state.service
    now = [0.0]
    wd = systemd.Watchdog(
        systemd.round_progress(lambda: svc.rounds, lambda: svc.planning),
        interval=10.0,
        clock=lambda: now[0],
    )
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(svc.tick(1.0))  # a round that finishes
        assert svc.rounds == 1
        now[0] += 30.0  # idle for longer than the interval: waiting is not a stall
        assert wd.check()
        release = threading.Event()
        plan = svc.core.plan
        monkeypatch.setattr(svc.core, "plan", lambda t, *a: (release.wait(30), plan(t, *a))[1])
        task = loop.create_task(svc.tick(2.0))
        loop.run_until_complete(asyncio.sleep(0.2))  # the round is now stuck in the planner
        assert svc.planning
        assert wd.check()  # just started
        now[0] += 11.0
        assert not wd.check(), "a hung round must stop the watchdog pings"
        release.set()
        loop.run_until_complete(task)
        assert svc.rounds == 2 and wd.check()  # the round finished: pinging again
    finally:
        loop.run_until_complete(svc.close())
        loop.close()
        store.close()
