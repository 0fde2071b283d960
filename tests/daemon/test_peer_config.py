"""Issue 37, Medium 1 and 2: peers agree or say so.

* A credential the leader revokes — through ``POST /v1/credentials/reload`` or by the
  operators file changing on disk — is refused by the standby within one heartbeat
  (1 s: ``leader_lease_s / 5`` at the default 10 s lease, the leader's check of its
  lock session); before, the standby kept its own copy until someone sent it a SIGHUP
  (the reload route is a write, 503 on a standby).
* A standby started with a different mode or host-token set names the differing
  settings in its log, ``sova_manager_config_differs{setting}`` and ``/readyz``, and
  ``sova status`` exits 1 naming them; before, nothing said so.

Both managers are their real apps on loopback uvicorn servers over one PostgreSQL schema.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import httpx
import pytest

from sova.manager.daemons.config import ManagerSettings
from sova.manager.daemons.credentials import OperatorCredentials
from sova.manager.daemons.security import TokenBook
from sova.manager.daemons.service.app import create_app
from sova.manager.daemons.service.leadership import Leadership
from sova.manager.daemons.service.peers import book_from_json, book_json, differing, settings_digest
from sova.manager.daemons.service.standby import Standby, _Watch, standby_app
from sova.manager.daemons.service.standby_reads import StandbyAuth
from sova.manager.daemons.service.store import Store

from .conftest import ADMIN, free_port, manager_settings, uvicorn_thread, wait_until
from .test_leadership import needs_pg, pg_schema
from .test_status_cli import run_status

HEARTBEAT_S = 1.0  # Leadership.start_heartbeat's interval at the default 10 s lease
ALICE = "alice-" + "a" * 26
BOB = "bob-" + "b" * 28
ADMIN_H = {"authorization": f"Bearer {ADMIN}"}


def ops_file(path: Path, *names: str) -> Path:
    secrets = {"alice": ALICE, "bob": BOB}
    path.write_text("".join(f'[{n}]\nrole = "viewer"\ntokens = ["{secrets[n]}"]\n' for n in names))
    return path


@contextlib.contextmanager
def pair(
    lead_settings: ManagerSettings, standby_settings: ManagerSettings
) -> Iterator[tuple[str, str, Standby]]:
    """(the leader's URL, the standby's URL, the standby's state) on a fresh schema."""
    with pg_schema("peers") as (url, _schema, _admin):
        store, standby_store = Store(url), Store(url)
        lead = Leadership(store, "http://leader.example:8700")
        follower = Leadership(standby_store, "http://standby.example:8700")
        try:
            assert lead.try_lock()
            store.migrate()
            assert lead.take_over() == 1
            app, sb = standby_app(
                standby_store, follower, lambda: None, settings=standby_settings, poll_s=0.1
            )
            lp, sp = free_port(), free_port()
            with (
                uvicorn_thread(create_app(lead_settings, store, migrate=False, epoch=1), lp),
                uvicorn_thread(app, sp),
            ):
                wait_until(lambda: sb.generation > 0, 10, "the standby to read the leader's")
                yield f"http://127.0.0.1:{lp}", f"http://127.0.0.1:{sp}", sb
        finally:
            follower.close()
            lead.close()
            standby_store.close()
            store.close()


def fences(base: str, token: str) -> int:
    h = {"authorization": f"Bearer {token}"}
    return httpx.get(base + "/v1/fences", headers=h, timeout=5).status_code


def refused_within(base: str, token: str, limit_s: float) -> float:
    """Seconds until ``token`` is 401 at ``base``; fails past ``limit_s``."""
    t0 = time.monotonic()
    while fences(base, token) != 401:
        assert time.monotonic() - t0 < limit_s, f"still accepted after {limit_s} s"
        time.sleep(0.02)
    return time.monotonic() - t0


@needs_pg
def test_a_revoked_operator_is_refused_by_the_standby_within_one_heartbeat(
    tmp_path: Path,
) -> None:
    ops = ops_file(tmp_path / "operators.toml", "alice", "bob")
    settings = manager_settings(admin_token=ADMIN, insecure=False, operators_file=ops)
    with pair(settings, settings) as (leader, standby, _sb):
        assert [fences(m, t) for m in (leader, standby) for t in (ALICE, BOB)] == [200] * 4
        # Through the API, at the leader (the standby answers the reload route 503).
        ops_file(ops, "alice")
        r = httpx.post(leader + "/v1/credentials/reload", headers=ADMIN_H, timeout=5)
        assert r.status_code == 200, r.text
        assert fences(leader, BOB) == 401
        took = refused_within(standby, BOB, HEARTBEAT_S)
        assert fences(standby, ALICE) == 200
        # Through the file alone: the leader notices it changed (a stat every 0.5 s) and
        # publishes; no reload anywhere.
        ops_file(ops, "bob")
        took_disk = refused_within(standby, ALICE, 0.5 + HEARTBEAT_S)
        assert refused_within(leader, ALICE, 0.1) < 0.1
        # An operator the leader adds is accepted by the standby too (it follows the leader).
        wait_until(lambda: fences(standby, BOB) == 200, HEARTBEAT_S, "bob again on the standby")
    print(f"revoked on the standby {took:.2f} s after the reload, {took_disk:.2f} s after the edit")


@needs_pg
def test_a_standby_configured_unlike_the_leader_is_named_by_status_and_a_metric(
    tmp_path: Path,
) -> None:
    leader_settings = manager_settings(admin_token=ADMIN, insecure=False)
    odd = manager_settings(
        admin_token=ADMIN,
        insecure=False,
        mode="recommend",
        hosts={"h1": {"token": "h1-token-0123456789abcdef"}},  # h2's token missing
    )
    with pair(leader_settings, odd) as (leader, standby, sb):
        assert sb.differs == ["host_tokens", "mode"]
        code, out, js = run_status(leader, standby)
        assert code == 1, out
        assert "differs from the leader's in: host_tokens, mode" in out.splitlines()[-1], out
        (st,) = [m for m in js["managers"] if m["url"] == standby]
        assert st["differs"] == ["host_tokens", "mode"]
        text = httpx.get(standby + "/metrics", headers=ADMIN_H, timeout=5).text
        assert 'sova_manager_config_differs{setting="mode"} 1.0' in text
        assert 'sova_manager_config_differs{setting="host_tokens"} 1.0' in text
    # The same configuration on both: nothing differs and status is 0.
    with pair(leader_settings, leader_settings) as (leader, standby, sb):
        assert sb.differs == []
        code, out, _ = run_status(leader, standby)
        assert code == 0, out
        text = httpx.get(standby + "/metrics", headers=ADMIN_H, timeout=5).text
        assert "sova_manager_config_differs{" not in text


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"mode": "recommend"}, ["mode"]),
        (
            {"planner": {"alpha": 0.75, "k": 3, "n": 5, "max_concurrent_migrations": 0}},
            ["planner.max_concurrent_migrations"],
        ),
        ({"leader_lease_s": 20.0}, ["leader_lease_s"]),
        ({"admin_token": "another-admin-token-0123"}, ["operators"]),
        ({"hosts": {}}, ["host_tokens"]),
        # Not safety-relevant: a port, a log level may differ between peers.
        ({"port": 9999, "log_level": "debug"}, []),
    ],
)
def test_the_digest_names_each_differing_setting(change: dict[str, Any], named: list[str]) -> None:
    base = {"admin_token": ADMIN}
    a = manager_settings(**base)
    b = manager_settings(**{**base, **change})
    assert (
        differing(settings_digest(a, TokenBook.load(a)), settings_digest(b, TokenBook.load(b)))
        == named
    )


