"""Issue 21, build item 5: a directive published but not yet started is withdrawn when an
operator's change makes it invalid — maintenance on its source or its target, a pin of its
VM, recommend mode for the cluster or for its source — through the manager's HTTP API.

The hot host h1 (net 0.9 > alpha 0.75, k = 3 of n = 5) is flagged in the third round and
told to send h1-vm1 to h2, the colder host. The operator's change comes after that round
published the directive and before h1 acknowledged it. Two cases:

* **not yet delivered** (no response carried it): withdrawn at once — the lease ends
  ``withdrawn`` (no window restarts: nothing moved), h1's next response carries no flag,
  and the audit log says which change withdrew it;
* **delivered, not acknowledged** (a response carried it; the agent may hold it and starts
  it at its next period, before its next report): the agent is no longer told to start it,
  and h1's next report decides. ``d`` below the directive's id from the same agent boot:
  it never applied it, the lease ends ``withdrawn``. ``d`` at or above it: it had applied it
  before the withdrawal reached it (the agent applies a directive when it receives it and
  starts the migration at its next period), so the migration runs to its end and its lease
  stays until the source reports that end — a live migration cannot be recalled.

The last three tests run the real agent daemon of h1 against the manager app in-process
(its HTTP client bridged into the app): it submits no migration for a withdrawn directive,
and finishes one it had started before the withdrawal reached it.
"""

from __future__ import annotations

from typing import Any

import pytest

from .conftest import ADMIN, Api, auth, report
from .test_operator_control import COLDER, HOT, make

ADMIN_H = {"authorization": f"Bearer {ADMIN}"}
HOSTS = {
    "h1": (HOT, {"h1-vm1": (0.1, 0.1, 0.5)}),
    "h2": (COLDER, {"h2-vm1": (0.05, 0.1, 0.05)}),
    "h3": (COLDER, {"h3-vm1": (0.05, 0.1, 0.05)}),
}

# (the operator's change, the words the audit row gives for it)
ORDERS: dict[str, tuple[str, str, dict[str, Any], str]] = {
    "maintenance-source": ("PUT", "/v1/fences/maintenance/h1", {}, "source h1 in maintenance"),
    "maintenance-target": ("PUT", "/v1/fences/maintenance/h2", {}, "target h2 in maintenance"),
    "pin": ("PUT", "/v1/fences/pin/h1-vm1", {}, "h1-vm1 pinned"),
    "cluster-recommend": ("PUT", "/v1/mode", {"mode": "recommend"}, "h1 in recommend mode"),
    "host-recommend": ("PUT", "/v1/hosts/h1/mode", {"mode": "recommend"}, "h1 in recommend"),
}


def post(api: Api, host: str, seq: int, ack: int = 0) -> dict[str, Any]:
    util, vms = HOSTS[host]
    r = api.post(
        f"/v1/hosts/{host}/reports",
        content=report(seq, 10.0 * seq, util, vms, ack=ack),
        headers=auth(host),
    )
    assert r.status_code == 200, r.text
    return dict(r.json())


def publish(api: Api) -> int:
    """Three rounds of reports; the third flags h1. Returns the directive's id. No response
    has carried it yet (the reports came before the round)."""
    for seq in range(1, 4):
        for h in HOSTS:
            post(api, h, seq)
        api.tick(10.0 * seq)
    dr = api.svc.directives["h1"]
    assert (dr.flag, dr.acked, dr.target, dr.vm) == (True, False, "h2", "h1-vm1")
    assert "h1-vm1" in api.svc.core.leases
    return int(dr.id)


def operator(api: Api, order: str) -> str:
    method, path, body, words = ORDERS[order]
    r = api.run(api.client.request(method, path, json={"by": "ops", **body}, headers=ADMIN_H))
    assert r.status_code == 200, r.text
    return words


def leases(api: Api) -> list[tuple[str, str, str]]:
    api.drain()
    view = api.get("/v1/cluster", headers=ADMIN_H).json()
    return [(x["vm"], x["src"], x["dst"]) for x in view["leases"]]


def audit(api: Api) -> list[dict[str, Any]]:
    api.drain()
    return list(api.get("/v1/audit?limit=100", headers=ADMIN_H).json()["entries"])


