"""Issue 24: drain, placement rules and forget through the manager's HTTP API (in-process,
agent clock). The real daemons drain a simulated host in test_fleet_drain_e2e.py.

h1 carries two VMs and is not hot (net 0.3); h2 (net 0.05) is colder than h3 (net 0.1).
A VM's move is simulated by the reports: after its migration ends, the source stops
reporting it and the target starts.
"""

from __future__ import annotations

from typing import Any

import pytest

from sova.manager.daemons.schema import build_report, encode
from sova.policy.hotspot import Utilisation, VMLoad

from .conftest import Api, auth
from .test_operator_control import ADMIN_H, make

UTIL = {"h1": (0.2, 0.3, 0.3), "h2": (0.05, 0.1, 0.05), "h3": (0.1, 0.2, 0.1)}
VMS = {"h1": {"a": (0.05, 0.05, 0.1), "b": (0.05, 0.05, 0.2)}, "h2": {}, "h3": {}}


class Cluster:
    def __init__(self, api: Api) -> None:
        self.api = api
        self.vms = {h: dict(v) for h, v in VMS.items()}
        self.seq = 0
        self.live = dict(UTIL)  # the hosts that report

    def round(self, plan: bool = True) -> dict[str, Any]:
        self.seq += 1
        t = 10.0 * self.seq
        for h, u in self.live.items():
            loads = {n: VMLoad(Utilisation(*x), 512 * 2**20) for n, x in self.vms[h].items()}
            body = encode(build_report(self.seq, t, Utilisation(*u), loads))
            r = self.api.post(f"/v1/hosts/{h}/reports", content=body, headers=auth(h))
            assert r.status_code == 200, r.text
        if plan:
            self.api.tick(t)
        r = self.api.get("/v1/hosts/h1/directive", headers=auth("h1"))
        return dict(r.json())

    def done(self, vm: str, dst: str, result: str = "succeeded") -> None:
        r = self.api.post(
            f"/v1/migrations/{vm}/done",
            json={"result": result},
            headers={**auth("h1"), "x-sova-host": "h1"},
        )
        assert r.json() == {"released": True}, r.text
        if result == "succeeded":
            self.vms[dst][vm] = self.vms["h1"].pop(vm)


def _status(api: Api, host: str = "h1") -> dict[str, Any]:
    api.drain()
    r = api.get(f"/v1/hosts/{host}/drain", headers=ADMIN_H)
    assert r.status_code == 200, r.text
    return dict(r.json())


def _start(api: Api, host: str = "h1") -> dict[str, Any]:
    r = api.run(
        api.client.put(
            f"/v1/hosts/{host}/drain", json={"by": "ops", "reason": "BIOS"}, headers=ADMIN_H
        )
    )
    assert r.status_code == 200, r.text
    return dict(r.json())


def test_drain_in_autonomic_mode_empties_the_host(api_factory: Any) -> None:
    api = make(api_factory, planner={"alpha": 0.75, "k": 3, "n": 5, "vm_cooldown": 0})
    c = Cluster(api)
    c.round()
    assert _status(api)["state"] == "not draining"
    assert _start(api)["state"] == "draining"
    # b (net 0.2 per 512 MiB) has the larger MF: first, to the coldest host h2.
    d = c.round()
    assert (d["f"], d["v"], d["t"]) == (True, "b", "h2")
    s = _status(api)
    assert s["remaining"] == ["a", "b"] and s["in_flight"] == [{"vm": "b", "dst": "h2"}]
    assert s["why"] == "drain: move b to h2"
    # one VM at a time off a host: while b's lease is open nothing else is signalled
    c.round()
    assert "waiting: a migration of this host is in flight" in _status(api)["why"]
    c.done("b", "h2")
    # The migration restarted h1's and h2's windows, and the next report spans the copy:
    # dropped; h1 is judged again from the round after.
    c.round()
    assert "waiting for the host's next report" in _status(api)["why"]
    d = c.round()
    # h2 is still the coldest by its report: a goes there too (no rule keeps them apart)
    assert (d["f"], d["v"], d["t"]) == (True, "a", "h2"), d
    c.done("a", "h2")
    c.round()
    c.round()
    s = _status(api)
    assert (s["state"], s["remaining"], s["moves_done"]) == ("drained", [], 2), s
    audit = api.get("/v1/audit", headers=ADMIN_H).json()["entries"]
    assert ("ops" in audit[0]["who"] or audit[0]["who"].startswith("admin")) and any(
        e["action"] == "fence:drain" and e["subject"] == "h1" for e in audit
    )
    # a drained host is in maintenance: nothing is sent to it
    cluster = api.get("/v1/cluster", headers=ADMIN_H).json()
    assert {(f["kind"], f["name"]) for f in cluster["fences"]} == {("drain", "h1")}
    h1 = next(h for h in cluster["hosts"] if h["host"] == "h1")
    assert h1["maintenance"] == "draining, set by admin (ops): BIOS"


