"""Issue 10: a control plane that never acts on stale, replayed or forged state.

Each test drives the manager through its HTTP API in-process (no network) with the agent
clock (``clock = "agent"``), so "time" is the reports' own clock and nothing sleeps.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

import pytest

from sova.manager.daemons.schema import PROTOCOL, Directive

from .conftest import Api, auth, manager_settings, report

HOT = (0.2, 0.3, 0.9)
COLD = (0.1, 0.2, 0.1)
WARM = (0.2, 0.3, 0.5)
VMS1 = {"h1-vm1": (0.1, 0.1, 0.5), "h1-vm2": (0.05, 0.1, 0.3)}
VMS2 = {"h2-vm1": (0.05, 0.1, 0.05)}
VMS3 = {"h3-vm1": (0.05, 0.1, 0.05)}


def post(api: Api, host: str, seq: int, t: float, util: Any, vms: Any, ack: int = 0) -> Any:
    r = api.post(
        f"/v1/hosts/{host}/reports", content=report(seq, t, util, vms, ack), headers=auth(host)
    )
    assert r.status_code == 200, r.text
    return r.json()


# ------------------------------------------------------------------ 1. stale hosts


def test_a_stale_host_is_neither_target_nor_source_and_is_shown_stale(api_factory) -> None:  # type: ignore[no-untyped-def]
    """h2's agent stops after its first report; 3 periods later it is no target for h1."""
    api = api_factory(clock="agent", plan_period_s=10)
    post(api, "h2", 1, 10.0, COLD, VMS2)
    for i in range(1, 8):
        post(api, "h1", i, 10.0 * i, HOT, VMS1)
        api.tick(10.0 * i)
    api.drain()
    late = [(d.time_s, d.target) for d in api.svc.store.decisions() if d.flag and d.time_s > 40]
    assert late == [], "h1 was sent to h2 from a report more than 3 periods old"
    hosts = {h["host"]: h for h in api.get("/v1/cluster").json()["hosts"]}
    assert hosts["h2"]["state"] == "stale" and hosts["h2"]["age_s"] == 60.0
    assert hosts["h1"]["state"] == "fresh" and hosts["h1"]["age_s"] == 0.0
    text = api.get("/metrics").text
    assert 'sova_manager_hosts{state="stale"} 1.0' in text
    assert 'sova_manager_hosts{state="fresh"} 1.0' in text
    assert 'sova_manager_host_last_report_timestamp_seconds{host="h2"} 10.0' in text


def test_a_stale_host_is_not_a_source_and_its_window_restarts_on_return(api_factory) -> None:  # type: ignore[no-untyped-def]
    api = api_factory(clock="agent", plan_period_s=10)
    for i in range(1, 3):  # two hot reports of k = 3, then h1 goes silent
        post(api, "h1", i, 10.0 * i, HOT, VMS1)
        post(api, "h2", i, 10.0 * i, COLD, VMS2)
        api.tick(10.0 * i)
    for i in range(3, 9):
        post(api, "h2", i, 10.0 * i, COLD, VMS2)
        api.tick(10.0 * i)
    # h1 returns: its old reports are from before a gap, not a window of its present.
    post(api, "h1", 3, 90.0, HOT, VMS1)
    post(api, "h2", 9, 90.0, COLD, VMS2)
    api.tick(90.0)
    d = api.get("/v1/hosts/h1/directive", headers=auth("h1")).json()
    assert d["f"] is False, "flagged from a window that spans the agent's absence"
    assert len(api.svc.core.history["h1"]) == 1


def test_a_directive_to_a_host_gone_stale_expires(api_factory) -> None:  # type: ignore[no-untyped-def]
    api = api_factory(
        clock="agent",
        plan_period_s=10,
        planner={"alpha": 0.75, "k": 3, "n": 5, "directive_ttl_periods": 100},
    )
    for i in range(1, 4):
        post(api, "h1", i, 10.0 * i, HOT, VMS1)
        post(api, "h2", i, 10.0 * i, COLD, VMS2)
        api.tick(10.0 * i)
    assert api.get("/v1/hosts/h1/directive", headers=auth("h1")).json()["f"] is True
    for i in range(4, 9):  # h1 never picks it up
        post(api, "h2", i, 10.0 * i, COLD, VMS2)
        api.tick(10.0 * i)
    assert api.get("/v1/hosts/h1/directive", headers=auth("h1")).json()["f"] is False
    assert api.get("/v1/cluster").json()["leases"] == []
    api.drain()
    assert api.svc.store.migration_rows("h1-vm1")[0]["result"] == "expired"


