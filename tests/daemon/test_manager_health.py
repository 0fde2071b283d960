"""The manager's planner keeps working, and says so, where a large cluster takes it:
past 1,024 descriptors, across wall-clock steps, and when rounds fail (issue 20)."""

from __future__ import annotations

import contextlib
import resource
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from sova.daemon.manager_app import create_app
from sova.daemon.store import Store

from .conftest import free_port, manager_settings, uvicorn_thread

IDLE = 1_100


@contextlib.contextmanager
def _nofile(at_least: int) -> Iterator[None]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < at_least:
        pytest.skip(f"RLIMIT_NOFILE hard limit {hard} < {at_least}: cannot hold the sockets")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, at_least), hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_rounds_complete_while_the_manager_holds_1100_idle_connections(tmp_path: Path) -> None:
    """Each idle connection is two descriptors in this process (client and accepted end),
    so the planner's pipe is numbered well past 1,024; ``select()`` refused it before
    (``ValueError: filedescriptor out of range in select()``) and no round completed."""
    store = Store(f"sqlite:///{tmp_path / 'manager.db'}")
    app = create_app(manager_settings(plan_period_s=0.5), store, fork_planner=True)
    svc = app.state.service
    port = free_port()
    socks: list[socket.socket] = []
    with _nofile(2 * IDLE + 512), uvicorn_thread(app, port):
        try:
            for _ in range(IDLE):
                socks.append(socket.create_connection(("127.0.0.1", port), timeout=5))
            time.sleep(0.5)  # the server has accepted them (its end is open too)
            probe = socket.socket()
            assert probe.fileno() > 1024, probe.fileno()
            probe.close()
            before = svc.rounds
            deadline = time.monotonic() + 10
            while svc.rounds < before + 3 and time.monotonic() < deadline:
                time.sleep(0.1)
            assert svc.rounds >= before + 3, f"{svc.rounds - before} round(s) in 10 s"
            r = httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=5)
            assert r.status_code == 200, r.text
        finally:
            for s in socks:
                s.close()
    store.close()
