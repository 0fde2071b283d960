"""Issue 20: standbys serve reads. A standby answers operator reads of what the store holds
(fences, modes, plans, audit, decisions) itself, read-only, naming the leader it follows;
every write, every agent request and the memory-only views stay 503 + ``x-sova-leader``.

The leader is the in-process app on a fenced PostgreSQL store (it plans from real reports);
the standby is its real app on a loopback uvicorn server, polling the same store.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from sova.manager.daemons.agent.client import LEADER_HEADER
from sova.manager.daemons.service.leadership import Leadership
from sova.manager.daemons.service.standby import EPOCH_HEADER, ROLE_HEADER, SEEN_HEADER, standby_app
from sova.manager.daemons.service.standby_reads import STANDBY_READS, read_only_store
from sova.manager.daemons.service.store import AuditRow, RoundWrite, Store
from sova.manager.daemons.service.store_rows import LogSlice
from sova.manager.daemons.service.store_schema import metadata

from .conftest import (
    ADMIN,
    Api,
    auth,
    free_port,
    manager_settings,
    report,
    uvicorn_thread,
    wait_until,
)
from .test_leadership import _manager, _manager_cfg, _role, needs_pg, pg_schema, two_managers
from .test_operator_control import HOSTS, rounds

ADMIN_H = {"authorization": f"Bearer {ADMIN}"}
LEADER_URL = "http://leader.example:8700"


@contextlib.contextmanager
def leader_and_standby() -> Iterator[tuple[Api, str, Store]]:
    """(the leader's app, the standby's base URL, the leader's store) on a fresh schema."""
    settings = manager_settings(
        clock="agent", plan_period_s=10, admin_token=ADMIN, insecure=False, mode="recommend"
    )
    with pg_schema("reads") as (url, _schema, _admin):
        store, standby_store = Store(url), Store(url)
        lead = Leadership(store, LEADER_URL)
        follower = Leadership(standby_store, "http://standby.example:8700")
        api: Api | None = None
        try:
            assert lead.try_lock()
            store.migrate()
            assert lead.take_over() == 1
            api = Api(settings, store)
            won: list[bool] = []
            app, sb = standby_app(
                standby_store, follower, lambda: won.append(True), settings=settings, poll_s=0.1
            )
            port = free_port()
            with uvicorn_thread(app, port):
                base = f"http://127.0.0.1:{port}"
                wait_until(lambda: sb.seen_mono is not None, 10, "the standby to see the leader")
                assert not won
                yield api, base, store
        finally:
            if api is not None:
                api.close()
            follower.close()
            lead.close()
            standby_store.close()
            store.close()


def leader_sets_things(api: Api) -> int:
    """Through the leader: an open plan from real rounds (recommend mode), a fence, a
    host's mode. Returns the plan's id."""
    rounds(api, range(1, 4))
    api.drain()
    (plan,) = api.get("/v1/plans?state=proposed", headers=ADMIN_H).json()["plans"]
    r = api.run(
        api.client.put(
            "/v1/fences/maintenance/h2", json={"by": "alice", "reason": "disk"}, headers=ADMIN_H
        )
    )
    assert r.status_code == 200, r.text
    r = api.run(
        api.client.put(
            "/v1/hosts/h1/mode", json={"mode": "autonomic", "by": "bob"}, headers=ADMIN_H
        )
    )
    assert r.status_code == 200, r.text
    return int(plan["id"])


@needs_pg
def test_the_standby_reads_what_the_leader_set_from_the_store() -> None:
    """Every read a standby serves answers what the leader answers, once the leader has
    set a fence, a mode and proposed a plan; each answer names the standby's role, the
    leader and its epoch, and how long ago the standby saw it hold the lock.
    Before: every one of these was 503 on the standby."""
    with leader_and_standby() as (api, base, _store):
        plan_id = leader_sets_things(api)
        paths = [
            "/v1/fences",
            "/v1/mode",
            "/v1/plans",
            "/v1/plans?state=proposed",
            f"/v1/plans/{plan_id}",
            f"/v1/plans/{plan_id}/watcher",
            "/v1/audit",
            "/v1/audit?after=1&limit=2",
            "/v1/decisions",
            "/v1/decisions?host=h1&limit=3",
            "/v1/whoami",
            "/v1/credentials",
        ]
        served = {p.split("?")[0].replace(str(plan_id), "{plan_id}") for p in paths}
        assert served == set(STANDBY_READS)  # every read the standby serves is compared
        for path in paths:
            want = api.get(path, headers=ADMIN_H)
            got = httpx.get(base + path, headers=ADMIN_H, timeout=5)
            assert want.status_code == 200, (path, want.text)
            assert got.status_code == 200, (path, got.text)
            assert got.json() == want.json(), path
            assert got.headers[ROLE_HEADER] == "standby"
            assert got.headers[LEADER_HEADER] == LEADER_URL
            assert got.headers[EPOCH_HEADER] == "1"
            assert 0.0 <= float(got.headers[SEEN_HEADER]) < 5.0
        fences = httpx.get(base + "/v1/fences", headers=ADMIN_H, timeout=5).json()
        assert [(f["kind"], f["name"], f["set_by"]) for f in fences] == [
            ("maintenance", "h2", "admin (alice)")
        ]
        # Not found and bad input are answered as the leader answers them.
        missing = httpx.get(base + "/v1/plans/999999", headers=ADMIN_H, timeout=5)
        assert missing.status_code == 404 and "no plan 999999" in missing.text
        bad = httpx.get(base + "/v1/plans?state=bogus", headers=ADMIN_H, timeout=5)
        assert bad.status_code == 422 and bad.json()["error"].startswith("state:"), bad.text
        # Reads need a credential on the standby as on the leader; so do its metrics,
        # which say standby at the leader's epoch (SovaNoLeader counts the roles).
        for path in ("/v1/fences", "/metrics"):
            for headers in ({}, auth("h1"), {"authorization": "Bearer wrong"}):
                r = httpx.get(base + path, headers=headers, timeout=5)
                assert r.status_code == 401, (path, headers, r.status_code)
        scrape = httpx.get(base + "/metrics", headers=ADMIN_H, timeout=5).text.splitlines()
        assert "sova_manager_leader 0.0" in scrape and "sova_manager_leader_epoch 1.0" in scrape


WRITES_AND_MEMORY = [
    ("PUT", "/v1/fences/maintenance/h1", {"reason": "x"}),
    ("DELETE", "/v1/fences/maintenance/h2", None),
    ("PUT", "/v1/mode", {"mode": "autonomic"}),
    ("DELETE", "/v1/hosts/h1/mode", None),
    ("POST", "/v1/plans/{plan}/approve", {"reason": "x"}),
    ("POST", "/v1/plans/{plan}/reject", {"reason": "x"}),
    ("PUT", "/v1/hosts/h1/drain", {"reason": "x"}),
    ("DELETE", "/v1/hosts/h3", None),
    ("POST", "/v1/credentials/reload", None),
    # memory-only facts: the leader's live view and a drain's progress
    ("GET", "/v1/cluster", None),
    ("GET", "/v1/cluster/history", None),
    ("GET", "/v1/hosts/h1/drain", None),
    # agents: reports and directives go to the leader's memory
    ("POST", "/v1/hosts/h1/reports", "report"),
    ("GET", "/v1/hosts/h1/directive", None),
    ("POST", "/v1/migrations/h1-vm1/done", {"ok": True}),
]


def _table_rows(store: Store) -> dict[str, list[tuple[Any, ...]]]:
    with store.engine.connect() as conn:
        return {
            name: sorted(tuple(map(repr, r)) for r in conn.execute(sa.select(t)))
            for name, t in metadata.tables.items()
        }


@needs_pg
def test_writes_to_the_standby_are_503_naming_the_leader_and_its_reads_write_nothing() -> None:
    """Every write, agent request and memory-only view on the standby is 503 with the
    leader's URL, changes nothing, and every read it serves leaves every table as it was
    (row for row): a standby neither plans nor writes."""
    with leader_and_standby() as (api, base, store):
        plan_id = leader_sets_things(api)
        api.drain()
        before = _table_rows(store)
        assert before["plans"] and before["fences"] and before["audit"] and before["decisions"]
        for method, path, body in WRITES_AND_MEMORY:
            path = path.format(plan=plan_id)
            kw: dict[str, Any] = {"headers": ADMIN_H}
            if body == "report":
                kw = {"headers": auth("h1"), "content": report(9, 90.0, (0.9, 0.1, 0.1))}
            elif body is not None:
                kw["json"] = body
            r = httpx.request(method, base + path, timeout=5, **kw)
            assert r.status_code == 503, (method, path, r.status_code, r.text)
            assert r.headers[LEADER_HEADER] == LEADER_URL, (method, path)
            assert LEADER_URL in r.json()["detail"], (method, path)
        for path in STANDBY_READS:
            for _ in range(3):
                r = httpx.get(base + path.format(plan_id=plan_id), headers=ADMIN_H, timeout=5)
                assert r.status_code == 200, (path, r.text)
        assert _table_rows(store) == before
        # The leader still plans and writes: the standby's reads took nothing from it.
        rounds(api, range(4, 5), HOSTS)
        api.drain()
        assert _table_rows(store)["decisions"] != before["decisions"]


@needs_pg
def test_the_standbys_store_sessions_refuse_writes() -> None:
    """The standby reads through sessions PostgreSQL keeps read-only: a write through
    them fails in the server, not by convention."""
    with pg_schema("ro") as (url, _schema, _admin):
        Store(url).migrate()
        reader = read_only_store(url)
        try:
            assert reader.audit_slice(LogSlice()) == []
            with pytest.raises(sa.exc.InternalError, match="read-only transaction"):
                reader.write_round(RoundWrite(audit=[AuditRow(1.0, "x", "fence", "h1")]))
            assert reader.audit_slice(LogSlice()) == []
        finally:
            reader.close()


@needs_pg
def test_two_manager_processes_a_fence_set_through_the_leader_is_read_on_the_standby(
    tmp_path: Path,
) -> None:
    """The real processes (`sova manager` twice on one store): a fence set through the
    leader is listed by the standby; setting one through the standby is 503 naming the
    leader and sets nothing."""
    with (
        pg_schema("procs") as (url, _schema, _admin),
        two_managers(tmp_path, url) as (ports, _cfgs, _procs),
    ):
        leader, standby = (f"http://127.0.0.1:{p}" for p in ports)
        r = httpx.put(leader + "/v1/fences/pin/vm-7", json={"reason": "licence"}, timeout=5)
        assert r.status_code == 200, r.text
        r = httpx.put(standby + "/v1/fences/pin/vm-8", json={"reason": "x"}, timeout=5)
        assert r.status_code == 503 and r.headers[LEADER_HEADER] == leader, r.text
        got = httpx.get(standby + "/v1/fences", timeout=5)
        assert got.status_code == 200 and got.headers[ROLE_HEADER] == "standby", got.text
        assert [(f["kind"], f["name"], f["reason"]) for f in got.json()] == [
            ("pin", "vm-7", "licence")
        ]
        assert got.json() == httpx.get(leader + "/v1/fences", timeout=5).json()


@needs_pg
def test_a_standby_reloads_its_credentials_on_sighup_and_stays_a_standby(
    tmp_path: Path,
) -> None:
    """Token rotation (`systemctl reload`) reaches a standby too: a viewer added to the
    operators file reads through the standby after SIGHUP, and the standby is still one.
    Before: SIGHUP's default action ended the standby process."""
    ops = tmp_path / "operators.toml"
    alice, bob = "alice-" + "a" * 26, "bob-" + "b" * 28
    ops.write_text(f'[alice]\nrole = "viewer"\ntokens = ["{alice}"]\n')
    with pg_schema("hup") as (url, _schema, _admin):
        ports = [free_port(), free_port()]
        procs = []
        try:
            for i, port in enumerate(ports):
                cfg = _manager_cfg(tmp_path, f"m{i}", url, port)
                text = cfg.read_text().replace(
                    "insecure = true", f'insecure = true\noperators_file = "{ops}"'
                )
                cfg.write_text(text)
                procs.append(_manager(cfg, tmp_path / f"m{i}.log"))
                want = ("leader", 1) if i == 0 else ("standby", 1)
                wait_until(lambda p=port, w=want: _role(p) == w, 30, f"manager {i} as {want}")
            standby = f"http://127.0.0.1:{ports[1]}"

            def fences(token: str) -> int:
                h = {"authorization": f"Bearer {token}"}
                return httpx.get(standby + "/v1/fences", headers=h, timeout=5).status_code

            assert (fences(alice), fences(bob)) == (200, 401)
            ops.write_text(ops.read_text() + f'[bob]\nrole = "viewer"\ntokens = ["{bob}"]\n')
            procs[1].send_signal(signal.SIGHUP)
            wait_until(lambda: fences(bob) == 200, 10, "the standby to reload its tokens")
            assert procs[1].poll() is None and _role(ports[1]) == ("standby", 1)
        finally:
            for p in procs:
                p.kill()
                p.wait(10)