# ------------------------------------------------------------------ 2. one migration


def _done(api: Api, host: str, vm: str, result: str, **kw: Any) -> Any:
    return api.post(
        f"/v1/migrations/{vm}/done",
        json={"result": result, **kw},
        headers={**auth(host), "x-sova-host": host},
    )


def _flagged(api: Api) -> list[tuple[float, str, str | None]]:
    api.drain()
    return [(d.time_s, d.host, d.vm) for d in api.svc.store.decisions() if d.flag]


def _hot_until_signalled(api: Api) -> int:
    for i in range(1, 4):
        post(api, "h1", i, 10.0 * i, HOT, VMS1)
        post(api, "h2", i, 10.0 * i, COLD, VMS2)
        api.tick(10.0 * i)
    d = api.get("/v1/hosts/h1/directive", headers=auth("h1")).json()
    assert d["f"] is True and d["t"] == "h2" and d["v"] == "h1-vm1"
    post(api, "h1", 4, 40.0, HOT, VMS1, ack=d["i"])  # the agent starts the migration
    post(api, "h2", 4, 40.0, COLD, VMS2)
    api.tick(40.0)
    return int(d["i"])


@pytest.mark.parametrize("order", ["target-report-first", "source-done-first"])
def test_whatever_closes_the_lease_restarts_both_windows(api_factory, order: str) -> None:  # type: ignore[no-untyped-def]
    """Issue 10 #2: the VM arrives; one migration, whichever message comes first."""
    api = api_factory(
        clock="agent",
        plan_period_s=10,
        planner={"alpha": 0.75, "k": 3, "n": 5, "restart_window_after_migration": True},
    )
    did = _hot_until_signalled(api)
    relieved = {"h1-vm2": VMS1["h1-vm2"]}
    arrived = {**VMS2, "h1-vm1": VMS1["h1-vm1"]}
    if order == "source-done-first":
        assert _done(api, "h1", "h1-vm1", "succeeded", dst="h2").json() == {"released": True}
    post(api, "h2", 5, 50.0, COLD, arrived)
    post(api, "h1", 5, 50.0, WARM, relieved, ack=did)
    api.tick(50.0)
    if order == "target-report-first":
        _done(api, "h1", "h1-vm1", "succeeded", dst="h2")  # the source agent comes back late
    for i in range(6, 10):
        post(api, "h2", i, 10.0 * i, COLD, arrived)
        post(api, "h1", i, 10.0 * i, WARM, relieved, ack=did)
        api.tick(10.0 * i)
    assert _flagged(api) == [(30.0, "h1", "h1-vm1")]


# ------------------------------------------------------------------ 3. bystanders


def test_only_the_source_may_decline_a_migration(api_factory) -> None:  # type: ignore[no-untyped-def]
    api = api_factory(clock="agent", plan_period_s=10)
    for i in range(1, 4):
        post(api, "h1", i, 10.0 * i, HOT, VMS1)
        post(api, "h2", i, 10.0 * i, COLD, VMS2)
        api.tick(10.0 * i)
    r = _done(api, "h2", "h1-vm1", "declined")
    assert r.status_code == 403, r.text
    assert [x["vm"] for x in api.get("/v1/cluster").json()["leases"]] == ["h1-vm1"]
    assert api.get("/v1/hosts/h1/directive", headers=auth("h1")).json()["f"] is True
    api.drain()
    assert api.svc.store.migration_rows("h1-vm1")[0]["ended_s"] is None


