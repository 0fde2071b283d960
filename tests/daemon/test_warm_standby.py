"""A warm standby (issue 20): the report windows a standby reads ahead of a takeover and
keeps up to date are exactly those a full restore reads, none missed, none twice, even
with report writes in flight when it reads."""

from __future__ import annotations

import threading
import time

import sqlalchemy as sa

from sova.manager.daemons.config import ManagerSettings
from sova.manager.daemons.service.service import ManagerService
from sova.manager.daemons.service.standby import WarmWindows
from sova.manager.daemons.service.store import Store
from sova.manager.daemons.service.store_reports import report_values
from sova.manager.daemons.service.store_rows import ReportRow
from sova.manager.daemons.service.store_schema import host_reports

from .test_leadership import needs_pg, pg_schema

N = 5  # the planner's window


def row(host: str, seq: int, boot: str = "b1", net: float = 0.3) -> ReportRow:
    vms = {f"{host}-vm{j}": [0.1, 0.05, net / 2, 512, False] for j in range(2)}
    return ReportRow(host, seq, 10.0 * seq, 10.0 * seq, (0.2, 0.3, net), vms, None, boot)


def leader_store(url: str) -> Store:
    """A store written as a leader writes it: migrated, its report writes fenced."""
    store = Store(url, lease_s=10)
    store.migrate()
    with store.engine.connect() as conn:
        store.fence = int(conn.execute(sa.text("SELECT epoch FROM leader")).scalar_one())
    return store


def restored(store: Store, warm: WarmWindows | None) -> tuple[object, ...]:
    svc = ManagerService(ManagerSettings(database_url=store.url), store)
    svc.restore(warm)
    core = svc.core
    return (
        {h: list(w) for h, w in core.history.items()},
        dict(core.vms),
        {h: (s.seq, s.boot, s.util) for h, s in svc.hosts.items()},
        {h: list(b) for h, b in svc.intake._past_boots.items()},
    )


@needs_pg
def test_a_warm_standby_restores_what_a_full_restore_reads() -> None:
    with pg_schema("warm") as (url, _schema, _admin):
        leader = leader_store(url)
        standby = Store(url)
        try:
            leader.add_reports([row(f"h{i}", s) for s in (1, 2, 3) for i in range(4)])
            warm = WarmWindows(standby, N)
            assert warm.catch_up() == 12  # read ahead: every row (4 hosts x 3)
            # The leader goes on: h0 restarts twice (boots b2, b3), h1 reports past its
            # window (7 rows > N), h3 is forgotten, h9 is new.
            leader.add_reports([row("h0", 1, "b2"), row("h0", 1, "b3")])
            leader.add_reports([row("h1", s, net=0.1 * s) for s in range(4, 8)])
            leader.forget_host("h3")
            assert warm.catch_up() == 6  # only what is new
            leader.add_reports([row("h9", 1)])
            full = restored(standby, None)
            assert restored(standby, warm) == full
            assert full[3]["h0"] == ["b1", "b2"]  # past boots: oldest first, live one out
            assert "h3" not in full[0] and "h9" in full[0]
            assert len(full[0]["h1"]) == N
        finally:
            leader.close()
            standby.close()


@needs_pg
def test_a_catch_up_waits_for_report_writes_in_flight() -> None:
    """PostgreSQL hands out ids before commit: a write holding id k may commit after one
    holding k + 1. A catch-up that took max(id) = k + 1 then would never read row k."""
    with pg_schema("warmflight") as (url, _schema, _admin):
        leader = leader_store(url)
        standby = Store(url)
        try:
            leader.add_reports([row("h0", 1)])
            warm = WarmWindows(standby, N)
            warm.catch_up()
            slow = leader.engine.connect()
            tx = slow.begin()
            leader.check_fence(slow, leader.fence or 0)  # the share lock a write takes
            slow.execute(host_reports.insert(), [report_values(row("h1", 1))])  # id k, in flight
            leader.add_reports([row("h2", 1)])  # id k + 1, committed
            done = threading.Event()
            th = threading.Thread(target=lambda: (warm.catch_up(), done.set()), daemon=True)
            th.start()
            time.sleep(0.5)
            assert not done.is_set(), "the catch-up did not wait for the write in flight"
            tx.commit()
            slow.close()
            th.join(10)
            assert done.is_set()
            assert {h for h, rs in warm.rows.items() if rs} == {"h0", "h1", "h2"}
        finally:
            leader.close()
            standby.close()
