"""Fault tests with real processes on loopback: a world serving simulated hosts, the
manager, one agent per host (the same processes ``sova demo`` runs).

1. kill -9 an agent while its VM is migrating, restart it: the Operation Table is rebuilt
   from the driver (the VM is VLM), the migration is not repeated, no VF is held twice,
   no VM is lost, and the manager's lease is released when the adopted migration ends.
2. stop the manager: agents keep scheduling VFs locally; start it again on the same store:
   reporting resumes and no decision made before the outage is lost.

(The third fault, a failed or timed-out migration rolled back, is in test_agent_daemon.py.)
"""

from __future__ import annotations

import re
import signal
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from sova.demo import Cluster

from .conftest import DATA, running_cluster, wait_until, world_view

SCENARIO = DATA / "two-hosts.yaml"
VMS = {"A", "B", "C", "D", "E"}


@pytest.fixture
def cluster(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Cluster]:
    # With the breakpoint armed, the world pauses itself at the first tick with a VM
    # migrating, so a test acts mid-migration without racing it (polling did race).
    start = {"pause_at_migration": bool(getattr(request, "param", False))}
    with running_cluster(
        SCENARIO, tmp_path, speed=40.0, agent_timeout_s=3.0, agent_metrics=True, start=start
    ) as c:
        yield c


def _view(c: Cluster) -> dict:  # type: ignore[type-arg]
    return world_view(c)


def _where(view: dict) -> dict[str, list[str]]:  # type: ignore[type-arg]
    out: dict[str, list[str]] = {}
    for h, info in view["hosts"].items():
        for vm in info["vms"]:
            out.setdefault(vm, []).append(h)
    return out


def _agent_metric(c: Cluster, host: str) -> str:
    return httpx.get(f"http://127.0.0.1:{c.metrics_ports[host]}/metrics", timeout=2).text


def _table(metrics: str) -> dict[str, str]:
    return {
        vm: op
        for vm, op in re.findall(
            r'sova_agent_vm_operation\{operation="(\w+)",vm="(\w+)"\} 1\.0', metrics
        )[::1]
        for vm, op in [(op, vm)]
    }


@pytest.mark.parametrize("cluster", [True], indirect=True, ids=["paused-at-migration"])
def test_kill_9_agent_mid_migration_and_restart(cluster: Cluster) -> None:
    c = cluster

    wait_until(lambda: _view(c)["paused"], 60, "the world to pause at the first migration")
    view = _view(c)
    moving = [vm for vm, s in view["hosts"]["H1"]["vms"].items() if s["migrating"]]
    assert moving == ["A"]
    assert c.kill("agent-H1", signal.SIGKILL) == -signal.SIGKILL
    c.start_agent("H1")  # a new process, a new metrics port

    # Rebuilt from the driver before it syncs a single tick: A is leaving (VLM), and
    # the VF holders are exactly what the world says.
    def rebuilt() -> dict[str, str]:
        return _table(_agent_metric(c, "H1"))

    table = wait_until(rebuilt, 30, "the restarted agent's Operation Table")
    view = _view(c)
    assert table["A"] == "VLM"
    for vm, s in view["hosts"]["H1"]["vms"].items():
        if vm != "A":
            assert table[vm] == ("VF" if s["nic"] == "vf" else "VNIC"), (vm, table, s)

    c.pause(False)

    def arrived() -> bool:
        v = _view(c)
        return "A" in v["hosts"]["H2"]["vms"] and not v["hosts"]["H2"]["vms"]["A"]["migrating"]

    wait_until(arrived, 60, "A to arrive on H2")
    t_arrived = _view(c)["now"]
    wait_until(lambda: _view(c)["now"] >= t_arrived + 40, 60, "40 more simulated seconds")
    final = _view(c)
    assert final["violation_count"] == 0, final["violations"]
    where = _where(final)
    assert set(where) == VMS and all(len(h) == 1 for h in where.values())
    # The adopted migration's end reached the manager: its lease is gone and audited.
    full = (c.log_dir / "agent-H1.log").read_text()  # type: ignore[operator]
    first, _, second = full.rpartition("sova agent for H1")  # both processes append here
    assert "migrating A to H2" in first
    assert "reconciled H1" in second and "migrating [A]" in second
    assert "adopted migration of A ended: succeeded" in second
    assert "migrating A to H2" not in second  # the new process never re-issued it
    leases = httpx.get(c.manager_url + "/v1/cluster", headers=c.admin_headers, timeout=5).json()[
        "leases"
    ]
    assert "A" not in [lease["vm"] for lease in leases]


def test_manager_outage_agents_schedule_locally_and_reporting_resumes(cluster: Cluster) -> None:
    c = cluster
    api = c.manager_url

    def decisions() -> list[dict]:  # type: ignore[type-arg]
        return httpx.get(
            api + "/v1/decisions", params={"limit": 1000}, headers=c.admin_headers, timeout=5
        ).json()["decisions"]

    before = wait_until(decisions, 60, "the manager's first decision")
    c.pause()
    before = decisions()
    seq_before = {
        h["host"]: h["seq"]
        for h in httpx.get(api + "/v1/cluster", headers=c.admin_headers, timeout=5).json()["hosts"]
    }
    t_down = _view(c)["now"]
    # Graceful: the lifespan flushes the store; uvicorn then re-raises SIGTERM (exit -15).
    assert c.kill("manager", signal.SIGTERM) in (0, -signal.SIGTERM)
    c.pause(False)

    # While it is away, the agents keep placing VFs (the loads change at 150 s).
    wait_until(lambda: _view(c)["now"] >= max(t_down, 150) + 60, 90, "the outage to last a while")
    c.pause()
    view = _view(c)
    assert view["violation_count"] == 0
    local = [
        e
        for e in view["recent_events"]
        if e["event"] in ("vf_attach", "vf_detach") and e["time_s"] > t_down
    ]
    assert local, view["recent_events"]
    for h in ("H1", "H2"):
        log = (c.log_dir / f"agent-{h}.log").read_text()  # type: ignore[operator]
        assert "manager unreachable" in log

    c.start_manager()
    c.wait_ready(api + "/healthz", "manager")
    after = decisions()
    assert after[: len(before)] == before  # nothing lost across the restart
    c.pause(False)

    def resumed() -> bool:
        hosts = httpx.get(api + "/v1/cluster", headers=c.admin_headers, timeout=5).json()["hosts"]
        return all(h["seq"] > seq_before.get(h["host"], 0) + 1 for h in hosts) and len(hosts) == 2

    wait_until(resumed, 60, "both agents to report again")
    # The manager counts a report before its answer reaches the agent, and the agent logs the
    # resumption only on reading that answer: under load the line trails the count (CI once
    # read the log 0.3 s before H2 wrote it), so it is awaited, not read once.
    for h in ("H1", "H2"):
        log = c.log_dir / f"agent-{h}.log"  # type: ignore[operator]
        wait_until(
            lambda log=log: "reporting resumed" in log.read_text(), 10, f"{h} to log resumption"
        )
    assert decisions()[: len(before)] == before
