"""Issue 20, build item 1: active/standby managers on one PostgreSQL store.

One leader holds the store's advisory lock and an epoch (the fencing token) raised at every
takeover; every write of decisions, leases and directives checks the epoch in its own
transaction. A second manager on PostgreSQL waits as a standby (503 + the leader's URL)
instead of exiting; on SQLite it still exits 2 (tests/daemon/test_store_ops.py).

The PostgreSQL tests need SOVA_TEST_PG_URL (scripts/ci-postgres.sh); each runs in a schema
of its own, so they share the server's database with other tests.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from sova.manager.daemons.agent.client import LEADER_HEADER, ManagerClient, ManagerUnreachable
from sova.manager.daemons.config import AgentSettings, ConfigError, load_agent_settings
from sova.manager.daemons.schema import Directive
from sova.manager.daemons.service.leadership import EXIT_DEPOSED, Leadership, read_leader
from sova.manager.daemons.service.store import Deposed, DirectiveRow, ReportRow, RoundWrite, Store
from sova.manager.daemons.service.store_admin import advisory_key

from .conftest import REPO, Api, auth, free_port, manager_settings, report, wait_until

PG_URL = os.environ.get("SOVA_TEST_PG_URL")
needs_pg = pytest.mark.skipif(
    not PG_URL, reason="no PostgreSQL server: set SOVA_TEST_PG_URL (see scripts/ci-postgres.sh)"
)
TOKEN = "h1-token-0123456789abcdef"


@contextlib.contextmanager
def pg_schema(tag: str) -> Iterator[tuple[str, str, sa.Engine]]:
    """A fresh schema; yields (store URL in it, schema name, an admin engine)."""
    assert PG_URL is not None
    schema = f"sova_{tag}_{os.getpid()}_{time.monotonic_ns() % 10**6}"
    admin = sa.create_engine(PG_URL)
    with admin.begin() as conn:
        conn.exec_driver_sql(f"CREATE SCHEMA {schema}")
    sep = "&" if "?" in PG_URL else "?"
    try:
        yield f"{PG_URL}{sep}options=-csearch_path%3D{schema}", schema, admin
    finally:
        with admin.begin() as conn:
            # Leftover sessions of killed managers would hold locks on the schema's tables.
            conn.execute(
                sa.text(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE pid <> pg_backend_pid() AND application_name LIKE 'sova manager%' "
                    "AND backend_type = 'client backend' AND pid IN (SELECT pid FROM pg_locks "
                    "WHERE locktype = 'advisory' AND objid::bigint = :o)"
                ),
                {"o": advisory_key(schema) & 0xFFFFFFFF},
            )
            conn.exec_driver_sql(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        admin.dispose()


def lock_holder_pid(admin: sa.Engine, schema: str) -> int | None:
    key = advisory_key(schema)
    with admin.connect() as conn:
        pid = conn.execute(
            sa.text(
                "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted "
                "AND classid::bigint = :c AND objid::bigint = :o"
            ),
            {"c": (key >> 32) & 0xFFFFFFFF, "o": key & 0xFFFFFFFF},
        ).scalar()
    return None if pid is None else int(pid)


def terminate(admin: sa.Engine, pid: int) -> None:
    with admin.begin() as conn:
        assert conn.execute(sa.text("SELECT pg_terminate_backend(:p)"), {"p": pid}).scalar()


def directive_write(host: str, did: int) -> RoundWrite:
    return RoundWrite(directives=[DirectiveRow(host, did, True, "h2", f"{host}-vm1", 1.0, False)])


# --------------------------------------------------------------------------- fencing


@needs_pg
def test_a_deposed_leader_cannot_write_a_directive_after_the_new_leader_started() -> None:
    """The old leader keeps running after its lock session is killed (the server frees the
    lock); the standby takes over (epoch 1 -> 2); the old leader's next directive write is
    refused in its own transaction and it steps down. Before this, there was no epoch: the
    old leader's write landed after the new leader had read the store."""
    with pg_schema("fence") as (url, schema, admin):
        old_store, new_store = Store(url), Store(url)
        lost: list[str] = []
        old = Leadership(old_store, "http://old:1", on_lost=lost.append)
        new = Leadership(new_store, "http://new:2")
        try:
            assert old.try_lock()
            old_store.migrate()
            assert old.take_over() == 1
            old_store.write_round(directive_write("h1", 10))  # leading: written
            assert not new.try_lock()  # a standby while the old leader holds the lock

            holder = lock_holder_pid(admin, schema)
            assert holder is not None
            terminate(admin, holder)  # the old leader's session dies; the process does not
            wait_until(new.try_lock, 10, "the standby to get the lock")
            assert new.take_over() == 2
            assert read_leader(new_store) is not None
            assert read_leader(new_store).url == "http://new:2"  # type: ignore[union-attr]

            with pytest.raises(Deposed, match="epoch 1 is no longer"):
                old_store.write_round(directive_write("h1", 11))
            assert lost and "epoch 1" in lost[0], lost
            assert old.check() is not None  # its heartbeat says so too
            rows = new_store.load_state(5).directives
            assert [(d.host, d.id) for d in rows] == [("h1", 10)]  # 11 never landed
            new_store.write_round(directive_write("h1", 12))  # the new leader writes
            assert [d.id for d in new_store.load_state(5).directives] == [12]
        finally:
            for lead in (old, new):
                lead.close()
            old_store.close()
            new_store.close()


