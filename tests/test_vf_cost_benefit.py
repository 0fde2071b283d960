"""The sova VF policy on loads like real fleets' (docs/design.md#vf-cost-benefit), in the
simulator: a VM busy on CPU and network at once keeps its VF at its peak, and a VM that
virtio serves is never plugged; the dsr-iov baseline keeps the papers' behaviour."""

from __future__ import annotations

import csv
from pathlib import Path

from typer.testing import CliRunner

from sova.cli import app

runner = CliRunner()

# hy: 1 Gbit/s, then its peak of 5.9 Gbit/s from 120 s to 300 s, when its CPU work also
# rises from 0.2 to 0.8 of its vCPU (io_degree falls under the 65 threshold); web sends a
# steady 400 Mbit/s on an idle CPU; chat 2 Mbit/s. One VF. virtio carries 5 Gbit/s for one
# guest (the Sova paper's profile), so at its peak hy needs the VF.
SCENARIO = """
name: hybrid
seed: 1
duration: 300s
tick: 1s
profile: {virtio_flow_limit: 5Gbit}
hosts:
  - name: h1
    cores: 16
    memory: 64GiB
    nic: {name: ens1f0, capacity: 10Gbit, vf_pool: 1}
    vms: [chat, hy, web]
vms:
  - {name: hy, memory: 2GiB, vcpus: 4}
  - {name: web, memory: 2GiB}
  - {name: chat, memory: 1GiB}
workload:
  - at: 0
    vms:
      hy: {kind: trace, trace: load.csv, column: hy, cpu: 0.2}
      web: {kind: trace, trace: load.csv, column: web, cpu: 0.05}
      chat: {kind: trace, trace: load.csv, column: chat, cpu: 0.05}
  - at: 120s
    vms:
      hy: {kind: trace, trace: load.csv, column: hy, cpu: 0.8}
controller:
  period: 10s
compare: [dsr-iov, sova]
"""


def _run(tmp_path: Path) -> list[dict[str, str]]:
    with (tmp_path / "load.csv").open("w") as fh:
        fh.write("time_s,hy,web,chat\n")
        for t in range(0, 301, 10):
            fh.write(f"{t},{5900 if t >= 120 else 1000},400,2\n")
    (tmp_path / "hybrid.yaml").write_text(SCENARIO)
    out = tmp_path / "out"
    r = runner.invoke(
        app, ["simulate", str(tmp_path / "hybrid.yaml"), "-o", str(out), "--no-progress"]
    )
    assert r.exit_code == 0, r.output
    with (out / "timeline.csv").open() as fh:
        return list(csv.DictReader(fh))


def test_a_vm_busy_on_cpu_and_network_at_once_keeps_its_vf_at_its_peak(tmp_path: Path) -> None:
    rows = _run(tmp_path)

    def on_vf(policy: str, vm: str, since: float) -> list[bool]:
        return [
            r["nic"] == "vf"
            for r in rows
            if r["policy"] == policy and r["vm"] == vm and float(r["time_s"]) >= since
        ]

    def mean_tx(policy: str) -> float:
        tx = [
            float(r["tx_mbps"])
            for r in rows
            if r["policy"] == policy and r["vm"] == "hy" and float(r["time_s"]) >= 190.0
        ]
        return sum(tx) / len(tx)

    # From one window (60 s) into the peak on, sova's top-sender rule keeps hy through the
    # I/O filter: it holds the VF every period, and sends more than on virtio.
    assert all(on_vf("sova", "hy", 190.0))
    assert mean_tx("sova") > 1.05 * mean_tx("dsr-iov")
    # The papers' filter (dsr-iov, the baseline) drops the CPU-busy hy and hands the VF to
    # web: the behaviour the rule changes, and that the baseline keeps.
    assert not any(on_vf("dsr-iov", "hy", 190.0))
    # chat (2 Mbit/s, which virtio carries without loss) is never plugged by sova
    assert not any(on_vf("sova", "chat", 0.0))


# One 10 GbE host under the Sova allocator: step jumps from 1.0 to 3.2 Gbit/s at 100 s;
# burst sends 2 Gbit/s and nothing in turns of 5 s; 23 other VMs send 20 Mbit/s each (the
# link is far from full). Both loops run every 5 s.
STEP = """
name: step
seed: 1
duration: 160s
tick: 1s
hosts:
  - name: h1
    cores: 32
    memory: 256GiB
    nic: {name: ens1f0, capacity: 10Gbit, vf_pool: 0}
    vms: [VMS]
vms:
  - {name: step, memory: 2GiB, vcpus: 4}
OTHERS
workload:
  - at: 0
    vms:
      step: {kind: trace, trace: load.csv, column: step}
LOADS
controller:
  period: 5s
  bandwidth_period: 5s
  bandwidth_policy: sova
  vf_policy: default
compare:
  - {name: capped, vf: default, bandwidth: sova}
  - {name: uncapped, vf: default, bandwidth: none}
"""


def test_the_sova_allocator_follows_a_demand_step_within_two_periods(tmp_path: Path) -> None:
    others = [f"o{k:02d}" for k in range(23)]
    with (tmp_path / "load.csv").open("w") as fh:
        fh.write("time_s,step,small,burst\n")
        for t in range(0, 161, 5):
            fh.write(f"{t},{3200 if t >= 100 else 1000},20,{2000 if t % 10 else 0}\n")
    text = (
        STEP.replace("VMS", ", ".join(["step", "burst", *others]))
        .replace(
            "OTHERS",
            "\n".join(f"  - {{name: {o}, memory: 1GiB}}" for o in ["burst", *others]),
        )
        .replace(
            "LOADS",
            "\n".join(
                [
                    "      burst: {kind: trace, trace: load.csv, column: burst}",
                    *(
                        f"      {o}: {{kind: trace, trace: load.csv, column: small}}"
                        for o in others
                    ),
                ]
            ),
        )
    )
    (tmp_path / "step.yaml").write_text(text)
    out = tmp_path / "out"
    r = runner.invoke(
        app, ["simulate", str(tmp_path / "step.yaml"), "-o", str(out), "--no-progress"]
    )
    assert r.exit_code == 0, r.output
    with (out / "timeline.csv").open() as fh:
        every = list(csv.DictReader(fh))
    rows = [row for row in every if row["vm"] == "step" and row["policy"] == "capped"]
    tx = {float(row["time_s"]): float(row["tx_mbps"]) for row in rows}
    # (100, 105] measures the step at the old cap; the cap decided at 105 takes effect
    # within a tick, so (105, 110] is partly at the old cap; by the end of (110, 115] the
    # new demand goes through, and on average it stays through (the offered load jitters
    # by 5 % around 3.2 Gbit/s, and a cap just under a burst clips it).
    assert tx[115.0] >= 0.95 * 3200.0
    after = [v for t, v in tx.items() if t >= 115.0]
    assert sum(after) / len(after) >= 0.95 * 3200.0
    # before the step: the 1 Gbit/s demand went through (nothing was wasted under the cap)
    assert min(v for t, v in tx.items() if 30.0 <= t < 100.0) >= 0.95 * 1000.0

    # On a link never above 6.3 of its 10 Gbit/s the allocator holds nothing back: every
    # VM (burst's 2 Gbit/s turns included) delivers what it delivers with no allocator.
    def sent(policy: str) -> float:
        return sum(float(row["tx_mbps"]) for row in every if row["policy"] == policy)

    assert sent("capped") >= (1.0 - 1e-6) * sent("uncapped")
