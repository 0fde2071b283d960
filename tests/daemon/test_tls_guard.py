"""Issue 21: TLS connections that never finish their handshake are limited and timed like
plain ones, and a TLS manager stops at once on SIGTERM with a kept-alive agent connection.

A real ``sova manager`` process with TLS (a self-signed certificate made with the
``openssl`` command), its connection limits set low (``max_connections`` 256,
``max_connections_per_client`` 16, ``header_timeout_s`` 1) and its descriptors limited to
400 (the issue's 8,448 at reduced scale). 600 connections that send nothing (never a
ClientHello) come from 127.0.0.2-127.0.0.9 and are re-opened (200/s) as the server closes them,
while real agents report over TLS from 127.0.0.1, each on a new connection: every report
must be answered. Before the fix the handshaking connections reached the guard only after
their handshake, so none of the limits applied: the 600 held 600 descriptors for asyncio's
60-s handshake timeout and new connections failed (EMFILE), as 30 of 30 reports did in the
issue with 9,000. With the fix at most 8 x 16 = 128 are held, each for at most 2 s.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from .conftest import REPO, free_port, report, wait_until

AGENTS, ROUNDS, ATTACK, RATE = 8, 3, 600, 200
ATTACKERS = [f"127.0.0.{i}" for i in range(2, 10)]


def _token(i: int) -> str:
    return f"tls-agent-token-{i:04d}-" + "y" * 8


def _cert(tmp: Path) -> tuple[Path, Path]:
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is needed to make a test certificate")
    cert, key = tmp / "cert.pem", tmp / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
         "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return cert, key


@contextlib.contextmanager
def _tls_manager(
    tmp: Path, nofile: int | None = None, **http: float
) -> Iterator[tuple[str, Path, subprocess.Popen[bytes]]]:
    cert, key = _cert(tmp)
    port = free_port()
    lines = [
        'listen = "127.0.0.1"',
        f"port = {port}",
        f'database_url = "sqlite:///{tmp / "m.db"}"',
        "plan_period_s = 10",
        'log_level = "warning"',
        "insecure = true",
        f'tls_certfile = "{cert}"',
        f'tls_keyfile = "{key}"',
        "[http]",
        *(f"{k} = {v}" for k, v in http.items()),
    ]
    for i in range(AGENTS):
        lines += [f'[hosts."a{i}"]', f'token = "{_token(i)}"']
    cfg = tmp / "m.toml"
    cfg.write_text("\n".join(lines) + "\n")
    log = tmp / "manager.log"
    p = subprocess.Popen(
        [sys.executable, "-m", "sova.cli_daemons", "manager", "--config", str(cfg)],
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        cwd=REPO,
        env={k: v for k, v in os.environ.items() if not k.startswith("SOVA_")},
        preexec_fn=None if nofile is None else lambda: _limit_files(nofile),
    )
    url = f"https://127.0.0.1:{port}"
    try:
        wait_until(
            lambda: (
                httpx.get(
                    url + "/healthz", verify=ssl.create_default_context(cafile=str(cert)), timeout=2
                ).status_code
                == 200
            ),
            60,
            "the TLS manager",
        )
        yield url, cert, p
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(10)


def _limit_files(n: int) -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_NOFILE, (n, n))


def _silent_connections(port: int, stop: threading.Event, opened: list[int]) -> None:
    """Connections that never send a byte (no ClientHello), re-opened as they close."""
    sel = selectors.DefaultSelector()
    live = 0

    def open_one(i: int) -> None:
        nonlocal live
        s = socket.socket()
        s.setblocking(False)
        s.bind((ATTACKERS[i % len(ATTACKERS)], 0))
        with contextlib.suppress(BlockingIOError):
            s.connect(("127.0.0.1", port))
        sel.register(s, selectors.EVENT_READ, i)
        live += 1
        opened[0] += 1

    for i in range(ATTACK):
        open_one(i)
    pending: list[int] = []
    budget, last = 0.0, time.monotonic()
    while not stop.is_set():
        # re-open at up to RATE/s (the issue: ~141/s sustains it; a faster flood is the
        # firewall's job, docs/operations.md#hostile-clients)
        now = time.monotonic()
        budget = min(budget + (now - last) * RATE, RATE)
        last = now
        while pending and budget >= 1:
            open_one(pending.pop())
            budget -= 1
        for key, _ in sel.select(0.01):
            s = key.fileobj
            assert isinstance(s, socket.socket)
            try:
                gone = s.recv(4096) == b""
            except OSError:
                gone = True
            if gone:
                sel.unregister(s)
                s.close()
                live -= 1
                pending.append(key.data)
    for key in list(sel.get_map().values()):
        with contextlib.suppress(OSError):
            key.fileobj.close()  # type: ignore[union-attr]


def test_never_handshaking_tls_connections_do_not_starve_agents(tmp_path: Path) -> None:
    http = {"max_connections": 256, "max_connections_per_client": 16, "header_timeout_s": 2}
    with _tls_manager(tmp_path, nofile=400, **http) as (url, cert, _p):
        port = int(url.rsplit(":", 1)[1])
        stop, opened = threading.Event(), [0]
        attacker = threading.Thread(target=_silent_connections, args=(port, stop, opened))
        attacker.start()
        try:
            time.sleep(2.0)  # the attack is in place (and its first wave already timed out)
            worst, codes = 0.0, []
            for r in range(ROUNDS):
                for i in range(AGENTS):
                    # a new connection per report: the case that failed 30 of 30 in the issue
                    with httpx.Client(
                        verify=ssl.create_default_context(cafile=str(cert)), timeout=5
                    ) as c:
                        t0 = time.perf_counter()
                        resp = c.post(
                            f"{url}/v1/hosts/a{i}/reports",
                            content=report(r + 1, r + 1.0, (0.2, 0.2, 0.2)),
                            headers={
                                "authorization": f"Bearer {_token(i)}",
                                "content-type": "application/json",
                            },
                        )
                        worst = max(worst, time.perf_counter() - t0)
                        codes.append(resp.status_code)
        finally:
            stop.set()
            attacker.join(30)
    assert codes == [200] * (AGENTS * ROUNDS), codes
    # the guard, not luck: silent connections were closed and re-opened many times over
    assert opened[0] > ATTACK + 50, opened[0]
    assert worst < 5.0, worst


def test_a_tls_manager_stops_at_once_with_a_kept_alive_agent(tmp_path: Path) -> None:
    """Before: 30 s (the TLS close waited for the idle agent's close_notify); plain: 0.2 s."""
    with (
        _tls_manager(tmp_path) as (url, cert, p),
        httpx.Client(verify=ssl.create_default_context(cafile=str(cert))) as c,
    ):
        r = c.post(
            f"{url}/v1/hosts/a0/reports",
            content=report(1, 1.0, (0.2, 0.2, 0.2)),
            headers={"authorization": f"Bearer {_token(0)}", "content-type": "application/json"},
        )
        assert r.status_code == 200  # and the connection stays open in the client's pool
        t0 = time.monotonic()
        p.send_signal(signal.SIGTERM)
        p.wait(40)
        took = time.monotonic() - t0
    assert took < 10.0, f"the TLS manager took {took:.1f} s to stop"
