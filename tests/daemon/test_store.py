"""The knowledge store on SQLite and on a real PostgreSQL server, and manager restarts.

PostgreSQL tests run when SOVA_TEST_PG_URL names a server (``scripts/ci-postgres.sh``
starts one and prints the URL); otherwise they are skipped, saying so.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from sova.manager.daemons.schema import PROTOCOL
from sova.manager.daemons.service.store import (
    DecisionRow,
    DirectiveRow,
    LeaseRow,
    MigrationEnd,
    ReportRow,
    RoundWrite,
    Store,
    metadata,
)

from .conftest import Api, auth, manager_settings, report

PG_URL = os.environ.get("SOVA_TEST_PG_URL")


def _reset_pg(url: str) -> None:
    eng = sa.create_engine(url)
    with eng.begin() as conn:
        metadata.drop_all(conn)
        conn.execute(sa.text("DROP TABLE IF EXISTS alembic_version"))
    eng.dispose()


@pytest.fixture(
    params=[
        "sqlite",
        pytest.param(
            "postgresql",
            marks=pytest.mark.skipif(
                not PG_URL,
                reason="no PostgreSQL server: set SOVA_TEST_PG_URL (see scripts/ci-postgres.sh)",
            ),
        ),
    ]
)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'store.db'}"
    else:
        assert PG_URL
        _reset_pg(PG_URL)
        url = PG_URL
    s = Store(url)
    s.migrate()
    yield s
    s.close()


def test_migrations_reach_head_and_are_idempotent(backend: Store) -> None:
    assert backend.migrate() == "0007"
    names = set(sa.inspect(backend.engine).get_table_names())
    # 0007: a fence's end
    assert "until_s" in {c["name"] for c in sa.inspect(backend.engine).get_columns("fences")}
    assert {
        "leader",
        "peer_config",
        "outbox",
        "webhook_deliveries",
        "host_reports",
        "decisions",
        "leases",
        "directives",
        "migrations",
        "alembic_version",
    } <= names


def test_report_windows_keep_the_last_n_in_order(backend: Store) -> None:
    rows = [
        ReportRow(
            h, i, 10.0 * i, 10.0 * i, (0.01 * i, 0.2, 0.3), {"vm": [0.1, 0.1, 0.1, 512, False]}
        )
        for i in range(1, 9)
        for h in ("h1", "h2")
    ]
    backend.add_reports(rows)
    st = backend.load_state(5)
    assert {h: [r.seq for r in w] for h, w in st.windows.items()} == {
        "h1": [4, 5, 6, 7, 8],
        "h2": [4, 5, 6, 7, 8],
    }
    assert st.windows["h1"][-1].util == pytest.approx((0.08, 0.2, 0.3))
    assert st.windows["h1"][-1].vms == {"vm": [0.1, 0.1, 0.1, 512, False]}
    # Pruning by age never touches the detector windows.
    assert backend.prune(before_s=1e9, keep_per_host=5) == 6
    assert backend.count("host_reports") == 10
    assert backend.load_state(5).windows == st.windows


def test_round_writes_are_read_back(backend: Store) -> None:
    inputs = {
        "utilisation": [0.2, 0.3, 0.9],
        "history": [[0.2, 0.3, 0.9]],
        "candidates": ["h1", "h2"],
    }
    backend.write_round(
        RoundWrite(
            decisions=[
                DecisionRow(1, 30.0, "h1", True, "h2", "vm1", "hot: move", ("net",), inputs),
                DecisionRow(
                    2, 30.0, "h3", False, None, None, "hot: no cold spot", ("cpu",), inputs
                ),
            ],
            new_leases=[LeaseRow("vm1", "h1", "h2", 30.0, 1)],
            directives=[DirectiveRow("h1", 1, True, "h2", "vm1", 30.0, False)],
        )
    )
    st = backend.load_state(5)
    assert st.leases == [LeaseRow("vm1", "h1", "h2", 30.0, 1)]
    assert st.directives == [DirectiveRow("h1", 1, True, "h2", "vm1", 30.0, False)]
    assert st.next_id == 3
    got = backend.decisions()
    assert [d.id for d in got] == [1, 2] and got[0].inputs == inputs
    assert got[0].hot_resources == ("net",)
    assert [d.id for d in backend.decisions(after=1)] == [2]
    assert [d.id for d in backend.decisions(host="h3")] == [2]

    backend.write_round(
        RoundWrite(
            dropped_leases=["vm1"],
            acked=[("h1", 1)],
            migration_ends=[MigrationEnd(1, 40.0, "succeeded", "arrived")],
        )
    )
    st = backend.load_state(5)
    assert st.leases == [] and st.directives[0].acked
    (m,) = backend.migration_rows("vm1")
    assert (m["started_s"], m["ended_s"], m["result"]) == (30.0, 40.0, "succeeded")


# ------------------------------------------------------------------ restart

HOT, COLD = (0.2, 0.3, 0.9), (0.1, 0.2, 0.1)
VMS1 = {"h1-vm1": (0.1, 0.1, 0.5), "h1-vm2": (0.05, 0.1, 0.3)}


def _feed(api: Api, seqs: range, ack: int = 0) -> None:
    for i in seqs:
        api.post(
            "/v1/hosts/h1/reports", content=report(i, 10.0 * i, HOT, VMS1, ack), headers=auth("h1")
        )
        api.post("/v1/hosts/h2/reports", content=report(i, 10.0 * i, COLD), headers=auth("h2"))
        api.tick(10.0 * i)


def test_a_restarted_manager_continues_where_it_stopped(backend: Store) -> None:
    first = Api(manager_settings(), backend)
    _feed(first, range(1, 4))
    directive = first.get(
        "/v1/hosts/h1/directive", params={"p": PROTOCOL}, headers=auth("h1")
    ).json()
    assert directive["f"] is True
    windows = {h: list(w) for h, w in first.svc.core.history.items()}
    decisions = first.get("/v1/decisions").json()["decisions"]
    first.close()  # drains the write-behind buffer, as SIGTERM does

    second = Api(manager_settings(), backend)
    try:
        assert {h: list(w) for h, w in second.svc.core.history.items()} == windows
        assert set(second.svc.core.leases) == {"h1-vm1"}
        # The unacknowledged directive survives: re-delivered, same id, not re-decided.
        again = second.post(
            "/v1/hosts/h1/reports", content=report(4, 40, HOT, VMS1), headers=auth("h1")
        )
        assert again.json() == directive
        assert second.get("/v1/decisions").json()["decisions"] == decisions
        # New decisions get new ids after the restored ones.
        second.post("/v1/hosts/h2/reports", content=report(4, 40, COLD), headers=auth("h2"))
        second.tick(40.0)
        ids = [d["id"] for d in second.get("/v1/decisions").json()["decisions"]]
        assert ids == sorted(set(ids)) and len(ids) == len(decisions) + 1
    finally:
        second.close()


def test_restart_restores_the_same_plan_as_no_restart(backend: Store, tmp_path: Path) -> None:
    control = Store(f"sqlite:///{tmp_path / 'control.db'}")
    ref = Api(manager_settings(), control)
    _feed(ref, range(1, 3))
    a = Api(manager_settings(), backend)
    _feed(a, range(1, 3))
    a.close()
    b = Api(manager_settings(), backend)
    try:
        _feed(ref, range(3, 4))
        _feed(b, range(3, 4))
        r1 = ref.get("/v1/hosts/h1/directive", headers=auth("h1")).json()
        r2 = b.get("/v1/hosts/h1/directive", headers=auth("h1")).json()
        # Ids differ (each start has its own store epoch); the decision does not.
        assert {**r1, "i": 0} == {**r2, "i": 0} and r1["f"] is True
    finally:
        b.close()
        ref.close()
        control.close()


def test_store_failure_means_no_directive(tmp_path: Path) -> None:
    """Persist, then publish: a round whose decisions cannot be stored signals nothing."""
    store = Store(f"sqlite:///{tmp_path / 'x.db'}")
    api = Api(manager_settings(), store)
    try:
        _feed(api, range(1, 3))

        def broken(_w: RoundWrite) -> None:
            raise RuntimeError("disk full")

        store.write_round = broken  # type: ignore[method-assign]
        with pytest.raises(RuntimeError):
            _feed(api, range(3, 4))
        assert api.get("/v1/hosts/h1/directive", headers=auth("h1")).json()["f"] is False
        assert api.svc.core.leases == {}
    finally:
        asyncio.set_event_loop(None)
        api.close()
        store.close()