def report_rows(seq: int, n: int = 5) -> list[ReportRow]:
    return [
        ReportRow(
            f"h{i}",
            seq,
            10.0 * seq,
            10.0 * seq,
            (0.1, 0.2, 0.3),
            {"vm": [0.1, 0.2, 0.3, 512, False]},
        )
        for i in range(n)
    ]


@needs_pg
def test_a_deposed_leaders_report_rows_are_refused() -> None:
    """The reports' write carries the fence in its rows' INSERT (one round trip): after a
    takeover the old leader's rows are refused whole, it steps down, and the report is not
    acknowledged (Deposed reaches the intake, which answers 503)."""
    with pg_schema("repfence") as (url, schema, admin):
        old_store, new_store = Store(url), Store(url)
        lost: list[str] = []
        old = Leadership(old_store, "http://old:1", on_lost=lost.append)
        new = Leadership(new_store, "http://new:2")
        try:
            assert old.try_lock()
            old_store.migrate()
            assert old.take_over() == 1
            old_store.add_reports(report_rows(1))  # leading: written
            assert new_store.count("host_reports") == 5
            holder = lock_holder_pid(admin, schema)
            assert holder is not None
            terminate(admin, holder)
            wait_until(new.try_lock, 10, "the standby to get the lock")
            assert new.take_over() == 2
            with pytest.raises(Deposed, match="epoch 1 is no longer the leader's .*epoch 2"):
                old_store.add_reports(report_rows(2))
            assert lost and "epoch 1" in lost[0], lost
            assert new_store.count("host_reports") == 5  # none of the 5 landed
            new_store.add_reports(report_rows(3))  # the new leader's rows are written
            assert new_store.count("host_reports") == 10
        finally:
            for lead in (old, new):
                lead.close()
            old_store.close()
            new_store.close()


@needs_pg
def test_a_report_write_is_one_round_trip_to_the_server(tmp_path: Path) -> None:
    """Each message after which the client waits for the server (a Sync of the extended
    protocol, a simple Query) is a round trip; libpq's trace of every connection of the
    store counts them. A report write is one: BEGIN, the rows and COMMIT in one batch.
    Before: five (the pool's pre-ping, BEGIN, the fence's SELECT, the rows, COMMIT), each
    a wait for a core and the GIL on a loaded manager (benchmarks/manager_load.py)."""
    from psycopg import pq

    with pg_schema("roundtrip") as (url, _schema, _admin):
        store = Store(url)
        trace = (tmp_path / "libpq.trace").open("wb")
        conns: list[Any] = []

        def on_connect(dbapi_conn: Any, _record: Any) -> None:
            dbapi_conn.pgconn.trace(trace.fileno())
            dbapi_conn.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS)
            conns.append(dbapi_conn)

        sa.event.listen(store.engine, "connect", on_connect)
        try:
            store.migrate()
            with store.engine.connect() as conn:  # fenced at the epoch, as a leader's writes
                store.fence = conn.execute(sa.text("SELECT epoch FROM leader")).scalar_one()
            store.add_reports(report_rows(1))  # the first: the connection is made
            for c in conns:
                c.pgconn.untrace()  # flushes what libpq traced so far
                c.pgconn.trace(trace.fileno())
                c.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS)
            start = (tmp_path / "libpq.trace").stat().st_size
            for seq in (2, 3, 4):
                store.add_reports(report_rows(seq))
            for c in conns:
                if not c.closed:
                    c.pgconn.untrace()
            sent = (tmp_path / "libpq.trace").read_bytes()[start:].decode().splitlines()
            waits = [
                m
                for m in sent
                if m.split("\t")[:1] == ["F"] and m.split("\t")[2] in ("Sync", "Query")
            ]
            assert len(waits) == 3, sent
            assert store.count("host_reports") == 20
        finally:
            store.close()
            trace.close()


