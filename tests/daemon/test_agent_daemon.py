"""The agent daemon in-process: dry run, migration rollback, manager outage, restart."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from sova.manager.daemons.agent.daemon import POLL, STEP, AgentDaemon, ManagerClient
from sova.manager.daemons.config import AgentSettings
from sova.model import AttachVF, DetachVF, Migrate, NicKind

from .fakes import FakeHost, FakeManager, FakeVM


def _settings(**kw: Any) -> AgentSettings:
    base: dict[str, Any] = {
        "driver": "mock",
        "host": "h1",
        "report_retries": 0,
        "controller": {
            "period": 10,
            "vf_policy": "sova",
            "sensing": {"window": 3},
            "migration_timeout": 60,
            "scheduler": {"min_dwell": 0},
        },
    }
    base.update(kw)
    return AgentSettings.model_validate(base)


def _host(**kw: Any) -> FakeHost:
    h = FakeHost(**kw)
    h.vms = {"vm-a": FakeVM("vm-a", 2e9), "vm-b": FakeVM("vm-b", 2e8)}
    return h


def _daemon(host: FakeHost, manager: FakeManager | None, **kw: Any) -> AgentDaemon:
    client = None
    if manager is not None:
        client = ManagerClient(
            "http://manager", "h1", "tok", retries=0, transport=manager.transport()
        )
    d = AgentDaemon(_settings(**kw), host.driver(), client=client)
    d.reconcile()
    return d


def _run(d: AgentDaemon, host: FakeHost, seconds: float) -> None:
    """Whole-second ticks; a control step every 10 s, polls in between."""
    for _ in range(int(seconds)):
        host.advance(1.0)
        d.do_phase(POLL)
        if round(host.now) % 10 == 0:
            d.do_phase(STEP)


def test_dry_run_logs_every_action_and_submits_none(caplog: pytest.LogCaptureFixture) -> None:
    host = _host()
    d = _daemon(host, None, dry_run=True)
    with caplog.at_level(logging.INFO, logger="sova.agent"):
        _run(d, host, 60)
    assert host.submitted == []
    assert any("dry run: would vf_attach vm-a" in r.message for r in caplog.records)
    text = d.metrics.registry.get_sample_value(
        "sova_agent_actions_total", {"kind": "vf_attach", "result": "dry-run"}
    )
    assert text and text >= 1


def test_the_busiest_vm_gets_the_vf_and_metrics_follow() -> None:
    host = _host()
    d = _daemon(host, None)
    _run(d, host, 40)
    assert host.vms["vm-a"].nic is NicKind.VF and host.vms["vm-b"].nic is NicKind.VIRTIO
    get = d.metrics.registry.get_sample_value
    assert get("sova_agent_vf_held", {"vm": "vm-a"}) == 1.0
    assert get("sova_agent_vm_operation", {"vm": "vm-a", "operation": "VF"}) == 1.0
    assert get("sova_agent_vf_holders") == 1.0
    assert get("sova_agent_loop_duration_seconds_count", {"loop": "control"}) == 4


@pytest.mark.parametrize("failure", ["fails", "hangs"])
def test_failed_or_timed_out_migration_is_rolled_back(failure: str) -> None:
    host = _host(migration=failure)
    mgr = FakeManager()
    d = _daemon(host, mgr)
    _run(d, host, 40)
    assert host.vms["vm-a"].nic is NicKind.VF
    mgr.directive = {"i": 7, "f": True, "t": "h2", "v": "vm-a"}
    _run(d, host, 10)  # the report's response carries the directive
    mgr.directive = {"i": 7, "f": False}
    _run(d, host, 30)  # VF revoked first, then the migration submitted
    kinds = [(type(a), a.vm) for a in host.submitted]
    assert (DetachVF, "vm-a") in kinds and (Migrate, "vm-a") in kinds
    assert kinds.index((DetachVF, "vm-a")) < kinds.index((Migrate, "vm-a"))
    assert mgr.reports[-1]["d"] == 7  # acknowledged
    _run(d, host, 120)  # fails after 20 s, or the agent gives up after 60 s
    assert not host.vms["vm-a"].gone  # still running at the source
    assert d.agent.migrating == {}
    result = "failed" if failure == "fails" else "timeout"
    assert mgr.done == [
        ("vm-a", {"result": result, "dst": "h2", "detail": mgr.done[0][1]["detail"]})
    ]
    # The normal loop re-grants the VF once the VM is back on the menu.
    last_migrate = max(i for i, a in enumerate(host.submitted) if isinstance(a, Migrate))
    assert any(isinstance(a, AttachVF) and a.vm == "vm-a" for a in host.submitted[last_migrate:])
    _run(d, host, 60)
    assert host.vms["vm-a"].nic is NicKind.VF
    assert sum(isinstance(a, Migrate) for a in host.submitted) == 1  # never retried on its own


def test_successful_migration_is_reported_once() -> None:
    host = _host()
    mgr = FakeManager()
    d = _daemon(host, mgr)
    _run(d, host, 40)
    mgr.directive = {"i": 3, "f": True, "t": "h2", "v": "vm-a"}
    _run(d, host, 10)
    mgr.directive = {"i": 3, "f": False}
    _run(d, host, 80)
    assert host.vms["vm-a"].gone
    assert [v for v, body in mgr.done] == ["vm-a"] and mgr.done[0][1]["result"] == "succeeded"


def test_repeated_directive_is_applied_once() -> None:
    host = _host(migration="fails")
    mgr = FakeManager(directive={"i": 5, "f": True, "t": "h2", "v": "vm-a"})
    d = _daemon(host, mgr)
    _run(d, host, 200)  # the manager keeps repeating directive 5 (say, it lost our acks)
    assert sum(isinstance(a, Migrate) for a in host.submitted) == 1


def test_manager_outage_keeps_local_scheduling_and_reporting_resumes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    host = _host()
    mgr = FakeManager(down=True)
    d = _daemon(host, mgr)
    with caplog.at_level(logging.INFO, logger="sova.agent"):
        _run(d, host, 40)
        assert host.vms["vm-a"].nic is NicKind.VF  # scheduled without the manager
        assert mgr.reports == [] and d.manager_up is False
        # The load moves while the manager is away: the VF follows it.
        host.vms["vm-a"].tx_bps, host.vms["vm-b"].tx_bps = 1e8, 3e9
        _run(d, host, 90)
        assert host.vms["vm-b"].nic is NicKind.VF and host.vms["vm-a"].nic is NicKind.VIRTIO
        mgr.down = False
        _run(d, host, 20)
    assert len(mgr.reports) == 2  # resumed; nothing was queued during the outage
    assert [r["s"] for r in mgr.reports] == sorted(r["s"] for r in mgr.reports)
    messages = [r.message for r in caplog.records]
    assert any("manager unreachable" in m for m in messages)
    assert any("reporting resumed" in m for m in messages)
    get = d.metrics.registry.get_sample_value
    assert get("sova_agent_manager_up") == 1.0
    assert get("sova_agent_reports_total", {"result": "unreachable"}) >= 10


def test_restart_adopts_a_migration_in_flight() -> None:
    host = _host()
    mgr = FakeManager()
    first = _daemon(host, mgr)
    _run(first, host, 40)
    mgr.directive = {"i": 9, "f": True, "t": "h2", "v": "vm-a"}
    _run(first, host, 10)
    mgr.directive = {"i": 9, "f": True, "t": "h2", "v": "vm-a"}  # its ack never arrives
    _run(first, host, 20)
    assert host.vms["vm-a"].migrating
    # kill -9: the new process knows nothing but what the driver shows.
    second = _daemon(host, mgr)
    assert second.operation_table()["vm-a"] == "VLM"
    get = second.metrics.registry.get_sample_value
    assert get("sova_agent_vm_operation", {"vm": "vm-a", "operation": "VLM"}) == 1.0
    _run(second, host, 40)
    assert host.vms["vm-a"].gone
    assert sum(isinstance(a, Migrate) for a in host.submitted) == 1  # not migrated twice
    assert ("vm-a", "succeeded") in [(v, b["result"]) for v, b in mgr.done]


def test_a_second_migration_is_refused_while_one_runs_on_the_host() -> None:
    """Issue 37 (High): a new leader sent a second directive (another VM) to a source
    whose first migration was still copying. Before, ``apply`` skipped only a directive
    for the *same* VM, and a restarted agent's adopted migration did not count: vm-b
    left while vm-a was copying. Now the agent declines it, says why in the migration's
    end, and its reports say the host is migrating (``g``) until the copy ends."""
    host = _host(migration_s=60.0)
    mgr = FakeManager()
    first = _daemon(host, mgr)
    _run(first, host, 40)
    mgr.directive = {"i": 9, "f": True, "t": "h2", "v": "vm-a"}
    _run(first, host, 30)  # its VF detached first, then the copy (60 s) starts
    assert host.vms["vm-a"].migrating
    second = _daemon(host, mgr)  # restarted: vm-a's copy is adopted, not its own
    mgr.directive = {"i": 10, "f": True, "t": "h2", "v": "vm-b"}
    _run(second, host, 30)  # its first report after a whole period gets directive 10
    mgr.directive = {"i": 10, "f": False}
    _run(second, host, 10)
    migrated = [a.vm for a in host.submitted if isinstance(a, Migrate)]
    assert migrated == ["vm-a"], migrated  # vm-b never left while vm-a was copying
    assert mgr.reports[-1].get("g") is True  # the host says it is migrating
    declined = [b for v, b in mgr.done if v == "vm-b"]
    assert len(declined) == 1 and declined[0]["result"] == "declined", mgr.done
    assert "vm-a" in declined[0]["detail"] and "migrating" in declined[0]["detail"]
    assert mgr.reports[-1]["d"] == 10  # acknowledged: the manager stops repeating it
    _run(second, host, 60)
    assert host.vms["vm-a"].gone
    assert "g" not in mgr.reports[-1]  # the copy ended: no longer migrating


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("t", "x/system?command=/tmp/evil#"),  # the ssh transport would run the command
        ("t", "h1"),  # itself
        ("t", "-oProxyCommand=evil"),
        ("v", "vm-a/../../etc"),
        ("t", "h2\u2028row"),
    ],
)
def test_a_directive_with_a_bad_field_is_refused_and_the_agent_keeps_running(
    field: str, value: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 37, Medium 5: a target of ``x/system?command=/tmp/evil#`` was carried out
    (libvirt's URI became qemu+ssh://x/system?command=/tmp/evil#/system) and only the
    migration's end message failed the name pattern, and the agent exited. Now every field
    is checked against the manager's own patterns first: nothing is submitted, the id is
    acknowledged (no repeats), the refusal goes back as the migration's end (the manager
    audits it) when the VM can be named, and the agent carries on."""
    host = _host()
    mgr = FakeManager()
    d = _daemon(host, mgr)
    _run(d, host, 40)
    mgr.directive = {"i": 11, "f": True, "t": "h2", "v": "vm-a", field: value}
    with caplog.at_level(logging.ERROR, logger="sova.agent"):
        _run(d, host, 20)
    mgr.directive = {"i": 11, "f": False}
    _run(d, host, 40)  # still running: it reports every period
    assert not any(isinstance(a, Migrate) for a in host.submitted)
    assert mgr.reports[-1]["d"] == 11
    assert mgr.reports[-1]["s"] >= 8
    assert any("refused directive 11" in r.message for r in caplog.records), caplog.text
    if field == "t":
        ((vm, body),) = mgr.done
        assert vm == "vm-a" and body["result"] == "declined", mgr.done
        assert body["detail"].startswith("refused directive 11: target")
        assert "\u2028" not in body["detail"]  # the value is shown escaped
    else:
        assert mgr.done == []  # a VM that cannot be named cannot be answered for


def test_a_directive_that_does_not_parse_leaves_the_agent_running(
    caplog: pytest.LogCaptureFixture,
) -> None:
    host = _host()
    mgr = FakeManager()
    d = _daemon(host, mgr)
    _run(d, host, 40)
    mgr.directive = {"i": 12, "f": True, "t": "h2", "v": "vm-a", "k": ["bad name!"]}
    with caplog.at_level(logging.ERROR, logger="sova.agent"):
        _run(d, host, 30)
    assert not any(isinstance(a, Migrate) for a in host.submitted)
    assert any("directive" in r.message and "k" in r.message for r in caplog.records)
    n = len(mgr.reports)
    mgr.directive = {"i": 0, "f": False}
    _run(d, host, 20)
    assert len(mgr.reports) == n + 2  # still reporting