@pytest.mark.parametrize("order", list(ORDERS))
def test_an_undelivered_directive_is_withdrawn_by_the_change(api_factory: Any, order: str) -> None:
    api = make(api_factory)
    did = publish(api)
    words = operator(api, order)
    # Withdrawn at once, not at the next round: the agent's next report gets no flag ...
    d = post(api, "h1", 4)
    assert (d["i"], d["f"]) == (did, False), d
    # ... and the lease is gone (nothing moved: h1's and h2's windows keep their reports).
    assert leases(api) == []
    assert len(api.svc.core.history["h1"]) == 4
    (m,) = api.svc.store.migration_rows("h1-vm1")
    assert (m["result"], m["id"]) == ("withdrawn", did)
    assert words in m["detail"]
    row = next(e for e in audit(api) if e["action"] == "withdraw")
    assert row["subject"] == f"directive {did}" and words in row["detail"]
    assert "migrate h1-vm1 h1 -> h2" in row["detail"]
    # An agent that acknowledges it anyway (a replay, a bug) starts nothing the manager
    # tracks: no lease comes back, and the later rounds do not repeat the move.
    post(api, "h1", 5, ack=did)
    for seq in range(6, 9):
        for h in HOSTS:
            post(api, h, seq)
        api.tick(10.0 * seq)
        flagged = api.svc.directives["h1"]
        assert not (
            flagged.flag and not flagged.acked and flagged.vm == "h1-vm1" and flagged.target == "h2"
        ), f"{order}: the same move was signalled again"


@pytest.mark.parametrize("order", list(ORDERS))
def test_a_delivered_directive_the_agent_never_applied_is_withdrawn(
    api_factory: Any, order: str
) -> None:
    api = make(api_factory)
    did = publish(api)
    assert post(api, "h1", 4)["f"] is True  # delivered (say the response was lost)
    words = operator(api, order)
    assert leases(api) == [("h1-vm1", "h1", "h2")], "ended before the agent could say"
    # The next report of the same boot acknowledges an older id: it never applied it.
    d = post(api, "h1", 5, ack=0)
    assert d["f"] is False
    assert leases(api) == []
    (m,) = api.svc.store.migration_rows("h1-vm1")
    assert m["result"] == "withdrawn" and words in m["detail"]
    rows = [e for e in audit(api) if e["subject"] == f"directive {did}"]
    assert [e["action"] for e in rows] == ["withdraw", "withdraw"], rows
    assert "not applied" in rows[-1]["detail"]


def test_a_delivered_directive_the_agent_applied_runs_to_its_end(api_factory: Any) -> None:
    api = make(api_factory)
    did = publish(api)
    assert post(api, "h1", 4)["f"] is True
    operator(api, "maintenance-target")
    # The agent had applied it (it acks it): the migration may be copying, so both hosts
    # stay reserved until the source reports how it ended.
    assert post(api, "h1", 5, ack=did)["f"] is False
    assert leases(api) == [("h1-vm1", "h1", "h2")]
    rows = [e for e in audit(api) if e["subject"] == f"directive {did}"]
    assert "already applied" in rows[-1]["detail"], rows
    r = api.post(
        "/v1/migrations/h1-vm1/done",
        json={"result": "succeeded", "dst": "h2"},
        headers={**auth("h1"), "x-sova-host": "h1"},
    )
    assert r.status_code == 200 and r.json()["released"] is True
    assert leases(api) == []
    (m,) = api.svc.store.migration_rows("h1-vm1")
    assert m["result"] == "succeeded"


def test_a_fence_elsewhere_leaves_the_directive_alone(api_factory: Any) -> None:
    """h3 is neither source nor target, h2-vm1 is not the VM moved, vf-freeze does not
    forbid a migration: the directive stands."""
    api = make(api_factory)
    did = publish(api)
    for path in (
        "/v1/fences/maintenance/h3",
        "/v1/fences/pin/h2-vm1",
        "/v1/fences/vf-freeze-vm/h1-vm1",
    ):
        r = api.run(api.client.put(path, json={"by": "ops"}, headers=ADMIN_H))
        assert r.status_code == 200, r.text
    r = api.run(
        api.client.put("/v1/hosts/h2/mode", json={"mode": "recommend", "by": "o"}, headers=ADMIN_H)
    )
    assert r.status_code == 200
    d = post(api, "h1", 4)
    assert (d["i"], d["f"], d["t"]) == (did, True, "h2")
    assert leases(api) == [("h1-vm1", "h1", "h2")]


# --------------------------------------------------------------------------- the real agent


