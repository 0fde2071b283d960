"""The manager's HTTP API: authentication, validation, directives, leases, views."""

from __future__ import annotations

import json

import pytest

from sova.manager.daemons.schema import PROTOCOL

from .conftest import ADMIN, TOKENS, Api, auth, report


def _state(api: Api) -> tuple[object, ...]:
    api.drain()
    s = api.svc
    return (
        dict(s.hosts),
        {h: list(w) for h, w in s.core.history.items()},
        api.svc.store.count("host_reports"),
        dict(s.directives),
    )


# ------------------------------------------------------------------ auth


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"authorization": "Bearer nope"},
        {"authorization": f"Bearer {TOKENS['h2']}"},  # another host's token
        {"authorization": f"Basic {TOKENS['h1']}"},
        {"authorization": f"Bearer {TOKENS['h1']}x"},
    ],
    ids=["missing", "wrong", "other-host", "not-bearer", "suffix"],
)
def test_report_without_valid_token_is_401_and_changes_nothing(
    api: Api, headers: dict[str, str]
) -> None:
    before = _state(api)
    r = api.post("/v1/hosts/h1/reports", content=report(1, 10, (0.9, 0.9, 0.9)), headers=headers)
    assert r.status_code == 401
    assert r.headers["www-authenticate"].startswith("Bearer")
    assert _state(api) == before
    assert api.svc.hosts == {}


def test_unknown_host_is_401_even_with_a_valid_token(api: Api) -> None:
    r = api.post(
        "/v1/hosts/intruder/reports",
        content=report(1, 10, (0.5, 0.5, 0.5)),
        headers={"authorization": f"Bearer {TOKENS['h1']}"},
    )
    assert r.status_code == 401
    assert "intruder" not in api.svc.hosts


def test_auth_runs_before_parsing_the_body(api: Api) -> None:
    r = api.post(
        "/v1/hosts/h1/reports", content=b"{not json", headers={"authorization": "Bearer x"}
    )
    assert r.status_code == 401


def test_migration_done_needs_the_token_of_the_named_host(api: Api) -> None:
    r = api.post(
        "/v1/migrations/vm1/done",
        json={"result": "succeeded"},
        headers={"authorization": f"Bearer {TOKENS['h1']}", "x-sova-host": "h2"},
    )
    assert r.status_code == 401


def test_read_endpoints_need_the_admin_token_when_configured(api_factory) -> None:  # type: ignore[no-untyped-def]
    api = api_factory(admin_token=ADMIN)
    for path in ("/v1/cluster", "/v1/decisions"):
        assert api.get(path).status_code == 401
        assert api.get(path, headers={"authorization": f"Bearer {TOKENS['h1']}"}).status_code == 401
        assert api.get(path, headers={"authorization": f"Bearer {ADMIN}"}).status_code == 200
    assert api.get("/healthz").status_code == 200
    # /metrics names every host and its load: a viewer's read since issue 21
    assert api.get("/metrics").status_code == 401
    assert api.get("/metrics", headers={"authorization": f"Bearer {ADMIN}"}).status_code == 200


# ------------------------------------------------------------------ validation