def test_drain_respects_anti_affinity(api_factory: Any) -> None:
    api = make(
        api_factory,
        planner={"alpha": 0.75, "k": 3, "n": 5, "vm_cooldown": 0},
        placement={"rules": [{"name": "ab", "kind": "anti-affinity", "vms": ["a", "b"]}]},
    )
    c = Cluster(api)
    c.round()
    _start(api)
    d = c.round()
    assert (d["v"], d["t"]) == ("b", "h2")
    c.done("b", "h2")
    c.round()  # the report spanning the copy is dropped (windows restart)
    d = c.round()
    # h2 (net 0.05) is still colder than h3 (0.1), as in the test above, but holds b
    assert (d["v"], d["t"]) == ("a", "h3"), "a may not join b on h2"


def test_drain_respects_anti_affinity_with_a_peer_its_host_no_longer_names(
    api_factory: Any,
) -> None:
    """As above, but once b is on h2 it is idle there: h2's reports no longer name it (a
    report names only a few candidates). b is still on h2 (its migration succeeded)."""
    api = make(
        api_factory,
        planner={"alpha": 0.75, "k": 3, "n": 5, "vm_cooldown": 0},
        placement={"rules": [{"name": "ab", "kind": "anti-affinity", "vms": ["a", "b"]}]},
    )
    c = Cluster(api)
    c.round()
    _start(api)
    d = c.round()
    assert (d["v"], d["t"]) == ("b", "h2")
    c.done("b", "h2")
    del c.vms["h2"]["b"]  # on h2, not among its report's candidates
    c.round()
    d = c.round()
    assert (d["v"], d["t"]) == ("a", "h3"), "a may not join b on h2"


def test_drain_in_recommend_mode_proposes_one_plan_per_move(api_factory: Any) -> None:
    api = make(
        api_factory, mode="recommend", planner={"alpha": 0.75, "k": 3, "n": 5, "vm_cooldown": 0}
    )
    c = Cluster(api)
    c.round()
    _start(api)
    assert not c.round()["f"]
    plans = api.get("/v1/plans?state=proposed", headers=ADMIN_H).json()["plans"]
    assert [
        (p["vm"] if "vm" in p else p["actions"][0]["vm"], p["inputs"].get("drain")) for p in plans
    ] == [("b", True)]
    assert "awaiting approval" in _status(api)["why"]
    r = api.post(f"/v1/plans/{plans[0]['id']}/approve", json={"by": "ops"}, headers=ADMIN_H)
    assert r.status_code == 200, r.text
    d = api.get("/v1/hosts/h1/directive", headers=auth("h1")).json()
    assert (d["f"], d["v"], d["t"]) == (True, "b", "h2")
    c.done("b", "h2")
    api.drain()
    assert api.get(f"/v1/plans/{plans[0]['id']}", headers=ADMIN_H).json()["state"] == "executed"