@needs_pg
def test_a_report_write_takes_the_leader_rows_lock_before_its_ids() -> None:
    """Store.report_mark (a warm standby's exact mark) locks the leader row exclusively
    and then reads max(id): a report write must wait for that lock before it draws any
    id, or a row with a smaller id could commit after the mark passed it. Held here by
    another session: the write waits, the id sequence has not moved, and once the lock
    goes the rows land."""
    with pg_schema("repmark") as (url, _schema, admin):
        store = Store(url)
        try:
            store.migrate()
            with store.engine.connect() as conn:
                store.fence = conn.execute(sa.text("SELECT epoch FROM leader")).scalar_one()
            store.add_reports(report_rows(1))
            with store.engine.connect() as conn:
                seq_name = conn.execute(
                    sa.text("SELECT pg_get_serial_sequence('host_reports', 'id')")
                ).scalar_one()
                seq = f"SELECT last_value FROM {seq_name}"
                drawn = conn.execute(sa.text(seq)).scalar_one()
            holder = store.engine.connect()
            holder.execute(sa.text("SELECT 1 FROM leader WHERE id = 1 FOR UPDATE"))
            writer = threading.Thread(target=store.add_reports, args=(report_rows(2),))
            writer.start()
            time.sleep(0.5)
            assert writer.is_alive()  # waiting for the lock
            with store.engine.connect() as conn:
                assert conn.execute(sa.text(seq)).scalar_one() == drawn  # no id drawn
            holder.rollback()
            holder.close()
            writer.join(10)
            assert not writer.is_alive()
            assert store.count("host_reports") == 10
        finally:
            store.close()


@needs_pg
def test_a_report_write_outlives_its_connections_death() -> None:
    """The reports' connection is kept, not pinged at each write: one the server ended (a
    restart, an idle timeout) is replaced and the rows written, not refused."""
    with pg_schema("repconn") as (url, _schema, admin):
        store = Store(url)
        pids: list[int] = []
        sa.event.listen(store.engine, "connect", lambda c, _r: pids.append(c.info.backend_pid))
        try:
            store.migrate()
            store.add_reports(report_rows(1))
            for pid in pids:
                terminate(admin, pid)
            store.add_reports(report_rows(2))
            assert store.count("host_reports") == 10
        finally:
            store.close()


@needs_pg
def test_a_retried_report_write_never_stores_a_row_twice(monkeypatch: pytest.MonkeyPatch) -> None:
    """The retry on a fresh connection cannot know whether the dead one's COMMIT landed
    (the server may end the session after committing, before its answer leaves). Here it
    did: the rows are committed, then the session is ended and the write fails as if the
    answer was lost. The retry adds only the rows not stored, so a warm standby never
    replays one report twice (two copies of a sample in its window). Before: 15 rows."""
    import sova.manager.daemons.service.store as store_module

    real = store_module.pipelined_insert
    with pg_schema("repdup") as (url, _schema, admin):
        store = Store(url)
        try:
            store.migrate()
            with store.engine.connect() as conn:
                store.fence = conn.execute(sa.text("SELECT epoch FROM leader")).scalar_one()
            store.add_reports(report_rows(1))  # the kept connection exists: a retry is due

            def commit_then_lose_the_answer(dbapi_conn: Any, rows: Any, fence: Any) -> int:
                monkeypatch.setattr(store_module, "pipelined_insert", real)
                real(dbapi_conn, rows, fence)
                terminate(admin, dbapi_conn.info.backend_pid)
                dbapi_conn.execute("SELECT 1")  # the death is seen: broken
                raise AssertionError("unreachable: the session was ended")

            monkeypatch.setattr(store_module, "pipelined_insert", commit_then_lose_the_answer)
            store.add_reports(report_rows(2))
            assert store.count("host_reports") == 10
            store.add_reports(report_rows(3))  # and the next write is an ordinary one
            assert store.count("host_reports") == 15
        finally:
            store.close()


