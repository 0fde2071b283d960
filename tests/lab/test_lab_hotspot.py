"""Hotspot and migration through Sova's own daemons: `sova lab run
scenarios/lab/hotspot-migration.yaml` starts one `sova manager` and one `sova agent
--driver libvirt` per lab hypervisor; the guests' own stress-ng make HV1 hot, the manager
sends one guest to HV2, HV1's agent unplugs its fast NIC (bond moved first) and
live-migrates it, and HV2's agent gives it a fast NIC there.

Measured over 5 runs of the shipped scenario (2-core machine kind, TCG; 3 alone, with
the lead's test runs beside them, and 2 in the tier): HV1 flagged 12-15 s into the burner
phase, exactly one migration every time; signal to guest running on HV2 3.2-6.3 s; libvirt
job 1.3-5.9 s, downtime 73-193 ms; longest unanswered ping stretch 0.2-0.3 s (1-2 of ~170 lost); a fast
NIC on HV2 6-10 s after arrival. The bounds are ~10x the worst figure (2 s downtime, 3 s
gap), for a busier CI machine; the scenario's own checks allow 5 s for both.

It needs the CPU it measures, and the arithmetic says how much (docs/lab.md#hotspot-arithmetic,
tests/test_lab_hotspot_arithmetic.py runs the real target screen on it). HV1's figure is its
agent's report, one per 5 s period: the growth of HV1's domains' CPU time (each QEMU
process, vCPU and I/O threads) over the period and HV1's declared 2 CPUs. Each QEMU is its
own scheduling group (libvirt starts it in its own session; the kernel's autogroups share
the CPU between sessions, whatever a process's nice value inside its session), so with k
other busy sessions a burning guest gets s = 2 / (2 + k) of a core and HV1 with both burners
reports about s: ~1.0 alone, 0.67 with one core kept busy, 0.5 with two. The light iperf3
alone (10 Mbit/s) is 0.25-0.35. The manager flags at 3 of 3 reports over alpha 0.42: under
every burner share down to 0.5, over the network-only phase, and over what two hot-plugs
cost (~0.95 for ~6 s, two reports: with 2 of 3 over 0.5 the plugs alone once flagged HV1
before any burner ran). After the move each host reports about s / 2: if the source is
over alpha the target is about as hot, and target plus guest is about s > 2 x alpha, over
the ceiling 0.8, so there is one move at every share.

Measured before this design (alpha 0.5, 2 of 3), QEMU 10, 2026-11-27: HV1 median 0.68
(0.54-0.72) with about one busy core beside the tier; 0.37 (0.27-0.58, nothing flagged) with
about four busy sessions; 0.54 (0.48-0.69); 0.96 (0.91-0.98) on a quiet machine. With this
design, in the tier with a busy loop in a session of its own beside it (2026-11-27, load
average 2.7-26.5, 622 s, all 15 passed): HV1 0.25-0.32 with the light load (0.52-0.60 for
5 s at the two plugs, not flagged), both burners median 0.62 (0.58-0.69, 20 reports),
flagged 18.8 s into the burners, one migration, downtime 237 ms, ping gap 0.3 s, each host
0.19-0.43 after the move. One run so far (docs/lab.md's run table).
On failure the message gives HV1's figures from the same window.
"""

from __future__ import annotations

import json

from .conftest import ROOT, lab_run

SCENARIO = ROOT / "scenarios" / "lab" / "hotspot-migration.yaml"
MAX_DOWNTIME_MS = 2000.0
MAX_PING_GAP_S = 3.0


def test_hot_hv1_sends_one_guest_to_hv2_through_the_real_daemons(lab, tmp_path):
    out = tmp_path / "out"
    s = lab_run(lab, SCENARIO, out)
    # the manager, not the test, decided: HV1 flagged hot on cpu
    assert s["flagged"] and s["flagged"][0]["host"] == "HV1", (s["flagged"], _hv1_cpu(out))
    assert "cpu" in s["flagged"][0]["reason"]
    # exactly one migration, none failed, and the guest ends on HV2
    assert s["events"].get("migrate") == 1 and "migrate_failed" not in s["events"], s["events"]
    (m,) = s["migration_rows"]
    assert (m["src"], m["dst"], m["ends_on"]) == ("HV1", "HV2", "HV2"), m
    # the fast NIC went before the migration and came back on HV2
    events = [(e["event"], e["vm"]) for e in _events(out)]
    assert events.index(("vf_detach", m["vm"])) < events.index(("migrate", m["vm"])), events
    assert m["fast_path_on_target_s"] is not None and m["fast_path_on_target_s"] > m["arrived_s"]
    # libvirt's job statistics and the ping from outside
    assert m["downtime_ms"] is not None and 0 < m["downtime_ms"] <= MAX_DOWNTIME_MS, m
    assert m["libvirt_time_ms"] is not None and m["libvirt_time_ms"] > m["downtime_ms"], m
    assert m["ping_max_gap_s"] is not None and m["ping_max_gap_s"] <= MAX_PING_GAP_S, m
    # the lease the manager held for the move is released; no TCP stream broke
    assert s["checks"]["lease_released"], s.get("cluster")
    assert s["checks"]["no_tcp_stream_lost"], s["streams"]
    assert s["exit_codes"]["agent-HV1"] == 0 and s["exit_codes"]["agent-HV2"] == 0
    # plots with content
    plots = json.loads((out / "plots.json").read_text())
    for name in ("holders.png", "rates.png", "hosts.png"):
        assert (out / name).stat().st_size > 0 and sum(plots[name].values()) > 0, plots


def _hv1_two_burners(out) -> list[float]:
    """HV1's utilisation as its agent computed it (hosts.csv, about one row a second) while
    both burners ran on it: from 5 s into the burner phase (one agent period, so a report
    covers burners only) to the first migration's start, or the run's end if none came."""
    import csv

    summary = json.loads((out / "summary.json").read_text())
    burners = next(p for p in summary["phases"] if p["name"] == "cpu-burners")
    start = float(burners["start_s"]) + 5.0
    stops = [float(e["time_s"]) for e in _events(out) if e["event"] == "migrate_start"]
    stop = min(stops, default=float("inf"))
    with (out / "hosts.csv").open() as fh:
        return [
            float(r["cpu"])
            for r in csv.DictReader(fh)
            if r["host"] == "HV1" and start <= float(r["time_s"]) < stop
        ]


def _hv1_cpu(out) -> str:
    """Whether HV1's burners got the CPU that makes a host hot (a machine busy with other
    work gives TCG guests less): the figures the manager judged against the scenario's alpha."""
    two = sorted(_hv1_two_burners(out))
    if not two:
        return "HV1 cpu: no report while both burners ran"
    return (
        f"HV1 cpu with both burners (alpha {_alpha()}): median {two[len(two) // 2]:.2f}, "
        f"min {two[0]:.2f}, max {two[-1]:.2f} over {len(two)} reports"
    )


def _alpha() -> float:
    from sova.lab.scenario import load_lab_scenario

    manager = load_lab_scenario(SCENARIO).controller.manager
    assert manager is not None
    return manager.alpha


def _events(out):
    import csv

    with (out / "events.csv").open() as fh:
        return list(csv.DictReader(fh))
