"""Issue 38, Build 6: JSON log lines name their subjects as fields of their own (host, VM,
plan, decision, directive, lease, epoch) with an ISO 8601 time, so a fleet's logs are
searched by ``host="h1"`` instead of a regular expression over free text. Before, a line
carried only ts (epoch seconds), level, logger and msg.

The lines come from the manager's real code paths (in-process API): a drain in recommend
mode proposes a plan, an operator approves it, a fence is set.
"""

from __future__ import annotations

import io
import json
import logging
import re
from collections.abc import Iterator
from typing import Any

import pytest

from sova.daemon.logs import JsonFormatter, fields

from .test_fleet_controls import Cluster, _start
from .test_operator_control import ADMIN_H, make

ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


@pytest.fixture
def json_log() -> Iterator[io.StringIO]:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(JsonFormatter())
    lg = logging.getLogger("sova")
    lg.addHandler(handler)
    old = lg.level
    lg.setLevel(logging.INFO)
    try:
        yield out
    finally:
        lg.removeHandler(handler)
        lg.setLevel(old)


def _lines(out: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_plans_and_fences_log_their_subjects_as_fields(
    api_factory: Any, json_log: io.StringIO
) -> None:
    api = make(
        api_factory, mode="recommend", planner={"alpha": 0.75, "k": 3, "n": 5, "vm_cooldown": 0}
    )
    c = Cluster(api)
    c.round()
    _start(api)
    c.round()
    [plan] = api.get("/v1/plans?state=proposed", headers=ADMIN_H).json()["plans"]
    r = api.post(f"/v1/plans/{plan['id']}/approve", json={"by": "ops"}, headers=ADMIN_H)
    assert r.status_code == 200, r.text
    lines = _lines(json_log)
    assert lines and all(ISO.match(e["time"]) for e in lines), lines[:2]
    proposed = next(e for e in lines if e["msg"].startswith("proposed plan"))
    assert {k: proposed.get(k) for k in ("plan", "decision", "vm", "host")} == {
        "plan": plan["id"],
        "decision": plan["id"],
        "vm": "b",
        "host": "h1",
    }, proposed
    approved = next(e for e in lines if " approved by " in e["msg"])
    assert (approved["plan"], approved["vm"], approved["host"]) == (plan["id"], "b", "h1")
    drain = next(e for e in lines if e["msg"].startswith("admin (ops) set drain"))
    assert drain["host"] == "h1", drain


def test_a_field_outside_the_list_is_refused() -> None:
    """A misspelt subject would silently make a field nobody searches for."""
    with pytest.raises(ValueError, match="hostname"):
        fields(hostname="h1")
