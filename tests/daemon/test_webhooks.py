"""Issue 38, notifications: the manager's events POSTed to a receiver as CloudEvents.

A real loopback receiver (tests/daemon/webhook_receiver.py) gets the events of a
recommend-mode scenario driven through the manager's API — decision, proposal, approval,
the migration's start and end, the plan executed, a fence set and lifted, a mode — each
exactly once, signed; a receiver failing with 500 gets the same event (same id, same body)
again after the backoff, then it is marked and never sent again; a receiver that hangs
costs one timeout. The failover across two managers is in test_webhooks_pg.py.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from pydantic import ValidationError

from sova.manager.daemons.config import ManagerSettings, format_errors
from sova.manager.daemons.event_kinds import AUDIT_KINDS, EVENT_KINDS, audit_kind
from sova.manager.daemons.service.store import AuditRow, LeaseRow, MigrationEnd, RoundWrite, Store
from sova.manager.daemons.service.store_outbox import outbox
from sova.manager.daemons.service.webhooks import SIGNATURE_HEADER, Webhooks, verify
from sova.manager.daemons.webhook_settings import WebhookSettings

from .conftest import REPO, auth
from .test_operator_control import ADMIN_H, make, plans, rounds
from .webhook_receiver import receiver

KEY = "k" * 24


def hooks(url: str, **ep: Any) -> dict[str, Any]:
    return {"source": "urn:sova:test", "endpoints": {"rx": {"url": url, **ep}}}


def deliver(api: Any) -> int:
    """Passes until one sends nothing; the events delivered."""

    async def passes() -> int:
        async with httpx.AsyncClient() as client:
            total = 0
            while n := await api.svc.webhooks.deliver_due(client):
                total += n
            return total

    return int(api.run(passes()))


def outbox_rows(store: Store) -> list[Any]:
    with store.engine.connect() as conn:
        return list(conn.execute(outbox.select().order_by(outbox.c.id)))


# --------------------------------------------------------------------------- settings


@pytest.mark.parametrize(
    ("endpoint", "says"),
    [
        (
            {"url": "http://hooks.example.net/x"},
            "webhooks.endpoints.rx.url = 'http://hooks.example.net/x'",
        ),
        ({"url": "ftp://127.0.0.1/x"}, "is not an http(s) URL"),
        ({"url": "https://h", "kinds": ["plan.aproved"]}, "'plan.aproved' is not an event kind"),
        ({"url": "https://h", "secret": "short"}, "webhooks.endpoints.rx.secret = ***"),
        ({"url": "https://h", "secret": KEY, "secret_file": "/k"}, "set one, not both"),
        ({"url": "https://h", "timeout_s": 0}, "webhooks.endpoints.rx.timeout_s = 0"),
        ({"url": "https://h", "max_attempts": 0}, "webhooks.endpoints.rx.max_attempts = 0"),
    ],
)
def test_a_bad_endpoint_is_one_line_naming_the_field_and_value(
    endpoint: dict[str, Any], says: str
) -> None:
    with pytest.raises(ValidationError) as err:
        ManagerSettings.model_validate({"webhooks": {"endpoints": {"rx": endpoint}}})
    text = format_errors(err.value, "manager.toml", {})
    (line,) = text.splitlines()[1:]  # the header, then one line
    assert says in line, line
    assert "short" not in text, "a secret was printed"


@pytest.mark.parametrize(
    "url",
    [
        "https://hooks.example.net/sova",
        "http://127.0.0.1:9000/x",
        "http://[::1]/x",
        "http://localhost/x",
    ],
)
def test_https_or_a_loopback_http_url_is_accepted(url: str) -> None:
    s = ManagerSettings.model_validate({"webhooks": {"endpoints": {"rx": {"url": url}}}})
    assert s.webhooks.endpoints["rx"].url == url


def test_every_audit_action_the_manager_writes_has_an_event_kind() -> None:
    """The actions written as literals in the manager's code (``AuditRow(now, who, "x"``
    or an f-string ``"fence:{kind}"``), and plan fates (``end.state``: executed | failed),
    all have a kind of their own, not the catch-all ``audit.<action>``."""
    src = "\n".join(p.read_text() for p in (REPO / "src/sova/manager/daemons/service").glob("*.py"))
    found = set(re.findall(r'AuditRow\(\s*[^,]+,\s*[^,]+,\s*f?"([a-z ]+)', src))
    assert {"approve", "fence", "unfence", "propose", "forget"} <= found, found
    for action in found | {"executed", "failed"}:
        assert audit_kind(action) in EVENT_KINDS and action in AUDIT_KINDS, action
    assert audit_kind("fence:maintenance") == "fence.set"
    assert audit_kind("something new") == "audit.something_new"  # still delivered


# --------------------------------------------------------------------------- delivery


def test_each_event_reaches_the_receiver_once_signed(api_factory: Any) -> None:
    with receiver() as rx:
        api = make(api_factory, mode="recommend", webhooks=hooks(rx.url, secret=KEY))
        rounds(api, range(1, 4))  # h1 hot: a decision and a proposed plan
        (p,) = plans(api, "proposed")
        r = api.post(f"/v1/plans/{p['id']}/approve", json={"by": "alice"}, headers=ADMIN_H)
        assert r.status_code == 200, r.text
        rounds(api, range(4, 5))  # the agent is told: a lease, the migration started
        r = api.post(
            "/v1/migrations/h1-vm1/done",
            json={"result": "succeeded"},
            headers={**auth("h1"), "x-sova-host": "h1"},
        )
        assert r.json() == {"released": True}, r.text
        for call in (
            api.client.put("/v1/fences/maintenance/h2", json={"by": "ops"}, headers=ADMIN_H),
            api.client.delete("/v1/fences/maintenance/h2", params={"by": "ops"}, headers=ADMIN_H),
            api.client.put("/v1/mode", json={"mode": "autonomic", "by": "ops"}, headers=ADMIN_H),
        ):
            assert api.run(call).status_code == 200
        api.drain()
        rows = outbox_rows(api.svc.store)
        assert deliver(api) == len(rows)
        assert deliver(api) == 0, "a delivered event was sent again"

        got = rx.accepted()
        ids = Counter(e["id"] for e in got)
        assert set(ids) == {r.uid for r in rows} and set(ids.values()) == {1}, ids
        kinds = {e["type"] for e in got}
        assert {
            f"io.sova.{k}"
            for k in (
                "decision",
                "plan.proposed",
                "plan.approved",
                "migration.started",
                "migration.succeeded",
                "plan.executed",
                "fence.set",
                "fence.cleared",
                "mode.set",
            )
        } <= kinds, kinds
        # Every audit row is one event, with what the audit says.
        audit = api.get("/v1/audit", params={"limit": 1000}, headers=ADMIN_H).json()["entries"]
        audited = [e for e in got if e["data"].get("action")]
        assert sorted((e["data"]["action"], e["subject"]) for e in audited) == sorted(
            (a["action"], a["subject"]) for a in audit
        )
        (approved,) = [e for e in got if e["type"] == "io.sova.plan.approved"]
        assert approved["subject"] == f"plan {p['id']}"
        assert approved["data"]["who"] == "admin (alice)"
        (started,) = [e for e in got if e["type"] == "io.sova.migration.started"]
        assert started["data"] == {
            "migration": started["data"]["migration"],
            "vm": "h1-vm1",
            "src": "h1",
            "dst": "h2",
        }
        for e in got:
            assert e["specversion"] == "1.0" and e["source"] == "urn:sova:test"
            assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\+00:00", e["time"])
        # Signed: the receiver's check passes on what was sent, fails on anything changed.
        for post in rx.posts:
            sig = post.headers[SIGNATURE_HEADER.lower()]
            assert post.headers["content-type"] == "application/cloudevents+json"
            assert verify(KEY.encode(), post.body, sig, time.time())
            assert not verify(
                KEY.encode(), post.body.replace(b"io.sova", b"io.evil"), sig, time.time()
            )
            assert not verify(b"another key 0123456", post.body, sig, time.time())
            assert not verify(KEY.encode(), post.body, sig, time.time() + 3600)  # replayed


def test_a_kind_filter_sends_only_those_kinds(api_factory: Any) -> None:
    with receiver() as rx:
        api = make(api_factory, webhooks=hooks(rx.url, kinds=["fence.set"]))
        for name in ("h2", "h3"):
            r = api.run(api.client.put(f"/v1/fences/maintenance/{name}", json={}, headers=ADMIN_H))
            assert r.status_code == 200
        api.run(api.client.delete("/v1/fences/maintenance/h2", headers=ADMIN_H))
        api.drain()
        assert deliver(api) == 2
        assert [(e["type"], e["subject"]) for e in rx.accepted()] == [
            ("io.sova.fence.set", "h2"),
            ("io.sova.fence.set", "h3"),
        ]


@pytest.fixture
def db(store: Store) -> Store:
    """A migrated store recording events (as a manager with endpoints sets it)."""
    store.migrate()
    store.outbox_endpoints = {"rx": frozenset()}
    return store


class Clock:
    def __init__(self) -> None:
        self.t = 1_000_000.0

    def __call__(self) -> float:
        return self.t


def _fence_event(store: Store, name: str) -> None:
    store.write_round(RoundWrite(audit=[AuditRow(0.0, "ops", "fence:maintenance", name, "")]))


def _passes(wh: Webhooks) -> int:
    async def one() -> int:
        async with httpx.AsyncClient() as client:
            return await wh.deliver_due(client)

    return asyncio.run(one())


def test_a_failing_receiver_gets_the_same_event_after_the_backoff(db: Store) -> None:
    """500, 500, then 200: three POSTs of one event (same id, same body), 1 s then 2 s
    apart (backoff_s = 1, doubling), none before it is due; then marked, never again."""
    clock = Clock()
    with receiver() as rx:
        answers = iter([500, 500])
        rx.answer = lambda _ev: next(answers, 200)
        settings = WebhookSettings.model_validate(hooks(rx.url, backoff_s=1.0))
        wh = Webhooks(settings, db, clock=clock)
        _fence_event(db, "h2")
        sent = []
        # (seconds advanced before the pass, POSTs the receiver has seen after it)
        for dt, posts in [(0, 1), (0.5, 1), (0.5, 2), (1.9, 2), (0.1, 3), (10, 3)]:
            clock.t += dt
            sent.append(_passes(wh))
            assert len(rx.posts) == posts, (dt, posts)
        assert sent == [0, 0, 0, 0, 1, 0]
        assert [p.status for p in rx.posts] == [500, 500, 200]
        assert len({p.body for p in rx.posts}) == 1  # one event, resent as it was
        (d,) = db.deliveries()
        assert (d.attempts, d.given_up, d.delivered_s) == (3, False, clock.t - 10)


def test_an_event_is_given_up_after_max_attempts_and_the_next_is_sent(db: Store) -> None:
    clock = Clock()
    with receiver() as rx:
        rx.answer = lambda ev: 500 if ev["subject"] == "bad" else 200
        settings = WebhookSettings.model_validate(hooks(rx.url, backoff_s=1.0, max_attempts=2))
        wh = Webhooks(settings, db, clock=clock)
        _fence_event(db, "bad")
        _fence_event(db, "good")
        for _ in range(4):
            _passes(wh)
            clock.t += 5
        assert [(p.event["subject"], p.status) for p in rx.posts] == [
            ("bad", 500),
            ("bad", 500),  # given up after 2: the next event is not held back
            ("good", 200),
        ]
        marks = {d.event_id: (d.attempts, d.given_up, d.error) for d in db.deliveries()}
        assert sorted(marks.values()) == [(1, False, ""), (2, True, "HTTP 500")]


def test_a_hanging_receiver_costs_one_timeout(db: Store) -> None:
    with receiver() as rx:
        rx.answer = lambda _ev: (time.sleep(3), 200)[1]
        settings = WebhookSettings.model_validate(hooks(rx.url, timeout_s=0.3))
        wh = Webhooks(settings, db)
        _fence_event(db, "h2")
        t0 = time.monotonic()
        assert _passes(wh) == 0
        took = time.monotonic() - t0
        assert took < 1.5, took  # 0.3 s timeout + the db's marks
        (d,) = db.deliveries()
        assert d.attempts == 1 and "timeout" in d.error.lower() and d.delivered_s is None


def test_a_receiver_trickling_its_answer_costs_one_timeout(db: Store) -> None:
    """Each byte within httpx's read timeout, the whole answer (10 x 0.2 s) far beyond
    timeout_s: the POST is abandoned at timeout_s all the same."""
    with receiver() as rx:
        rx.trickle_s = 0.2
        settings = WebhookSettings.model_validate(hooks(rx.url, timeout_s=0.5))
        wh = Webhooks(settings, db)
        _fence_event(db, "h2")
        t0 = time.monotonic()
        assert _passes(wh) == 0
        took = time.monotonic() - t0
        assert took < 1.5, took
        (d,) = db.deliveries()
        assert d.error == "no answer within timeout_s = 0.5 s" and d.delivered_s is None


def test_a_migration_end_written_twice_is_one_event(db: Store) -> None:
    db.write_round(RoundWrite(new_leases=[LeaseRow("vm1", "h1", "h2", 1.0, 7)]))
    end = MigrationEnd(7, 2.0, "succeeded", "")
    db.write_round(RoundWrite(migration_ends=[end]))
    db.write_round(RoundWrite(migration_ends=[end]))  # a repeat changes nothing
    assert [r.kind for r in outbox_rows(db)] == ["migration.started", "migration.succeeded"]


def test_no_events_are_kept_without_endpoints(db: Store) -> None:
    db.outbox_endpoints = {}
    _fence_event(db, "h2")
    assert outbox_rows(db) == []


def test_old_events_are_pruned_and_not_sent(db: Store) -> None:
    _fence_event(db, "old")
    assert db.prune_events(time.time() + 1) == 1
    assert outbox_rows(db) == []


def test_the_operations_guide_lists_every_event_kind() -> None:
    text = (REPO / "docs/operations.md").read_text()
    section = text[text.index("## Webhooks") : text.index("## Health and readiness")]
    listed = set(re.findall(r"`([a-z]+\.[a-z_]+|decision)`", section))
    assert set(EVENT_KINDS) <= listed, set(EVENT_KINDS) - listed


def test_sova_webhooks_lists_the_deliveries_newest_first(db: Store, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from sova.cli import app

    clock = Clock()
    with receiver() as rx:
        rx.answer = lambda ev: 500 if ev["subject"] == "bad" else 200
        settings = WebhookSettings.model_validate(hooks(rx.url, max_attempts=1))
        _fence_event(db, "bad")
        _fence_event(db, "good")
        _passes(Webhooks(settings, db, clock=clock))
        _passes(Webhooks(settings, db, clock=clock))
    url = str(db.engine.url)
    out = CliRunner().invoke(app, ["webhooks", "--database-url", url])
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    assert lines[1].split()[:6] == ["2", "fence.set", "rx", "delivered", "1"], lines
    assert lines[2].split() == ["1", "fence.set", "rx", "given", "up", "1", "HTTP", "500"]
    out = CliRunner().invoke(app, ["webhooks", "--database-url", url, "-o", "json"])
    assert [(r["event_id"], r["given_up"]) for r in json.loads(out.output)] == [
        (2, False),
        (1, True),
    ]
    empty = tmp_path / "old.db"
    sa.create_engine(f"sqlite:///{empty}").connect().close()
    out = CliRunner().invoke(app, ["webhooks", "--database-url", f"sqlite:///{empty}"])
    assert out.exit_code == 2 and "no webhook outbox" in out.output


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (None, "No such file or directory"),
        ("short\n", "holds no key of >= 16 characters"),
    ],
)
def test_a_bad_secret_file_stops_the_manager_at_start(
    tmp_path: Path, content: str | None, says: str
) -> None:
    from typer.testing import CliRunner

    from sova.cli import app

    from .conftest import free_port

    secret = tmp_path / "hook.secret"
    if content is not None:
        secret.write_text(content)
    cfg = tmp_path / "manager.toml"
    cfg.write_text(
        f'database_url = "sqlite:///{tmp_path / "m.db"}"\ninsecure = true\nport = {free_port()}\n'
        f'[webhooks.endpoints.oncall]\nurl = "https://hooks.example.net/x"\n'
        f'secret_file = "{secret}"\n'
    )
    out = CliRunner().invoke(app, ["manager", "--config", str(cfg)])
    assert out.exit_code == 2, out.output
    (line,) = [x for x in out.output.splitlines() if x.strip()]
    assert f"webhooks: secret_file {secret}: {says}" in line, line
    assert not (tmp_path / "m.db").exists(), "the manager opened its store"


def test_every_event_kind_reaches_the_receiver_once(db: Store) -> None:
    """Each kind made by the write the manager makes for it (an audit row with its action,
    a decision, a lease opened, a lease ended with each result, a leader's election), all
    delivered in one go: each kind exactly once, and a second pass sends nothing. (The API
    test above drives nine of them through the manager; the failover test the election.)"""
    from sova.manager.daemons.event_kinds import MIGRATION_RESULTS
    from sova.manager.daemons.service.store import DecisionRow

    actions = {kind: action for action, kind in AUDIT_KINDS.items()}
    for kind in AUDIT_KINDS.values():
        action = actions[kind] + (":maintenance" if kind.startswith("fence.") else "")
        db.write_round(RoundWrite(audit=[AuditRow(0.0, "ops", action, "x", "")]))
    db.write_round(
        RoundWrite(decisions=[DecisionRow(1, 0.0, "h1", True, "h2", "vm1", "hot", ("net",), {})])
    )
    for i, result in enumerate(MIGRATION_RESULTS, start=10):
        db.write_round(RoundWrite(new_leases=[LeaseRow(f"vm{i}", "h1", "h2", 0.0, i)]))
        db.write_round(RoundWrite(migration_ends=[MigrationEnd(i, 1.0, result, "")]))
    assert db.add_event("leader.elected", time.time(), "epoch 3", {"epoch": 3}, key="leader-3")
    assert not db.add_event("leader.elected", time.time(), "epoch 3", {"epoch": 3}, key="leader-3")
    with receiver() as rx:
        wh = Webhooks(WebhookSettings.model_validate(hooks(rx.url)), db)
        while _passes(wh):
            pass
        got = Counter(e["type"].removeprefix("io.sova.") for e in rx.accepted())
    # migration.started once per lease opened (one per result), every other kind once
    assert got == {
        k: len(MIGRATION_RESULTS) if k == "migration.started" else 1 for k in EVENT_KINDS
    }
    assert len(rx.posts) == sum(got.values())


def test_an_event_id_is_not_reused_after_a_store_restore(db: Store, tmp_path: Path) -> None:
    """A restore takes the store back to the backup's rows, so the outbox's row ids are
    handed out again; a receiver deduplicating by ``id`` must not take the next event for
    one it already has."""
    backup = tmp_path / "backup.db"
    db.backup(backup)
    with receiver() as rx:
        settings = WebhookSettings.model_validate(hooks(rx.url))
        _fence_event(db, "before-restore")
        _passes(Webhooks(settings, db))
        db.lock_writer()
        db.restore(backup)
        _fence_event(db, "after-restore")
        _passes(Webhooks(settings, db))
        got = [(e["subject"], e["id"]) for e in rx.accepted()]
    assert [s for s, _ in got] == ["before-restore", "after-restore"]
    assert got[0][1] != got[1][1], got


def test_the_delivery_task_outlives_a_failing_store(db: Store, monkeypatch: Any) -> None:
    """A pass that fails (the store unreachable) is logged and the next pass delivers: the
    task never ends, so it cannot end the manager's other background tasks with it."""
    with receiver() as rx:
        settings = WebhookSettings.model_validate({**hooks(rx.url), "poll_interval_s": 0.05})
        wh = Webhooks(settings, db)
        _fence_event(db, "h2")
        real = db.pending_events
        calls = []

        def flaky(*a: Any) -> Any:
            calls.append(1)
            if len(calls) <= 2:
                raise sa.exc.OperationalError("SELECT", {}, Exception("server closed"))
            return real(*a)

        monkeypatch.setattr(db, "pending_events", flaky)

        async def run() -> bool:
            task = asyncio.create_task(wh.run())
            for _ in range(100):
                await asyncio.sleep(0.05)
                if rx.accepted():
                    break
            alive = not task.done()
            task.cancel()
            return alive

        assert asyncio.run(run())
        assert len(calls) >= 3 and [e["subject"] for e in rx.accepted()] == ["h2"]