def test_drain_is_blocked_with_why(api_factory: Any) -> None:
    """alpha 0.75, every other host fenced: no cold spot, and the status says so."""
    api = make(api_factory)
    c = Cluster(api)
    c.round()
    for h in ("h2", "h3"):
        r = api.run(api.client.put(f"/v1/fences/maintenance/{h}", json={}, headers=ADMIN_H))
        assert r.status_code == 200
    _start(api)
    assert not c.round()["f"]
    s = _status(api)
    assert s["state"] == "draining" and "blocked: no cold spot" in s["why"], s


def test_approval_rechecks_the_placement_rules(api_factory: Any) -> None:
    """A plan to move b to h2 is proposed; then a (anti-affine with b) shows up on h2."""
    api = make(
        api_factory,
        mode="recommend",
        placement={"rules": [{"name": "ab", "kind": "anti-affinity", "vms": ["a", "b"]}]},
    )
    c = Cluster(api)
    c.round()
    _start(api)
    c.round()
    (p,) = api.get("/v1/plans?state=proposed", headers=ADMIN_H).json()["plans"]
    c.vms["h2"]["a"] = c.vms["h1"].pop("a")  # moved by someone else (a human, Nova)
    c.round(plan=False)  # reported, not planned yet: the approval sees it first
    r = api.post(f"/v1/plans/{p['id']}/approve", json={"by": "ops"}, headers=ADMIN_H)
    assert r.status_code == 409 and "anti-affinity rule ab: a is on h2" in r.json()["detail"]


def test_cancel_a_drain(api_factory: Any) -> None:
    api = make(api_factory)
    c = Cluster(api)
    c.round()
    _start(api)
    r = api.run(api.client.delete("/v1/hosts/h1/drain", params={"by": "ops"}, headers=ADMIN_H))
    assert r.status_code == 200 and r.json()["state"] == "not draining"
    assert not c.round()["f"]


@pytest.mark.parametrize("path", ["/v1/hosts/h1/drain", "/v1/hosts/h1"])
def test_fleet_changes_need_the_operator_role(api_factory: Any, path: str) -> None:
    from .conftest import ADMIN

    api = make(api_factory, admin_token=ADMIN)
    r = api.run(api.client.delete(path))
    assert r.status_code == 401


def test_forget_is_refused_while_the_host_is_live_and_allowed_when_stale(
    api_factory: Any,
) -> None:
    api = make(api_factory)
    c = Cluster(api)
    for _ in range(3):
        c.round()
    r = api.run(api.client.delete("/v1/hosts/h3", params={"by": "ops"}, headers=ADMIN_H))
    assert r.status_code == 409, r.text
    assert "h3 is live" in r.json()["detail"]
    # h3 falls silent: stale after 3 periods (30 s) of others' reports
    del c.live["h3"]
    for _ in range(5):
        c.round()
    r = api.run(api.client.delete("/v1/hosts/h3", params={"by": "ops"}, headers=ADMIN_H))
    assert r.status_code == 200, r.text
    api.drain()
    cluster = api.get("/v1/cluster", headers=ADMIN_H).json()
    assert "h3" not in [h["host"] for h in cluster["hosts"]]
    assert "h3" not in api.svc.core.history and "h3" not in api.svc.core.seen
    assert api.svc.store.load_state(5).windows.get("h3") is None
    audit = api.get("/v1/audit", headers=ADMIN_H).json()["entries"]
    assert (audit[-1]["action"], audit[-1]["subject"]) == ("forget", "h3")
    r = api.run(api.client.delete("/v1/hosts/h3", params={"by": "ops"}, headers=ADMIN_H))
    assert r.status_code == 404


def test_forget_is_refused_while_a_migration_involves_the_host(api_factory: Any) -> None:
    api = make(api_factory)
    c = Cluster(api)
    c.round()
    r = api.run(api.client.put("/v1/fences/maintenance/h2", json={}, headers=ADMIN_H))
    assert r.status_code == 200
    _start(api, "h1")  # b leaves h1 for h3 (h2 is fenced)
    assert c.round()["t"] == "h3"
    r = api.run(api.client.delete("/v1/hosts/h3", headers=ADMIN_H))
    assert r.status_code == 409 and "migration" in r.json()["detail"], r.text
    # fenced and idle but still reporting: refused (its next report would bring it back
    # with its maintenance fence cleared)
    r = api.run(api.client.delete("/v1/hosts/h2", headers=ADMIN_H))
    assert r.status_code == 409 and "h2 is live" in r.json()["detail"], r.text
    assert ("maintenance", "h2") in api.svc.desk.ops.fences


