"""Connection-level limits for the manager's HTTP server (a small uvicorn protocol guard).

Why our own: uvicorn 0.3x has a keep-alive timeout and ``limit_concurrency``, but no timeout
for a request's *head*, no limit on the head's size with httptools, no per-client limit, and
``limit_concurrency`` counts idle connections — so ~4,000 idle or half-sent connections made
every agent's report a 503 for as long as they were held, and one 50 MB header kept the
event loop busy parsing for seconds. h11's ``h11_max_incomplete_event_size`` bounds the head
but not its time, and h11 costs ~3x httptools' CPU per request at 1,000 reports/s. So this
subclasses whichever protocol uvicorn would use and adds, per connection:

* **head timeout** (``header_timeout_s``): a request head must be complete this long after
  the connection opens, or after its first byte on a kept-alive connection; else the
  connection is closed. This is also the idle timeout of a connection that never sends
  anything;
* **head size** (``max_header_bytes``): more bytes than this before the head is complete →
  431 and close, before the parser sees them;
* **per-client connections** (``max_connections_per_client``, by peer address): more → the
  new connection is closed at once;
* **total connections** (``max_connections``): at the limit, the oldest connection with no
  request in flight is closed to make room (as nginx reuses idle keep-alive connections), so
  idle connections can never keep a working client out.

**TLS** is done here too, not by the event loop's server: there the connection reaches
the protocol only once its handshake is complete, so 9,000 connections that never finished
one escaped every limit above and held the manager's descriptors (issue 21). Here a TLS
connection is counted, limited and timed from its first byte like a plain one: the
handshake and the request head share ``header_timeout_s``. And an idle kept-alive TLS
connection is aborted at shutdown (a TLS close waits up to 30 s for the peer's close_notify,
which an idle agent never sends).

The body's read timeout is enforced where the body is read (:mod:`sova.manager.daemons.service.guard`);
the idle time between requests on a kept-alive connection is uvicorn's ``timeout_keep_alive``.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import ssl
from asyncio import sslproto
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

log = logging.getLogger("sova.manager")

# How long a TLS close waits for the peer's close_notify (asyncio's default: 30 s).
_TLS_SHUTDOWN_S = 2.0

_431 = (
    b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 0\r\n"
    b"connection: close\r\n\r\n"
)


class ConnLimits(BaseModel):
    """``[http]`` of the manager's settings."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    header_timeout_s: float = Field(default=5.0, gt=0, le=300)
    body_timeout_s: float = Field(default=5.0, gt=0, le=300)
    idle_timeout_s: float = Field(default=30.0, gt=0, le=3600)
    max_header_bytes: int = Field(default=16 * 1024, ge=1024, le=1 << 20)
    max_connections_per_client: int = Field(default=64, ge=1, le=100_000)
    max_connections: int = Field(default=8192, ge=16, le=1_000_000)


@dataclass
class _Book:
    """Shared by every connection of one server (the event loop's thread only)."""

    limits: ConnLimits
    per_client: collections.Counter[str] = field(default_factory=collections.Counter)
    # Insertion-ordered: the first entries are the connections idle the longest.
    idle: dict[Any, None] = field(default_factory=dict)
    open: int = 0
    refused: int = 0
    evicted: int = 0
    timed_out: int = 0
    too_large: int = 0
    handshake_failed: int = 0


# uvicorn's protocol class is chosen at run time (base_protocol()), so the guard is a
# mixin that guarded() places before it; typed as Any because that base is.
_ProtocolBase: Any = asyncio.Protocol


