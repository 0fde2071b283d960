"""Opening a libvirt connection: the optional import, the event loop, permanent errors, and
the link that replaces a connection when its daemon dies.

A libvirt connection does not survive its daemon: once ``libvirtd`` is killed or restarted,
every call on the old ``virConnect`` fails (``client socket is closed``) for ever, and the
domain-event callbacks registered on it are gone with it. :class:`LibvirtLink` owns the one
connection a driver uses, notices that it is dead (libvirt's ``isAlive``, which keepalive
makes fail within ``interval x (count + 1)`` seconds on a hung daemon), and opens a new one a
bounded number of times with a growing back-off. Everything else asks the link for the
connection at the moment of use, so nothing keeps the dead one.

The retry loop is written here rather than taken from tenacity or stamina: neither is a
dependency of the agent, and the loop (attempts, back-off, one message naming every
attempt's error) is the same shape as the hot-plug one in :mod:`.hotplug`.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sova.driver.base import DriverError
from sova.install import install_hint

try:
    import libvirt
except ImportError:  # pragma: no cover - exercised only where libvirt-python is absent
    libvirt = None


def require_libvirt() -> Any:
    if libvirt is None:
        raise DriverError(
            f"libvirt-python is not installed: {install_hint('agent')} "
            "(builds against libvirt-dev; or use the distribution's python3-libvirt)"
        )
    return libvirt


_loop_lock = threading.Lock()
_loop_started = False


def ensure_event_loop() -> None:
    """Start libvirt's default event loop once per process (before any connection opens).

    Without it libvirt delivers no domain events at all, and hot-plug could only be
    confirmed by polling the XML.
    """
    global _loop_started
    lv = require_libvirt()
    with _loop_lock:
        if _loop_started:
            return
        lv.virEventRegisterDefaultImpl()

        def run() -> None:
            while True:
                lv.virEventRunDefaultImpl()

        threading.Thread(target=run, name="libvirt-events", daemon=True).start()
        _loop_started = True


_log = logging.getLogger("sova.driver.libvirt")


def open_connection(uri: str, read_only: bool, timeout_s: float | None = None) -> Any:
    """A new connection to ``uri``; with ``timeout_s``, a daemon that accepts the socket but
    never answers fails the open after that long (libvirt's open itself has no timeout: the
    attempt is left to finish on its own thread, and what it opens late is closed)."""
    lv = require_libvirt()
    # libvirt prints every error to stderr by default; we report them ourselves.
    lv.registerErrorHandler(lambda _ctx, _err: None, None)
    ensure_event_loop()

    def attempt() -> Any:
        try:
            return lv.openReadOnly(uri) if read_only else lv.open(uri)
        except lv.libvirtError as e:
            raise DriverError(f"cannot connect to {uri}: {e}") from e

    if timeout_s is None:
        return attempt()
    lock = threading.Lock()
    state: dict[str, Any] = {}
    done = threading.Event()

    def run() -> None:
        result: Any
        try:
            result = attempt()
        except DriverError as e:
            result = e
        with lock:
            if state.get("abandoned"):
                if not isinstance(result, DriverError):
                    with contextlib.suppress(Exception):
                        result.close()
                return
            state["result"] = result
        done.set()

    threading.Thread(target=run, name="libvirt-open", daemon=True).start()
    if not done.wait(timeout_s):
        with lock:
            if "result" not in state:
                state["abandoned"] = True
                raise DriverError(f"cannot connect to {uri}: no answer within {timeout_s:g} s")
    result = state["result"]
    if isinstance(result, DriverError):
        raise result
    return result


@dataclass(frozen=True)
class ReconnectPolicy:
    attempts: int = 3
    backoff_s: float = 1.0  # before attempt n+1: backoff_s x 2^(n-1)
    connect_timeout_s: float = 10.0  # per attempt

    def budget_s(self) -> float:
        """Longest :meth:`LibvirtLink.ensure` may take before it gives up."""
        n = self.attempts
        return float(self.connect_timeout_s * n + self.backoff_s * (2 ** max(0, n - 1) - 1))


class LibvirtLink:
    """The driver's one connection, replaced by a new one when its daemon is gone.

    ``opener`` opens a connection (with its own timeout); a connection handed in as
    ``conn`` belongs to the caller (tests, the dry run's shared connection) and is never
    replaced. ``generation`` counts the connections opened after the first.
    """

    def __init__(
        self,
        uri: str,
        opener: Callable[[], Any],
        policy: ReconnectPolicy,
        keepalive: tuple[int, int] = (0, 0),
        conn: Any | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.uri = uri
        self.policy = policy
        self.generation = 0
        self._opener = opener
        self._keepalive = keepalive
        self._sleep = sleep
        self._owned = conn is None
        self._lock = threading.Lock()
        self._lost = ""  # why libvirt closed the connection, as its close callback said
        self._conn = conn if conn is not None else self._open()

    @property
    def conn(self) -> Any:
        return self._conn

    def _open(self) -> Any:
        conn = self._opener()
        if self._keepalive[0] > 0:
            with contextlib.suppress(Exception):  # local/test URIs have no keepalive
                conn.setKeepAlive(*self._keepalive)
        with contextlib.suppress(Exception):  # not every driver reports its close
            conn.registerCloseCallback(self._closed, None)
        return conn

    def _closed(self, _conn: Any, reason: int, _opaque: Any) -> None:
        why = _CLOSE_REASONS.get(reason, f"reason {reason}")
        self._lost = why
        _log.warning("libvirt connection to %s closed (%s)", self.uri, why)

    def alive(self) -> bool:
        """The connection still reaches its daemon, as far as libvirt knows without a call."""
        if not self._owned:
            return True
        try:
            return bool(self._conn.isAlive())
        except Exception:
            return False

    def ensure(self) -> bool:
        """Reconnect if the connection is dead; True when a new one was opened just now.

        Raises :class:`DriverError` after ``policy.attempts`` failed opens: the caller then
        has no connection to read the host with, and must not act on what it read before.
        """
        with self._lock:
            if self.alive():
                return False
            why = self._lost or "the connection is no longer alive"
            errors: list[str] = []
            for n in range(1, self.policy.attempts + 1):
                try:
                    conn = self._open()
                except DriverError as e:
                    errors.append(str(e))
                    if n < self.policy.attempts:
                        self._sleep(self.policy.backoff_s * 2 ** (n - 1))
                    continue
                old, self._conn, self._lost = self._conn, conn, ""
                self.generation += 1
                with contextlib.suppress(Exception):
                    old.close()
                _log.warning("libvirt connection to %s replaced (%s; attempt %d)", self.uri, why, n)
                return True
            raise DriverError(
                f"libvirt connection to {self.uri} lost ({why}): {self.policy.attempts} "
                f"reconnect attempts failed, last: {errors[-1]}"
            )


_CLOSE_REASONS = {0: "error", 1: "end of file", 2: "keepalive timeout", 3: "client closed"}


def is_permanent(e: Any) -> bool:
    """Errors a retry cannot fix: the request itself is wrong or unsupported here."""
    lv = require_libvirt()
    return e.get_error_code() in (
        lv.VIR_ERR_NO_SUPPORT,
        lv.VIR_ERR_CONFIG_UNSUPPORTED,
        lv.VIR_ERR_XML_ERROR,
        lv.VIR_ERR_XML_DETAIL,
        lv.VIR_ERR_INVALID_ARG,
        lv.VIR_ERR_NO_DOMAIN,
    )
