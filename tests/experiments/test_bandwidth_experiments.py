"""docs/design.md#experiments rows D1, Q3, Q4 and P1, each from one `sova simulate` run of its scenario file.

The bandwidth allocators are unit-tested in tests/test_bandwidth.py; here they run in
closed loop on the simulated NIC (measured counters -> allocator -> guest limits), and the
rows are read back from the output files an operator would read. Steady-state values come
from timeline.csv (the sensor's 10 s means) after the controllers have converged, so the
whole-run averages in summary.json, which include the warm-up, are not what is asserted.
"""

from __future__ import annotations

import csv
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from sova.cli import app

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ROOT / "scenarios"
runner = CliRunner()


def simulate(tmp: Path, scenario: str, *args: str) -> Path:
    out = tmp / Path(scenario).stem
    result = runner.invoke(
        app, ["simulate", str(SCENARIOS / scenario), "--out", str(out), "--no-progress", *args]
    )
    assert result.exit_code == 0, result.output
    return out


def steady_tx(
    out: Path, after_s: float, until_s: float = 1e12, column: str = "tx_mbps"
) -> dict[tuple[str, ...], float]:
    """Mean of a timeline column per (sweep value, policy, VM) over rows in (after, until]."""
    acc: dict[tuple[str, ...], list[float]] = defaultdict(list)
    with (out / "timeline.csv").open() as fh:
        for row in csv.DictReader(fh):
            if after_s < float(row["time_s"]) <= until_s:
                key = (row.get("sweep_value", ""), row["policy"], row["vm"])
                acc[key].append(float(row[column]))
    return {k: sum(v) / len(v) for k, v in acc.items()}


