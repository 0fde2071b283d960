"""A minimum held on a real bottleneck: `sova lab run scenarios/lab/guarantee.yaml`.

Both guests send through one 50 Mbit/s link the host shapes, g2 with four TCP streams;
g1's 35 Mbit/s minimum is declared in its domain's metadata. Without a bandwidth
controller g1 misses it; with the production HostAgent's allocator it holds, by HTB in the
guests set through the real guest agent (guest-exec, exit status checked) and by HTB on
the taps with no guest agent (never libvirt <bandwidth>).

Measured (g1's mean Mbit/s of its own iperf3 over a phase's last 30-40 s; 2-core machine
kind, TCG): baseline 10.0-18.6 (the minimum always missed), guest-side 33.5 (alone) and
30.8 (in the tier, still converging with a 10 % probe: the probe is 20 % since), host-side
33.4-33.5; the shared link carried 42-48 Mbit/s of 50. A guest held at exactly its minimum
shows ~95 % of it in iperf3 (TCP payload against HTB's whole frames); the bound is 90 %.

It needs the guests' CPU: under TCG a guest's network stack runs on its one vCPU (two
guests sending 20 Mbit/s each made HV1 0.26-0.32 of 2 CPUs in the hotspot scenario: about
0.28 of a core each, idle overhead included), and the guest-side limits cost a guest-exec
of `tc` every 2 s. Each QEMU is its own scheduling group (see test_lab_hotspot.py): with k
other busy sessions on the 2 cores a guest gets 2 / (2 + k) of a core — 0.67 with one core
kept busy (the project's standard); g1 still held guest-side at about a third of a core
(k about 4, below), and missed it at load average 17-60.

The bound is the shaping arithmetic, not a guess: g1 held at its 35 Mbit/s cap (HTB counts
whole 1514-byte frames, iperf3 the 1448 bytes of payload) shows 35 x 1448 / 1514 = 33.5, and
measured 33.0-33.9 in each second of a judged window held at the cap; 90 % (31.5) leaves
2 Mbit/s for the window's readings to dip. What spends that slack is the allocator, not
the shaping: a reading of g1 under 80 % of its cap (1 - probe) is taken as its demand, so its
cap drops below its minimum and climbs back 20 % a period. On a full link the rate TCP
leaves a guaranteed guest is not its demand, and nothing yet says so: at the guest-side
phase's start g1's caps went 14.2, 7.5, 11.8, 7.9, 10.7 ... Mbit/s against its minimum of
35 and took 30 s of probes to reach it, and in the failing run below one such reading inside
the judged window (cap 31.2) took g1 to 31.05. That is the missing mechanism
(tests/test_bandwidth_step.py's strict xfail), not a wrong bound; until it exists the
45 s settle lets the climb finish before the judged window, and a dip in the window can
still fail the test.

Measured, g1's mean Mbit/s (none / guest-side / host-side), QEMU 10, 2026-11-27: 26.4 /
33.2 / 33.5 with other sessions' benchmarks beside the tier (about one busy core); 19.7 /
32.4 / 33.3 with a busy-loop of the tier's own beside those (about four busy sessions,
load average 8-13); 8.2 / 32.6 / 33.4 in a third run (load average 3.3-8.9); 13.7 / 31.05 / 33.5 in a fourth
(load average 2.5-7.8): guest-side missed the 31.5 bound, g1 sending below its cap. Earlier, at nice 10 beside load average 17-60: guest-side 23.6-29.6
(the caps inside the guests swung 29-37 Mbit/s as g1's measured rate lagged), host-side
33.2-33.5, on QEMU 7.2 and QEMU 10 alike.
"""

from __future__ import annotations

import json

from .conftest import ROOT, lab_run

SCENARIO = ROOT / "scenarios" / "lab" / "guarantee.yaml"


def test_minimum_misses_without_a_controller_and_holds_guest_side_and_host_side(lab, tmp_path):
    out = tmp_path / "out"
    s = lab_run(lab, SCENARIO, out)
    rows = {row["enforcement"]: row for row in s["guarantee"]}
    assert set(rows) == {"none", "guest-side", "host-side"}
    minimum = rows["none"]["min_mbps"]["g1"]
    # the link is a real bottleneck: without a controller g1 does not get its minimum
    assert rows["none"]["mean_mbps"]["g1"] < minimum, rows["none"]
    for how in ("guest-side", "host-side"):
        g1 = rows[how]["mean_mbps"]["g1"]
        assert g1 is not None and g1 >= 0.9 * minimum, rows[how]  # 31.5 of 35
        assert rows[how]["total_mbps"] <= 1.05 * 50, rows[how]  # the link's cap held
    # how the limits reached the guests: inside them through guest-exec, then on the taps
    events = _events(out)
    assert any(e["event"] == "rate_limit" and "guest HTB" in e["detail"] for e in events)
    assert any(e["event"] == "rate_limit" and "no <bandwidth>" in e["detail"] for e in events)
    assert not [e for e in events if e["event"] == "rate_limit_failed"], "a limit failed"
    assert s["passed"], s["checks"]
    plots = json.loads((out / "plots.json").read_text())
    assert sum(plots["goodput.png"].values()) > 0 and sum(plots["rates.png"].values()) > 0


def _events(out):
    import csv

    with (out / "events.csv").open() as fh:
        return list(csv.DictReader(fh))