# --------------------------------------------------------------------------- processes


def _manager_cfg(tmp: Path, name: str, url: str, port: int, period: float = 2.0) -> Path:
    cfg = tmp / f"{name}.toml"
    cfg.write_text(
        "\n".join(
            [
                'listen = "127.0.0.1"',
                f"port = {port}",
                f'database_url = "{url}"',
                f"plan_period_s = {period}",
                'log_level = "info"',
                "insecure = true",
                "leader_lease_s = 4",
                '[hosts."h1"]',
                f'token = "{TOKEN}"',
            ]
        )
        + "\n"
    )
    return cfg


def _manager(cfg: Path, log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "sova.cli_daemons", "manager", "--config", str(cfg)],
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
        cwd=REPO,
    )


def _readyz(port: int) -> httpx.Response:
    return httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2)


def _role(port: int) -> tuple[str, int | None] | None:
    try:
        body = _readyz(port).json()
    except (httpx.HTTPError, ValueError):
        return None
    return body.get("role"), body.get("epoch")


def _metric(port: int, name: str) -> float:
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2).text
    (line,) = [x for x in text.splitlines() if x.startswith(name + " ")]
    return float(line.split()[1])


@contextlib.contextmanager
def two_managers(tmp: Path, url: str) -> Iterator[tuple[list[int], list[Path], list[Any]]]:
    ports = [free_port(), free_port()]
    cfgs = [_manager_cfg(tmp, f"m{i}", url, p) for i, p in enumerate(ports)]
    procs: list[Any] = [_manager(cfgs[0], tmp / "m0.log")]
    try:
        wait_until(lambda: _role(ports[0]) == ("leader", 1), 30, "the first manager to lead")
        procs.append(_manager(cfgs[1], tmp / "m1.log"))
        wait_until(lambda: _role(ports[1]) == ("standby", 1), 30, "the second to stand by")
        yield ports, cfgs, procs
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(10)
        for i in range(len(cfgs)):
            print(f"----- m{i}.log\n{(tmp / f'm{i}.log').read_text()[-3000:]}")


@needs_pg
def test_a_second_manager_on_postgresql_stands_by_redirects_and_takes_over(
    tmp_path: Path,
) -> None:
    """Before, the second manager exited 2 (one writer, no standby). Now it waits: 503 on
    /readyz and on agent routes, naming the leader; an agent given both URLs lands on the
    leader; kill -9 of the leader and the standby leads at epoch 2 within a few seconds;
    the old leader, restarted, stands by."""
    with (
        pg_schema("standby") as (url, _schema, _admin),
        two_managers(tmp_path, url) as (
            ports,
            cfgs,
            procs,
        ),
    ):
        leader_url, standby_url = (f"http://127.0.0.1:{p}" for p in ports)
        r = httpx.get(standby_url + "/v1/hosts/h1/directive", timeout=2)
        assert r.status_code == 503 and r.headers[LEADER_HEADER] == leader_url, r.text
        body = _readyz(ports[1]).json()
        assert body["role"] == "standby" and body["epoch"] == 1, body
        assert leader_url in body["status"], body
        assert _metric(ports[0], "sova_manager_leader") == 1.0
        assert _metric(ports[1], "sova_manager_leader") == 0.0
        assert _metric(ports[1], "sova_manager_leader_epoch") == 1.0

        # An agent that lists the standby first is sent on to the leader.
        client = ManagerClient([standby_url, leader_url], "h1", TOKEN, retries=0)
        assert isinstance(client.wait_directive(0, 0.0), Directive)
        assert client.url == leader_url
        client.close()

        procs[0].send_signal(signal.SIGKILL)
        procs[0].wait(10)
        t0 = time.monotonic()
        wait_until(lambda: _role(ports[1]) == ("leader", 2), 30, "the standby to take over")
        took = time.monotonic() - t0
        assert took < 5.0, took  # lock poll 0.5 s + restore of an empty store
        assert _metric(ports[1], "sova_manager_leader_epoch") == 2.0

        procs.append(_manager(cfgs[0], tmp_path / "m0.log"))  # the old leader, restarted
        wait_until(lambda: _role(ports[0]) == ("standby", 2), 30, "the old leader to follow")
        r = httpx.get(leader_url + "/v1/hosts/h1/directive", timeout=2)
        assert r.status_code == 503 and r.headers[LEADER_HEADER] == standby_url


