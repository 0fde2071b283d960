"""The issue's acceptance on real traffic, shortened to fit CI: measured, never assumed.

* DAQS Fig. 3 (the harder 37.5 % guarantee) and Fig. 4 (newcomers): the Sova allocator
  holds the guarantee in >= 95 % of the seconds it is offered and keeps >= 95 % of the
  unconstrained throughput; the baseline misses it; DAQS and static ip-link caps show
  their published weaknesses.
* VF scheduling: the VFs follow the network-bound VMs and no VM's pings or TCP stream
  stop for more than a second at any switch.

Every figure is read back from the written summary.json, as an operator would.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sova.testbed.report import write_outputs
from sova.testbed.runner import run_scenario
from sova.testbed.scenario import TestbedScenario, load_testbed_scenario

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios" / "testbed"

pytestmark = pytest.mark.slow


def run(scn: TestbedScenario, prefix: str, tmp_path: Path, **kw: Any) -> dict[str, Any]:
    runs = run_scenario(scn, prefix, tmp_path / "logs", **kw)
    write_outputs(tmp_path / "out", scn, runs)
    for name in ("report.md", "timeline.csv", "events.csv", "testbed.csv", "throughput.png"):
        assert (tmp_path / "out" / name).is_file(), name
    summary: dict[str, Any] = json.loads((tmp_path / "out" / "summary.json").read_text())
    return summary


def per_second(tmp_path: Path, label: str, vm: str) -> list[float]:
    rows = (tmp_path / "out" / "testbed.csv").read_text().splitlines()
    head = rows[0].split(",")
    i_pol, i_vm, i_got = head.index("policy"), head.index("vm"), head.index("delivered_mbps")
    return [
        float(c[i_got])
        for c in (r.split(",") for r in rows[1:])
        if c[i_pol] == label and c[i_vm] == vm
    ]


def test_daqs_fig3_sova_holds_37_5_percent_at_full_utilisation(prefix: str, tmp_path: Path) -> None:
    scn = load_testbed_scenario(SCENARIOS / "daqs-fig3.yaml")
    # 30 one-second intervals: the 95 % bar then tolerates one bad second (29/30 = 96.7 %);
    # with 20 a single second of TCP ramp-up would already fail it.
    scn = scn.model_copy(
        update={"duration": 30.0, "variants": [v for v in scn.variants if v.name == "g37"]}
    )
    pol = run(scn, prefix, tmp_path)["policies"]
    sova, none, ip, daqs = (pol[f"{p}@g37"] for p in ("sova", "none", "ip-link-static", "daqs"))

    assert sova["guarantee_held_fraction"] >= 0.95
    assert sova["vs_baseline"] >= 0.95
    # Without control the one stream gets about a sixth of the port: far below 37.5 %.
    assert none["guarantee_held_fraction"] <= 0.1
    assert none["per_vm"]["guar"]["throughput_mbps"] < 250
    # ip-link with the natural cap (link - guarantee) misses it or wastes the link.
    assert ip["guarantee_held_fraction"] < 0.95 or ip["vs_baseline"] < 0.9
    # DAQS gets there by 0.75 % steps every 200 ms: it misses at first, then holds.
    assert daqs["guarantee_held_fraction"] < sova["guarantee_held_fraction"]
    tail = per_second(tmp_path, "daqs@g37", "guar")[-5:]
    assert sum(tail) / len(tail) >= 0.95 * 375
    assert daqs["vs_baseline"] >= 0.9


def test_daqs_fig4_sova_holds_the_guarantee_as_best_effort_vms_join(
    prefix: str, tmp_path: Path
) -> None:
    scn = load_testbed_scenario(SCENARIOS / "daqs-fig4.yaml")
    scn = scn.model_copy(
        update={
            "duration": 30.0,
            "traffic": [f for f in scn.traffic if f.start < 30.0],  # be1..be3 join
        }
    )
    pol = run(scn, prefix, tmp_path, only=["none", "ip-link-static", "sova"])["policies"]
    sova, none = pol["sova"], pol["none"]
    assert pol["ip-link-static"]["periods"] == 30

    assert sova["guarantee_held_fraction"] >= 0.95
    assert sova["vs_baseline"] >= 0.95
    assert none["guarantee_held_fraction"] < 0.7  # lost once two newcomers send
    # Caps fixed for two senders: too tight with one (under-use), too loose with three.
    ip_guar = per_second(tmp_path, "ip-link-static", "guar")
    ip_total = [
        sum(x)
        for x in zip(
            *(per_second(tmp_path, "ip-link-static", vm) for vm in ("guar", "be1", "be2", "be3")),
            strict=True,
        )
    ]
    assert min(ip_total[5:13]) < 0.85 * 1000  # one newcomer: the link is under-used
    assert min(ip_guar[-5:]) < 0.98 * 250  # three: the guarantee is broken


def test_vf_scheduling_moves_vfs_to_network_bound_vms_without_breaks(
    prefix: str, tmp_path: Path
) -> None:
    scn = load_testbed_scenario(SCENARIOS / "vf-scheduling.yaml")
    summary = run(scn, prefix, tmp_path, only=["dsr-iov"])
    m = summary["policies"]["dsr-iov"]
    checks = summary["acceptance"]["checks"]
    assert checks and all(c["holds"] for c in checks), checks
    assert m["vf_changes"] >= 6  # 2 attaches, then 2 detaches and 2 attaches
    assert m["failed_actions"] == 0
    assert m["max_ping_gap_s"] is not None and m["max_ping_gap_s"] <= 1.0
    assert m["max_tcp_gap_s"] is not None and m["max_tcp_gap_s"] <= 1.0