def test_a_report_buffered_during_a_forget_does_not_bring_the_host_back(store: Any) -> None:
    """h3 reports between the forget's flush and its delete (it came back meanwhile): the
    row, written after the delete, would restore h3 at the next restart."""
    from .conftest import ADMIN, manager_settings

    settings = manager_settings(clock="agent", plan_period_s=10, admin_token=ADMIN)
    api = Api(settings, store)
    c = Cluster(api)
    c.round()
    del c.live["h3"]
    for _ in range(5):
        c.round()
    flush = api.svc.fleet.flush_reports
    late = build_report(c.seq + 100, 10.0 * c.seq + 1, Utilisation(*UTIL["h3"]), {})

    async def flush_then_report() -> int:
        n = await flush()
        api.svc.intake.ingest("h3", late)
        return n

    api.svc.fleet.flush_reports = flush_then_report
    r = api.run(api.client.delete("/v1/hosts/h3", params={"by": "ops"}, headers=ADMIN_H))
    assert r.status_code == 200, r.text
    api.drain()
    api.close()
    again = Api(settings, store)
    assert "h3" not in again.svc.core.history and "h3" not in again.svc.state.hosts
    again.close()


def test_a_drain_survives_a_manager_restart(store: Any) -> None:
    from .conftest import ADMIN, manager_settings

    settings = manager_settings(clock="agent", plan_period_s=10, admin_token=ADMIN)
    api = Api(settings, store)
    c = Cluster(api)
    c.round()
    _start(api)
    api.drain()
    api.close()
    again = Api(settings, store)
    assert again.svc.core.draining == {"h1"} and "h1" in again.svc.core.maintenance
    c.api = again
    d = c.round()
    assert (d["f"], d["v"], d["t"]) == (True, "b", "h2"), d
    assert _status(again)["state"] == "draining"
    again.close()


def test_draining_a_target_withdraws_the_directive_to_it(api_factory: Any) -> None:
    """h1 hot (test_operator_control's cluster): its VM is signalled to h2; h2 starts
    draining before h1 acknowledges: the directive is withdrawn (a drained host receives
    nothing), while a drain of the *source* would keep it (the drain moves it anyway)."""
    from .test_operator_control import directive, rounds

    api = make(api_factory)
    assert rounds(api, range(1, 4))["h1"]["f"]
    _start(api, "h2")
    assert not directive(api, "h1")["f"]


def _proposed(api: Api) -> list[dict[str, Any]]:
    return list(api.get("/v1/plans?state=proposed", headers=ADMIN_H).json()["plans"])


def _forget(api: Api, host: str) -> Any:
    return api.run(api.client.delete(f"/v1/hosts/{host}", params={"by": "ops"}, headers=ADMIN_H))


def test_a_drained_host_can_be_forgotten_once_its_vms_left(api_factory: Any) -> None:
    """Issue 38, defect 4: h1 drains in recommend mode; b moves by its approved plan, then
    a leaves h1 another way while its plan is open (moved by hand). Before the fix that plan
    stayed open and the forget was refused: ``plan ... names h1``."""
    api = make(
        api_factory, mode="recommend", planner={"alpha": 0.75, "k": 3, "n": 5, "vm_cooldown": 0}
    )
    c = Cluster(api)
    c.round()
    _start(api)
    c.round()
    [pb] = _proposed(api)
    r = api.post(f"/v1/plans/{pb['id']}/approve", json={"by": "ops"}, headers=ADMIN_H)
    assert r.status_code == 200, r.text
    c.done("b", "h2")
    for _ in range(5):  # the next move once b's migration has settled (anti-thrash)
        c.round()
        if _proposed(api):
            break
    [pa] = _proposed(api)
    assert pa["actions"][0]["vm"] == "a", pa
    c.vms["h3"]["a"] = c.vms["h1"].pop("a")
    c.round()
    assert _proposed(api) == []
    closed = api.get(f"/v1/plans/{pa['id']}", headers=ADMIN_H).json()
    assert (closed["state"], closed["detail"]) == ("expired", "obsolete: a is no longer on h1")
    assert _status(api)["state"] == "drained"
    del c.live["h1"]  # its agent stops; stale after 3 periods
    for _ in range(5):
        c.round()
    r = _forget(api, "h1")
    assert r.status_code == 200, r.text


