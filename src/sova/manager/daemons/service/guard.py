"""The manager's HTTP guard: authentication, body-size limit and request timing, before
FastAPI sees a request.

Pure ASGI (no BaseHTTPMiddleware): it runs on every report, so it must cost microseconds.
Authentication runs *before* the body is read or parsed, so a request with a missing or
wrong token gets 401 and changes nothing, whatever its body; the body is then read up to
``max_report_bytes`` and handed on unchanged.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import TYPE_CHECKING, Any, Protocol

from prometheus_client import Histogram

from sova.manager.daemons.credentials import Credential
from sova.manager.daemons.schema import FIELD_NAMES

if TYPE_CHECKING:
    from sova.manager.daemons.config import ManagerSettings
    from sova.manager.daemons.security import TokenBook
    from sova.manager.daemons.service.service import ManagerService


class Authority(Protocol):
    """Whose credentials decide: the leader's service, or a standby's (standby_reads)."""

    @property
    def settings(self) -> ManagerSettings: ...

    @property
    def tokens(self) -> TokenBook: ...


def _bearer(headers: list[tuple[bytes, bytes]]) -> bytes | None:
    for k, v in headers:
        if k == b"authorization":
            scheme, _, token = v.partition(b" ")
            if scheme.lower() == b"bearer" and token:
                return token.strip()
    return None


def _header(headers: list[tuple[bytes, bytes]], name: bytes) -> bytes | None:
    for k, v in headers:
        if k == name:
            return v
    return None


ASGIApp = Callable[
    [MutableMapping[str, Any], Callable[[], Awaitable[Any]], Callable[[Any], Awaitable[None]]],
    Awaitable[None],
]


class GuardMiddleware:
    """Authentication, body-size limit and request timing, before FastAPI sees the request.

    Pure ASGI (no BaseHTTPMiddleware): it runs on every report, so it must cost microseconds.
    The body is read here, up to the limit, so that an oversized or unauthenticated request
    is refused before any parsing, and handed on unchanged otherwise.
    """

    def __init__(self, app: ASGIApp, service: ManagerService) -> None:
        self.app = app
        self.service = service
        self._timers: dict[str, Histogram] = {}

    async def __call__(
        self,
        scope: MutableMapping[str, Any],
        receive: Callable[[], Awaitable[Any]],
        send: Callable[[Any], Awaitable[None]],
    ) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        path: str = scope["path"]
        method: str = scope["method"]
        endpoint = _endpoint(path)
        try:
            await self._handle(scope, receive, send, path, method, endpoint)
        finally:
            timer = self._timers.get(endpoint)
            if timer is None:  # a handful of endpoints: labels() once each, not per request
                timer = self._timers[endpoint] = self.service.metrics.request_duration.labels(
                    endpoint
                )
            timer.observe(time.perf_counter() - started)

    async def _handle(
        self,
        scope: MutableMapping[str, Any],
        receive: Callable[[], Awaitable[Any]],
        send: Callable[[Any], Awaitable[None]],
        path: str,
        method: str,
        endpoint: str,
    ) -> None:
        if not await self._admit(scope, send, path, method, endpoint):
            return
        if method in ("POST", "PUT", "PATCH"):
            whole = await self._body(scope, receive, send, endpoint)
            if whole is None:
                return
            twice, decoded = _decode(whole)
            if twice is not None:
                if endpoint == "report":
                    self.service.metrics.reports.labels("rejected").inc()
                await _send_json(send, 422, _given_twice(twice))
                return
            if endpoint == "report" and isinstance(decoded, dict):
                # Decoded once: the reports' fast path (routes_agents.ReportFastPath)
                # validates this object instead of parsing the body again.
                scope["state"][DECODED_REPORT] = decoded
            sent = False

            async def replay() -> Any:
                nonlocal sent
                if not sent:
                    sent = True
                    return {"type": "http.request", "body": whole, "more_body": False}
                return await receive()

            await self.app(scope, replay, send)
            return
        await self.app(scope, receive, send)

    async def _admit(
        self,
        scope: MutableMapping[str, Any],
        send: Callable[[Any], Awaitable[None]],
        path: str,
        method: str,
        endpoint: str,
    ) -> bool:
        """The request's credential, checked for its endpoint and noted in its state; False
        when refused (the 401 or 403 is sent)."""
        svc = self.service
        headers: list[tuple[bytes, bytes]] = scope["headers"]
        token = _bearer(headers)
        parts = path.strip("/").split("/")
        if endpoint in ("report", "directive"):
            host = parts[2] if len(parts) > 2 else ""
            agent = svc.check_host_token(host, token)
            ok = agent or (endpoint == "directive" and svc.tokens.operator(token) is not None)
            if not ok:
                if endpoint == "report":
                    svc.metrics.reports.labels("unauthorized").inc()
                await _send_json(send, 401, {"detail": "missing or invalid token for this host"})
                return False
            scope.setdefault("state", {})["sova_host"] = host
            # Only the host's own agent takes delivery of its directive; an operator reads it.
            scope["state"]["sova_agent"] = agent
        elif endpoint == "done":
            host = (_header(headers, b"x-sova-host") or b"").decode("latin-1")
            if not svc.check_host_token(host, token):
                await _send_json(send, 401, {"detail": "missing or invalid token for this host"})
                return False
            scope.setdefault("state", {})["sova_host"] = host
        elif endpoint in ("operator", "metrics"):
            status, cred_or_why = authorize(svc, token, method, path)
            if isinstance(cred_or_why, str):
                await _send_json(send, status, {"detail": cred_or_why})
                return False
            scope.setdefault("state", {})["sova_operator"] = cred_or_why
        return True

    async def _body(
        self,
        scope: MutableMapping[str, Any],
        receive: Callable[[], Awaitable[Any]],
        send: Callable[[Any], Awaitable[None]],
        endpoint: str,
    ) -> bytes | None:
        """The whole body, within the size limit and the body timeout; None when it is
        refused (413 or 408 sent) or the client went away."""
        svc = self.service
        limit = svc.settings.max_report_bytes
        declared = _header(scope["headers"], b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > limit):
            if endpoint == "report":
                svc.metrics.reports.labels("too_large").inc()
            await _send_json(send, 413, _too_large(limit))
            return None
        chunks: list[bytes] = []
        size = 0
        deadline = time.monotonic() + svc.settings.http.body_timeout_s
        while True:
            try:
                # A client that sends its body slowly (or not at all) must not hold a
                # connection and a task for ever. (asyncio.timeout, not wait_for: no
                # task per message on the reports' path.)
                async with asyncio.timeout(deadline - time.monotonic()):
                    msg = await receive()
            except TimeoutError:
                await _send_json(send, 408, {"detail": "request body not received in time"})
                return None
            if msg["type"] == "http.disconnect":
                return None
            body = msg.get("body", b"")
            size += len(body)
            if size > limit:
                if endpoint == "report":
                    svc.metrics.reports.labels("too_large").inc()
                await _send_json(send, 413, _too_large(limit))
                return None
            chunks.append(body)
            if not msg.get("more_body", False):
                return b"".join(chunks)


# The scope's state key under which a report's body, decoded, is handed on.
DECODED_REPORT = "sova_report_json"

ANONYMOUS = Credential("anonymous", "admin")  # insecure = true and no credential configured


def required_role(method: str, path: str) -> str:
    """The least role a request needs: reads are a viewer's, credential management an
    admin's, every other change an operator's."""
    if path.startswith("/v1/credentials"):
        return "admin"
    if method in ("GET", "HEAD", "OPTIONS"):
        return "viewer"
    return "operator"


def authorize(
    svc: Authority, token: bytes | None, method: str, path: str
) -> tuple[int, Credential | str]:
    """(200, the caller's credential) or (401/403, why)."""
    cred = svc.tokens.operator(token)
    if cred is None:
        if len(svc.tokens.operators) == 0:
            if svc.settings.insecure:
                return 200, ANONYMOUS
            return 401, (
                "no operator credential is configured (admin_token or operators_file): "
                "every operator request is refused unless insecure = true"
            )
        return 401, "missing or invalid operator token"
    need = required_role(method, path)
    if not cred.may(need):
        return 403, f"credential {cred.name} has role {cred.role}; {method} {path} needs {need}"
    return 200, cred


class _Twice(ValueError):
    pass


def _no_twice(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise _Twice(k)
        out[k] = v
    return out


_NOT_JSON = object()
_PAIRS = json.JSONDecoder(object_pairs_hook=_no_twice)


def _decode(body: bytes) -> tuple[str | None, Any]:
    """(a key given twice in a JSON object of ``body``, or None; the decoded body, or
    ``_NOT_JSON``). A key given twice is refused: the parser keeps the last, a proxy or a
    log reader may keep the first. A body that is not JSON is left to the route's own
    error."""
    if not body:
        return None, _NOT_JSON
    try:
        try:
            # An agent's report is UTF-8: one decoder for all, no encoding detection.
            return None, _PAIRS.decode(body.decode())
        except _Twice:
            raise
        except ValueError:  # perhaps UTF-16/32 or a BOM, which json.loads detects
            return None, json.loads(body, object_pairs_hook=_no_twice)
    except _Twice as exc:
        return str(exc), _NOT_JSON
    except ValueError:  # not JSON, not UTF-8: the route says so as it always did
        return None, _NOT_JSON


def _given_twice(key: str) -> dict[str, Any]:
    long = FIELD_NAMES.get(key)
    field = f"{key} ({long})" if long else key
    field = field[:80].encode("ascii", "backslashreplace").decode()
    msg = "a key given twice in one JSON object"
    item = {"loc": ["body", field], "msg": msg, "type": "duplicate_key", "field": field}
    return {"detail": [item], "error": f"{field}: {msg}"}


def _too_large(limit: int) -> dict[str, Any]:
    return {
        "detail": [
            {
                "loc": ["body"],
                "msg": f"request body larger than {limit} bytes",
                "type": "too_large",
                "field": "body",
            }
        ],
        "error": f"body: larger than {limit} bytes",
    }


def _endpoint(path: str) -> str:
    if path.startswith("/v1/hosts/"):
        if path.endswith("/reports"):
            return "report"
        if path.endswith("/directive"):
            return "directive"
    elif path.startswith("/v1/migrations/"):
        return "done"
    # Everything else under /v1 is the operators' (reads and changes alike): a credential
    # whose role allows the method (viewer reads, operator changes, admin manages tokens).
    if path.startswith("/v1/"):
        return "operator"
    return {
        "/metrics": "metrics",
        "/healthz": "healthz",
        "/readyz": "readyz",
    }.get(path, "other")


async def _send_json(send: Callable[[Any], Awaitable[None]], status: int, body: Any) -> None:
    payload = json.dumps(body, separators=(",", ":")).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(payload)).encode()),
    ]
    if status == 401:
        headers.append((b"www-authenticate", b'Bearer realm="sova"'))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": payload})