class _Guard(_ProtocolBase):  # type: ignore[misc]
    """The limits on one server's connections, over uvicorn's HTTP protocol (see
    :func:`guarded`, which sets the class attributes)."""

    guard_book: _Book  # shared by every connection of the server
    guard_limits: ConnLimits
    guard_tls: ssl.SSLContext | None

    def connection_made(self, transport: Any) -> None:
        peer = transport.get_extra_info("peername")
        self._peer = str(peer[0]) if peer else ""
        self._refused = False
        self._in_head = False
        self._head_bytes = 0
        self._head_timer: asyncio.TimerHandle | None = None
        self._counted = False
        self._handshaking = False
        self._early: list[bytes] = []
        if self.guard_book.per_client[self._peer] >= self.guard_limits.max_connections_per_client:
            self._refused = True
            self.guard_book.refused += 1
            log.debug(
                "refused %s: %d connections from it",
                self._peer,
                self.guard_limits.max_connections_per_client,
            )
            transport.abort()
            return
        if self.guard_book.open >= self.guard_limits.max_connections:
            if not self.guard_book.idle:
                self._refused = True
                self.guard_book.refused += 1
                log.debug("refused %s: %d connections, none idle", self._peer, self.guard_book.open)
                transport.abort()
                return
            oldest = next(iter(self.guard_book.idle))
            self.guard_book.evicted += 1
            oldest._close_idle()
        self.guard_book.per_client[self._peer] += 1
        self.guard_book.open += 1
        self._counted = True
        if self.guard_tls is None:
            super().connection_made(transport)
            self._await_head(arm=True)
            return
        # The handshake runs under the head's timer: a peer that never completes it is
        # closed like one that never sends a head, and counts against the same limits.
        self.transport = transport
        self._handshaking = True
        self._await_head(arm=True)
        # What loop.start_tls does, but now: an awaited start_tls begins a loop turn
        # later, and uvloop starts reading as soon as connection_made returns, so the
        # ClientHello could reach the HTTP parser first.
        loop = asyncio.get_running_loop()
        waiter = loop.create_future()
        self._tls = sslproto.SSLProtocol(
            loop,
            self,
            self.guard_tls,
            waiter,
            server_side=True,
            call_connection_made=False,
            ssl_handshake_timeout=self.guard_limits.header_timeout_s,  # type: ignore[arg-type]
            ssl_shutdown_timeout=_TLS_SHUTDOWN_S,
        )
        transport.set_protocol(self._tls)
        self._tls.connection_made(transport)
        waiter.add_done_callback(self._handshake_done)

    def _handshake_done(self, waiter: asyncio.Future[None]) -> None:
        # A peer that closes mid-handshake wakes the waiter without an exception;
        # the TLS transport is gone then.
        failed = (
            waiter.cancelled() or waiter.exception() is not None or self._tls._app_transport is None
        )
        if failed or not self._counted:
            if failed:
                self.guard_book.handshake_failed += 1
            self.transport.abort()
            self._release()
            return
        self._handshaking = False
        in_head = self._in_head
        super().connection_made(self._tls._app_transport)
        self._in_head = in_head  # the head timer keeps running from the connect
        early, self._early = self._early, []
        for data in early:
            self.data_received(data)

    def shutdown(self) -> None:
        """Server shutdown: an idle connection is aborted at once (nothing is lost;
        a TLS close would wait for the peer's close_notify), a busy one finishes."""
        if self._handshaking:
            self.transport.abort()
            return
        if self.guard_tls is not None and self._in_head and self._head_bytes == 0:
            self.transport.abort()
            return
        super().shutdown()

    def _release(self) -> None:
        if not self._counted:
            return
        self._counted = False
        self._head_done()
        self.guard_book.open -= 1
        self.guard_book.per_client[self._peer] -= 1
        if self.guard_book.per_client[self._peer] <= 0:
            del self.guard_book.per_client[self._peer]

    def _await_head(self, arm: bool) -> None:
        """Waiting for a request head. On a new connection the head timer runs from now
        (a connection that sends nothing is closed); between requests on a kept-alive
        connection it starts with the next head's first byte, and idleness before it
        is uvicorn's ``timeout_keep_alive``."""
        self._in_head = True
        self._head_bytes = 0
        self.guard_book.idle[self] = None
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        if arm:
            self._arm_head_timer()

    def _arm_head_timer(self) -> None:
        loop = asyncio.get_running_loop()
        self._head_timer = loop.call_later(self.guard_limits.header_timeout_s, self._head_timeout)

    def _head_done(self) -> None:
        self._in_head = False
        self.guard_book.idle.pop(self, None)
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timeout(self) -> None:
        self._head_timer = None
        if self._in_head:
            self.guard_book.timed_out += 1
            self._close_idle()

    def _close_idle(self) -> None:
        self.guard_book.idle.pop(self, None)
        self.transport.close()

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        if self._handshaking:
            # Application data right behind the client's Finished (one TCP segment)
            # arrives before the handshake's waiter callback has run: keep it for
            # the HTTP parser, within the head's size limit.
            self._early.append(data)
            if sum(map(len, self._early)) > self.guard_limits.max_header_bytes:
                self.guard_book.too_large += 1
                self.transport.abort()
            return
        if self._in_head:
            if self._head_timer is None:
                self._arm_head_timer()  # a head begins on a kept-alive connection
            self._head_bytes += len(data)
            if self._head_bytes > self.guard_limits.max_header_bytes:
                self.guard_book.too_large += 1
                self._head_done()
                self.transport.write(_431)
                self.transport.close()
                return
            before = self.cycle
            super().data_received(data)
            if self.cycle is not None and self.cycle is not before:
                self._head_done()  # a request began: its head is complete
            return
        super().data_received(data)

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._await_head(arm=False)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._refused:
            return
        self._release()
        if self._handshaking:
            return  # uvicorn's protocol never saw this connection
        super().connection_lost(exc)


def guarded(
    base: type[asyncio.Protocol], limits: ConnLimits, tls: ssl.SSLContext | None = None
) -> type[asyncio.Protocol]:
    """A subclass of uvicorn's HTTP protocol ``base`` enforcing ``limits`` (and serving TLS
    with ``tls``: then give uvicorn no certificate of its own)."""
    attrs = {"guard_book": _Book(limits), "guard_limits": limits, "guard_tls": tls}
    return type("Guarded", (_Guard, base), attrs)


def base_protocol() -> type[asyncio.Protocol]:
    """The protocol uvicorn's ``http = "auto"`` would pick."""
    try:
        import httptools  # noqa: F401
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

        return HttpToolsProtocol
    except ImportError:  # pragma: no cover - depends on the install
        from uvicorn.protocols.http.h11_impl import H11Protocol

        return H11Protocol
