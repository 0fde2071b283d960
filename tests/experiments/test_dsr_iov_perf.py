"""DSR-IOV performance experiments (docs/design.md#experiments rows F7a-F7d), checked from `sova simulate` output.

Each test runs the whole scenario file (every sweep point: the runs are short) through the
CLI and reads summary.json, so what is asserted is what an operator would see. All four
share one hardware profile, scenarios/profiles/dsr-iov.yaml, with Table 3
(tests/test_simulate.py), so a calibration that helped one figure at the expense of
another would fail here or there.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from sova.cli import app

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ROOT / "scenarios"
runner = CliRunner()


def sweep(tmp: Path, scenario: str) -> dict[Any, dict[str, dict[str, Any]]]:
    """{sweep value: {policy: summary}} of a `sova simulate` run of the scenario file."""
    out = tmp / Path(scenario).stem
    result = runner.invoke(
        app, ["simulate", str(SCENARIOS / scenario), "--out", str(out), "--no-progress"]
    )
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "summary.json").read_text())
    assert (out / "report.md").is_file()
    return {p["value"]: p["policies"] for p in summary["sweep"]["points"]}


def reduction(pol: dict[str, dict[str, Any]], metric: str) -> float:
    """How much lower DSR-IOV's figure is than the default's, as a fraction."""
    return 1.0 - pol["dsr-iov"][metric] / pol["default"][metric]


def test_f7a_delay_at_least_26_percent_lower_from_32_vms(tmp_path: Path) -> None:
    pts = sweep(tmp_path, "dsr-iov-fig7a.yaml")
    assert sorted(pts) == [1, 8, 16, 24, 32, 40, 48, 56, 63]
    red = {n: reduction(pol, "mean_response_ms") for n, pol in pts.items()}
    for n, pol in pts.items():
        # the 63-VF pool covers every VM: each one is hot-plugged once, nothing flaps
        assert pol["dsr-iov"]["vf_changes"] == n
        assert pol["default"]["vf_changes"] == 0
        assert red[n] > 0, f"{n} VMs: the VF must be faster at every size"
    # F7a: >= 26 % lower for >= 32 VMs. Ours is ~30 % at 32 and ~38 % at 63: the extra
    # scheduling hop and backend queue of virtio grow with the host's CPU load.
    for n in (32, 40, 48, 56, 63):
        assert red[n] >= 0.26, f"{n} VMs: only {red[n]:.1%} lower"
    # At 1 VM the host is idle and the fixed costs (client, wire, Apache) dominate.
    assert red[1] < 0.2
    assert all(red[a] < red[b] for a, b in zip(sorted(red), sorted(red)[1:], strict=False))


def test_f7b_delay_21_to_58_percent_lower_above_100_req_s(tmp_path: Path) -> None:
    pts = sweep(tmp_path, "dsr-iov-fig7b.yaml")
    assert sorted(pts) == list(range(100, 1001, 100))
    for rate, pol in pts.items():
        red = reduction(pol, "mean_response_ms")
        assert pol["dsr-iov"]["vf_changes"] == 32  # all 32 VMs hold a VF
        if rate > 100:
            # F7b: 21-58 % lower above 100 req/s (ours: 37 % at 200 ... 52 % at 1000)
            assert 0.21 <= red <= 0.58, f"{rate} req/s: {red:.1%}"
    # delay grows with the rate under both policies (vCPU and host load)
    for policy in ("default", "dsr-iov"):
        d = [pts[r][policy]["mean_response_ms"] for r in sorted(pts)]
        assert d == sorted(d)


def test_f7c_dsr_iov_near_line_rate_default_falls(tmp_path: Path) -> None:
    pts = sweep(tmp_path, "dsr-iov-fig7c.yaml")
    line = 9480.0  # TCP goodput of 10 GbE (docs/design.md#calibration, Dong et al.)
    ns = sorted(pts)
    for n in ns:
        # DSR-IOV near line rate at every size (>= 99 %; the first ~12 s are on virtio)
        assert pts[n]["dsr-iov"]["throughput_mbps"] >= 0.99 * line
    # the default falls steadily with the number of VMs: every active virtio queue costs
    # the backend overhead, and from 8 VMs its ceiling is below the link
    dflt = [pts[n]["default"]["throughput_mbps"] for n in ns if n >= 8]
    assert all(a > b for a, b in zip(dflt, dflt[1:], strict=False))
    # 63 VMs: paper 9018.04 -> 9428.92 Mbit/s, +4.6 %; ours within 3-7 %
    gain = pts[63]["dsr-iov"]["throughput_mbps"] / pts[63]["default"]["throughput_mbps"] - 1
    assert 0.03 <= gain <= 0.07, f"+{gain:.1%}"
    assert 8800 <= pts[63]["default"]["throughput_mbps"] <= 9200


def test_f7d_transfer_time_lower_with_dsr_iov(tmp_path: Path) -> None:
    pts = sweep(tmp_path, "dsr-iov-fig7d.yaml")
    for n, pol in pts.items():
        for policy in ("default", "dsr-iov"):
            # mean_transfer_s is over completed transfers: every copy must have finished
            assert pol[policy]["files_done"] == n, (n, policy)
    # 48 VMs (34 also running lookbusy) oversubscribe the 20 cores, so virtio's per-packet
    # host CPU is taken from encryption; the paper: 295.95 s -> 210.81 s. Ours is lower
    # too, by less (see the scenario's note: the classifier leaves busy VMs on virtio).
    d48 = pts[48]
    assert d48["dsr-iov"]["mean_transfer_s"] < d48["default"]["mean_transfer_s"]
    assert reduction(d48, "mean_transfer_s") >= 0.02
    # with an idle host a VF changes nothing: scp is bound by its own vCPU
    assert pts[1]["dsr-iov"]["mean_transfer_s"] == pts[1]["default"]["mean_transfer_s"]
    # more VMs than cores: transfers slow down under both policies
    assert d48["default"]["mean_transfer_s"] > pts[16]["default"]["mean_transfer_s"]
