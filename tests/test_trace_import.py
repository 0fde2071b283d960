"""`sova scenario import`: per-VM series in public trace archives' formats become a
trace-replay scenario that validates and replays; bad cells are refused in one line.

The samples are written here, in the formats' own layout; no third-party trace is shipped.
"""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from sova.cli import app
from sova.scenario import load_scenario

runner = CliRunner()

BITBRAINS_HEADER = (
    "Timestamp [ms];\tCPU cores;\tCPU capacity provisioned [MHZ];\tCPU usage [MHZ];\t"
    "CPU usage [%];\tMemory capacity provisioned [KB];\tMemory usage [KB];\t"
    "Disk read throughput [KB/s];\tDisk write throughput [KB/s];\t"
    "Network received throughput [KB/s];\tNetwork transmitted throughput [KB/s]"
)
T0 = 1376314846  # the archive's timestamps: seconds since 1970, despite the "[ms]"


def bitbrains_file(path: Path, rows: list[tuple[int, float, float, float]], cores: int = 4) -> None:
    """Rows of (seconds after T0, CPU %, rx KB/s, tx KB/s) in the archive's layout."""
    lines = [BITBRAINS_HEADER]
    for dt, pct, rx, tx in rows:
        mhz = cores * 2926.0
        lines.append(
            ";\t".join(
                str(x)
                for x in (
                    T0 + dt,
                    cores,
                    mhz,
                    mhz * pct / 100,
                    pct,
                    8388608,
                    4194304.5,
                    0.0,
                    12.5,
                    rx,
                    tx,
                )
            )
        )
    path.write_text("\n".join(lines) + "\n")


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open() as fh:
        return list(csv.DictReader(fh))


def invoke(*args: str) -> tuple[int, str]:
    r = runner.invoke(app, ["scenario", "import", *args])
    return r.exit_code, r.output


# 1 KB = 1,024 B (VMware's counters): 61.03515625 KB/s = 500,000 bit/s = 0.5 Mbit/s.
HALF_MBIT = 61.03515625


def test_bitbrains_files_become_a_scenario_that_replays(tmp_path: Path) -> None:
    src = tmp_path / "fastStorage"
    src.mkdir()
    # vm1: rx+tx 1 Mbit/s then 200 Mbit/s from 600 s; CPU 10 % then 90 %.
    bitbrains_file(
        src / "1.csv",
        [(0, 10.0, HALF_MBIT, HALF_MBIT), (300, 10.0, HALF_MBIT, HALF_MBIT)]
        + [(t, 90.0, 200 * HALF_MBIT, 200 * HALF_MBIT) for t in (600, 900, 1200)],
    )
    # vm2 samples 30 s later in each interval (the archive's VMs are not in phase):
    # 50 Mbit/s of rx only.
    bitbrains_file(
        src / "2.csv", [(t + 30, 5.0, 100 * HALF_MBIT, 0.0) for t in range(0, 1500, 300)], cores=2
    )
    # vm10 sorts after vm2 (by number, not text): idle.
    bitbrains_file(src / "10.csv", [(t, 1.0, 0.0, 0.0) for t in range(0, 1500, 300)])
    out = tmp_path / "bb" / "day.yaml"
    code, output = invoke(
        str(src), "--format", "bitbrains", "--out", str(out), "--hosts", "2",
        "--vf-pool", "1", "--nic-capacity", "25Gbit", "--tick", "5s", "--compare", "default,dsr-iov",
    )  # fmt: skip
    assert code == 0, output
    assert "3 VM(s) on 2 host(s), 5 steps of 300 s" in output
    scn = load_scenario(out)  # what `sova validate` runs
    assert [v.name for v in scn.vms] == ["vm1", "vm2", "vm10"]
    assert {h.name: h.vms for h in scn.hosts} == {"host1": ["vm1", "vm10"], "host2": ["vm2"]}
    assert all(h.nic.vf_pool == 1 and h.nic.capacity == 25e9 for h in scn.hosts)
    assert {v.name: v.vcpus for v in scn.vms} == {"vm1": 4, "vm2": 2, "vm10": 4}
    assert scn.vms[0].memory == 8388608 * 1024  # "Memory capacity provisioned [KB]"
    assert scn.duration == 1500 and scn.tick == 5
    assert scn.workload[0].vms["vm1"].cpu_column == "vm1.cpu"
    rows = read_csv(out.with_suffix(".csv"))
    assert [float(r["time_s"]) for r in rows] == [0, 300, 600, 900, 1200]
    assert [float(r["vm1"]) for r in rows] == pytest.approx([1, 1, 200, 200, 200])
    assert [float(r["vm1.cpu"]) for r in rows] == pytest.approx([0.1, 0.1, 0.9, 0.9, 0.9])
    # vm2's first sample (30 s) is after the grid's 0 s: nothing is known there, 0 is held.
    assert [float(r["vm2"]) for r in rows] == pytest.approx([0, 50, 50, 50, 50])

    sim = tmp_path / "sim"
    r = runner.invoke(
        app, ["simulate", str(out), "--out", str(sim), "--no-progress", "-p", "default"]
    )
    assert r.exit_code == 0, r.output
    timeline = read_csv(sim / "timeline.csv")
    for vm, want in (("vm1", 200.0), ("vm2", 50.0)):
        late = [
            float(r["offered_mbps"]) for r in timeline if r["vm"] == vm and float(r["time_s"]) > 700
        ]
        assert late, vm
        # lognormal rate jitter (sigma 0.05) averages out over 80 periods
        assert sum(late) / len(late) == pytest.approx(want, rel=0.05), vm
    cpu = [float(r["cpu_usage"]) for r in timeline if r["vm"] == "vm1" and float(r["time_s"]) > 700]
    # 90 % of vm1's vCPUs busy, plus what sending 200 Mbit/s costs the guest (< 0.02)
    assert sum(cpu) / len(cpu) == pytest.approx(0.9, abs=0.04)
    early = [
        float(r["offered_mbps"]) for r in timeline if r["vm"] == "vm1" and float(r["time_s"]) < 590
    ]
    assert max(early) < 2.0


