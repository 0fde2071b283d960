"""A loopback webhook receiver for the tests: a real HTTP server in a thread that records
every POST and answers what the test scripts (200 unless told otherwise)."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Post:
    body: bytes
    headers: dict[str, str]
    status: int  # what the receiver answered
    at: float  # time.monotonic() of its arrival

    @property
    def event(self) -> dict[str, Any]:
        return dict(json.loads(self.body))


@dataclass
class Receiver:
    url: str
    posts: list[Post] = field(default_factory=list)
    # Called with the event; returns the status to answer (and may sleep).
    answer: Callable[[dict[str, Any]], int] = lambda _ev: 200
    lock: threading.Lock = field(default_factory=threading.Lock)
    trickle_s: float = 0.0  # > 0: the answer's body comes a byte at a time, this far apart

    def accepted(self) -> list[dict[str, Any]]:
        """The events answered with a 2xx, in arrival order."""
        with self.lock:
            return [p.event for p in self.posts if 200 <= p.status < 300]

    def wait_for(self, pred: Callable[[list[dict[str, Any]]], bool], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if pred(self.accepted()):
                return
            time.sleep(0.05)
        raise AssertionError(f"not received in {timeout} s: {[e['type'] for e in self.accepted()]}")


@contextlib.contextmanager
def receiver() -> Iterator[Receiver]:
    rec: Receiver

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            t0 = time.monotonic()
            body = self.rfile.read(int(self.headers["Content-Length"]))
            status = rec.answer(json.loads(body))
            with rec.lock:
                rec.posts.append(
                    Post(body, {k.lower(): v for k, v in self.headers.items()}, status, t0)
                )
            self.send_response(status)
            if not rec.trickle_s:
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            # An answer that keeps coming: 10 bytes, each after trickle_s.
            self.send_header("Content-Length", "10")
            self.end_headers()
            for _ in range(10):
                self.wfile.flush()
                time.sleep(rec.trickle_s)
                self.wfile.write(b".")

        def log_message(self, *_a: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    rec = Receiver(f"http://127.0.0.1:{server.server_address[1]}/hook")
    th = threading.Thread(target=server.serve_forever, daemon=True)
    th.start()
    try:
        yield rec
    finally:
        server.shutdown()
        server.server_close()