def test_cancelling_a_drain_closes_the_plans_it_proposed(api_factory: Any) -> None:
    api = make(
        api_factory, mode="recommend", planner={"alpha": 0.75, "k": 3, "n": 5, "vm_cooldown": 0}
    )
    c = Cluster(api)
    c.round()
    _start(api)
    c.round()
    [p] = _proposed(api)
    r = api.run(api.client.delete("/v1/hosts/h1/drain", params={"by": "ops"}, headers=ADMIN_H))
    assert r.status_code == 200, r.text
    assert _proposed(api) == []
    closed = api.get(f"/v1/plans/{p['id']}", headers=ADMIN_H).json()
    assert (closed["state"], closed["detail"]) == ("expired", "obsolete: the drain of h1 ended")


def _preview(api: Any, host: str = "h1") -> Any:
    r = api.get(f"/v1/hosts/{host}/drain/preview", headers=ADMIN_H)
    return r.status_code, r.json()


def test_a_drain_preview_lists_the_moves_and_writes_nothing(api_factory: Any) -> None:
    """Recommend mode, where a drain would propose a plan per move: the preview proposes
    none, sets no fence and writes no audit row, and names the moves in the drain's order
    (b first: the larger migration factor; both to h2, the coldest, as the drain test above
    sends them)."""
    api = make(
        api_factory, mode="recommend", planner={"alpha": 0.75, "k": 3, "n": 5, "vm_cooldown": 0}
    )
    c = Cluster(api)
    c.round()
    api.drain()
    before = [api.get(p, headers=ADMIN_H).json() for p in ("/v1/plans", "/v1/audit")]
    code, p = _preview(api)
    assert code == 200, p
    assert (p["host"], p["draining"]) == ("h1", False)
    assert [(m["vm"], m["target"], m["why"]) for m in p["moves"]] == [
        ("b", "h2", "drain: move b to h2"),
        ("a", "h2", "drain: move a to h2"),
    ]
    api.drain()
    after = [api.get(q, headers=ADMIN_H).json() for q in ("/v1/plans", "/v1/audit")]
    assert after == before
    assert _status(api)["state"] == "not draining"
    # the next round plans as if no preview had happened: h1 is not hot, nothing proposed
    assert not c.round()["f"]
    assert api.get("/v1/plans", headers=ADMIN_H).json()["plans"] == []
    # while the drain is in force the preview says so, and still proposes nothing more
    _start(api)
    c.round()
    proposed = api.get("/v1/plans", headers=ADMIN_H).json()["plans"]
    code, p = _preview(api)
    assert p["draining"] is True and p["moves"][0]["vm"] == "b", p
    assert api.get("/v1/plans", headers=ADMIN_H).json()["plans"] == proposed


def test_a_drain_preview_says_why_nothing_would_move(api_factory: Any) -> None:
    api = make(api_factory)
    c = Cluster(api)
    c.round()
    for h in ("h2", "h3"):
        r = api.run(api.client.put(f"/v1/fences/maintenance/{h}", json={}, headers=ADMIN_H))
        assert r.status_code == 200
    code, p = _preview(api)
    assert code == 200 and len(p["moves"]) == 1, p
    m = p["moves"][0]
    assert m["vm"] == "b" and m["target"] is None and "blocked: no cold spot" in m["why"], m
    code, p = _preview(api, "h9")
    assert code == 404, p