@needs_pg
def test_a_leader_whose_session_is_killed_steps_down_and_the_standby_leads(
    tmp_path: Path,
) -> None:
    """pg_terminate_backend of the leader's lock session (the process lives on): its
    heartbeat fails within a second and it exits 3 (restarted, it joins as a standby); the
    standby leads at epoch 2."""
    with (
        pg_schema("stepdown") as (url, schema, admin),
        two_managers(tmp_path, url) as (
            ports,
            _cfgs,
            procs,
        ),
    ):
        holder = lock_holder_pid(admin, schema)
        assert holder is not None
        terminate(admin, holder)
        assert procs[0].wait(15) == EXIT_DEPOSED
        wait_until(lambda: _role(ports[1]) == ("leader", 2), 30, "the standby to take over")
        log = (tmp_path / "m0.log").read_text()
        assert "lost the leadership (epoch 1)" in log, log[-2000:]


# --------------------------------------------------------------------------- agents


def _transport(answers: dict[str, Any]) -> httpx.MockTransport:
    """Each base URL's behaviour: "down" (connection refused), "standby:<leader>", "ok"."""

    def handle(request: httpx.Request) -> httpx.Response:
        base = f"{request.url.scheme}://{request.url.host}:{request.url.port}"
        what = answers[base]
        seen.append(base)
        if what == "down":
            raise httpx.ConnectError("refused", request=request)
        if isinstance(what, str) and what.startswith("standby:"):
            return httpx.Response(503, headers={LEADER_HEADER: what[8:]}, json={})
        return httpx.Response(200, json={"f": False, "i": 7})

    seen: list[str] = []
    t = httpx.MockTransport(handle)
    t.seen = seen  # type: ignore[attr-defined]
    return t


A, B, C = "http://a:1", "http://b:2", "http://c:3"


@pytest.mark.parametrize(
    ("answers", "want_url", "want_seen"),
    [
        # the first answers: one request
        ({A: "ok", B: "ok"}, A, [A]),
        # the first is down: the next URL, at once in the same call
        ({A: "down", B: "ok"}, B, [A, B]),
        # a standby names the leader (in our list): straight there
        ({A: f"standby:{C}", B: "down", C: "ok"}, C, [A, C]),
        # a standby naming a URL not in the list is not followed (the token stays home)
        ({A: "standby:http://evil:9", B: "ok"}, B, [A, B]),
    ],
)
def test_an_agent_with_several_managers_finds_the_leader(
    answers: dict[str, str], want_url: str, want_seen: list[str]
) -> None:
    t = _transport(answers)
    urls = [u for u in (A, B, C) if u in answers]
    client = ManagerClient(urls, "h1", TOKEN, retries=1, transport=t)
    d = client.wait_directive(0, 0.0)
    assert d.id == 7 and client.url == want_url
    assert t.seen == want_seen  # type: ignore[attr-defined]


def test_an_agent_whose_managers_are_all_down_gives_up_bounded() -> None:
    t = _transport({A: "down", B: "down"})
    client = ManagerClient([A, B], "h1", TOKEN, retries=1, transport=t)
    with pytest.raises(ManagerUnreachable):
        client.wait_directive(0, 0.0)
    assert len(t.seen) == 4  # type: ignore[attr-defined]  # (retries + 1) x 2 URLs
    with pytest.raises(ManagerUnreachable):
        client.wait_directive(0, 0.0)
    assert len(t.seen) == 6  # type: ignore[attr-defined]  # degraded: one try per URL


@pytest.mark.parametrize(
    ("conf", "want"),
    [
        ({"manager_url": [A, B]}, [A, B]),
        ({"manager_url": f"{A}, {B}"}, [A, B]),
        ({"manager_urls": [A, B]}, [A, B]),
        ({"manager_url": A}, [A]),
        ({}, []),
    ],
)
def test_manager_url_takes_one_or_several(conf: dict[str, Any], want: list[str]) -> None:
    assert AgentSettings.model_validate(conf).manager_url_list() == want