def summary(out: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((out / "summary.json").read_text())
    return data


# --------------------------------------------------------------------------- D1


def test_d1_dba_vm_packet_rate_sla(tmp_path: Path) -> None:
    out = simulate(tmp_path, "dba-vm.yaml")
    tx = steady_tx(out, after_s=10)

    def r(pkt: str, policy: str, vm: str) -> float:
        return tx[(pkt, policy, vm)]

    # Scenario 1 (1500 B), native: 3 x 1 Gbit/s offered on 1 GbE -> equal thirds.
    for vm in ("VM1", "VM2", "VM3"):
        assert abs(r("1500", "native", vm) - 333.3) < 10
    # ... so VM2's 700 Mbit/s SLA is missed; DBA-VM gives 150/700/150.
    assert abs(r("1500", "dba-vm", "VM1") - 150) < 5
    assert abs(r("1500", "dba-vm", "VM2") - 700) < 10
    assert abs(r("1500", "dba-vm", "VM3") - 150) < 5
    # Scenario 2 (64 B for VM1/VM3), native: 190 kpps shared round-robin -> ~63 kpps
    # each; 63 kpps x 64 B x 8 = 32 Mbit/s, far below the 150 Mbit/s SLAs.
    assert r("64", "native", "VM1") < 150 and r("64", "native", "VM3") < 150
    assert r("64", "native", "VM1") < 50
    # DBA-VM: pps caps dropped at the netfront: 20 kpps x 512 bit = 10.2 Mbit/s,
    # 60 kpps x 512 bit = 30.7 Mbit/s; VM2 near its 700.
    assert 9.0 <= r("64", "dba-vm", "VM1") <= 10.5
    assert 22.0 <= r("64", "dba-vm", "VM3") <= 31.0
    assert 650 <= r("64", "dba-vm", "VM2") <= 710


# --------------------------------------------------------------------------- Q3


def test_q3_daqs_fig3_guarantee_sweep(tmp_path: Path) -> None:
    out = simulate(tmp_path, "daqs-fig3.yaml")
    tx = steady_tx(out, after_s=30)  # DAQS needs ~10 s of 0.3 Gbit/s steps to reach 15
    pts = {str(p["value"]): p["policies"] for p in summary(out)["sweep"]["points"]}
    base_total = 37490.0
    for g in ("10", "15"):
        need = float(g) * 1000 * 0.95  # guarantee_tolerance 0.05

        def total(policy: str, g: str = g) -> float:
            return tx[(g, policy, "G")] + tx[(g, policy, "BE")]

        # Baseline: per-stream sharing 1:5 -> 37.49 / 6 = 6.25 Gbit/s, guarantee missed.
        assert abs(tx[(g, "baseline", "G")] - base_total / 6) < 300
        assert abs(total("baseline") - base_total) < 300
        # DAQS meets the guarantee (the paper: at ~93 % of baseline; ours: ~100 %).
        assert tx[(g, "daqs", "G")] >= need
        assert total("daqs") >= 0.93 * base_total
        # Sova meets it at >= 97 % of baseline.
        assert tx[(g, "sova", "G")] >= need
        assert total("sova") >= 0.97 * base_total
        assert pts[g]["sova"]["guarantee_met_fraction"] >= 0.9
    # ip-link at 40 - 15 = 25 Gbit/s misses 15 (37.49 - 25 = 12.49) ...
    assert tx[("15", "ip-link-25", "G")] < 15000 * 0.95
    # ... a 10 Gbit/s cap meets it but wastes the port (paper 65.9 %, ours (18.5+10)/37.49).
    assert tx[("15", "ip-link-10", "G")] >= 15000
    util = (tx[("15", "ip-link-10", "G")] + tx[("15", "ip-link-10", "BE")]) / base_total
    assert util < 0.8
    # Not reached (paper.note): ip-link at 30 leaves the guarantee VM 37.49 - 30 = 7.49.
    assert abs(tx[("10", "ip-link-30", "G")] - 7490) < 200


# --------------------------------------------------------------------------- Q4


def test_q4_daqs_fig4_senders_join(tmp_path: Path) -> None:
    out = simulate(tmp_path, "daqs-fig4.yaml")
    pol = summary(out)["policies"]
    # DAQS and Sova hold the 10 Gbit/s guarantee throughout (bar the 200 ms ticks right
    # after a sender starts); the baseline loses it from the second sender on.
    assert pol["daqs"]["guarantee_met_fraction"] >= 0.95
    assert pol["sova"]["guarantee_met_fraction"] >= 0.95
    assert pol["baseline"]["guarantee_met_fraction"] < 0.5

    # Per minute k (k best-effort senders), from the 10 s timeline rows of that minute
    # once the controllers have settled (the last 40 s).
    def minute(policy: str, k: int) -> tuple[float, float]:
        tx = steady_tx(out, after_s=60 * k + 20, until_s=60 * (k + 1))
        g = tx[("", policy, "G1")]
        return g, sum(v for (_, p, _vm), v in tx.items() if p == policy)

    # ip-link: caps of (40 - 10) / 7 = 4.29 Gbit/s fixed in advance: with 1 sender the
    # port carries 18.5 + 4.29 = 22.8 of 37.49 (under-used) ...
    g1, total1 = minute("ip-link", 1)
    assert total1 < 0.7 * 37490 and g1 >= 10000
    # ... with 7 senders 7 x 4.29 = 30 Gbit/s leaves 7.49 for the guarantee VM: broken.
    g7, _ = minute("ip-link", 7)
    assert g7 < 9500
    for policy in ("daqs", "sova"):
        for k in (1, 4, 7):
            g, total = minute(policy, k)
            assert g >= 9500, (policy, k, g)
            assert total >= 0.9 * 37490, (policy, k, total)


# --------------------------------------------------------------------------- P1


def test_p1_native_vs_driver_domain(tmp_path: Path) -> None:
    out = simulate(tmp_path, "native-vs-driver-domain.yaml")
    pts = {str(p["value"]): p["policies"] for p in summary(out)["sweep"]["points"]}
    top = pts["1700"]  # offered above every saturation point
    dd, nat = top["driver-domain"]["per_vm"], top["native"]["per_vm"]
    cpu = steady_tx(out, after_s=10, column="cpu_usage")  # the first period has no sample
    # smp: the IDD core saturates at 1 s / (2 streams x 14 packets x 37.6 us) ~ 950/stream,
    # while each VM's core is only ~2/3 busy (950 x 667 us): the IDD is the bottleneck.
    assert 900 <= dd["VM1"]["requests_per_s"] <= 1000
    assert cpu[("1700", "driver-domain", "VM1")] < 0.75
    # native: each VM's own core is the limit, 1 / 667 us = 1500 replies/s: ~ +60 %.
    assert 1450 <= nat["VM1"]["requests_per_s"] <= 1550
    assert cpu[("1700", "native", "VM1")] > 0.95
    gain = nat["VM1"]["requests_per_s"] / dd["VM1"]["requests_per_s"] - 1
    assert 0.5 <= gain <= 0.7
    # Below saturation both serve what is offered.
    assert abs(pts["800"]["driver-domain"]["per_vm"]["VM1"]["requests_per_s"] - 800) < 40
    # One shared core, native, no QoS: two VMs split it (1500 / 2 = 750 each).
    assert 700 <= nat["VM3"]["requests_per_s"] <= 800
    # Device-level ingress QoS: VM6 held to 150 requests/s at the NIC, so VM5 gets the
    # freed core: 1 / 1.1 of it ~ 1360, > 1.7x the best-effort 750 and < 10 % below 1500.
    assert abs(nat["VM6"]["requests_per_s"] - 150) < 5
    assert nat["VM5"]["requests_per_s"] >= 0.9 * 1500 - 10
    assert nat["VM5"]["requests_per_s"] > 1.7 * nat["VM3"]["requests_per_s"]