def test_a_namesake_on_the_target_does_not_close_the_lease(api_factory) -> None:  # type: ignore[no-untyped-def]
    api = api_factory(clock="agent", plan_period_s=10)
    did = _hot_until_signalled(api)
    # h2 reports a VM of its own that happens to be called h1-vm1; the real one is still
    # being copied (the source has not reported the migration's end).
    post(api, "h2", 5, 50.0, COLD, {**VMS2, "h1-vm1": (0.01, 0.01, 0.01)})
    post(api, "h1", 5, 50.0, HOT, VMS1, ack=did)
    api.tick(50.0)
    assert [x["vm"] for x in api.get("/v1/cluster").json()["leases"]] == ["h1-vm1"]
    api.drain()
    assert api.svc.store.migration_rows("h1-vm1")[0]["result"] != "succeeded"
    # The source's own account ends it.
    assert _done(api, "h1", "h1-vm1", "succeeded", dst="h2").json() == {"released": True}
    api.drain()
    assert api.svc.store.migration_rows("h1-vm1")[0]["result"] == "succeeded"


def test_a_source_restarted_after_the_move_lets_the_arrival_close_the_lease(api_factory) -> None:  # type: ignore[no-untyped-def]
    """The source agent died after the copy finished (kill -9 at the first migration in the
    demo, when the switch-over beat the kill): the restarted agent has no memory of the
    migration and the VM is gone from its host, so no end will ever be reported. Its new
    boot id says so; from then on the VM showing up on the lease's target is the only
    evidence there will be, and it closes the lease (before: held for lease_timeout_s,
    900 s, blocking both hosts and the VM's next move)."""
    api = api_factory(clock="agent", plan_period_s=10)
    _hot_until_signalled(api)

    def send(host: str, seq: int, t: float, util: Any, vms: Any, boot: str, ack: int = 0) -> None:
        body = report(seq, t, util, vms, ack, boot=boot)
        r = api.post(f"/v1/hosts/{host}/reports", content=body, headers=auth(host))
        assert r.status_code == 200, r.text

    send("h1", 5, 50.0, WARM, {"h1-vm2": VMS1["h1-vm2"]}, boot="b0000002")  # no memory
    send("h2", 5, 50.0, COLD, {**VMS2, "h1-vm1": VMS1["h1-vm1"]}, boot="b0000003")
    api.tick(50.0)
    assert "h1-vm1" not in [x["vm"] for x in api.get("/v1/cluster").json()["leases"]]
    api.drain()
    assert api.svc.store.migration_rows("h1-vm1")[0]["result"] == "succeeded"


def test_a_withdrawn_directive_leaves_no_orphan_mark(api_factory) -> None:  # type: ignore[no-untyped-def]
    """Issue 19: the source restarted before it acknowledged its directive (its leases are
    marked orphaned: their end may be an arrival), then the directive was withdrawn. The
    lease ended; so must its orphan mark, or a later lease of the same VM would close on
    the VM merely being seen (before: the withdrawal dropped the lease by hand and left it)."""
    api = api_factory(
        clock="agent",
        plan_period_s=10,
        planner={"alpha": 0.75, "k": 3, "n": 5, "directive_ttl_periods": 2},
    )
    for i in range(1, 4):
        post(api, "h1", i, 10.0 * i, HOT, VMS1)
        post(api, "h2", i, 10.0 * i, COLD, VMS2)
        api.tick(10.0 * i)
    assert api.get("/v1/hosts/h1/directive", headers=auth("h1")).json()["f"] is True
    for seq, t in ((1, 40.0), (2, 50.0)):  # a new boot that never acknowledges
        body = report(seq, t, HOT, VMS1, boot="b0000009")
        assert api.post("/v1/hosts/h1/reports", content=body, headers=auth("h1")).status_code == 200
        post(api, "h2", seq + 3, t, COLD, VMS2)
        api.tick(t)
    assert api.svc.core.orphaned == {"h1-vm1"}
    api.tick(55.0)  # 25 s > 2 periods without an ack: withdrawn
    assert api.svc.core.leases == {} and api.svc.core.orphaned == set()
    api.drain()
    assert api.svc.store.migration_rows("h1-vm1")[0]["result"] == "expired"


# ------------------------------------------------------------------ 4. replays and clocks


def _send(api: Api, seq: int, t: float, boot: str, host: str = "h1") -> Any:
    return api.post(
        f"/v1/hosts/{host}/reports",
        content=report(seq, t, COLD, VMS1, boot=boot),
        headers=auth(host),
    )


def _snapshot(api: Api) -> Any:
    api.drain()
    return (dict(api.svc.hosts), list(api.svc.core.history.get("h1", [])), api.svc.now())


