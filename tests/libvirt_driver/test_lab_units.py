"""The lab's pieces that need neither root nor QEMU: scenarios, the lab-nic slot logic."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from sova.driver.libvirt_driver.fastpath import LabNic, slot_mac
from sova.driver.libvirt_xml import DomainNic, parse_domain
from sova.lab.scenario import LabScenarioError, load_lab_scenario

ROOT = Path(__file__).resolve().parents[2]

GOOD = """
name: t
guests: 2
fast_slots: 1
phases:
  - {name: a, duration_s: 10, loads: {g1: net}, expect_holders: [g1]}
"""


def test_shipped_lab_scenarios_load():
    for path in sorted((ROOT / "scenarios" / "lab").glob("*.yaml")):
        scn = load_lab_scenario(path)
        assert scn.phases and scn.duration_s > 0


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        (GOOD.replace("g1: net", "g9: net"), "phases.0: guest 'g9' does not exist"),
        (GOOD.replace("duration_s: 10", "duration_s: -3"), "phases.0.duration_s"),
        (GOOD.replace("loads: {g1: net}", "loads: {g1: disk}"), "phases.0.loads.g1"),
        (GOOD.replace("expect_holders: [g1]", "expect_holders: [g1, g2]"), "fast_slots is 1"),
        (GOOD + "bogus: 1\n", "bogus"),
        (
            GOOD + "controller: {op_timeout: 30s}\n",
            "op_timeout: 30s is shorter than the lab driver's worst-case plug",
        ),
    ],
)
def test_bad_lab_scenario_is_one_line_naming_the_field(tmp_path, text, needle):
    p = tmp_path / "s.yaml"
    p.write_text(text)
    with pytest.raises(LabScenarioError) as exc:
        load_lab_scenario(p)
    msg = str(exc.value)
    assert needle in msg and "\n" not in msg


def test_lab_run_with_a_bad_scenario_exits_2_before_touching_anything(tmp_path):
    from sova.cli import app

    p = tmp_path / "s.yaml"
    p.write_text(GOOD.replace("duration_s: 10", "duration_s: 0"))
    res = CliRunner().invoke(app, ["lab", "run", str(p)])
    assert res.exit_code == 2
    assert "phases.0.duration_s" in res.output
    assert not (Path("out") / "lab" / "t").exists()


def _domain_with(iface_xml: str) -> str:
    return (
        "<domain type='qemu'><name>g1</name><vcpu>1</vcpu><memory unit='MiB'>320</memory>"
        "<devices><interface type='bridge'><mac address='52:54:00:77:00:01'/>"
        "<source bridge='svl-slow'/><model type='virtio'/><alias name='ua-backup'/>"
        "<target dev='vnet0'/></interface>" + iface_xml + "</devices></domain>"
    )


def test_lab_nic_plug_xml_is_recognised_as_the_held_slot():
    nic = LabNic(conn=lambda: None, bridge="svl-fast", taps=("svl1f0", "svl1f1"), speed_mbit=300)
    backup = DomainNic(type="bridge", mac="52:54:00:77:00:01", model="virtio", alias="ua-backup")
    xml = nic.plug_xml(backup, "svl1f1", pairing=False)
    assert "<teaming" not in xml  # libvirt refuses transient teaming on a virtio NIC
    info = parse_domain(_domain_with(xml))
    fast = nic.nic(info)
    assert fast is not None and fast.mac == slot_mac("svl1f1") and fast.target_dev == "svl1f1"
    assert nic.held(info, nic.view()) == (1, "lab-nic")
    assert nic.nic(parse_domain(_domain_with(""))) is None  # the backup is never the fast NIC
    unplug = nic.unplug_xml(fast)
    assert slot_mac("svl1f1") in unplug and "svl-fast" in unplug


def test_ping_gaps_finds_the_largest_gap_and_the_lost_requests(tmp_path):
    from sova.lab.loads import ping_gaps

    log = tmp_path / "ping.log"
    rows = ["PING 10.77.0.11 (10.77.0.11) 56(84) bytes of data."]
    for seq, t in [(1, 100.0), (2, 100.1), (3, 100.2), (6, 100.9), (7, 101.0)]:
        rows.append(f"[{t:.6f}] 64 bytes from 10.77.0.11: icmp_seq={seq} ttl=64 time=1 ms")
    rows.append("[99.0] 64 bytes from 10.77.0.11: icmp_seq=0 ttl=64 time=1 ms")  # before start
    log.write_text("\n".join(rows) + "\n")
    got = ping_gaps(log, 99.5, 102.0, interval_s=0.1)
    assert got["max_arrival_gap_s"] == 0.7 and got["replies"] == 5 and got["lost"] == 2
    assert got["max_gap_s"] == 0.3  # seq 3 -> 6 unanswered between: 3 intervals of send time


def test_orphan_ifbs_are_sovas_whose_tap_is_gone(tmp_path):
    from sova.driver.libvirt_driver.tap_shaping import ifb_name, orphan_ifbs

    for n in ("vnet3", ifb_name("vnet3"), ifb_name("vnet7"), "ifb0", "svt-ifb"):
        (tmp_path / n).mkdir()
    assert ifb_name("vnet3") == "svivnet3"
    assert orphan_ifbs(tmp_path) == ["svivnet7"]  # vnet3 still has its tap; others not ours


def test_vf_scheduling_expected_holders_are_what_the_simulator_decides():
    """The holders the shipped scenario states per phase are the ones the same policy
    decides in the simulator for the same phases (the lab run checks itself against both)."""
    from sova.lab_simulated import simulated_holders

    scn = load_lab_scenario(ROOT / "scenarios" / "lab" / "vf-scheduling.yaml")
    assert simulated_holders(scn) == [sorted(p.expect_holders) for p in scn.phases]


def test_the_simulator_follows_the_phases_not_the_stated_list():
    """Swap the loads and the simulator's holders swap with them (it is not echoing
    expect_holders)."""
    from sova.lab_simulated import simulated_holders

    scn = load_lab_scenario(ROOT / "scenarios" / "lab" / "vf-scheduling.yaml")
    swapped = scn.model_copy(
        update={
            "phases": [p.model_copy(update={"loads": scn.phases[1].loads}) for p in scn.phases[:1]]
            + [p.model_copy(update={"loads": scn.phases[0].loads}) for p in scn.phases[1:2]]
        }
    )
    assert simulated_holders(swapped) == [["g3", "g4"], ["g1", "g2"]]


# --------------------------------------------------------------------------- lab up / down


def test_up_without_libvirt_python_starts_nothing_and_names_the_checkouts_setup(
    tmp_path, monkeypatch
):
    """Failed before the fix: `up` built the image, the network and the daemons first."""
    import sys

    from sova.lab import lab as lab_mod
    from sova.lab.daemons import LabError
    from sova.lab.settings import LabSettings

    def started(*_a, **_k):
        raise AssertionError("up started something before its checks")

    monkeypatch.setattr(lab_mod, "LAB_TOOLS", ())
    monkeypatch.setattr(lab_mod, "build_image", started)
    monkeypatch.setattr(lab_mod.network, "up", started)
    monkeypatch.setitem(sys.modules, "libvirt", None)  # import libvirt -> ImportError
    s = LabSettings(root=tmp_path / "lab", prefix="svz")
    with pytest.raises(LabError) as e:
        lab_mod.up(s, ROOT)
    msg = str(e.value)
    assert "libvirt-python is not installed" in msg and "scripts/lab-setup.sh" in msg
    assert "pip install 'sova-sriov" not in msg  # the checkout, not PyPI
    assert not s.root.exists()


def test_up_names_every_missing_tool_before_starting(tmp_path, monkeypatch):
    from sova.lab import lab as lab_mod
    from sova.lab.daemons import LabError
    from sova.lab.settings import LabSettings

    monkeypatch.setattr(lab_mod, "LAB_TOOLS", ("sova-no-such-tool", "sh"))
    s = LabSettings(root=tmp_path / "lab", prefix="svz")
    with pytest.raises(LabError, match=r"^sova-no-such-tool not found: run `sudo "):
        lab_mod.up(s, ROOT)
    assert not s.root.exists()


def _fake_qemu(tmp_path, monkeypatch, body: str) -> str:
    import os

    bin_ = tmp_path / "bin"
    bin_.mkdir()
    q = bin_ / "qemu-system-x86_64"
    q.write_text("#!/bin/sh\n" + body + "\n")
    q.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_}:{os.environ['PATH']}")
    monkeypatch.delenv("SOVA_LAB_ACCEL", raising=False)
    kvm = tmp_path / "kvm"
    kvm.write_text("")
    return str(kvm)


def test_kvm_probe_of_a_silent_guest_gives_up_fast(tmp_path, monkeypatch):
    """QEMU 10 on a PVM host runs the KVM guest without a word: the probe used to wait its
    full 15 s on every `up`. Failed before the fix (15.0 s)."""
    import time

    from sova.lab.accel import KVM_PROBE_S, choose_accel

    kvm = _fake_qemu(tmp_path, monkeypatch, "exec sleep 60")
    t0 = time.monotonic()
    got = choose_accel(tmp_path / "vmlinuz", kvm_dev=kvm)
    took = time.monotonic() - t0
    assert got.domain_type == "qemu" and "no kernel output within" in got.reason
    assert took < KVM_PROBE_S + 2, took


def test_kvm_probe_returns_at_the_kernel_banner(tmp_path, monkeypatch):
    import time

    from sova.lab.accel import choose_accel

    kvm = _fake_qemu(tmp_path, monkeypatch, "echo 'Linux version 6.1.0'; exec sleep 60")
    t0 = time.monotonic()
    got = choose_accel(tmp_path / "vmlinuz", kvm_dev=kvm)
    assert got.domain_type == "kvm", got
    assert time.monotonic() - t0 < 2


def test_down_kills_what_the_lab_recorded_even_when_its_command_line_names_nothing(tmp_path):
    """A lab daemon's command line (libvirtd -f /etc/libvirt/…) does not name the lab: `down`
    finds it in the ledger the lab keeps; a ledger pid now held by another process (reused)
    is left alone. Failed before the fix: `down` matched command lines only."""
    import subprocess

    from sova.lab import daemons
    from sova.lab.settings import LabSettings

    s = LabSettings(root=tmp_path / "lab", prefix="svz")
    ours = subprocess.Popen(["sleep", "300"])
    other = subprocess.Popen(["sleep", "300"])
    try:
        daemons.record_pid(s, ours.pid, "HV2 libvirtd")
        with (s.root / "pids").open("a") as f:
            f.write(f"{other.pid} 1 HV1 libvirtd\n")  # the pid, but not that process
        killed = daemons.kill_all(s, grace_s=2)
        assert ours.pid in killed and other.pid not in killed
        assert ours.wait(5) is not None
        assert other.poll() is None
    finally:
        for p in (ours, other):
            p.kill()
            p.wait()


def test_a_killed_unreaped_daemon_is_not_taken_for_a_running_one(tmp_path):
    """The lab starts libvirtd as its own child: killed by a fault test and not yet reaped,
    it lingers as a zombie whose /proc entry still has its start time. Before: the lab took
    it for the running daemon, never started a new one, and the next connect to that host
    was refused (the destination-killed lab test's clean-up failed that way)."""
    import signal
    import subprocess
    import time

    from sova.lab.daemons import proc_start_time

    child = subprocess.Popen(["sleep", "60"])
    try:
        assert proc_start_time(child.pid) is not None
        child.send_signal(signal.SIGKILL)
        deadline = time.monotonic() + 10
        while Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
            assert time.monotonic() < deadline
        assert proc_start_time(child.pid) is None  # a zombie is gone, not running
    finally:
        child.kill()
        child.wait()