def test_bitbrains_millisecond_stamps_and_a_window(tmp_path: Path) -> None:
    """Stamps in milliseconds (as the header says) read as the archive's seconds do, and
    --skip/--duration keep a window of the trace."""
    src = tmp_path / "Rnd"
    src.mkdir()
    # 10 samples, 300 s apart; vm7's demand is its sample's index in Mbit/s (2i x 0.5)
    rows = [(300 * i, 50.0, i * HALF_MBIT, i * HALF_MBIT) for i in range(10)]
    bitbrains_file(src / "7.csv", rows)
    text = (src / "7.csv").read_text().splitlines()
    ms = [text[0]] + [f"{int(x.split(';')[0]) * 1000};{x.split(';', 1)[1]}" for x in text[1:]]
    (src / "8.csv").write_text("\n".join(ms) + "\n")
    out = tmp_path / "w.yaml"
    code, output = invoke(
        str(src), "--format", "bitbrains", "--out", str(out), "--hosts", "1",
        "--skip", "15min", "--duration", "30min",
    )  # fmt: skip
    assert code == 0, output
    got = read_csv(out.with_suffix(".csv"))
    # 15 min in = sample 3; 30 min = 6 steps of 300 s: samples 3..8
    assert [float(r["time_s"]) for r in got] == [0, 300, 600, 900, 1200, 1500]
    assert [float(r["vm7"]) for r in got] == pytest.approx([3, 4, 5, 6, 7, 8])
    assert [float(r["vm8"]) for r in got] == [float(r["vm7"]) for r in got]
    assert load_scenario(out).duration == 1800


