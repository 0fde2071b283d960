"""Issue 11: operator control — modes and proposed plans, fences, the audit log — in the
manager core (table-driven) and through the manager's HTTP API (agent clock, in-process
ASGI; the CLI and real processes are in test_operator_cli.py).

The hot host h1 reports net 0.9 > alpha 0.75 in every report (k = 3 of n = 5), so after
three rounds it is flagged; h2 and h3 are cold (net 0.1), h2 the colder by name order.
"""

from __future__ import annotations

from typing import Any

import pytest

from sova.manager.decisions.core import ManagerCore
from sova.policy.hotspot import HotspotDetector, Utilisation, VMLoad

from .conftest import ADMIN, Api, auth, manager_settings, report

HOT = (0.2, 0.3, 0.9)
COLD = (0.1, 0.2, 0.1)
COLDER = (0.05, 0.1, 0.05)
ADMIN_H = {"authorization": f"Bearer {ADMIN}"}


# --------------------------------------------------------------------------- core


def _core(**kw: Any) -> ManagerCore:
    core = ManagerCore(detector=HotspotDetector(3, 5, 0.75), **kw)
    loads = {
        # MF = net share per GiB: big (0.5 / 8 GiB) < small (0.3 / 2 GiB), so "small" is
        # the first choice and "big" the second.
        "h1": (HOT, {"big": (0.05, 0.1, 0.5, 8), "small": (0.05, 0.1, 0.3, 2)}),
        "h2": (COLDER, {"x": (0.01, 0.01, 0.01, 1)}),
        "h3": (COLD, {"y": (0.01, 0.01, 0.01, 1)}),
    }
    for t in range(3):
        for h, (u, vms) in loads.items():
            core.ingest(
                h,
                Utilisation(*u),
                {
                    n: VMLoad(Utilisation(c, m, n_), gib * 2**30)
                    for n, (c, m, n_, gib) in vms.items()
                },
                at=10.0 * t,
            )
    return core


@pytest.mark.parametrize(
    ("fences", "flag", "vm", "target", "reason_has"),
    [
        # nothing fenced: the largest MF (small) to the coldest host (h2)
        ({}, True, "small", "h2", "move small to h2"),
        # h2 in maintenance: it cannot receive, the next coldest (h3) does
        ({"maintenance": {"h2": "set by ops"}}, True, "small", "h3", "move small to h3"),
        # both cold hosts in maintenance: no cold spot left for the chosen VM
        ({"maintenance": {"h2": "a", "h3": "b"}}, False, "small", None, "no cold spot"),
        # the hot host itself in maintenance: not a source, and the reason says so
        ({"maintenance": {"h1": "set by ops"}}, False, None, None, "host in maintenance"),
        # small pinned: the next by MF (big) moves instead
        ({"pinned": {"small"}}, True, "big", "h2", "move big to h2"),
        # both pinned: no VM to move
        ({"pinned": {"small", "big"}}, False, None, None, "no VM to move"),
    ],
)
def test_fences_in_the_planner(
    fences: dict[str, Any], flag: bool, vm: str | None, target: str | None, reason_has: str
) -> None:
    core = _core(**fences)
    sig = core.plan(30.0).signals["h1"]
    assert (sig.flag, sig.target if flag else None) == (flag, target), sig.reason
    if vm is not None:
        assert sig.vm == vm
    assert reason_has in sig.reason
    assert bool(core.leases) == flag


def test_recommend_mode_proposes_without_a_lease() -> None:
    core = _core(recommend={"h1"})
    result = core.plan(30.0)
    sig = result.signals["h1"]
    assert not sig.flag and sig.target == "h2" and sig.vm == "small"
    assert "proposed for approval" in sig.reason
    assert [(p.vm, p.src, p.dst) for p in result.proposed] == [("small", "h1", "h2")]
    assert result.opened == () and core.leases == {}
    # Proposing is not moving: no cool-down, no hourly count, no no-return record.
    assert core.last_moved == {} and not core.started and core.departed == {}
    assert result.decisions[0].inputs["proposed"] is True


# --------------------------------------------------------------------------- HTTP API


def post(api: Api, host: str, seq: int, t: float, util: Any, vms: Any) -> Any:
    r = api.post(f"/v1/hosts/{host}/reports", content=report(seq, t, util, vms), headers=auth(host))
    assert r.status_code == 200, r.text
    return r.json()


HOSTS = {
    "h1": (HOT, {"h1-vm1": (0.1, 0.1, 0.5)}),
    "h2": (COLDER, {"h2-vm1": (0.05, 0.1, 0.05)}),
}


