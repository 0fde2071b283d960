"""Fixtures for the control-plane tests: a manager app on a temporary store, helpers to
build reports, and real loopback servers for the tests that need processes."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from sova.manager.daemons.config import ManagerSettings
from sova.manager.daemons.schema import Report, build_report, encode
from sova.manager.daemons.service.app import create_app
from sova.manager.daemons.service.store import Store
from sova.policy.hotspot import Utilisation, VMLoad

TOKENS = {"h1": "t1-" + "a" * 29, "h2": "t2-" + "b" * 29, "h3": "t3-" + "c" * 29}
ADMIN = "admin-" + "z" * 26
REPO = Path(__file__).resolve().parents[2]
DATA = Path(__file__).with_name("data")


def manager_settings(**kw: Any) -> ManagerSettings:
    base: dict[str, Any] = {
        "hosts": {h: {"token": t} for h, t in TOKENS.items()},
        "plan_period_s": 0,
        "planner": {"alpha": 0.75, "k": 3, "n": 5},
        # Operator routes without a credential (issue 21 makes loopback need one too);
        # the tests of credentials and roles set admin_token or operators_file.
        "insecure": True,
    }
    base.update(kw)
    return ManagerSettings.model_validate(base)


def auth(host: str) -> dict[str, str]:
    return {"authorization": f"Bearer {TOKENS[host]}", "content-type": "application/json"}


def report(
    seq: int,
    t: float,
    util: tuple[float, float, float],
    vms: dict[str, tuple[float, float, float]] | None = None,
    ack: int = 0,
    boot: str = "",
) -> bytes:
    loads = {
        n: VMLoad(Utilisation(*u), 512 * 2**20)
        for n, u in (vms or {"vm-x": (0.1, 0.1, 0.1)}).items()
    }
    body = build_report(seq, t, Utilisation(*util), loads, ack=ack)
    if boot:  # an agent that names its boot (every agent since issue 10)
        body = body.model_copy(update={"boot": boot})
    return encode(body)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store(f"sqlite:///{tmp_path / 'manager.db'}")
    yield s
    s.close()


class Api:
    """The manager app behind an in-process ASGI client (no network)."""

    def __init__(
        self, settings: ManagerSettings, store: Store, clock: Callable[[], float] | None = None
    ) -> None:
        self.app = create_app(settings, store, clock=clock)
        self.svc = self.app.state.service
        self.loop = asyncio.new_event_loop()
        self.client = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=self.app), base_url="http://manager"
        )

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    def post(self, path: str, **kw: Any) -> httpx.Response:
        return self.run(self.client.post(path, **kw))

    def get(self, path: str, **kw: Any) -> httpx.Response:
        return self.run(self.client.get(path, **kw))

    def tick(self, now: float) -> Any:
        return self.run(self.svc.tick(now))

    def drain(self) -> None:
        self.run(self.svc.drain())

    def close(self) -> None:
        self.run(self.client.aclose())
        self.run(self.svc.close())
        self.loop.close()


@pytest.fixture
def api_factory(store: Store) -> Iterator[Callable[..., Api]]:
    made: list[Api] = []

    def make(wall_clock: Callable[[], float] | None = None, **kw: Any) -> Api:
        a = Api(manager_settings(**kw), store, wall_clock)
        made.append(a)
        return a

    yield make
    for a in made:
        with contextlib.suppress(Exception):
            a.close()


@pytest.fixture
def api(api_factory: Callable[..., Api]) -> Api:
    return api_factory()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def uvicorn_thread(app: Any, port: int) -> Iterator[Any]:
    """A real uvicorn server on 127.0.0.1 in a thread (for synchronous clients)."""
    import uvicorn

    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    )
    th = threading.Thread(target=server.run, daemon=True)
    th.start()
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    assert server.started, "uvicorn did not start"
    try:
        yield server
    finally:
        server.should_exit = True
        th.join(10)


def spawn(args: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, *args],
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
        env={**os.environ, **(env or {})},
        cwd=REPO,
    )


def wait_until(pred: Callable[[], Any], timeout: float, what: str, every: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            last = pred()
            if last:
                return last
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what} (last: {last!r})")


def wait_for_process(
    proc: subprocess.Popen[bytes], pred: Callable[[], Any], timeout: float, what: str
) -> Any:
    """:func:`wait_until` for a daemon's state: on a timeout the daemon prints every
    thread's stack into its log first (SIGUSR1, ``sova.manager.daemons.logs.dump_stacks_on_signal``)
    and the error says whether it still runs, so a hang in CI says where it hung."""
    try:
        return wait_until(pred, timeout, what)
    except AssertionError as exc:
        code = proc.poll()
        if code is None:
            proc.send_signal(signal.SIGUSR1)
            time.sleep(1.0)  # faulthandler writes from a signal handler: let it finish
        state = "still running (stacks in its log)" if code is None else f"exited {code}"
        raise AssertionError(f"{exc}; the process {state}") from None


def parse_report(body: bytes) -> Report:
    return Report.model_validate_json(body)


# --------------------------------------------------------------------------- a daemon cluster


@contextlib.contextmanager
def running_cluster(
    scenario: Path,
    tmp_path: Path,
    *,
    policy: str = "sova",
    show_logs: str | None = "*.log",
    start: dict[str, Any] | None = None,
    **kw: Any,
) -> Iterator[Any]:
    """The processes ``sova demo`` runs (world, manager, one agent per host) on loopback,
    started with ``start`` and stopped however the test ends; the logs matching
    ``show_logs`` are printed on the way out (pytest shows them when a test fails)."""
    from sova.demo import Cluster, pick_policy
    from sova.scenario import load_scenario

    scn = load_scenario(scenario)
    with tempfile.TemporaryDirectory() as work:
        c = Cluster(
            scenario,
            scn,
            pick_policy(scn, policy),
            tmp_path / "out",
            Path(work),
            log_dir=tmp_path / "logs",
            **kw,
        )
        try:
            c.start(**(start or {}))
            yield c
        finally:
            c.stop()
            for log in sorted((tmp_path / "logs").glob(show_logs)) if show_logs else ():
                print(f"----- {log.name}\n{log.read_text()[-3000:]}")


def world_view(c: Any) -> dict[str, Any]:
    """The world's view of the cluster (hosts, VMs, paused, done)."""
    view: dict[str, Any] = httpx.get(c.world_url + "/v1/world/view", timeout=5).json()
    return view
