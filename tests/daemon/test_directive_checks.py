"""Issue 37, Medium 5, the manager's side: an agent's refusal of a directive (a field no
manager sends) ends the lease as declined and is audited, naming the host and the field."""

from __future__ import annotations

from typing import Any

from .conftest import auth
from .test_directive_withdrawal import audit, leases, make, publish


def test_an_agents_refusal_is_audited_and_frees_the_hosts(api_factory: Any) -> None:
    api = make(api_factory)
    did = publish(api)
    detail = f"refused directive {did}: target 'x/system?command=/tmp/evil#' is not a host name"
    r = api.post(
        "/v1/migrations/h1-vm1/done",
        json={"result": "declined", "detail": detail},
        headers={**auth("h1"), "x-sova-host": "h1"},
    )
    assert r.status_code == 200 and r.json()["released"] is True, r.text
    assert leases(api) == []
    rows = [e for e in audit(api) if e["action"] == "refused"]
    assert len(rows) == 1, audit(api)
    assert rows[0]["who"] == "h1" and rows[0]["subject"] == f"directive {did}"
    assert "x/system?command=" in rows[0]["detail"]
