"""The manager's planner keeps working, and says so, where a large cluster takes it:
past 1,024 descriptors, across wall-clock steps, and when rounds fail (issue 20)."""

from __future__ import annotations

import asyncio
import contextlib
import resource
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from sova.manager.daemons.service.app import create_app
from sova.manager.daemons.service.store import Store

from .conftest import Api, auth, free_port, manager_settings, report, uvicorn_thread

IDLE = 1_100
BOOTS = {"h1": "b1", "h2": "b2", "h3": "b3"}
UTIL = {"h1": (0.3, 0.3, 0.95), "h2": (0.2, 0.2, 0.2), "h3": (0.2, 0.2, 0.2)}  # h1 is hot


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
            deadline = time.monotonic() + 30
            while svc.rounds < before + 3 and time.monotonic() < deadline:
                time.sleep(0.1)
            assert svc.rounds >= before + 3, f"{svc.rounds - before} round(s) in 30 s"
            r = httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=5)
            assert r.status_code == 200, r.text
        finally:
            for s in socks:
                s.close()
    store.close()


class Clocks:
    """The manager's two clocks, moved by the test: wall (display, audit) and monotonic."""

    def __init__(self) -> None:
        self.wall_s = 1_800_000_000.0
        self.mono_s = 1000.0

    def wall(self) -> float:
        return self.wall_s

    def mono(self) -> float:
        return self.mono_s

    def advance(self, dt: float) -> None:
        self.wall_s += dt
        self.mono_s += dt


class InProcess(Api):
    def __init__(self, store: Store, clocks: Clocks, **kw: object) -> None:
        self.app = create_app(
            manager_settings(**kw), store, clock=clocks.wall, monotonic=clocks.mono
        )
        self.svc = self.app.state.service
        self.loop = asyncio.new_event_loop()
        self.client = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=self.app), base_url="http://manager"
        )


@pytest.fixture
def clocks() -> Clocks:
    return Clocks()


@pytest.fixture
def timed(store: Store, clocks: Clocks) -> Iterator[InProcess]:
    a = InProcess(store, clocks, plan_period_s=10)
    yield a
    a.close()


def _send(a: Api, clocks: Clocks, seq: int, hosts: tuple[str, ...] = ("h1", "h2")) -> None:
    for h in hosts:
        r = a.post(
            f"/v1/hosts/{h}/reports",
            content=report(seq, 5_000.0 + 10 * seq, UTIL[h], boot=BOOTS[h]),
            headers=auth(h),
        )
        assert r.status_code == 200, r.text


def test_readyz_turns_503_when_rounds_fail_and_200_when_they_complete_again(
    timed: InProcess, clocks: Clocks, store: Store
) -> None:
    """A store that refuses the round's decision rows (a trigger, as a full or damaged
    table would) while it still takes other writes: before, /readyz stayed 200 because
    only ``can_write`` was asked."""
    for seq in range(1, 6):  # a full window (n = 5): each round logs h1's decision
        _send(timed, clocks, seq)
    timed.tick(clocks.wall())
    assert timed.get("/readyz").status_code == 200
    with store.engine.begin() as conn:
        conn.exec_driver_sql(
            "CREATE TRIGGER refuse BEFORE INSERT ON decisions "
            "BEGIN SELECT RAISE(ABORT, 'decisions refused'); END"
        )
    for seq in (6, 7):
        clocks.advance(10)
        _send(timed, clocks, seq)
        with pytest.raises(Exception, match="decisions refused"):
            timed.tick(clocks.wall())
    r = timed.get("/readyz")
    assert r.status_code == 503, r.text
    assert r.json()["round_failures"] == 2
    assert "planning failed 2 round(s) in a row" in r.json()["status"]
    metrics = timed.get("/metrics").text
    assert "sova_manager_round_consecutive_failures 2.0" in metrics
    assert "sova_manager_round_failures_total 2.0" in metrics
    with store.engine.begin() as conn:
        conn.exec_driver_sql("DROP TRIGGER refuse")
    clocks.advance(10)
    _send(timed, clocks, 8)
    timed.tick(clocks.wall())
    r = timed.get("/readyz")
    assert r.status_code == 200, r.text
    assert r.json()["last_round_s"] == clocks.wall() and r.json()["round_failures"] == 0
    assert "sova_manager_round_consecutive_failures 0.0" in timed.get("/metrics").text


def test_readyz_turns_503_when_no_round_completes_for_two_periods(
    timed: InProcess, clocks: Clocks
) -> None:
    """Rounds every 10 s: 20 s of silence is allowed (plus the last round's duration),
    25 s is not."""
    timed.tick(clocks.wall())
    clocks.advance(19)
    assert timed.get("/readyz").status_code == 200
    clocks.advance(6)
    r = timed.get("/readyz")
    assert r.status_code == 503 and "planning stopped" in r.json()["status"], r.text
    timed.tick(clocks.wall())
    assert timed.get("/readyz").status_code == 200


@pytest.mark.parametrize("step_s", [120.0, -120.0], ids=["forward", "back"])
def test_a_wall_clock_step_refuses_no_report_and_makes_no_host_stale(
    store: Store, clocks: Clocks, step_s: float
) -> None:
    """Three agents report every 10 s on their monotonic clocks; the manager's wall clock
    steps by ±120 s after the 6th period (max_clock_skew_s = 60, stale after 3 periods).
    Before, every report after the step was 422 ``drifted ±120 s`` and all hosts went
    stale."""
    a = InProcess(store, clocks, plan_period_s=10, max_clock_skew_s=60)
    try:
        agent_t = 500.0
        for seq in range(1, 16):
            if seq == 7:
                clocks.wall_s += step_s
            for h in ("h1", "h2", "h3"):
                r = a.post(
                    f"/v1/hosts/{h}/reports",
                    content=report(seq, agent_t, UTIL["h2"], boot=BOOTS[h]),
                    headers=auth(h),
                )
                assert r.status_code == 200, f"seq {seq} {h}: {r.text}"
            a.tick(None)
            text = a.get("/metrics").text
            assert 'sova_manager_hosts{state="stale"} 0.0' in text, seq
            assert 'sova_manager_hosts{state="fresh"} 3.0' in text, seq
            assert a.get("/readyz").status_code == 200
            clocks.advance(10)
            agent_t += 10
        assert 'sova_manager_reports_total{result="accepted"} 45.0' in a.get("/metrics").text
    finally:
        a.close()


def test_readyz_is_503_in_time_while_the_store_stalls(
    timed: InProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 37 (Low): a store that does not answer (PostgreSQL paused, a network
    partition) held /readyz until the store came back, so a probe saw a timeout, not a
    503. Now the store's write check gets 1 s; a stalled one is 503 naming it, and probes
    during the stall share the check in flight (no thread piles up per probe)."""
    calls: list[float] = []

    def stalled(timeout_s: float = 0.5) -> bool:
        calls.append(time.monotonic())
        time.sleep(3.0)
        return True

    monkeypatch.setattr(timed.svc.store, "can_write", stalled)
    answers = []
    for _ in range(2):
        t0 = time.monotonic()
        r = timed.get("/readyz")
        answers.append((r.status_code, time.monotonic() - t0, r.json()["status"]))
    for code, took, status in answers:
        assert code == 503 and took < 2.0, answers
        assert "store" in status and "1 s" in status, status
    assert len(calls) == 1, "each probe started another write check"
