"""Issue 11 through real processes: a world of simulated hosts, ``sova manager`` in recommend
mode and one ``sova agent`` per host (the processes ``sova demo`` runs), driven by an operator
with the ``sova`` CLI as a subprocess against the manager's real HTTP API.

H1 is hot from the start (net ~0.7 > alpha 0.6), so the manager decides to move a VM to H2
after three reports, but only proposes it. The world is paused while the operator decides,
so the plan cannot expire or the run end under the test. ~15 s per test.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from sova.demo import Cluster

from .conftest import DATA, running_cluster, wait_until, world_view

SCENARIO = DATA / "two-hosts.yaml"


def sova(c: Cluster, *args: str, code: int = 0) -> str:
    env = {
        **os.environ,
        "SOVA_MANAGER_URL": c.manager_url,
        "SOVA_OPERATOR": "alice",
        "SOVA_ADMIN_TOKEN": c.admin_token,  # the demo's admin credential, named "admin"
    }
    p = subprocess.run(
        [sys.executable, "-m", "sova", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert p.returncode == code, (args, p.returncode, p.stdout, p.stderr)
    return p.stdout + p.stderr


def plans(c: Cluster, state: str) -> list[dict[str, Any]]:
    return list(json.loads(sova(c, "plans", "--json", "list", "--state", state))["plans"])


def _done(c: Cluster) -> bool:
    return bool(world_view(c)["done"])


def migrations(c: Cluster) -> list[tuple[str, str, str]]:
    with (c.out / "events.csv").open() as f:
        return [
            (e["vm"], e["src_host"], e["dst_host"])
            for e in csv.DictReader(f)
            if e["event"] == "migrate_start"
        ]


@pytest.fixture
def cluster(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Cluster]:
    param = dict(getattr(request, "param", {}))
    start = {"paused": bool(param.pop("paused", False))}
    env = {"SOVA_MANAGER_MODE": "recommend", **param}
    with running_cluster(
        SCENARIO, tmp_path, speed=20.0, manager_env=env, show_logs="manager.log", start=start
    ) as c:
        yield c


def _first_plan(c: Cluster) -> dict[str, Any]:
    found = wait_until(lambda: plans(c, "proposed"), 60, "a proposed plan")
    c.pause()
    (p,) = plans(c, "proposed")
    assert p["id"] == found[0]["id"]
    return p


@pytest.mark.slow
def test_operator_approves_and_the_agent_migrates(cluster: Cluster) -> None:
    c = cluster
    assert "cluster: recommend (config file)" in sova(c, "mode", "show")
    p = _first_plan(c)
    shown = sova(c, "plans", "show", str(p["id"]))
    assert "src:" in shown and "dst:" in shown and "reason:" in shown
    a = p["actions"][0]
    out = sova(c, "plans", "approve", str(p["id"]), "--reason", "checked the graphs")
    assert "approved" in out
    c.pause(False)
    wait_until(lambda: _done(c), 120, "the run to finish")
    c.finish()
    # Exactly the approved move, carried out by the source's agent.
    assert migrations(c) == [(a["vm"], a["src"], a["dst"])]
    audit = sova(c, "audit")
    assert "admin (alice) approve" in audit and f"plan {p['id']}" in audit


@pytest.mark.slow
def test_operator_rejects_and_nothing_moves(cluster: Cluster) -> None:
    c = cluster
    p = _first_plan(c)
    sova(c, "plans", "reject", str(p["id"]), "-m", "not during the sale")
    # Deciding twice is refused with exit code 1 and says why.
    assert "is rejected" in sova(c, "plans", "approve", str(p["id"]), code=1)
    c.pause(False)
    wait_until(lambda: _done(c), 120, "the run to finish")
    c.finish()
    assert migrations(c) == []


@pytest.mark.slow
@pytest.mark.parametrize("cluster", [{"SOVA_MANAGER_PLAN_TTL_S": "30"}], indirect=True)
def test_unapproved_plans_expire_and_nothing_moves(cluster: Cluster) -> None:
    c = cluster
    wait_until(lambda: _done(c), 120, "the run to finish")
    c.finish()
    assert migrations(c) == []
    assert plans(c, "expired"), "no plan expired in a 400 s run with a 30 s time to live"


@pytest.mark.slow
def test_maintenance_set_with_the_cli_keeps_the_host_out_of_play(cluster: Cluster) -> None:
    """H2, the only possible target, in maintenance: the manager proposes nothing at all,
    and the cluster view shows the fence."""
    c = cluster
    # before H2 has reported: --force (a name no host reported is refused otherwise)
    sova(c, "fence", "set", "maintenance", "H2", "-m", "firmware", "--force")
    assert "maintenance" in sova(c, "fence", "list") and "firmware" in sova(c, "fence", "list")
    wait_until(lambda: _done(c), 120, "the run to finish")
    c.finish()
    assert migrations(c) == []
    assert plans(c, "proposed") == []
    view = httpx.get(c.manager_url + "/v1/cluster", headers=c.admin_headers, timeout=5).json()
    h2 = next(h for h in view["hosts"] if h["host"] == "H2")
    assert h2["maintenance"] == "set by admin (alice): firmware"
    reasons = [
        d["reason"]
        for d in httpx.get(
            c.manager_url + "/v1/decisions?limit=1000", headers=c.admin_headers, timeout=5
        ).json()["decisions"]
        if d["host"] == "H1"
    ]
    assert reasons and all("no cold spot" in r for r in reasons), reasons[-1:]


@pytest.mark.slow
@pytest.mark.parametrize(
    "cluster", [{"SOVA_MANAGER_MODE": "autonomic", "paused": True}], indirect=True
)
def test_mode_and_a_pin_set_with_the_cli_survive_a_manager_restart(cluster: Cluster) -> None:
    """The file says autonomic; the operator switches to recommend and pins A (the VM the
    manager would move first) with the CLI, then the manager restarts: both still hold, and
    what it proposes never moves A."""
    import signal

    c = cluster  # the world has not ticked yet: nothing was decided in autonomic mode
    sova(c, "mode", "set", "recommend", "-m", "change freeze")
    sova(c, "fence", "set", "pin", "A", "-m", "licence", "--force")  # before any report
    assert c.kill("manager", signal.SIGTERM) in (0, -signal.SIGTERM)
    c.start_manager()
    c.wait_ready(c.manager_url + "/healthz", "manager")
    assert "cluster: recommend (set by admin (alice))" in sova(c, "mode", "show")
    assert "pin             A" in sova(c, "fence", "list")
    c.pause(False)
    wait_until(lambda: _done(c), 120, "the run to finish")
    c.finish()
    assert migrations(c) == []  # recommend mode: nothing moves unapproved
    proposed = plans(c, "proposed") + plans(c, "expired") + plans(c, "superseded")
    assert proposed, "H1 stayed hot, yet nothing was proposed"
    assert all(p["actions"][0]["vm"] != "A" for p in proposed)
