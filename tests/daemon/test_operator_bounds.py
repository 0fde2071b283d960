"""Issue 21, resources and correctness of operator control: fences are bounded (422 naming
the bound), and a plan lifetime too short to be read is refused at start."""

from __future__ import annotations

from typing import Any

import pytest

from sova.manager.daemons.config import ConfigError, load_manager_settings

from .conftest import ADMIN

H = {"authorization": f"Bearer {ADMIN}"}


@pytest.mark.parametrize("kind", ["maintenance", "pin", "vf-freeze-host", "vf-freeze-vm"])
def test_every_fence_kind_is_bounded_with_a_422_naming_the_bound(
    api_factory: Any, kind: str
) -> None:
    """Before: 5,000 pins were accepted (``/v1/cluster`` 1.07 MB) — no bound but the
    freeze list's."""
    api = api_factory(admin_token=ADMIN, max_fences_per_kind=3)
    put = lambda n: api.run(api.client.put(f"/v1/fences/{kind}/n{n}", json={}, headers=H))  # noqa: E731
    assert [put(i).status_code for i in range(3)] == [200, 200, 200]
    r = put(3)
    assert r.status_code == 422, r.text
    assert "max_fences_per_kind = 3" in r.json()["detail"]
    assert put(1).status_code == 200  # setting one again is not a new fence
    assert len([f for f in api.get("/v1/fences", headers=H).json() if f["kind"] == kind]) == 3


@pytest.mark.parametrize(("ttl", "why"), [("0", "greater than or equal to 10"), ("5s", "10")])
def test_a_plan_ttl_too_short_to_read_is_refused(ttl: str, why: str) -> None:
    """Before: ``plan_ttl_s = 0`` started; every plan was born expired and each round wrote
    two audit rows per hot host."""
    with pytest.raises(ConfigError, match=why) as exc:
        load_manager_settings(None, environ={"SOVA_MANAGER_PLAN_TTL_S": ttl})
    assert "plan_ttl_s" in str(exc.value)


def test_a_plan_ttl_shorter_than_a_round_is_refused() -> None:
    with pytest.raises(ConfigError, match="plan_period_s"):
        load_manager_settings(
            None, environ={"SOVA_MANAGER_PLAN_TTL_S": "20", "SOVA_MANAGER_PLAN_PERIOD_S": "60"}
        )


def test_a_store_failure_answers_503_without_sql(api_factory: Any, monkeypatch: Any) -> None:
    """Before: the 503 body quoted the driver's message, SQL statement and parameters
    included (table and column names to anyone with a token)."""
    import sqlalchemy as sa

    api = api_factory(admin_token=ADMIN)

    async def locked(*_a: Any, **_k: Any) -> None:
        raise sa.exc.OperationalError(
            "INSERT INTO fences (kind, name, set_by) VALUES (?, ?, ?)", ("pin", "vm1", "x"),
            Exception("database is locked"),
        )  # fmt: skip

    monkeypatch.setattr(api.svc.state.writer, "write", locked)  # the operator desk's write
    r = api.run(api.client.put("/v1/fences/pin/vm1", json={}, headers=H))
    assert r.status_code == 503
    assert "INSERT" not in r.text and "fences" not in r.text and "OperationalError" in r.text
