"""``sova status``: who leads, the epoch, and each manager's role, from several manager URLs.

Real managers on loopback servers: a leader and a standby on one PostgreSQL store, a
SQLite manager (which leads its own store), and a port nobody listens on.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from sova.cli import app
from sova.manager.daemons.service.app import create_app
from sova.manager.daemons.service.leadership import Leadership
from sova.manager.daemons.service.standby import standby_app
from sova.manager.daemons.service.store import Store

from .conftest import free_port, manager_settings, uvicorn_thread, wait_until
from .test_leadership import needs_pg, pg_schema


def run_status(*urls: str) -> tuple[int, str, dict[str, Any]]:
    args = ["status", "--timeout", "2"] + [a for u in urls for a in ("--manager-url", u)]
    text = CliRunner().invoke(app, args)
    as_json = CliRunner().invoke(app, [*args, "--json"])
    assert as_json.exit_code == text.exit_code, (text.output, as_json.output)
    return text.exit_code, text.output, json.loads(as_json.output)


@contextlib.contextmanager
def sqlite_manager(tmp: Path) -> Iterator[str]:
    store = Store(f"sqlite:///{tmp / 'one.db'}")
    port = free_port()
    try:
        with uvicorn_thread(create_app(manager_settings(), store), port):
            yield f"http://127.0.0.1:{port}"
    finally:
        store.close()


def test_status_names_the_one_sqlite_manager_and_a_manager_that_is_down(tmp_path: Path) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    with sqlite_manager(tmp_path) as one:
        code, out, js = run_status(one, dead)
        assert run_status(one)[0] == 0
    # one of two managers down: the pair has no standby left, so not OK (issue 38)
    assert code == 1, out
    assert out.splitlines()[-1] == (
        f"{one} leads (one store, no epoch (SQLite)); unhealthy: {dead} (down)"
    ), out
    roles = {m["url"]: (m["role"], m["epoch"]) for m in js["managers"]}
    assert roles == {one: ("leader", None), dead: ("down", None)}
    code, out, _ = run_status(dead)
    assert (code, out.splitlines()[-1]) == (3, "no manager answered"), out


def test_status_refuses_a_bad_url_in_one_line() -> None:
    r = CliRunner().invoke(app, ["status", "--manager-url", "ftp://x"])
    assert r.exit_code == 2 and "--manager-url 'ftp://x'" in r.output, r.output


@needs_pg
def test_status_shows_the_leader_the_epoch_and_every_role(tmp_path: Path) -> None:
    """A leader and a standby on one store: exit 0, the leader and its epoch; the standby
    alone: no manager leads (1); a SQLite manager beside the leader: two claim to lead (1)."""
    settings = manager_settings()
    with pg_schema("status") as (url, _schema, _admin):
        store, standby_store = Store(url), Store(url)
        lead = Leadership(store, "http://advertised-leader:8700")
        follower = Leadership(standby_store, "http://advertised-standby:8700")
        try:
            assert lead.try_lock()
            store.migrate()
            epoch = lead.take_over()
            leader_app = create_app(settings, store, epoch=epoch)
            sb_app, sb = standby_app(
                standby_store, follower, lambda: None, settings=settings, poll_s=0.1
            )
            lp, sp = free_port(), free_port()
            leader, standby = f"http://127.0.0.1:{lp}", f"http://127.0.0.1:{sp}"
            with uvicorn_thread(sb_app, sp):
                wait_until(lambda: sb.seen_mono is not None, 10, "the standby to see the leader")
                code, out, js = run_status(standby)
                assert (code, out.splitlines()[-1]) == (1, "no manager leads"), out
                with uvicorn_thread(leader_app, lp):
                    code, out, js = run_status(leader, standby)
                    assert code == 0, out
                    assert out.splitlines()[-1] == f"{leader} leads (epoch {epoch})", out
                    got = [(m["url"], m["role"], m["epoch"], m["follows"]) for m in js["managers"]]
                    assert got == [
                        (leader, "leader", 1, None),
                        (standby, "standby", 1, "http://advertised-leader:8700"),
                    ]
                    with sqlite_manager(tmp_path) as other:
                        code, out, _ = run_status(leader, standby, other)
                    assert code == 1, out
                    assert out.splitlines()[-1] == (
                        f"2 managers claim to lead: {leader} (epoch 1), {other} (epoch None)"
                    ), out
        finally:
            follower.close()
            lead.close()
            standby_store.close()
            store.close()