def _post(api: Api, body: bytes | str) -> tuple[int, dict]:  # type: ignore[type-arg]
    if isinstance(body, str):
        body = body.encode()
    r = api.post("/v1/hosts/h1/reports", content=body, headers=auth("h1"))
    return r.status_code, r.json()


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ('{"s":1,"t":1,"u":[0.1,0.2,1.4]}', "u[2] (host utilisation [cpu, mem, net])"),
        ('{"s":1,"t":1,"u":[0.1,0.2]}', "u (host utilisation"),
        ('{"s":1,"t":1,"u":[0.1,-0.2,0.3]}', "u[1]"),
        ('{"s":-1,"t":1,"u":[0.1,0.2,0.3]}', "s (sequence number)"),
        ('{"s":1,"u":[0.1,0.2,0.3]}', "t (agent clock (s))"),
        # unknown fields are a newer agent's and ignored (test_wire_versions.py); a protocol
        # version outside the manager's window is not
        ('{"s":1,"t":1,"u":[0.1,0.2,0.3],"p":99}', "p (wire protocol version)"),
        ('{"s":1,"t":1,"u":[0.1,0.2,0.3],"v":[{"n":"a b","u":[0,0,0],"m":1}]}', "v[0].n (VM name)"),
        (
            '{"s":1,"t":1,"u":[0.1,0.2,0.3],"v":[{"n":"a","u":[0,0,0],"m":0}]}',
            "v[0].m (VM memory (MiB))",
        ),
        ('{"s":1,"t":1,"u":[0.1,0.2,0.3],"v":[{"n":"a","u":[0,0,"x"],"m":1}]}', "v[0].u[2]"),
        ('{"s":1,"t":1e400,"u":[0.1,0.2,0.3]}', "t"),
        ("{not json", "body"),
        ("[]", "body"),
    ],
)
def test_bad_reports_get_422_naming_the_field_and_change_nothing(
    api: Api, body: str, field: str
) -> None:
    before = _state(api)
    status, payload = _post(api, body)
    assert status == 422, payload
    fields = [d["field"] for d in payload["detail"]]
    assert any(f.startswith(field) for f in fields), fields
    assert field.split(" ")[0] in payload["error"]
    assert _state(api) == before


def test_too_many_vms_is_422(api: Api) -> None:
    vms = [{"n": f"vm{i}", "u": [0, 0, 0], "m": 1} for i in range(17)]
    status, payload = _post(api, json.dumps({"s": 1, "t": 1, "u": [0, 0, 0], "v": vms}))
    assert status == 422
    assert payload["detail"][0]["field"].startswith("v")


def test_oversized_report_is_413_whether_declared_or_streamed(api: Api) -> None:
    big = b'{"s":1,"t":1,"u":[0,0,0],"pad":"' + b"x" * 2000 + b'"}'
    r = api.post("/v1/hosts/h1/reports", content=big, headers=auth("h1"))
    assert r.status_code == 413
    assert r.json()["detail"][0]["field"] == "body"

    async def chunks():  # type: ignore[no-untyped-def]
        for _ in range(20):
            yield b" " * 100  # no content-length: the limit must hold while streaming

    r = api.post("/v1/hosts/h1/reports", content=chunks(), headers=auth("h1"))
    assert r.status_code == 413
    assert api.svc.hosts == {}


# ------------------------------------------------------------------ directives and leases

HOT = (0.2, 0.3, 0.9)
COLD = (0.1, 0.2, 0.1)
VMS1 = {"h1-vm1": (0.1, 0.1, 0.5), "h1-vm2": (0.05, 0.1, 0.3)}
VMS2 = {"h2-vm1": (0.05, 0.1, 0.05)}


def _round(api: Api, seq: int, t: float, ack: int = 0) -> dict:  # type: ignore[type-arg]
    r1 = api.post(
        "/v1/hosts/h1/reports", content=report(seq, t, HOT, VMS1, ack), headers=auth("h1")
    )
    r2 = api.post("/v1/hosts/h2/reports", content=report(seq, t, COLD, VMS2), headers=auth("h2"))
    assert r1.status_code == r2.status_code == 200
    api.tick(t)
    return r1.json()


def test_hot_host_gets_a_directive_repeated_until_acknowledged(api: Api) -> None:
    for i in range(1, 4):
        assert _round(api, i, 10.0 * i)["f"] is False  # k = 3 reports before a verdict
    d = api.get("/v1/hosts/h1/directive", params={"p": PROTOCOL}, headers=auth("h1")).json()
    assert d["f"] is True and d["t"] == "h2" and d["v"] == "h1-vm1" and d["i"] > 0
    # Lost response: the next report (no ack) gets the same directive again.
    again = api.post("/v1/hosts/h1/reports", content=report(4, 40, HOT, VMS1), headers=auth("h1"))
    assert again.json() == d
    # Acknowledged: no longer flagged; the lease holds both hosts.
    acked = api.post(
        "/v1/hosts/h1/reports", content=report(5, 50, HOT, VMS1, d["i"]), headers=auth("h1")
    )
    assert acked.json()["f"] is False
    view = api.get("/v1/cluster").json()
    assert view["leases"] == [{"vm": "h1-vm1", "src": "h1", "dst": "h2", "since_s": 30.0}]
    # The decision log carries the inputs that caused the move.
    log = api.get("/v1/decisions").json()["decisions"]
    first = next(x for x in log if x["flag"])
    assert first["id"] == d["i"] and first["inputs"]["utilisation"] == list(HOT)
    assert len(first["inputs"]["history"]) == 3


