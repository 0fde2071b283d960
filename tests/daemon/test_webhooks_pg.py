"""Issue 38, notifications across a leader failover: two ``sova manager`` processes on one
PostgreSQL schema, both configured with the same webhook endpoint (a loopback receiver in
this test, leader lease 4 s, outbox polled every 0.2 s, retries 0.5 s then 1 s apart).

The leader's election, a fence set are delivered; then the receiver fails (500) while an
operator changes the mode and lifts the fence, so the leader holds two undelivered events
when it is frozen (SIGSTOP). The standby takes over (epoch 2), the receiver recovers, and
the new leader delivers the two events (the same ids the old leader had tried) and its own
election. The old leader is then let run again (SIGCONT): its claims are refused by the
epoch fence and it sends nothing. Every event in the store's outbox was answered 200
exactly once; no id twice.

Measured (2 shared cores): the standby led ~5-12 s after the stop; ~25 s a run.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from sova.manager.daemons.service.store import AuditRow, Deposed, RoundWrite, Store
from sova.manager.daemons.service.webhooks import Webhooks
from sova.manager.daemons.webhook_settings import WebhookSettings

from .conftest import free_port, wait_until
from .test_leadership import _manager, _manager_cfg, _role, needs_pg, pg_schema
from .webhook_receiver import receiver

KEY = "k" * 24


def _with_hooks(cfg: Path, url: str) -> Path:
    cfg.write_text(
        cfg.read_text()
        + "\n".join(
            [
                "[webhooks]",
                'source = "urn:sova:test"',
                "poll_interval_s = 0.2",
                "[webhooks.endpoints.rx]",
                f'url = "{url}"',
                f'secret = "{KEY}"',
                "backoff_s = 0.5",
                "max_backoff_s = 1",
            ]
        )
        + "\n"
    )
    return cfg


def _types(events: list[dict[str, Any]]) -> list[str]:
    return [e["type"].removeprefix("io.sova.") for e in events]


@needs_pg
def test_every_event_reaches_the_receiver_once_across_a_failover(tmp_path: Path) -> None:
    with receiver() as rx, pg_schema("hooks") as (url, schema, admin):
        failing = threading.Event()
        rx.answer = lambda _ev: 500 if failing.is_set() else 200
        ports = [free_port(), free_port()]
        cfgs = [
            _with_hooks(_manager_cfg(tmp_path, f"m{i}", url, p), rx.url)
            for i, p in enumerate(ports)
        ]
        base = f"http://127.0.0.1:{ports[0]}"
        procs = [_manager(cfgs[0], tmp_path / "m0.log")]
        try:
            wait_until(lambda: _role(ports[0]) == ("leader", 1), 30, "the first to lead")
            procs.append(_manager(cfgs[1], tmp_path / "m1.log"))
            wait_until(lambda: _role(ports[1]) == ("standby", 1), 30, "the second to stand by")
            r = httpx.put(f"{base}/v1/fences/maintenance/h1", json={"by": "ops"}, timeout=5)
            assert r.status_code == 200, r.text
            rx.wait_for(lambda got: {"leader.elected", "fence.set"} <= set(_types(got)), 20)

            failing.set()
            r = httpx.put(f"{base}/v1/mode", json={"mode": "recommend", "by": "ops"}, timeout=5)
            assert r.status_code == 200, r.text
            r = httpx.delete(f"{base}/v1/fences/maintenance/h1", params={"by": "ops"}, timeout=5)
            assert r.status_code == 200, r.text
            wait_until(
                lambda: {"mode.set", "fence.cleared"} <= {_types([p.event])[0] for p in rx.posts},
                20,
                "the old leader to try both events (answered 500)",
            )
            os.kill(procs[0].pid, signal.SIGSTOP)
            stopped = time.monotonic()
            wait_until(lambda: _role(ports[1]) == ("leader", 2), 60, "the standby to lead")
            led = time.monotonic()
            failing.clear()
            rx.wait_for(
                lambda got: (
                    Counter(_types(got))["leader.elected"] == 2
                    and {"mode.set", "fence.cleared"} <= set(_types(got))
                ),
                30,
            )
            os.kill(procs[0].pid, signal.SIGCONT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                procs[0].wait(20)  # the deposed leader notices and steps down
            time.sleep(2.0)  # time for a stray POST to arrive, had one been sent
            print(f"the standby led {led - stopped:.1f} s after the stop")
        finally:
            for p in procs:
                if p.poll() is None:
                    os.kill(p.pid, signal.SIGCONT)
                    p.kill()
                    p.wait(10)
            for i in range(len(procs)):
                print(f"----- m{i}.log\n{(tmp_path / f'm{i}.log').read_text()[-3000:]}")

        with admin.connect() as conn:
            stored = {
                str(r.uid): r.kind
                for r in conn.execute(sa.text(f"SELECT uid, kind FROM {schema}.outbox"))
            }
        got = rx.accepted()
        per_id = Counter(e["id"] for e in got)
        assert set(per_id.values()) == {1}, f"an event was delivered twice: {per_id}"
        assert set(per_id) == set(stored), "an event of the store was not delivered"
        assert sorted(_types(got)) == sorted(
            ["leader.elected", "fence.set", "leader.elected", "mode.set", "fence.cleared"]
        )
        assert sorted(e["data"]["epoch"] for e in got if e["type"].endswith("leader.elected")) == [
            1,
            2,
        ]
        # The two events the old leader had tried were delivered by the new one, under the
        # same ids; nothing arrived from the old leader after it was let run again.
        tried = {p.event["id"] for p in rx.posts if p.status == 500}
        assert tried and tried <= {
            e["id"] for e in got if e["type"].endswith(("mode.set", "fence.cleared"))
        }
        assert all(p.at > led for p in rx.posts if p.status == 200 and p.event["id"] in tried)
        ok_ids = [p.event["id"] for p in rx.posts if p.status == 200]
        assert len(ok_ids) == len(set(ok_ids))


@needs_pg
def test_a_leader_deposed_between_reading_and_posting_sends_nothing() -> None:
    """The race the claim closes: the old leader read its pending events, then froze; the
    new leader delivered them; the old one, resumed, goes on to POST what it had read. Its
    claim is written under its epoch, refused (Deposed), and nothing is sent. (Without the
    claim before the POST, the receiver got each event a second time.)"""
    with receiver() as rx, pg_schema("hookrace") as (url, _schema, _admin):
        old, new = Store(url), Store(url)
        try:
            old.migrate()
            for s in (old, new):
                s.outbox_endpoints = {"rx": frozenset()}
            with old.engine.begin() as conn:
                conn.execute(sa.text("UPDATE leader SET epoch = 1 WHERE id = 1"))
            old.fence = 1
            settings = WebhookSettings.model_validate(
                {"endpoints": {"rx": {"url": rx.url, "backoff_s": 0.1}}}
            )
            old.write_round(RoundWrite(audit=[AuditRow(0.0, "ops", "mode", "cluster", "x")]))
            old_hooks, new_hooks = Webhooks(settings, old), Webhooks(settings, new)
            ep = settings.endpoints["rx"]
            read = old.pending_events("rx", 0.0, time.time(), 100)
            assert len(read) == 1
            with new.engine.begin() as conn:  # the takeover
                conn.execute(sa.text("UPDATE leader SET epoch = 2 WHERE id = 1"))
            new.fence = 2

            async def both() -> int:
                async with httpx.AsyncClient() as client:
                    n = await new_hooks.deliver_due(client)
                    with pytest.raises(Deposed):
                        await old_hooks._post(client, "rx", ep, read[0])
                    return n

            assert asyncio.run(both()) == 1
            assert [p.status for p in rx.posts] == [200]
        finally:
            old.close()
            new.close()
