"""One writer per SQLite store; backup and restore; a store newer than the code (issue 20)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from sova.manager.daemons.service.store import Store

from .conftest import ADMIN, REPO, TOKENS, Api, free_port, manager_settings, wait_until
from .test_operator_control import ADMIN_H, directive, plans, rounds


def _manager_config(tmp_path: Path, db: Path, name: str) -> tuple[Path, int]:
    port = free_port()
    lines = [
        'listen = "127.0.0.1"',
        f"port = {port}",
        f'database_url = "sqlite:///{db}"',
        "plan_period_s = 10",
        'log_level = "warning"',
    ]
    for h, t in TOKENS.items():
        lines += [f'[hosts."{h}"]', f'token = "{t}"']
    cfg = tmp_path / f"{name}.toml"
    cfg.write_text("\n".join(lines) + "\n")
    return cfg, port


def _manager(cfg: Path, log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "sova.cli_daemons", "manager", "--config", str(cfg)],
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        cwd=REPO,
    )


def _refused_line(cfg: Path) -> str:
    """Start a manager that must refuse to start: exit 2 and one line on stderr (returned)."""
    r = subprocess.run(
        [sys.executable, "-m", "sova.cli_daemons", "manager", "--config", str(cfg)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
        env={"COLUMNS": "400", "PATH": "/usr/bin:/bin"},
    )
    assert r.returncode == 2, r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    return lines[0]


def test_a_second_manager_on_one_sqlite_store_exits_2_naming_the_store_and_holder(
    tmp_path: Path,
) -> None:
    """Before, both started and both reported ready (split brain)."""
    db = tmp_path / "m.db"
    cfg1, port1 = _manager_config(tmp_path, db, "one")
    cfg2, port2 = _manager_config(tmp_path, db, "two")
    first = _manager(cfg1, tmp_path / "one.log")
    try:
        wait_until(
            lambda: httpx.get(f"http://127.0.0.1:{port1}/readyz", timeout=1).status_code == 200,
            30,
            "the first manager",
        )
        line = _refused_line(cfg2)
        assert str(db) in line and f"pid {first.pid}" in line, line
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"http://127.0.0.1:{port2}/healthz", timeout=1)
    finally:
        first.terminate()
        first.wait(15)
    # The holder is gone (however it ended): the next manager takes the store.
    third = _manager(cfg2, tmp_path / "three.log")
    try:
        wait_until(
            lambda: httpx.get(f"http://127.0.0.1:{port2}/readyz", timeout=1).status_code == 200,
            30,
            "a manager after the first exited",
        )
    finally:
        third.kill()
        third.wait(15)


# ------------------------------------------------------------------ backup and restore


def _sova(*args: str) -> Any:
    from typer.testing import CliRunner

    from sova.cli import app

    return CliRunner().invoke(app, list(args))


def test_backup_wipe_restore_keeps_fences_mode_plans_audit_and_ids_move_on(
    tmp_path: Path,
) -> None:
    """A backup taken while the manager runs; after it, a plan is approved (directive X,
    which an agent may have applied); the store is wiped and restored from the backup.
    The restored manager has the mode, the fences, the still-open plan and the audit log;
    the directive it issues for the same plan has an id above X (a new store epoch)."""
    db = tmp_path / "m.db"
    url = f"sqlite:///{db}"
    settings = manager_settings(clock="agent", plan_period_s=10, admin_token=ADMIN)
    wall = [1_800_000_000.0]
    store = Store(url)
    api = Api(settings, store, clock=lambda: wall[0])
    api.run(api.client.put("/v1/mode", json={"mode": "recommend", "by": "o"}, headers=ADMIN_H))
    api.run(api.client.put("/v1/fences/pin/h2-vm1", json={"by": "o"}, headers=ADMIN_H))
    api.run(api.client.put("/v1/fences/maintenance/h3", json={"by": "o"}, headers=ADMIN_H))
    rounds(api, range(1, 4))
    (p,) = plans(api, "proposed")
    audit_before = api.get("/v1/audit", headers=ADMIN_H).json()["entries"]
    assert len(audit_before) >= 4  # mode, two fences, the proposal

    r = _sova("store", "backup", str(tmp_path / "b.db"), "--database-url", url)
    assert r.exit_code == 0, r.output

    r = api.post(f"/v1/plans/{p['id']}/approve", json={"by": "alice"}, headers=ADMIN_H)
    assert r.status_code == 200, r.text
    x = directive(api, "h1")
    assert x["f"]
    api.drain()
    api.close()
    store.close()
    for f in tmp_path.glob("m.db*"):  # the database, its WAL and shared memory
        f.unlink()

    r = _sova("store", "restore", str(tmp_path / "b.db"), "--database-url", url)
    assert r.exit_code == 0, r.output
    wall[0] += 60  # the manager restarts later
    store = Store(url)
    again = Api(settings, store, clock=lambda: wall[0])
    try:
        assert again.get("/v1/mode", headers=ADMIN_H).json()["cluster"] == "recommend"
        fences = again.get("/v1/fences", headers=ADMIN_H).json()
        assert {(f["kind"], f["name"]) for f in fences} == {
            ("pin", "h2-vm1"),
            ("maintenance", "h3"),
        }
        audit = again.get("/v1/audit", headers=ADMIN_H).json()["entries"]
        assert audit[: len(audit_before)] == audit_before
        assert audit[-1]["action"] == "store restore" and audit[-1]["subject"].endswith("b.db")
        rounds(again, range(4, 5))
        assert [q["id"] for q in plans(again, "proposed")] == [p["id"]]  # approved after
        r = again.post(f"/v1/plans/{p['id']}/approve", json={"by": "alice"}, headers=ADMIN_H)
        assert r.status_code == 200, r.text
        y = directive(again, "h1")
        assert y["f"] and y["i"] > x["i"], (x, y)
    finally:
        again.close()
        store.close()


def test_restore_refuses_while_a_manager_holds_the_store(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    running = Store(f"sqlite:///{db}")
    running.migrate()
    running.lock_writer()
    r = _sova("store", "backup", str(tmp_path / "b.db"), "--database-url", f"sqlite:///{db}")
    assert r.exit_code == 0, r.output  # a backup is taken while it runs
    try:
        r = _sova("store", "restore", str(tmp_path / "b.db"), "--database-url", f"sqlite:///{db}")
        assert r.exit_code == 2
        assert r.output.count("\n") == 1 and "in use by another manager" in r.output, r.output
    finally:
        running.close()


def test_a_store_newer_than_the_code_is_refused_with_one_line(tmp_path: Path) -> None:
    """Before, alembic failed with a traceback ("Can't locate revision") and the manager
    stopped with exit 1."""
    db = tmp_path / "m.db"
    s = Store(f"sqlite:///{db}")
    s.migrate()
    with s.engine.begin() as conn:
        conn.exec_driver_sql("UPDATE alembic_version SET version_num = '0099_from_the_future'")
    s.close()
    cfg, _ = _manager_config(tmp_path, db, "m")
    line = _refused_line(cfg)
    assert "0099_from_the_future" in line and "newer than this Sova" in line, line


def test_tables_without_a_schema_version_are_refused_with_a_hint(tmp_path: Path) -> None:
    """Issue 37, Low: Sova's tables without ``alembic_version`` (a partial restore, a
    table copy) made the upgrade fail on "table already exists": exit 1, a traceback, no
    hint. Now a configuration error (exit 2), one line saying what to do."""
    db = tmp_path / "m.db"
    s = Store(f"sqlite:///{db}")
    s.migrate()
    with s.engine.begin() as conn:
        conn.exec_driver_sql("DROP TABLE alembic_version")
    s.close()
    cfg, _ = _manager_config(tmp_path, db, "m")
    line = _refused_line(cfg)
    assert "no schema version (alembic_version)" in line and "sova store restore" in line, line


PG_URL = os.environ.get("SOVA_TEST_PG_URL")


@pytest.mark.skipif(
    not PG_URL, reason="no PostgreSQL server: set SOVA_TEST_PG_URL (see scripts/ci-postgres.sh)"
)
@pytest.mark.skipif(
    not (shutil.which("pg_dump") and shutil.which("pg_restore")),
    reason="pg_dump/pg_restore not installed (PostgreSQL client tools)",
)
def test_postgresql_backup_wipe_restore(tmp_path: Path) -> None:
    """pg_dump of the store's schema, its tables dropped, pg_restore: rows are back. The
    store lives in a schema of its own here (search_path), so the test shares the server's
    database with other tests without touching their tables."""
    import sqlalchemy as sa

    from sova.manager.daemons.service.store import AuditRow, FenceRow, RoundWrite

    assert PG_URL is not None
    schema = f"sova_backup_{os.getpid()}"
    admin = sa.create_engine(PG_URL)
    with admin.begin() as conn:
        conn.exec_driver_sql(f"CREATE SCHEMA {schema}")
    sep = "&" if "?" in PG_URL else "?"
    url = f"{PG_URL}{sep}options=-csearch_path%3D{schema}"
    try:
        store = Store(url)
        store.migrate()
        store.write_round(
            RoundWrite(
                audit=[AuditRow(1.0, "o", "fence set", "pin/vm1", "")],
                fences_set=[FenceRow("pin", "vm1", "o", 1.0, "why")],
            )
        )
        store.close()
        r = _sova("store", "backup", str(tmp_path / "b.dump"), "--database-url", url)
        assert r.exit_code == 0, r.output
        with admin.begin() as conn:  # wipe
            conn.exec_driver_sql(f"DROP SCHEMA {schema} CASCADE")
            conn.exec_driver_sql(f"CREATE SCHEMA {schema}")
        r = _sova("store", "restore", str(tmp_path / "b.dump"), "--database-url", url)
        assert r.exit_code == 0, r.output
        store = Store(url)
        state = store.load_state(5)
        assert [(f.kind, f.name, f.reason) for f in state.fences] == [("pin", "vm1", "why")]
        with store.engine.connect() as conn:
            actions = [a for (a,) in conn.exec_driver_sql("SELECT action FROM audit ORDER BY id")]
        assert actions == ["fence set", "store restore"]
        store.close()
    finally:
        with admin.begin() as conn:
            conn.exec_driver_sql(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        admin.dispose()


@pytest.mark.skipif(
    not PG_URL, reason="no PostgreSQL server: set SOVA_TEST_PG_URL (see scripts/ci-postgres.sh)"
)
def test_a_second_manager_on_one_postgresql_store_is_refused_naming_the_holder() -> None:
    """A session-level advisory lock on a connection the manager holds: the second is
    refused while the first lives, and takes the store once its session is gone."""
    import sqlalchemy as sa

    from sova.manager.daemons.service.store import StoreBusy

    assert PG_URL is not None
    schema = f"sova_lock_{os.getpid()}"
    admin = sa.create_engine(PG_URL)
    with admin.begin() as conn:
        conn.exec_driver_sql(f"CREATE SCHEMA {schema}")
    sep = "&" if "?" in PG_URL else "?"
    url = f"{PG_URL}{sep}options=-csearch_path%3D{schema}"
    first, second = Store(url), Store(url)
    try:
        first.lock_writer()
        with pytest.raises(StoreBusy) as exc:
            second.lock_writer()
        line = str(exc.value)
        assert "\n" not in line and schema in line and f"pid {os.getpid()}" in line, line
        first.close()  # its session ends: the lock goes with it
        second.lock_writer()
    finally:
        first.close()
        second.close()
        with admin.begin() as conn:
            conn.exec_driver_sql(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        admin.dispose()


@pytest.mark.parametrize("link", ["hard", "symbolic"])
def test_a_second_writer_through_another_name_of_the_sqlite_file_is_refused(
    tmp_path: Path, link: str
) -> None:
    """Issue 37 (Low): the writer lock was ``<path>.lock`` beside the path it was given, so
    a hard link (or a symbolic one) to the database, in another directory, had a lock of its
    own and a second manager wrote the same file. The file itself is locked now too."""
    from sova.manager.daemons.service.store import StoreBusy

    db = tmp_path / "m.db"
    other = tmp_path / "elsewhere"
    other.mkdir()
    first = Store(f"sqlite:///{db}")
    first.migrate()
    alias = other / "alias.db"
    (os.link if link == "hard" else os.symlink)(db, alias)
    second = Store(f"sqlite:///{alias}")
    try:
        first.lock_writer()
        with pytest.raises(StoreBusy) as exc:
            second.lock_writer()
        line = str(exc.value)
        assert "\n" not in line and str(alias) in line, line
        first.close()  # its lock goes with it
        second.lock_writer()
    finally:
        first.close()
        second.close()