def agent_run(api: Api, fence: str, seconds: int = 120) -> tuple[Any, list[Any]]:
    """The real agent daemon of h1 (a fake host whose vm-a and vm-b send 5 + 4 Gbit/s on its
    10 Gbit/s link: net 0.9, hot; vm-a, 0.5, fits on h2) against the manager app; h2 reports
    cold. A round follows every control period. The operator puts h2 in maintenance right
    after the round that publishes the directive (``fence = "published"``), right after the
    response that carries it (``"delivered"``), or never. Returns the host and the
    responses h1's agent got."""
    from sova.manager.daemons.agent.daemon import POLL, STEP

    from .fakes import FakeHost, FakeVM
    from .test_freeze_versions import Bridge, agent

    bridge = Bridge(api)
    host = FakeHost()
    host.vms = {"vm-a": FakeVM("vm-a", 5e9), "vm-b": FakeVM("vm-b", 4e9)}
    d = agent(bridge, host)
    seq, fenced = 0, False
    for _ in range(seconds):
        host.advance(1.0)
        d.do_phase(POLL)
        now = round(host.now)
        if now % 10:
            continue
        d.do_phase(STEP)
        if fence == "delivered" and not fenced and bridge.bodies and bridge.bodies[-1]["f"]:
            fenced = bool(operator(api, "maintenance-target"))
        seq += 1
        body = report(seq, float(now), COLDER, {"h2-vm1": (0.05, 0.1, 0.05)})
        assert api.post("/v1/hosts/h2/reports", content=body, headers=auth("h2")).is_success
        api.tick(float(now))
        dr = api.svc.directives.get("h1")
        if fence == "published" and not fenced and dr is not None and dr.flag:
            fenced = bool(operator(api, "maintenance-target"))
    assert fenced == (fence != "never")
    return host, bridge.bodies


def migrations(host: Any) -> list[Any]:
    from sova.model import Migrate

    return [a for a in host.submitted if isinstance(a, Migrate)]


def test_the_real_agent_migrates_without_the_change(api_factory: Any) -> None:
    """The control: the same run without the fence moves vm-a to h2."""
    host, _ = agent_run(make(api_factory), "never")
    assert [(m.vm, m.dst_host) for m in migrations(host)] == [("vm-a", "h2")]


def test_the_real_agent_never_starts_a_withdrawn_directive(api_factory: Any) -> None:
    """Withdrawn right after the round that published it, before any response carried it:
    the agent's next response says no flag, and it submits no migration."""
    api = make(api_factory)
    host, bodies = agent_run(api, "published")
    assert not any(b["f"] for b in bodies), bodies
    assert migrations(host) == []
    assert leases(api) == []


def test_the_real_agent_finishes_a_migration_it_applied_before_the_change(
    api_factory: Any,
) -> None:
    """A response carried the directive; the fence came right after. The agent starts the
    migration at its next step, before its next report, so the withdrawal cannot overtake
    it; that report acknowledges the directive, and the lease stays until the source
    reports the migration's end."""
    api = make(api_factory)
    host, bodies = agent_run(api, "delivered")
    assert [b["f"] for b in bodies].count(True) == 1
    assert [(m.vm, m.dst_host) for m in migrations(host)] == [("vm-a", "h2")]
    assert leases(api) == []  # released by the source's report of the end
    (m,) = api.svc.store.migration_rows("vm-a")
    assert m["result"] == "succeeded"
    rows = [e["detail"] for e in audit(api) if e["action"] == "withdraw"]
    assert len(rows) == 2 and "already applied by h1" in rows[1], rows


def test_a_change_the_store_refuses_withdraws_nothing(api_factory: Any, monkeypatch: Any) -> None:
    """Persisted before it takes effect: when the store refuses the fence's write (503),
    the fence is not set and the directive stands, flagged, with its lease."""
    import sqlalchemy as sa

    api = make(api_factory)
    did = publish(api)

    async def locked(*_a: Any, **_k: Any) -> None:
        raise sa.exc.OperationalError("INSERT", (), Exception("database is locked"))

    with monkeypatch.context() as m:
        m.setattr(api.svc.state.writer, "write", locked)
        r = api.run(api.client.put("/v1/fences/maintenance/h2", json={}, headers=ADMIN_H))
    assert r.status_code == 503
    assert "h2" not in api.svc.core.maintenance
    assert "h1-vm1" in api.svc.core.leases
    d = post(api, "h1", 4)
    assert (d["i"], d["f"], d["t"]) == (did, True, "h2")


def test_an_operator_reading_the_directive_does_not_deliver_it(api_factory: Any) -> None:
    """Issue 37, Low: an operator's GET of a host's directive is a read. Before, it marked
    the directive delivered, so a later change held it for the source's next report (as
    if the agent might have it) instead of withdrawing it at once; the agent's own GET
    still delivers it."""
    api = make(api_factory)
    did = publish(api)
    r = api.get("/v1/hosts/h1/directive", headers=ADMIN_H)
    assert (r.status_code, r.json()["f"], r.json()["i"]) == (200, True, did)
    words = operator(api, "maintenance-source")
    assert leases(api) == []  # withdrawn at once: no response to h1 carried it
    (m,) = api.svc.store.migration_rows("h1-vm1")
    assert (m["result"], m["id"]) == ("withdrawn", did) and words in m["detail"]


def test_the_agents_own_read_of_the_directive_delivers_it(api_factory: Any) -> None:
    api = make(api_factory)
    publish(api)
    r = api.get("/v1/hosts/h1/directive", headers=auth("h1"))
    assert r.json()["f"] is True
    operator(api, "maintenance-source")
    assert leases(api) == [("h1-vm1", "h1", "h2")]  # held until h1's next report decides
