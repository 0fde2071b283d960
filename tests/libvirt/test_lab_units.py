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
    nic = LabNic(conn=None, bridge="svl-fast", taps=("svl1f0", "svl1f1"), speed_mbit=300)
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
