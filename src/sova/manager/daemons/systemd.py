"""systemd service integration: sd_notify readiness, watchdog, and nothing when not under systemd.

Written over the documented datagram protocol (sd_notify(3): one ``KEY=VALUE`` datagram to
the AF_UNIX socket named by ``$NOTIFY_SOCKET``, ``@`` meaning the abstract namespace) rather
than with a library: the protocol is a dozen lines and stable, the maintained bindings
(python-systemd, cysystemd) are C extensions that need libsystemd-dev to build, and the pure
ones on PyPI are unmaintained. Every function is a no-op without ``$NOTIFY_SOCKET``, so the
daemons run unchanged outside systemd and in tests.
"""

from __future__ import annotations

import itertools
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)


def notify(state: str) -> bool:
    """Send ``state`` (e.g. ``READY=1``) to the service manager; False if there is none."""
    addr = os.environ.get("NOTIFY_SOCKET")
    if not addr or addr[0] not in "/@":
        return False
    target = "\0" + addr[1:] if addr[0] == "@" else addr
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as s:
            s.connect(target)
            s.sendall(state.encode())
    except OSError as exc:
        log.warning("sd_notify %s failed: %s", state.split("=")[0], exc)
        return False
    return True


def watchdog_interval() -> float | None:
    """``WatchdogSec`` in seconds when systemd expects this process to ping, else None."""
    usec = os.environ.get("WATCHDOG_USEC")
    pid = os.environ.get("WATCHDOG_PID")
    if not usec or (pid and pid != str(os.getpid())):
        return None
    try:
        value = int(usec) / 1e6
    except ValueError:
        return None
    return value if value > 0 else None


class Watchdog:
    """Pings ``WATCHDOG=1`` while ``progress()`` keeps changing.

    ``progress`` returns anything that changes when the daemon's own loop makes headway
    (the agent: finished control phases). A thread that pinged unconditionally would only
    prove the process exists; this one stops pinging once the loop has made no progress for
    ``stale_after`` seconds (default: the watchdog interval), and systemd restarts the unit.
    """

    def __init__(
        self,
        progress: Callable[[], Any],
        *,
        interval: float | None = None,
        stale_after: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.interval = interval if interval is not None else watchdog_interval()
        self.progress = progress
        self.stale_after = stale_after or self.interval or 0.0
        self.clock = clock
        self._last = progress()
        self._last_change = clock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def check(self) -> bool:
        """Ping if the loop made progress recently; returns whether it pinged."""
        now = self.clock()
        current = self.progress()
        if current != self._last:
            self._last, self._last_change = current, now
        if now - self._last_change > self.stale_after:
            log.error(
                "no progress for %.0f s: not pinging the systemd watchdog", now - self._last_change
            )
            return False
        return notify("WATCHDOG=1")

    def start(self) -> Watchdog:
        if self.interval is None or self._thread is not None:
            return self
        self._thread = threading.Thread(target=self._run, name="sd-watchdog", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        assert self.interval is not None
        while not self._stop.wait(self.interval / 4):
            self.check()

    def stop(self) -> None:
        self._stop.set()


def ready(status: str = "") -> bool:
    """Tell systemd start-up is complete (``Type=notify``)."""
    return notify("READY=1" + (f"\nSTATUS={status}" if status else ""))


def stopping() -> bool:
    return notify("STOPPING=1")


def round_progress(rounds: Callable[[], int], busy: Callable[[], bool]) -> Callable[[], Any]:
    """The manager's progress for :class:`Watchdog`: planning rounds, not HTTP.

    While a round runs (``busy()``), progress is the count of finished rounds, so a round
    that hangs (a store call that never returns, a deadlock) stops the pings once it has
    run ``stale_after`` seconds and systemd restarts the manager. Between rounds the
    planner waits for a timer or for reports, which is not a stall: every call is new
    progress then.
    """
    idle = itertools.count()

    def progress() -> Any:
        return ("round", rounds()) if busy() else ("idle", next(idle))

    return progress


def notifying_uvicorn_server(config: Any, watchdog: Watchdog | None = None) -> Any:
    """A ``uvicorn.Server`` that reports ready once it listens and pings from its event loop.

    uvicorn calls ``on_tick`` every 0.1 s from the event loop's main task, so a ping from
    there proves the loop that serves requests is running; with ``watchdog`` (the manager:
    :func:`round_progress`) the ping also needs the planner to be making progress.
    """
    import uvicorn

    class _Server(uvicorn.Server):
        _ready_sent = False
        _interval = watchdog_interval()
        _last_ping = 0.0

        async def on_tick(self, counter: int) -> bool:
            if self.started and not self._ready_sent:
                self._ready_sent = True
                ready("serving")
            if (
                self._interval is not None
                and time.monotonic() - self._last_ping > self._interval / 4
            ):
                self._last_ping = time.monotonic()
                if watchdog is None:
                    notify("WATCHDOG=1")
                else:
                    watchdog.check()
            return await super().on_tick(counter)

    return _Server(config)