def test_duplicate_report_is_not_ingested_twice(api: Api) -> None:
    body = report(1, 10, HOT, VMS1)
    for _ in range(2):
        assert api.post("/v1/hosts/h1/reports", content=body, headers=auth("h1")).status_code == 200
    assert len(api.svc.core.history["h1"]) == 1


def test_migration_done_releases_the_lease_and_is_audited(api: Api) -> None:
    for i in range(1, 4):
        _round(api, i, 10.0 * i)
    d = api.get("/v1/hosts/h1/directive", headers=auth("h1")).json()
    hdr = {**auth("h1"), "x-sova-host": "h1"}
    r = api.post(
        "/v1/migrations/h1-vm1/done",
        json={"result": "failed", "detail": "rolled back"},
        headers=hdr,
    )
    assert r.status_code == 200 and r.json() == {"released": True}
    assert api.get("/v1/cluster").json()["leases"] == []
    assert api.get("/v1/hosts/h1/directive", headers=auth("h1")).json()["f"] is False
    # Idempotent: a retried report of the same end releases nothing more.
    r = api.post("/v1/migrations/h1-vm1/done", json={"result": "failed"}, headers=hdr)
    assert r.json() == {"released": False}
    api.drain()
    rows = api.svc.store.migration_rows("h1-vm1")
    assert [(m["id"], m["result"], m["detail"]) for m in rows] == [
        (d["i"], "failed", "rolled back")
    ]


def test_unacknowledged_directive_is_withdrawn_and_its_lease_released(api_factory) -> None:  # type: ignore[no-untyped-def]
    api = api_factory(
        plan_period_s=10, planner={"alpha": 0.75, "k": 3, "n": 5, "directive_ttl_periods": 2}
    )
    for i in range(1, 4):
        _round(api, i, 10.0 * i)
    assert api.get("/v1/cluster").json()["leases"]
    api.tick(45.0)
    assert api.get("/v1/cluster").json()["leases"]  # 15 s: within 2 periods
    api.tick(55.0)  # 25 s > 20 s without an ack
    lease = api.svc.core.leases.get("h1-vm1")
    assert api.get("/v1/cluster").json()["leases"] == [] or lease is None or lease.id != 1
    api.drain()
    rows = api.svc.store.migration_rows("h1-vm1")
    assert rows[0]["result"] == "expired"


def test_metrics_and_health(api: Api) -> None:
    _round(api, 1, 10.0)
    text = api.get("/metrics").text
    for name in (
        'sova_manager_reports_total{result="accepted"} 2.0',
        "sova_manager_plan_duration_seconds_bucket",
        "sova_manager_request_duration_seconds_count",
        'sova_manager_host_utilisation_ratio{host="h1",resource="net"} 0.9',
        'sova_manager_hosts{state="fresh"} 2.0',
    ):
        assert name in text, name
    assert api.get("/healthz").json() == {"status": "ok", "hosts": 2, "store": "sqlite"}


def test_round_trigger_plans_when_every_host_has_reported(api_factory) -> None:  # type: ignore[no-untyped-def]
    api = api_factory(plan_trigger="round", clock="agent")
    hosts = list(TOKENS)
    for seq in (1, 2):
        for h in hosts[:-1]:
            api.post(
                f"/v1/hosts/{h}/reports", content=report(seq, 10.0 * seq, COLD), headers=auth(h)
            )
        api.run(api.svc.drain())
        assert api.svc.rounds == seq - 1  # one host still missing
        api.post(
            f"/v1/hosts/{hosts[-1]}/reports",
            content=report(seq, 10.0 * seq, COLD),
            headers=auth(hosts[-1]),
        )
        d = api.get(
            f"/v1/hosts/{hosts[0]}/directive",
            params={"seq": seq, "wait_s": 5},
            headers=auth(hosts[0]),
        )
        assert d.status_code == 200
        assert api.svc.rounds == seq