def test_the_published_book_holds_digests_only_and_reads_back() -> None:
    s = manager_settings(admin_token=ADMIN)
    book = TokenBook.load(s).operators
    stored = book_json(book)
    assert ADMIN not in repr(stored)  # never a secret
    assert book_from_json(stored) == book
    # A malformed entry in the store is left out rather than trusted.
    assert book_from_json(
        {"x": ["root", ["00" * 32]], "y": ["viewer", ["zz"]]}
    ) == OperatorCredentials({})


@dataclasses.dataclass
class _SeenAtGeneration(Standby):
    """A standby whose ``differs`` is recorded at each write of ``generation``."""

    seen: list[list[str]] = dataclasses.field(default_factory=list)

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "generation" and "seen" in self.__dict__:
            self.seen.append(list(self.differs))
        super().__setattr__(name, value)


class _Published:
    """The two reads :meth:`_Watch.follow` makes of the store: one published generation."""

    def __init__(self, digest: dict[str, str]) -> None:
        self.digest = digest

    def peer_generation(self) -> int:
        return 1

    def peer_config(self) -> tuple[int, dict[str, Any], dict[str, str]]:
        return 1, {}, self.digest


def test_a_reader_that_sees_the_leaders_generation_sees_its_comparison_too() -> None:
    """The status route and ``/readyz`` run on other threads than the standby's follow;
    one that reads the new generation must read the settings compared against it.
    Before, ``generation`` was written first and ``differs`` a digest computation later:
    CI on 2026-12-07 read ``[]`` between the two (the test above, under load)."""
    leader = manager_settings(admin_token=ADMIN, insecure=False)
    odd = manager_settings(admin_token=ADMIN, insecure=False, mode="recommend")
    sb = _SeenAtGeneration()
    published = _Published(settings_digest(leader, TokenBook.load(leader)))
    watch = _Watch(sb, cast(Store, published), cast(Leadership, None), lambda: None, odd, time.time)
    app = SimpleNamespace(state=SimpleNamespace(standby_auth=StandbyAuth(odd, TokenBook.load(odd))))
    watch.follow(cast(Any, app))
    assert (sb.generation, sb.differs) == (1, ["mode"])
    assert sb.seen == [["mode"]]  # the comparison was in place when the generation changed
