"""Fences that expire (issue 38, ``sova fence set … --until``): the end is kept with the
fence (store revision 0007), shown by the API, and the first planning round at or after it
lifts the fence, audited as expired; an end already past is refused naming the field.

The agent clock: reports at t = 10, 20, 30 … and a round at each (tests/daemon/test_operator_control.py's
``rounds``), so the manager's clock reads the latest report's t.
"""

from __future__ import annotations

from typing import Any

import pytest
import typer

from sova.cli_fence import parse_until
from sova.manager.daemons.service.fences import until_text

from .conftest import Api, manager_settings
from .test_operator_control import ADMIN, ADMIN_H, rounds


def _fences(api: Api) -> dict[str, Any]:
    return {f["name"]: f for f in api.get("/v1/fences", headers=ADMIN_H).json()}


def _put(api: Api, path: str, body: dict[str, Any]) -> Any:
    return api.run(api.client.put(path, json=body, headers=ADMIN_H))


def test_a_fence_is_lifted_by_the_first_round_after_its_end_and_the_audit_says_so(
    store: Any,
) -> None:
    settings = manager_settings(clock="agent", plan_period_s=10, admin_token=ADMIN)
    api = Api(settings, store)
    rounds(api, range(1, 3))  # the manager's clock now reads 20
    r = _put(api, "/v1/fences/maintenance/h3", {"by": "o", "reason": "bios", "for_s": 25})
    assert r.status_code == 200, r.text
    assert r.json()["until_s"] == 45.0  # 20 + 25
    r = _put(api, "/v1/fences/pin/h2-vm1", {"by": "o"})  # no end: stays
    assert r.json()["until_s"] is None
    assert _fences(api)["h3"]["until_s"] == 45.0
    api.drain()
    entries = api.get("/v1/audit?limit=1000", headers=ADMIN_H).json()["entries"]
    (set_row,) = [e for e in entries if e["action"] == "fence:maintenance"]
    assert set_row["detail"] == f"bios (until {until_text(45.0)})", set_row
    api.close()

    api = Api(settings, store)  # a restart keeps the end
    assert _fences(api)["h3"]["until_s"] == 45.0
    rounds(api, range(3, 5))  # rounds at 30 and 40: before the end
    assert "h3" in _fences(api) and "h3" in api.svc.core.maintenance
    rounds(api, range(5, 6))  # the round at 50 is the first at or after 45
    api.drain()
    fences = _fences(api)
    assert "h3" not in fences and "h3" not in api.svc.core.maintenance
    assert "h2-vm1" in fences
    entries = api.get("/v1/audit?limit=1000", headers=ADMIN_H).json()["entries"]
    expired = [e for e in entries if e["action"] == "unfence:maintenance"]
    assert len(expired) == 1, entries
    assert expired[0]["subject"] == "h3" and "sova" in expired[0]["who"]
    assert expired[0]["detail"] == f"expired at {until_text(45.0)} (set by admin (o))", expired
    api.close()

    api = Api(settings, store)  # lifted in the store too: a restart does not bring it back
    assert "h3" not in _fences(api)
    api.close()


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"until_s": 15.0}, "until_s = 15"),  # the clock reads 20: already past
        ({"until_s": 99.0, "for_s": 10.0}, "until_s or for_s, not both"),
        ({"for_s": -5}, "for_s"),
    ],
)
def test_a_fence_end_in_the_past_or_given_twice_is_refused_naming_the_field(
    store: Any, body: dict[str, Any], says: str
) -> None:
    api = Api(manager_settings(clock="agent", plan_period_s=10, admin_token=ADMIN), store)
    rounds(api, range(1, 3))
    r = _put(api, "/v1/fences/maintenance/h3", {"by": "o", **body})
    assert r.status_code == 422 and says in r.text, r.text
    assert _fences(api) == {}
    api.close()


@pytest.mark.parametrize(
    ("value", "sent"),
    [
        ("90m", {"for_s": 5400.0}),  # 90 x 60
        ("2h", {"for_s": 7200.0}),
        ("1.5d", {"for_s": 129600.0}),  # 1.5 x 86400
        ("30s", {"for_s": 30.0}),
        # naive: UTC; 2026-12-07T18:00Z is 1796666400 s after the epoch
        ("2026-12-07T18:00", {"until_s": 1796666400.0}),
        ("2026-12-07T19:00+01:00", {"until_s": 1796666400.0}),
    ],
)
def test_until_takes_a_duration_or_an_iso_time(value: str, sent: dict[str, float]) -> None:
    assert parse_until(value) == sent


@pytest.mark.parametrize("value", ["2x", "soon", "0h", "-2h", ""])
def test_a_bad_until_is_one_line_naming_it(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(typer.Exit) as exc:
        parse_until(value)
    assert exc.value.exit_code == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and f"--until = {value!r}" in err, err