@pytest.mark.parametrize(
    ("first", "then"),
    [((5, 50.0), (3, 30.0)), ((2**53, 50.0), (2, 60.0)), ((5, 50.0), (5, 55.0))],
    ids=["lower-seq", "huge-then-small", "same-seq-other-time"],
)
def test_a_replay_inside_one_boot_is_409_and_changes_nothing(
    api_factory,  # type: ignore[no-untyped-def]
    first: tuple[int, float],
    then: tuple[int, float],
) -> None:
    api = api_factory(clock="agent")
    assert _send(api, *first, boot="b0070001").status_code == 200
    before = _snapshot(api)
    r = _send(api, *then, boot="b0070001")
    assert r.status_code == 409, r.text
    assert _snapshot(api) == before


def test_a_restart_is_explicit_and_an_old_boot_cannot_come_back(api_factory) -> None:  # type: ignore[no-untyped-def]
    api = api_factory(clock="agent")
    assert _send(api, 7, 70.0, "0000000a").status_code == 200
    # The agent restarted: a new boot id, its sequence starts again.
    assert _send(api, 1, 80.0, "0000000b").status_code == 200
    assert api.svc.hosts["h1"].seq == 1
    # A report captured from the previous boot and sent again is a replay.
    before = _snapshot(api)
    assert _send(api, 8, 90.0, "0000000a").status_code == 409
    assert _snapshot(api) == before
    # Old samples under a new boot (time going backwards) are refused too.
    assert _send(api, 1, 60.0, "0000000c").status_code == 409
    assert _snapshot(api) == before


def test_without_a_boot_id_a_lower_sequence_is_not_a_restart(api_factory) -> None:  # type: ignore[no-untyped-def]
    api = api_factory(clock="agent")
    assert _send(api, 5, 50.0, "").status_code == 200
    assert _send(api, 2, 60.0, "").status_code == 409


def test_a_future_timestamp_cannot_move_the_agent_clock(api_factory) -> None:  # type: ignore[no-untyped-def]
    api = api_factory(clock="agent", max_clock_skew_s=60)
    assert _send(api, 1, 100.0, "b1").status_code == 200
    r = _send(api, 2, 1e11, "b1")
    assert r.status_code == 422 and r.json()["detail"][0]["field"].startswith("t"), r.text
    assert api.svc.now() == 100.0
    assert _send(api, 2, 110.0, "b1").status_code == 200


def test_wall_clock_reports_outside_the_skew_are_422(api_factory) -> None:  # type: ignore[no-untyped-def]
    wall = [1_000_000.0]
    api = api_factory(wall_clock=lambda: wall[0], max_clock_skew_s=30)
    assert _send(api, 1, 500.0, "b1").status_code == 200  # agent clocks are monotonic
    wall[0] += 10
    assert _send(api, 2, 510.0, "b1").status_code == 200
    wall[0] += 10
    before = _snapshot(api)
    assert _send(api, 3, 1e11, "b1").status_code == 422  # 1e11 s ahead of its own pace
    assert _send(api, 3, 400.0, "b1").status_code in (409, 422)  # behind
    assert _snapshot(api) == before
    assert _send(api, 3, 521.0, "b1").status_code == 200


# ------------------------------------------------------------------ 5. store loss


def test_decision_ids_never_repeat_across_store_loss(tmp_path, api_factory) -> None:  # type: ignore[no-untyped-def]
    """The store is deleted under a running cluster: the agent applied directive X; the
    new store's first directive must be newer than X (else the agent ignores it as
    applied) and an ack of X must not count as an ack of it."""
    from sova.manager.daemons.service.store import Store

    from .conftest import manager_settings

    wall = [1_800_000_000.0]
    first = api_factory(clock="agent", plan_period_s=10, wall_clock=lambda: wall[0])
    x = _hot_until_signalled(first)  # the agent applied X and acked it
    first.close()

    lost = Store(f"sqlite:///{tmp_path / 'new.db'}")
    try:
        wall[0] += 60
        second = Api(manager_settings(clock="agent", plan_period_s=10), lost, lambda: wall[0])
        for i in range(5, 8):
            post(second, "h1", i, 10.0 * i, HOT, VMS1, ack=x)
            post(second, "h2", i, 10.0 * i, COLD, VMS2)
            second.tick(10.0 * i)
        d = second.get("/v1/hosts/h1/directive", params={"p": PROTOCOL}, headers=auth("h1")).json()
        assert d["f"] is True and d["i"] > x, (d, x)
        again = post(second, "h1", 8, 80.0, HOT, VMS1, ack=x)
        assert again == d  # X acknowledges nothing the new store decided
        second.close()
    finally:
        lost.close()


