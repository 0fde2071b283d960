"""The reports' fast path (issue 37, build point 7): a well-formed report is answered
without FastAPI's routing, dependency solving and second parse of the body, and every
answer, fast or not, is the one FastAPI's route gave before, byte for byte."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any

import pytest

from sova.manager.daemons.service.routes_agents import ReportFastPath
from sova.manager.daemons.service.store import Store

from .conftest import TOKENS, Api, auth, manager_settings, report

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Any]]
Send = Callable[[Any], Awaitable[None]]


def _fast_path_of(api: Api) -> ReportFastPath:
    """The ReportFastPath in the app's built middleware stack."""
    api.app.middleware_stack = api.app.build_middleware_stack()
    layer: Any = api.app.middleware_stack
    while not isinstance(layer, ReportFastPath):
        layer = layer.app
    return layer


def _count_fallbacks(api: Api) -> list[str]:
    """Paths the fast path handed on to FastAPI, in order."""
    fast = _fast_path_of(api)
    inner, seen = fast.app, []

    async def counted(scope: Scope, receive: Receive, send: Send) -> None:
        seen.append(f"{scope['method']} {scope['path']}")
        await inner(scope, receive, send)

    fast.app = counted
    return seen


def _without_fast_path(api: Api) -> None:
    """The app as it was before the fast path: every report through FastAPI's route."""
    api.app.user_middleware = [m for m in api.app.user_middleware if m.cls is not ReportFastPath]
    api.app.middleware_stack = None


GOOD = report(1, 10.0, (0.5, 0.5, 0.5), boot="a1")
OLDER = report(1, 9.0, (0.5, 0.5, 0.5), boot="a1")
NEXT = report(2, 20.0, (0.5, 0.5, 0.5), boot="a1")
JSON = {"content-type": "application/json"}
H1 = auth("h1")

# (method, path, headers, body, status, who answers: the guard, the fast path or the
# FastAPI route), run in this order against both apps: the sequence numbers matter (the
# third is a replay of the first's boot, s=1 again).
P = "/v1/hosts/h1/reports"
UTF8 = {**H1, "content-type": "application/json; charset=utf-8"}
WRONG = {**JSON, "authorization": "Bearer wrong"}
TWICE = NEXT[:-1] + b',"s":9}'
CASES: list[tuple[str, str, dict[str, str], bytes, int, str]] = [
    ("POST", P, H1, GOOD, 200, "fast"),
    ("POST", P, H1, GOOD, 200, "fast"),  # a retry: answered again
    ("POST", P, H1, OLDER, 409, "fast"),  # refused by the intake
    ("POST", P, UTF8, NEXT, 200, "fast"),
    ("POST", P, WRONG, NEXT, 401, "guard"),
    ("POST", P, JSON, NEXT, 401, "guard"),  # no token
    ("POST", "/v1/hosts/h2/reports", H1, NEXT, 401, "guard"),  # another host's token
    ("POST", P, H1, b'{"s": 1, "pad": "' + b"x" * 2000 + b'"}', 413, "guard"),
    ("POST", P, H1, b'{"s": 3, "t": ', 422, "route"),  # bad JSON
    ("POST", P, H1, b'{"s": 3, "t": "\xff"}', 400, "route"),  # not UTF-8
    ("POST", P, H1, b"[1, 2]", 422, "route"),  # not an object
    ("POST", P, H1, b"", 422, "route"),  # no body
    ("POST", P, H1, NEXT.replace(b'"s":2', b'"s":-1'), 422, "route"),
    ("POST", P, H1, NEXT.replace(b'"s":2', b'"s":"2"'), 422, "route"),
    ("POST", P, H1, TWICE, 422, "guard"),  # a key given twice
    ("POST", P, {**H1, "content-type": "text/plain"}, NEXT, 422, "route"),
    ("POST", P, {"authorization": H1["authorization"]}, NEXT, 422, "route"),
    ("POST", "/v1/hosts/h1/x/reports", H1, NEXT, 404, "route"),  # not the route
    ("GET", P, H1, b"", 405, "route"),
    ("POST", P, H1, report(3, 30.0, (0.2, 0.2, 0.2), boot="a1"), 200, "fast"),
    # json.loads reads UTF-16 and a UTF-8 byte-order mark; the guard's UTF-8 decoder does
    # not, and falls back to it (a key given twice in UTF-16 is still found)
    (
        "POST",
        P,
        H1,
        report(4, 40.0, (0.2, 0.2, 0.2), boot="a1").decode().encode("utf-16"),
        200,
        "fast",
    ),
    ("POST", P, H1, b"\xef\xbb\xbf" + report(5, 50.0, (0.2, 0.2, 0.2), boot="a1"), 200, "fast"),
    ("POST", P, H1, TWICE.decode().encode("utf-16"), 422, "guard"),
]


def _answers(api: Api) -> list[tuple[int, list[tuple[str, str]], bytes]]:
    out = []
    for method, path, headers, body, _, _ in CASES:
        r = api.run(api.client.request(method, path, headers=headers, content=body))
        out.append((r.status_code, sorted(r.headers.items()), r.content))
    return out