def rounds(api: Api, seqs: range, hosts: dict[str, Any] = HOSTS) -> dict[str, Any]:
    """Reports and a planning round per step; each host's directive after the last round."""
    for i in seqs:
        for h, (util, vms) in hosts.items():
            post(api, h, i, 10.0 * i, util, vms)
        api.tick(10.0 * i)
    return {h: directive(api, h) for h in hosts}


def make(api_factory: Any, **kw: Any) -> Api:
    base: dict[str, Any] = {"clock": "agent", "plan_period_s": 10, "admin_token": ADMIN}
    return api_factory(**{**base, **kw})  # type: ignore[no-any-return]


def plans(api: Api, state: str | None = None) -> list[dict[str, Any]]:
    api.drain()
    q = f"?state={state}" if state else ""
    r = api.get(f"/v1/plans{q}", headers=ADMIN_H)
    assert r.status_code == 200, r.text
    return list(r.json()["plans"])


def directive(api: Api, host: str) -> dict[str, Any]:
    r = api.get(f"/v1/hosts/{host}/directive", headers=auth(host))
    assert r.status_code == 200, r.text
    return dict(r.json())


def test_operator_endpoints_need_the_admin_token(api_factory: Any) -> None:
    api = make(api_factory)
    for method, path in [
        ("GET", "/v1/plans"),
        ("GET", "/v1/plans/1"),
        ("POST", "/v1/plans/1/approve"),
        ("GET", "/v1/fences"),
        ("PUT", "/v1/fences/maintenance/h1"),
        ("PUT", "/v1/mode"),
        ("PUT", "/v1/hosts/h1/mode"),
        ("GET", "/v1/audit"),
    ]:
        for headers in ({}, auth("h1")):  # no token, and a host's token
            r = api.run(api.client.request(method, path, headers=headers, json={"by": "x"}))
            assert r.status_code == 401, (method, path, r.status_code)
    assert api.get("/v1/fences", headers=ADMIN_H).json() == []


def test_recommend_proposes_and_approval_signals_the_migration(api_factory: Any) -> None:
    api = make(api_factory, mode="recommend")
    last = rounds(api, range(1, 4))
    assert not last["h1"]["f"], "recommend mode signalled a migration on its own"
    (p,) = plans(api, "proposed")
    assert p["actions"] == [{"action": "migrate", "vm": "h1-vm1", "src": "h1", "dst": "h2"}]
    # Expected effect from the last reports: h1's net 0.9 - 0.5, h2's 0.05 + 0.5.
    assert p["expected"]["src"]["after"]["net"] == pytest.approx(0.4)
    assert p["expected"]["dst"]["after"]["net"] == pytest.approx(0.55)
    assert p["expires_s"] == pytest.approx(p["created_s"] + 600)
    assert p["inputs"]["history"], "a plan carries the window it was decided from"
    # The same plan as OpenStack Watcher shows an action plan (what its operators review).
    w = api.get(f"/v1/plans/{p['id']}/watcher", headers=ADMIN_H).json()
    (action,) = w["actions"]
    assert (action["action_type"], w["state"]) == ("migrate", "RECOMMENDED")
    assert action["input_parameters"] == {
        "migration_type": "live",
        "source_node": "h1",
        "destination_node": "h2",
        "resource_id": "h1-vm1",
        "resource_name": "h1-vm1",
    }
    # Later rounds keep the same open plan instead of piling up copies.
    rounds(api, range(4, 6))
    assert [q["id"] for q in plans(api, "proposed")] == [p["id"]]
    assert not directive(api, "h1")["f"]

    r = api.post(
        f"/v1/plans/{p['id']}/approve", json={"by": "alice", "reason": "ok"}, headers=ADMIN_H
    )
    assert r.status_code == 200, r.text
    assert r.json()["state"] == "approved" and r.json()["decided_by"] == "admin (alice)"
    d = directive(api, "h1")
    assert (d["f"], d["t"], d["v"]) == (True, "h2", "h1-vm1")
    api.drain()
    cluster = api.get("/v1/cluster", headers=ADMIN_H).json()
    assert [(x["vm"], x["src"], x["dst"]) for x in cluster["leases"]] == [("h1-vm1", "h1", "h2")]
    audit = api.get("/v1/audit", headers=ADMIN_H).json()["entries"]
    assert [(e["who"], e["action"], e["subject"]) for e in audit][-1] == (
        "admin (alice)",
        "approve",
        f"plan {p['id']}",
    )
    signalled = [
        d for d in api.get("/v1/decisions", headers=ADMIN_H).json()["decisions"] if d["flag"]
    ]
    assert len(signalled) == 1 and signalled[0]["inputs"]["approved_by"] == "admin (alice)"
    # A plan decides once.
    again = api.post(f"/v1/plans/{p['id']}/approve", json={"by": "bob"}, headers=ADMIN_H)
    assert again.status_code == 409 and "approved" in again.json()["detail"]