def test_the_agent_notices_a_new_store_epoch(caplog) -> None:  # type: ignore[no-untyped-def]
    from sova.manager.daemons.schema import EPOCH_SHIFT

    from .fakes import FakeManager
    from .test_agent_daemon import _daemon, _host

    host = _host()
    d = _daemon(host, FakeManager())
    old, new = (100 << EPOCH_SHIFT) + 57, (200 << EPOCH_SHIFT) + 1
    d.applied = old
    with caplog.at_level(logging.WARNING, "sova.agent"):
        d.apply(Directive(id=(50 << EPOCH_SHIFT) + 900, flag=True, target="h2", vm="vm-a"))
    assert "older store epoch" in caplog.text and d.applied == old
    with caplog.at_level(logging.WARNING, "sova.agent"):
        d.apply(Directive(id=new, flag=True, target="h2", vm="vm-a"))
    assert "store epoch changed" in caplog.text and d.applied == new


# ------------------------------------------------------------------ 8. health


def test_readiness_fails_while_the_store_cannot_be_written(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import sqlite3

    from sova.manager.daemons.service.store import Store

    from .conftest import manager_settings

    path = tmp_path / "locked.db"
    store = Store(f"sqlite:///{path}")
    api = Api(manager_settings(clock="agent"), store)
    try:
        assert api.get("/readyz").status_code == 200
        other = sqlite3.connect(path, timeout=0.1, isolation_level=None)
        other.execute("BEGIN EXCLUSIVE")  # another process holds the database
        try:
            r = api.get("/readyz")
            assert r.status_code == 503, r.text
            assert "store" in r.json()["status"]
            assert api.get("/healthz").status_code == 200  # alive: do not restart it
            # A report is not acknowledged (503: its row is not stored), and a round
            # decided now cannot be persisted: nothing is published.
            for i in range(1, 4):
                for h, util, vms in (("h1", HOT, VMS1), ("h2", COLD, VMS2)):
                    r = api.post(
                        f"/v1/hosts/{h}/reports",
                        content=report(i, 10.0 * i, util, vms),
                        headers=auth(h),
                    )
                    assert r.status_code == 503 and "store" in r.json()["error"], r.text
                with contextlib.suppress(Exception):  # the round fails: see what it published
                    api.tick(10.0 * i)
            assert api.get("/v1/hosts/h1/directive", headers=auth("h1")).json()["f"] is False
        finally:
            other.execute("ROLLBACK")
            other.close()
        # The store takes writes again, but the planner has not yet completed a round.
        r = api.get("/readyz")
        assert r.status_code == 503 and "planning failed" in r.json()["status"]
        api.tick(40.0)
        assert api.get("/readyz").status_code == 200
    finally:
        api.close()
        store.close()


def test_an_old_boot_cannot_come_back_after_a_manager_restart(store) -> None:  # type: ignore[no-untyped-def]
    """The boot ids live in the store: a restarted manager knows the agent's earlier boots
    (before, every host looked restarted to it, and one replay of an old boot got in)."""
    now = [1000.0]
    settings = manager_settings()
    api = Api(settings, store, clock=lambda: now[0])
    assert _send(api, 7, 1000.0, "0000000a").status_code == 200
    now[0] = 1010.0
    assert _send(api, 1, 1010.0, "0000000b").status_code == 200
    api.drain()
    api.close()

    again = Api(settings, store, clock=lambda: now[0])
    now[0] = 1015.0
    r = _send(again, 8, 1005.0, "0000000a")
    assert r.status_code == 409 and "not new" in r.text, r.text
    now[0] = 1020.0
    assert _send(again, 2, 1020.0, "0000000b").status_code == 200  # the live boot goes on
    assert again.svc.hosts["h1"].seq == 2
    again.close()