def test_long_format_with_named_units_and_hosts(tmp_path: Path) -> None:
    src = tmp_path / "fleet.csv"
    # KiB/s: 6,103.515625 KiB/s = 50,000,000 bit/s = 50 Mbit/s; cpu in percent; ms times.
    src.write_text(
        "timestamp,vm,host,rx,tx,cpu\n"
        "1700000000000,db,hvA,6103.515625,0,40\n"
        "1700000000000,web,hvB,0,12207.03125,5\n"
        "1700000060000,db,hvA,12207.03125,6103.515625,80\n"
        "1700000060000,web,hvB,0,0,0\n"
    )
    out = tmp_path / "long.yaml"
    code, output = invoke(
        str(src), "--format", "long", "--out", str(out), "--time-unit", "ms",
        "--rate-unit", "KiB/s", "--cpu-unit", "percent", "--period", "30s",
    )  # fmt: skip
    assert code == 0, output
    scn = load_scenario(out)
    # the file's host column places the VMs
    assert {h.name: h.vms for h in scn.hosts} == {"hvA": ["db"], "hvB": ["web"]}
    rows = read_csv(out.with_suffix(".csv"))
    assert [float(r["db"]) for r in rows] == pytest.approx([50, 150])
    assert [float(r["web"]) for r in rows] == pytest.approx([100, 0])
    assert [float(r["db.cpu"]) for r in rows] == pytest.approx([0.4, 0.8])
    assert scn.duration == 120 and scn.controller.period == 30

    code, output = invoke(
        str(src), "--format", "long", "--out", str(out), "--time-unit", "ms",
        "--rate-unit", "KiB/s", "--cpu-unit", "percent", "--direction", "tx",
    )  # fmt: skip
    assert code == 0, output
    assert [float(r["db"]) for r in read_csv(out.with_suffix(".csv"))] == pytest.approx([0, 50])


def test_placement_file_and_inventory(tmp_path: Path) -> None:
    src = tmp_path / "fleet.csv"
    src.write_text("timestamp,vm,tx\n0,a,1\n0,b,2\n0,c,3\n10,a,1\n10,b,2\n10,c,3\n")
    placement = tmp_path / "where.csv"
    placement.write_text("vm,host\na,big\nb,small\nc,big\n")
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(
        yaml.safe_dump(
            {
                "defaults": {"vf_pool": 3, "nic_capacity": "40Gbit"},
                "hosts": [{"name": "small", "vf_pool": 0, "memory": "64GiB"}, {"name": "spare"}],
            }
        )
    )
    out = tmp_path / "p.yaml"
    code, output = invoke(
        str(src), "--format", "long", "--out", str(out), "--placement", str(placement),
        "--inventory", str(inventory),
    )  # fmt: skip
    assert code == 0, output
    scn = load_scenario(out)
    hosts = {h.name: h for h in scn.hosts}
    assert {n: h.vms for n, h in hosts.items()} == {"small": ["b"], "spare": [], "big": ["a", "c"]}
    assert (hosts["small"].nic.vf_pool, hosts["big"].nic.vf_pool, hosts["spare"].nic.vf_pool) == (
        0,
        3,
        3,
    )
    assert hosts["small"].memory == 64 * 2**30 and hosts["big"].nic.capacity == 40e9


BAD = [
    # (format, file text, extra options, what the one-line error must contain)
    (
        "long",
        "timestamp,vm,tx\n0,a,1\n10,a,fast\n",
        [],
        "x.csv:3: column 'tx': 'fast' is not a number",
    ),
    ("long", "timestamp,vm,tx\n0,a,1\n10,a,-2\n", [], "x.csv:3: column 'tx': '-2' must be finite"),
    ("long", "timestamp,vm,tx\n10,a,1\n5,a,1\n", [], "x.csv:3: column 'timestamp': '5' is earlier"),
    ("long", "timestamp,vm,tx,cpu\n0,a,1,1.5\n", [], "x.csv:2: column 'cpu': '1.5' is above"),
    ("long", "time,vm,tx\n0,a,1\n", [], "x.csv:1: unknown column 'time'"),
    ("long", "timestamp,vm\n0,a\n", [], "x.csv:1: header lacks column(s) ['rx or tx']"),
    ("long", "timestamp,vm,tx\n0,a\n", [], "x.csv:2: 2 cells, the header has 3"),
    ("long", "timestamp,vm,tx\nnoon,a,1\n", ["--time-unit", "iso8601"], "x.csv:2: column 'timestamp': 'noon' is not an ISO 8601"),
    ("long", "timestamp,vm,tx\n0,a,1\n", ["--rate-unit", "Mbps"], "rate unit 'Mbps' is not one of"),
    (
        "bitbrains",
        BITBRAINS_HEADER + "\n1376314846;\t4;\t1;\t1;\t1;\t1;\t1;\t1;\t1;\tn/a;\t1\n",
        [],
        "x.csv:2: column 'Network received throughput [KB/s]': 'n/a' is not a number",
    ),
    (
        "bitbrains",
        BITBRAINS_HEADER.replace("Network transmitted", "Net tx") + "\n",
        [],
        "x.csv:1: header lacks column(s) ['network transmitted throughput [kb/s]']",
    ),
    ("bitbrains", BITBRAINS_HEADER + "\n1376314846;\t4\n", [], "x.csv:2: 2 cells, the header has 11"),
]  # fmt: skip