@pytest.mark.parametrize(
    ("conf", "words"),
    [
        ({"manager_url": [A, "ftp://x"]}, ["manager_url", "ftp://x"]),
        ({"manager_urls": [A, A + "/"]}, ["manager_urls", "twice"]),
        ({"manager_url": A, "manager_urls": [B]}, ["manager_url or manager_urls"]),
        ({"manager_url": []}, ["manager_url", "names no manager"]),
    ],
)
def test_bad_manager_urls_are_one_line_errors(
    tmp_path: Path, conf: dict[str, Any], words: list[str]
) -> None:
    cfg = tmp_path / "agent.toml"
    lines = []
    for k, v in conf.items():
        val = "[" + ", ".join(f'"{x}"' for x in v) + "]" if isinstance(v, list) else f'"{v}"'
        lines.append(f"{k} = {val}")
    cfg.write_text("\n".join(lines) + "\n")
    with pytest.raises(ConfigError) as exc:
        load_agent_settings(cfg, environ={})
    # The file's one heading line, then one line for the one error, naming field and value.
    _, line = str(exc.value).splitlines()
    assert all(w in line for w in words), line


# --------------------------------------------------------------------------- review fixes


@needs_pg
def test_a_leader_frozen_inside_a_fenced_write_does_not_block_the_takeover() -> None:
    """The old leader is inside a write (the fence's share lock on the leader row taken)
    when its host freezes: its lock session ends after the lease, its store session sits
    idle in the transaction. The standby gets the lock; its takeover must not wait for the
    row lock until TCP gives up (hours): the store session ends after the lease too
    (idle_in_transaction_session_timeout) and the takeover's bounded retries get through.
    Before: the takeover's UPDATE waited as long as the frozen transaction stayed open."""
    lease = 1.0
    with pg_schema("frozen") as (url, _schema, _admin):
        old_store, new_store = Store(url, lease_s=lease), Store(url, lease_s=lease)
        old = Leadership(old_store, "http://old:1", lease_s=lease)
        new = Leadership(new_store, "http://new:2", lease_s=lease)
        frozen = old_store.engine.connect()
        try:
            assert old.try_lock()
            old_store.migrate()
            assert old.take_over() == 1
            old_store.check_fence(frozen, 1)  # the write's FOR SHARE; then silence
            # No heartbeat: the lock session idles out after the lease (idle_session_timeout).
            wait_until(new.try_lock, 10, "the standby to get the lock")
            took: list[int] = []
            t0 = time.monotonic()
            th = threading.Thread(target=lambda: took.append(new.take_over()), daemon=True)
            th.start()
            th.join(6 * lease)
            assert took == [2], "the takeover still waits for the frozen leader's row lock"
            assert time.monotonic() - t0 < 6 * lease
        finally:
            frozen.invalidate()
            frozen.close()
            for lead in (old, new):
                lead.close()
            old_store.close()
            new_store.close()


