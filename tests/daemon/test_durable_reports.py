"""Acknowledged means durable (issue 20): a report is answered only once its row is
committed to the store, many reports share one transaction (group commit), and a report
the store did not take is answered 503 and taken when sent again."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from typing import Any

import httpx
import pytest

from sova.manager.daemons.agent.client import ManagerClient, ManagerUnreachable
from sova.manager.daemons.config import AGENT_REPORT_TIMEOUT_S
from sova.manager.daemons.service.store_rows import ReportRow

from .conftest import Api, auth, report


def test_an_answered_report_is_already_in_the_store(api: Api) -> None:
    # No flush, no drain: the 200 itself means the row is committed.
    for seq in (1, 2, 3):
        r = api.post(
            "/v1/hosts/h1/reports",
            content=report(seq, 10 * seq, (0.5, 0.5, 0.5)),
            headers=auth("h1"),
        )
        assert r.status_code == 200, r.text
        assert api.svc.store.count("host_reports") == seq


def test_reports_arriving_together_share_one_transaction(api: Api) -> None:
    calls: list[int] = []
    add = api.svc.store.add_reports

    def counted(rows: Any) -> None:
        calls.append(len(rows))
        add(rows)

    api.svc.store.add_reports = counted  # type: ignore[method-assign]

    async def burst() -> list[int]:
        rs = await asyncio.gather(
            *(
                api.client.post(
                    f"/v1/hosts/{h}/reports",
                    content=report(1, 10, (0.5, 0.5, 0.5)),
                    headers=auth(h),
                )
                for h in ("h1", "h2", "h3")
            )
        )
        return [r.status_code for r in rs]

    assert api.run(burst()) == [200, 200, 200]
    assert sum(calls) == 3 and len(calls) < 3, calls  # 3 rows, fewer than 3 commits
    assert api.svc.store.count("host_reports") == 3


def test_a_report_the_store_refused_is_503_and_taken_when_sent_again(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    add = api.svc.store.add_reports
    down = True

    def flaky(rows: list[ReportRow]) -> None:
        if down:
            raise OSError("store unreachable")
        add(rows)

    monkeypatch.setattr(api.svc.store, "add_reports", flaky)
    body = report(1, 10, (0.5, 0.5, 0.5))
    r = api.post("/v1/hosts/h1/reports", content=body, headers=auth("h1"))
    assert r.status_code == 503, r.text
    assert "store" in r.json()["error"] and "\n" not in r.json()["error"]  # one line
    assert api.svc.store.count("host_reports") == 0
    down = False
    r = api.post("/v1/hosts/h1/reports", content=body, headers=auth("h1"))  # the agent's resend
    assert r.status_code == 200, r.text
    assert api.svc.store.count("host_reports") == 1  # once: the resend is not a second row


# --------------------------------------------------------------------------- agents


def _outage(down_s: float) -> tuple[httpx.MockTransport, list[str]]:
    """Both managers refuse connections for ``down_s`` (a takeover), then B leads."""
    t0 = time.monotonic()
    seen: list[str] = []

    def handle(request: httpx.Request) -> httpx.Response:
        base = f"{request.url.scheme}://{request.url.host}:{request.url.port}"
        seen.append(base)
        if time.monotonic() - t0 < down_s or base == A:
            raise httpx.ConnectError("refused", request=request)
        return httpx.Response(200, json={"f": False, "i": 7})

    return httpx.MockTransport(handle), seen


A, B = "http://a:1", "http://b:2"


def test_an_agent_sends_its_report_again_through_a_takeover() -> None:
    # Nothing answers for 1.5 s: with retries=1 the bounded tries (4, ~0.3 s of back-off)
    # end inside the outage; the report's patience keeps it going until B answers.
    t, seen = _outage(1.5)
    client = ManagerClient([A, B], "h1", "t" * 20, retries=1, transport=t, patience_s=4.0)
    t0 = time.monotonic()
    d = client.report(b"{}")
    assert d.id == 7 and client.url == B
    assert 1.5 <= time.monotonic() - t0 < 4.0
    assert len(seen) > 4  # more than the bounded tries


def test_an_agent_gives_up_a_report_after_its_patience_then_tries_once_per_period() -> None:
    t, seen = _outage(60.0)
    client = ManagerClient([A, B], "h1", "t" * 20, retries=1, transport=t, patience_s=0.8)
    t0 = time.monotonic()
    with pytest.raises(ManagerUnreachable):
        client.report(b"{}")
    assert 0.8 <= time.monotonic() - t0 < 2.5
    n = len(seen)
    with pytest.raises(ManagerUnreachable):  # degraded: no patience, one try per URL
        client.report(b"{}")
    assert len(seen) == n + 2


def test_a_new_hosts_first_report_does_not_walk_every_host(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 10,000 hosts' first reports each counting every host is 10^8 steps in the first
    # period: the manager fell a minute behind in benchmarks/manager_failover.py.
    walks: list[float] = []
    stale = api.svc.core.stale
    monkeypatch.setattr(api.svc.core, "stale", lambda now: walks.append(now) or stale(now))
    for h in ("h1", "h2", "h3"):
        r = api.post(
            f"/v1/hosts/{h}/reports", content=report(1, 10, (0.5, 0.5, 0.5)), headers=auth(h)
        )
        assert r.status_code == 200
    assert walks == []
    fresh = api.svc.metrics.registry.get_sample_value("sova_manager_hosts", {"state": "fresh"})
    assert fresh == 3


def test_a_report_is_503_within_the_agents_timeout_while_sqlite_is_locked(api: Api) -> None:
    """Issue 37 (Low): another process holding SQLite's write lock (an ``sqlite3`` shell in a
    transaction, a backup tool) made the report's commit wait SQLite's 5 s busy timeout, so
    the agent's 2 s request timed out with no answer. Now the store gives up in time for a
    503 the agent reads (and sends the report again); the row stays buffered and is
    written, once, when the lock is gone."""
    path = api.svc.store.sqlite_path
    assert path is not None
    holder = sqlite3.connect(path, isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")  # the write lock, held
        body = report(1, 10, (0.5, 0.5, 0.5))
        t0 = time.monotonic()
        r = api.post("/v1/hosts/h1/reports", content=body, headers=auth("h1"))
        took = time.monotonic() - t0
        assert r.status_code == 503, r.text
        assert took < AGENT_REPORT_TIMEOUT_S, f"answered after {took:.1f} s"
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    r = api.post("/v1/hosts/h1/reports", content=body, headers=auth("h1"))  # sent again
    assert r.status_code == 200, r.text
    assert api.svc.store.count("host_reports") == 1
    print(f"503 after {took:.2f} s while locked")