@pytest.mark.parametrize(("fmt", "text", "extra", "want"), BAD, ids=[b[3][:40] for b in BAD])
def test_bad_input_is_one_line_naming_file_line_column_value(
    tmp_path: Path, fmt: str, text: str, extra: list[str], want: str
) -> None:
    src = tmp_path / "x.csv"
    src.write_text(text)
    out = tmp_path / "out.yaml"
    code, output = invoke(str(src), "--format", fmt, "--out", str(out), "--hosts", "1", *extra)
    assert code == 2, output
    lines = output.strip().splitlines()
    assert len(lines) == 1 and want in lines[0], output
    assert not out.exists()


def test_a_scenario_the_simulator_would_refuse_is_not_left_behind(tmp_path: Path) -> None:
    src = tmp_path / "x.csv"
    src.write_text("timestamp,vm,tx\n0,a,1\n10,a,1\n")
    out = tmp_path / "out.yaml"
    # a 4 GiB VM (the default) on a 1 GiB host
    code, output = invoke(
        str(src), "--format", "long", "--out", str(out), "--hosts", "1", "--memory", "1GiB"
    )
    assert code == 2, output
    assert "refused" in output and "above host 'host1'" in output
    assert not out.exists() and not out.with_suffix(".csv").exists()


def test_a_shared_trace_is_checked_per_column_and_read_again_when_it_changes(
    tmp_path: Path,
) -> None:
    """Many VMs replay one CSV; it is parsed once (scenario._trace_summary), yet each VM's
    columns are judged on their own, and a file changed since is read again."""
    from sova.scenario import ScenarioError

    trace = tmp_path / "t.csv"
    trace.write_text("time_s,a,b,a.cpu\n0,1,2,0.5\n10,1,-2,0.5\n20,1,2,1.5\n")
    scn = tmp_path / "s.yaml"
    w = {"kind": "trace", "trace": "t.csv"}
    scn.write_text(
        yaml.safe_dump(
            {
                "name": "shared", "duration": 30, "tick": 1,
                "hosts": [{"name": "h", "cores": 4, "memory": "8GiB",
                           "nic": {"capacity": "10Gbit", "vf_pool": 1}, "vms": ["a", "b"]}],
                "vms": [{"name": "a"}, {"name": "b"}],
                "workload": [{"at": 0, "vms": {"a": {**w, "column": "a", "cpu_column": "a.cpu"},
                                               "b": {**w, "column": "b"}}}],
                "controller": {"period": 10},
            }
        )
    )  # fmt: skip
    # b's negative sample (line 3) comes before a's CPU share above 1 (line 4)
    with pytest.raises(ScenarioError, match=r"line 3: needs finite numbers.*'b' >= 0"):
        load_scenario(scn)
    trace.write_text("time_s,a,b,a.cpu\n0,1,2,0.5\n10,1,2,0.5\n20,1,2,1.5\n")
    with pytest.raises(ScenarioError, match=r"line 4: cpu_column 'a.cpu' .* \(got 1.5\)"):
        load_scenario(scn)
    # a cell that is not a number (line 3) is met before the share above 1 (line 4)
    trace.write_text("time_s,a,b,a.cpu\n0,1,2,0.5\n10,1,x,0.5\n20,1,2,1.5\n")
    with pytest.raises(ScenarioError, match=r"line 3: needs 4 numbers, one per column"):
        load_scenario(scn)
    trace.write_text("time_s,a,b,a.cpu\n0,1,2,0.5\n10,1,2,0.5\n20,1,2,1.0\n")
    assert [v.name for v in load_scenario(scn).vms] == ["a", "b"]