def test_every_answer_is_the_routes_answer_byte_for_byte(tmp_path: Path) -> None:
    """Each request of CASES goes to a manager with the fast path and to one without it
    (the FastAPI route alone, as before): the status, the headers and the body are the
    same, and the fast path took exactly the well-formed reports."""
    apis = []
    for name in ("fast", "route"):
        store = Store(f"sqlite:///{tmp_path / name}.db")
        apis.append((Api(manager_settings(), store), store))
    (fast, fast_store), (route, route_store) = apis
    try:
        fallbacks = _count_fallbacks(fast)
        _without_fast_path(route)
        got, want = _answers(fast), _answers(route)
        for case, g, w in zip(CASES, got, want, strict=True):
            assert g == w, (case[:2], case[3][:60], g, w)
            assert g[0] == case[4], (case[:2], case[3][:60], g)
        # What the guard does not answer itself, the fast path took or handed on.
        assert fallbacks == [f"{c[0]} {c[1]}" for c in CASES if c[5] == "route"]
        assert fast_store.count("host_reports") == route_store.count("host_reports") == 5
        errors = [json.loads(w[2]) for w, c in zip(want, CASES, strict=True) if c[4] == 422]
        assert errors[0]["error"].startswith("body: JSON decode error"), errors[0]
        assert (
            errors[3]["error"] == "s (sequence number): Input should be greater than or equal to 0"
        )
    finally:
        for api, store in apis:
            api.close()
            store.close()


async def _asgi_post(
    api: Api, path: str, token: str, body: bytes, on_start: Callable[[], None]
) -> int:
    """One POST through the app as uvicorn hands it over; ``on_start`` runs as the answer
    starts to go out."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "client": ("127.0.0.1", 40000),
        "server": ("127.0.0.1", 8700),
        "headers": [
            (b"authorization", f"Bearer {token}".encode()),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
        ],
    }
    sent = False

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.sleep(3600)
        return {"type": "http.disconnect"}

    status: list[int] = []

    async def send(msg: dict[str, Any]) -> None:
        if msg["type"] == "http.response.start":
            on_start()
            status.append(int(msg["status"]))

    await api.app(scope, receive, send)
    return status[0]


def test_a_fast_answer_goes_out_only_once_its_row_is_committed(api: Api) -> None:
    """Acknowledged means durable on the fast path too: as each answer starts, the
    report's row is in the store (read through a connection of its own)."""
    fallbacks = _count_fallbacks(api)
    rows_at_answer: list[int] = []

    def count() -> None:
        rows_at_answer.append(api.svc.store.count("host_reports"))

    async def burst() -> list[int]:
        return await asyncio.gather(
            *(
                _asgi_post(api, f"/v1/hosts/{h}/reports", TOKENS[h], GOOD, count)
                for h in ("h1", "h2", "h3")
            )
        )

    assert api.run(burst()) == [200, 200, 200]
    assert fallbacks == []  # all three answered by the fast path
    # Every answer saw at least its own row; the last saw all three.
    assert len(rows_at_answer) == 3 and min(rows_at_answer) >= 1 and rows_at_answer[-1] == 3


def test_a_report_whose_store_write_fails_is_not_acknowledged(api: Api) -> None:
    """The fast path answers 503, as the route did, when the group commit fails."""
    fallbacks = _count_fallbacks(api)

    def broken(rows: Any) -> None:
        raise OSError("disk full")

    api.svc.store.add_reports = broken  # type: ignore[method-assign]
    r = api.post("/v1/hosts/h1/reports", content=GOOD, headers=H1)
    assert r.status_code == 503, r.text
    assert "the store did not take the report (OSError: disk full)" in r.json()["error"]
    assert fallbacks == []


@pytest.mark.parametrize("timeout_s", [0.2])
def test_a_body_that_never_comes_is_answered_408(api_factory: Any, timeout_s: float) -> None:
    """The guard's body deadline (now asyncio.timeout, formerly wait_for) still holds."""
    api = api_factory(http={"body_timeout_s": timeout_s})
    path = "/v1/hosts/h1/reports"
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "client": ("127.0.0.1", 40000),
        "server": ("127.0.0.1", 8700),
        "headers": [(b"authorization", f"Bearer {TOKENS['h1']}".encode())],
    }

    async def receive() -> dict[str, Any]:
        await asyncio.sleep(3600)  # the client never sends its body
        return {"type": "http.disconnect"}

    out: list[Any] = []

    async def send(msg: dict[str, Any]) -> None:
        out.append(msg)

    async def go() -> float:
        t0 = asyncio.get_running_loop().time()
        await asyncio.wait_for(api.app(scope, receive, send), 10)
        return asyncio.get_running_loop().time() - t0

    took = api.run(go())
    assert out[0]["status"] == 408 and b"not received in time" in out[1]["body"], out
    assert timeout_s <= took < timeout_s + 2, took