def test_a_plan_keeps_its_id_between_two_equally_good_targets(api_factory: Any) -> None:
    """Issue 38, defect 3: with two targets whose loads trade places by a hair each round,
    the plan flipped between them under a new id every few rounds, each flip a
    propose/supersede pair in the audit, and an operator's approval of the id they read
    answered "superseded". Now one plan stays open, and its approval succeeds."""
    api = make(api_factory, mode="recommend")
    vm = {"h1-vm1": (0.1, 0.1, 0.5)}
    for i in range(1, 13):
        a, b = (0.0501, 0.05) if i % 2 else (0.05, 0.0501)
        hosts = {
            "h1": (HOT, vm),
            "h2": ((0.05, 0.1, a), {"h2-vm1": (0.05, 0.1, a)}),
            "h3": ((0.05, 0.1, b), {"h3-vm1": (0.05, 0.1, b)}),
        }
        rounds(api, range(i, i + 1), hosts)
    (p,) = plans(api, "proposed")
    audit = api.get("/v1/audit", headers=ADMIN_H).json()["entries"]
    assert [e["action"] for e in audit if e["action"] in ("propose", "supersede")] == ["propose"]
    r = api.post(f"/v1/plans/{p['id']}/approve", json={"by": "alice"}, headers=ADMIN_H)
    assert r.status_code == 200, r.text


def test_rejected_plan_moves_nothing(api_factory: Any) -> None:
    api = make(api_factory, mode="recommend")
    rounds(api, range(1, 4))
    (p,) = plans(api, "proposed")
    r = api.post(f"/v1/plans/{p['id']}/reject", json={"by": "bob"}, headers=ADMIN_H)
    assert r.status_code == 200 and r.json()["state"] == "rejected"
    last = rounds(api, range(4, 8))
    assert not last["h1"]["f"]
    assert api.get("/v1/cluster", headers=ADMIN_H).json()["leases"] == []
    assert [q["state"] for q in plans(api)][0] == "rejected"


def test_unapproved_plan_expires_and_nothing_moves(api_factory: Any) -> None:
    api = make(api_factory, mode="recommend", plan_ttl_s=25)
    rounds(api, range(1, 4))  # proposed at t=30, expires at t=55
    (p,) = plans(api, "proposed")
    last = rounds(api, range(4, 7))  # t=60: expired (a new one is proposed in its place)
    assert not last["h1"]["f"]
    old = api.get(f"/v1/plans/{p['id']}", headers=ADMIN_H).json()
    assert old["state"] == "expired" and old["decided_by"] == "sova"
    r = api.post(f"/v1/plans/{p['id']}/approve", json={"by": "late"}, headers=ADMIN_H)
    assert r.status_code == 409 and "expired" in r.json()["detail"]
    assert api.get("/v1/cluster", headers=ADMIN_H).json()["leases"] == []


def test_per_host_mode(api_factory: Any) -> None:
    """The cluster autonomic, h1 alone in recommend: h1's move is proposed, not signalled."""
    api = make(api_factory)
    r = api.run(
        api.client.put("/v1/hosts/h1/mode", json={"mode": "recommend", "by": "o"}, headers=ADMIN_H)
    )
    assert r.status_code == 200 and r.json()["hosts"] == {"h1": "recommend"}
    assert not rounds(api, range(1, 4))["h1"]["f"]
    assert len(plans(api, "proposed")) == 1
    r = api.run(api.client.delete("/v1/hosts/h1/mode", params={"by": "o"}, headers=ADMIN_H))
    assert r.status_code == 200 and r.json()["hosts"] == {}
    assert rounds(api, range(4, 5))["h1"]["f"], "back in autonomic mode, it is signalled"


