"""Issue 24 (7): an approved plan reaches ``executed`` or ``failed`` in every mode.

Through the agent's directive path (libvirt), the plan's migration is the lease its
approval opened; the lease's end decides the plan's fate: the source agent reporting the
migration done (succeeded -> executed; failed, timeout or declined -> failed, with the
agent's detail), or the lease ending without a report (timed out, source silent). Each
fate is audited as ``sova``, as expiry and supersession are.

The cluster is test_operator_control's: h1 hot (net 0.9 > 0.75, k = 3 of 5), h2 cold; in
recommend mode the third round proposes moving h1-vm1 to h2.
"""

from __future__ import annotations

from typing import Any

import pytest

from .conftest import ADMIN, Api, auth, manager_settings, report
from .test_operator_control import ADMIN_H, COLDER, HOT, directive, make, plans, rounds


def _approved(api_factory: Any, **kw: Any) -> tuple[Api, dict[str, Any]]:
    api = make(api_factory, mode="recommend", **kw)
    rounds(api, range(1, 4))
    (p,) = plans(api, "proposed")
    r = api.post(f"/v1/plans/{p['id']}/approve", json={"by": "alice"}, headers=ADMIN_H)
    assert r.status_code == 200 and r.json()["state"] == "approved", r.text
    return api, p


def _done(api: Api, result: str, detail: str = "") -> None:
    r = api.post(
        "/v1/migrations/h1-vm1/done",
        json={"result": result, "detail": detail},
        headers={**auth("h1"), "x-sova-host": "h1"},
    )
    assert r.status_code == 200 and r.json() == {"released": True}, r.text


def post(api: Api, host: str, seq: int, t: float, util: Any, vms: Any, ack: int = 0) -> None:
    r = api.post(
        f"/v1/hosts/{host}/reports", content=report(seq, t, util, vms, ack), headers=auth(host)
    )
    assert r.status_code == 200, r.text


def _fate(api: Api, plan_id: int) -> tuple[str, str]:
    api.drain()
    p = api.get(f"/v1/plans/{plan_id}", headers=ADMIN_H).json()
    audit = api.get("/v1/audit", headers=ADMIN_H).json()["entries"]
    last = audit[-1]
    assert (last["who"], last["action"], last["subject"]) == ("sova", p["state"], f"plan {plan_id}")
    return p["state"], p["detail"]


@pytest.mark.parametrize(
    ("result", "detail", "state", "detail_has"),
    [
        ("succeeded", "", "executed", "succeeded"),
        ("failed", "rolled back: target refused", "failed", "rolled back: target refused"),
        ("timeout", "", "failed", "timeout"),
        ("declined", "vm busy", "failed", "declined: vm busy"),
    ],
)
def test_the_source_agents_report_decides_the_plan(
    api_factory: Any, result: str, detail: str, state: str, detail_has: str
) -> None:
    api, p = _approved(api_factory)
    _done(api, result, detail)
    got_state, got_detail = _fate(api, p["id"])
    assert got_state == state
    assert detail_has in got_detail and "approved" in got_detail, got_detail


def test_a_directive_never_acknowledged_fails_its_plan(api_factory: Any) -> None:
    # directive_ttl_periods = 3 x 10 s: approved at t=30, h1 never acks, withdrawn at t=70.
    api, p = _approved(api_factory)
    rounds(api, range(4, 8))
    state, detail = _fate(api, p["id"])
    assert state == "failed" and "h1 never acknowledged the signal" in detail, detail


def test_a_lease_that_times_out_fails_its_plan(api_factory: Any) -> None:
    # lease_timeout = 60 s: approved at t=30, acknowledged by h1 at t=40 (so never
    # withdrawn), never reported done; the round at t=100 (70 s > 60 s) expires it.
    api, p = _approved(api_factory, planner={"alpha": 0.75, "k": 3, "n": 5, "lease_timeout": 60})
    did = directive(api, "h1")["i"]
    for i in range(4, 11):
        post(api, "h1", i, 10.0 * i, HOT, {"h1-vm1": (0.1, 0.1, 0.5)}, ack=did)
        post(api, "h2", i, 10.0 * i, COLDER, {"h2-vm1": (0.05, 0.1, 0.05)})
        api.tick(10.0 * i)
    state, detail = _fate(api, p["id"])
    assert state == "failed" and "lease timed out" in detail, detail


def test_an_unapproved_round_decision_has_no_plan_to_close(api_factory: Any) -> None:
    """Autonomic mode: the round's own migration ends; no plan changes (there is none)."""
    api = make(api_factory)
    assert rounds(api, range(1, 4))["h1"]["f"]
    _done(api, "succeeded")
    api.drain()
    assert plans(api) == []
    audit = api.get("/v1/audit", headers=ADMIN_H).json()["entries"]
    assert [e for e in audit if e["action"] in ("executed", "failed")] == []


def test_the_fate_survives_a_manager_restart(store: Any) -> None:
    """Approved, then the manager restarts; the agent's report to the new manager still
    closes the plan (the approval's decision row names it)."""
    settings = manager_settings(
        clock="agent", plan_period_s=10, admin_token=ADMIN, mode="recommend"
    )
    api = Api(settings, store)
    rounds(api, range(1, 4))
    (p,) = plans(api, "proposed")
    r = api.post(f"/v1/plans/{p['id']}/approve", json={"by": "alice"}, headers=ADMIN_H)
    assert r.status_code == 200, r.text
    api.drain()
    api.close()
    again = Api(settings, store)
    _done(again, "succeeded")
    assert _fate(again, p["id"])[0] == "executed"
    again.close()