@needs_pg
def test_a_takeover_blocked_by_a_row_lock_that_stays_gives_up_bounded(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A row lock held by a session with no idle timeout (not a manager's store session):
    the takeover waits lock_timeout (the lease) per attempt and raises after its attempts,
    rather than waiting without end; the epoch is not raised."""
    lease = 0.5
    with pg_schema("stuck") as (url, schema, admin):
        store = Store(url)
        lead = Leadership(store, "http://new:2", lease_s=lease)
        holder = admin.connect()
        try:
            assert lead.try_lock()
            store.migrate()
            holder.exec_driver_sql(f"SET search_path = {schema}")
            holder.exec_driver_sql("SELECT epoch FROM leader WHERE id = 1 FOR SHARE")
            t0 = time.monotonic()
            with pytest.raises(sa.exc.OperationalError, match="lock timeout"):
                lead.take_over(attempts=3)
            assert 3 * lease <= time.monotonic() - t0 < 3 * lease + 2.0
            assert caplog.text.count("still locked by a write of the old leader") == 2
            holder.rollback()
            row = read_leader(store)
            assert row is not None and row.epoch == 0  # not raised
        finally:
            holder.rollback()
            holder.close()
            lead.close()
            store.close()


@needs_pg
def test_a_leader_paused_past_half_its_lease_hands_out_no_flagged_directive() -> None:
    """Writes are fenced by the epoch, a directive from memory is not: a leader paused
    past its lease may have been deposed (its directive withdrawn) and still answer a
    report before its heartbeat fails. The flagged directive goes out only while the lock
    session confirmed the epoch less than lease/2 ago (a fake monotonic clock stands for
    the pause); otherwise 503, and the next good heartbeat brings it back.
    Before: the directive went out whatever the heartbeat's age."""
    now = [100.0]
    with pg_schema("paused") as (url, _schema, _admin):
        store = Store(url, lease_s=10.0)
        lead = Leadership(store, "http://me:1", lease_s=10.0, mono=lambda: now[0])
        api: Api | None = None
        try:
            assert lead.try_lock()
            store.migrate()
            assert lead.take_over() == 1
            store.write_round(directive_write("h1", 10))
            api = Api(manager_settings(), store)
            r = api.get("/v1/hosts/h1/directive", headers=auth("h1"))
            assert r.status_code == 200 and r.json()["f"] == 1, r.text  # confirmed just now
            now[0] += 5.0  # paused: lease/2 without a heartbeat
            r = api.get("/v1/hosts/h1/directive", headers=auth("h1"))
            assert r.status_code == 503, r.text
            assert "not confirmed" in r.json()["error"]
            body = report(0, 1.0, (0.1, 0.1, 0.1))
            r = api.post("/v1/hosts/h1/reports", headers=auth("h1"), content=body)
            assert r.status_code == 503, r.text
            assert lead.check() is None  # a heartbeat: the store still carries epoch 1
            r = api.get("/v1/hosts/h1/directive", headers=auth("h1"))
            assert r.status_code == 200 and r.json()["f"] == 1, r.text
            # Sent again, the same report is a duplicate (not a replay, 409): it gets the
            # directive now.
            r = api.post("/v1/hosts/h1/reports", headers=auth("h1"), content=body)
            assert r.status_code == 200 and r.json()["f"] == 1, r.text
        finally:
            if api is not None:
                api.close()
            lead.close()
            store.close()


@needs_pg
@pytest.mark.skipif(
    not (shutil.which("pg_dump") and shutil.which("pg_restore")),
    reason="pg_dump/pg_restore not installed (PostgreSQL client tools)",
)
def test_a_restore_moves_the_epoch_past_every_epoch_held_before(tmp_path: Path) -> None:
    """Backup at epoch 1, a takeover to epoch 2 (that leader may be frozen, not dead),
    restore: the next takeover must not hand out epoch 2 again, or the frozen leader's
    writes would pass the fence. Before: the restore took the row back to epoch 1."""
    with pg_schema("restore") as (url, _schema, _admin):
        store = Store(url)
        first, second, third = (Leadership(store, f"http://m{i}:1") for i in range(3))
        try:
            assert first.try_lock()
            store.migrate()
            assert first.take_over() == 1
            store.backup(tmp_path / "b.dump")
            first.close()
            assert second.try_lock()
            assert second.take_over() == 2
            second.close()  # deposed by the restore below; its epoch stays 2
            store.restore(tmp_path / "b.dump")
            assert third.try_lock()
            assert third.take_over() == 4  # past max(1 restored, 2 held) + 1
        finally:
            for lead in (first, second, third):
                lead.close()
            store.close()


@needs_pg
def test_the_lock_session_stays_alive_while_the_new_leader_migrates() -> None:
    """The heartbeat runs from the lock's acquisition: a migration longer than the lease
    (idle_session_timeout) must not end the lock session before the takeover. Before: the
    heartbeat could only start after take_over (it read the epoch and found none)."""
    lease = 1.0
    with pg_schema("migrating") as (url, schema, admin):
        store = Store(url, lease_s=lease)
        lost: list[str] = []
        lead = Leadership(store, "http://me:1", lease_s=lease, on_lost=lost.append)
        try:
            assert lead.try_lock()
            pid = lock_holder_pid(admin, schema)
            lead.start_heartbeat(0.2)
            time.sleep(3 * lease)  # a long migration (the session would idle out in 1 s)
            store.migrate()
            assert lost == []
            assert lock_holder_pid(admin, schema) == pid
            assert lead.take_over() == 1
            time.sleep(0.5)
            assert lost == [] and lead.fresh()
        finally:
            lead.close()
            store.close()