def test_a_mode_for_a_host_that_does_not_exist_is_404_and_not_stored(api_factory: Any) -> None:
    """Issue 37, Low: a typo (``hv0O1``) was stored and listed as a host's mode, and the
    host meant kept the cluster's. A host exists once it has a token or has reported (as
    for a drain); its mode may be reset even so (an old row from a removed host)."""
    api = make(api_factory)
    r = api.run(
        api.client.put("/v1/hosts/nosuch/mode", json={"mode": "recommend"}, headers=ADMIN_H)
    )
    assert r.status_code == 404 and "nosuch" in r.json()["detail"], r.text
    api.drain()
    assert api.get("/v1/mode", headers=ADMIN_H).json()["hosts"] == {}
    assert api.svc.store.mode_rows() == []
    # h3 has a token but has not reported yet: it exists.
    r = api.run(api.client.put("/v1/hosts/h3/mode", json={"mode": "recommend"}, headers=ADMIN_H))
    assert r.status_code == 200 and r.json()["hosts"] == {"h3": "recommend"}, r.text
    r = api.run(api.client.delete("/v1/hosts/nosuch/mode", headers=ADMIN_H))
    assert r.status_code == 200, r.text


def test_approval_rechecks_its_preconditions(api_factory: Any) -> None:
    api = make(api_factory, mode="recommend")
    rounds(api, range(1, 4))
    (p,) = plans(api, "proposed")
    r = api.run(
        api.client.put(
            "/v1/fences/maintenance/h2", json={"by": "ops", "reason": "BIOS"}, headers=ADMIN_H
        )
    )
    assert r.status_code == 200, r.text
    r = api.post(f"/v1/plans/{p['id']}/approve", json={"by": "alice"}, headers=ADMIN_H)
    assert r.status_code == 409 and "target h2 is in maintenance" in r.json()["detail"]
    assert api.get(f"/v1/plans/{p['id']}", headers=ADMIN_H).json()["state"] == "failed"
    assert not directive(api, "h1")["f"]


def test_maintenance_and_pin_through_the_api(api_factory: Any) -> None:
    api = make(api_factory)
    hosts = {
        "h1": (HOT, {"h1-vm1": (0.1, 0.1, 0.5), "h1-vm2": (0.05, 0.1, 0.3)}),
        "h2": (COLDER, {"h2-vm1": (0.05, 0.1, 0.05)}),
    }
    for kind, name in (("maintenance", "h2"), ("pin", "h1-vm1")):
        r = api.run(
            api.client.put(f"/v1/fences/{kind}/{name}", json={"by": "ops"}, headers=ADMIN_H)
        )
        assert r.status_code == 200, r.text
    assert not rounds(api, range(1, 4), hosts)["h1"]["f"], "sent to a host in maintenance"
    api.drain()
    view = api.get("/v1/cluster", headers=ADMIN_H).json()
    by_host = {h["host"]: h for h in view["hosts"]}
    assert by_host["h2"]["maintenance"] == "set by admin (ops)"
    assert by_host["h1"]["pinned_vms"] == ["h1-vm1"]
    assert {(f["kind"], f["name"]) for f in view["fences"]} == {
        ("maintenance", "h2"),
        ("pin", "h1-vm1"),
    }
    r = api.run(
        api.client.delete("/v1/fences/maintenance/h2", params={"by": "ops"}, headers=ADMIN_H)
    )
    assert r.status_code == 200
    d = rounds(api, range(4, 5), hosts)["h1"]
    # h2 back in play; the pinned vm1 stays, vm2 (next by MF) is the one sent.
    assert (d["f"], d["t"], d["v"]) == (True, "h2", "h1-vm2")


def test_vf_freeze_rides_on_every_directive(api_factory: Any) -> None:
    api = make(api_factory)
    for kind, name in (("vf-freeze-vm", "h2-vm1"), ("vf-freeze-host", "h1")):
        r = api.run(api.client.put(f"/v1/fences/{kind}/{name}", json={}, headers=ADMIN_H))
        assert r.status_code == 200, r.text
    d1 = post(api, "h1", 1, 10.0, COLD, None)
    d2 = post(api, "h2", 1, 10.0, COLD, None)
    assert d1["z"] is True
    assert d2["z"] is False and d2["k"] == ["h2-vm1"]


def test_bad_operator_input_is_named(api_factory: Any) -> None:
    api = make(api_factory)
    r = api.run(api.client.put("/v1/fences/quarantine/h1", json={}, headers=ADMIN_H))
    assert r.status_code == 422 and "kind" in r.text
    r = api.run(api.client.put("/v1/mode", json={"mode": "manual"}, headers=ADMIN_H))
    assert r.status_code == 422 and "mode" in r.json()["error"]
    r = api.get("/v1/plans/99", headers=ADMIN_H)
    assert r.status_code == 404


def test_mode_fences_and_open_plans_survive_a_restart(store: Any) -> None:
    settings = manager_settings(clock="agent", plan_period_s=10, admin_token=ADMIN)
    api = Api(settings, store)
    api.run(api.client.put("/v1/mode", json={"mode": "recommend", "by": "o"}, headers=ADMIN_H))
    api.run(api.client.put("/v1/fences/pin/h2-vm1", json={"by": "o"}, headers=ADMIN_H))
    api.run(api.client.put("/v1/fences/maintenance/h3", json={"by": "o"}, headers=ADMIN_H))
    rounds(api, range(1, 4))
    (p,) = plans(api, "proposed")
    api.close()

    again = Api(settings, store)  # the config file still says autonomic
    assert again.get("/v1/mode", headers=ADMIN_H).json()["cluster"] == "recommend"
    assert {(f["kind"], f["name"]) for f in again.get("/v1/fences", headers=ADMIN_H).json()} == {
        ("pin", "h2-vm1"),
        ("maintenance", "h3"),
    }
    assert again.svc.core.pinned == {"h2-vm1"} and "h3" in again.svc.core.maintenance
    rounds(again, range(4, 5))  # fresh reports after the restart
    assert [q["id"] for q in plans(again, "proposed")] == [p["id"]]
    r = again.post(f"/v1/plans/{p['id']}/approve", json={"by": "alice"}, headers=ADMIN_H)
    assert r.status_code == 200, r.text
    assert directive(again, "h1")["f"]
    again.close()


# --------------------------------------------------------------------------- OpenStack mode


class FakeNova:
    """An actuator standing in for Nova's live migration (the real one is exercised against
    Nova's functional harness in tests/openstack); ``result`` decides how the op ends."""

    name = "openstack"

    def __init__(self, result: str) -> None:
        self.result = result
        self.submitted: list[tuple[str, Any]] = []

    def submit(self, action: Any) -> str:
        self.submitted.append((self.host, action))
        return f"op-{len(self.submitted)}"

    def poll(self, op_id: str) -> Any:
        from sova.driver.base import OpState, OpStatus

        state = OpState.SUCCEEDED if self.result == "succeeded" else OpState.FAILED
        return OpStatus(op_id, state, "" if state is OpState.SUCCEEDED else "Nova: no valid host")

    def reconcile(self, sensed: Any) -> Any:
        return sensed


@pytest.mark.parametrize(("result", "state"), [("succeeded", "executed"), ("failed", "failed")])
def test_openstack_mode_carries_out_an_approved_plan_through_the_actuator(
    store: Any, result: str, state: str
) -> None:
    """orchestrator = "openstack": the manager itself runs the approved migration through the
    source host's actuator (Nova), the agent gets no directive, and the lease and the plan
    record how it ended."""
    import asyncio

    import httpx

    from sova.manager.daemons.service.app import create_app
    from sova.model import Migrate

    nova = FakeNova(result)

    def actuator_for(host: str) -> FakeNova:
        nova.host = host  # type: ignore[attr-defined]
        return nova

    settings = manager_settings(
        clock="agent", plan_period_s=10, admin_token=ADMIN, mode="recommend"
    )
    api = Api.__new__(Api)
    api.app = create_app(settings, store, actuator_for=actuator_for)
    api.svc = api.app.state.service
    api.loop = asyncio.new_event_loop()
    api.client = httpx.AsyncClient(
        transport=httpx.ASGITransport(app=api.app), base_url="http://manager"
    )
    try:
        rounds(api, range(1, 4))
        (p,) = plans(api, "proposed")
        r = api.post(f"/v1/plans/{p['id']}/approve", json={"by": "alice"}, headers=ADMIN_H)
        assert r.status_code == 200, r.text
        assert not directive(api, "h1")["f"], "the agent was told to migrate as well"
        api.run(asyncio.gather(*api.svc.desk.executions))
        api.drain()
        assert nova.submitted == [("h1", Migrate("h1-vm1", "h2"))]
        done = api.get(f"/v1/plans/{p['id']}", headers=ADMIN_H).json()
        assert done["state"] == state and result in done["detail"]
        assert api.get("/v1/cluster", headers=ADMIN_H).json()["leases"] == []
        (m,) = store.migration_rows("h1-vm1")
        assert m["result"] == result
        # the plan's final fate is in the audit log too (issue 21: it was not)
        audit = api.get("/v1/audit", headers=ADMIN_H).json()["entries"]
        assert [(e["who"], e["action"], e["subject"]) for e in audit][-1] == (
            "sova",
            state,
            f"plan {p['id']}",
        )
        assert result in audit[-1]["detail"]
    finally:
        api.close()
