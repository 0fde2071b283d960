"""The one record: how every world turns outcomes, steps and decisions into rows."""

from __future__ import annotations

from sova.agent.executor import Outcome, Result
from sova.model import AttachVF, Migrate, SetGuestRateLimit
from sova.record import (
    EVENT_COLUMNS,
    TIMELINE_COLUMNS,
    complete_row,
    decision_event,
    event_from_dict,
    outcome_event,
    row_dict,
    timeline_from_dict,
    timeline_row,
)


def test_outcomes_become_events_worded_once() -> None:
    ev = outcome_event(
        Outcome(12.34567, AttachVF("vm1", max_bps=2e9), Result.SUCCEEDED, "vf0"),
        policy="p",
        host="h",
    )
    assert ev is not None
    assert (ev.time_s, ev.event, ev.vm, ev.src_host, ev.detail) == (
        12.346,
        "vf_attach",
        "vm1",
        "h",
        "vf0; rate 2000 Mbit/s",
    )
    failed = outcome_event(Outcome(1.0, Migrate("vm1", "h2"), Result.TIMEOUT, "late"), host="h1")
    assert failed is not None and failed.event == "migrate_failed" and failed.dst_host == "h2"


def test_rate_limits_are_events_only_where_the_world_asks() -> None:
    o = Outcome(3.0, SetGuestRateLimit("vm1", 5e8), Result.SUCCEEDED)
    assert outcome_event(o) is None  # the simulator's timeline carries them
    ev = outcome_event(o, rate_limits=True, time_s=1.0)
    assert ev is not None and ev.detail == "limit 500.0 Mbit/s" and ev.time_s == 1.0
    refused = outcome_event(Outcome(3.0, SetGuestRateLimit("vm1", None), Result.FAILED, "no agent"))
    assert refused is not None and refused.event == "rate_limit_failed"


def test_decisions_read_the_same_in_every_world() -> None:
    ev = decision_event(
        "sova", 30.0004, "h1", vm=None, target="h2", reason="hot", utilisation=(0.5, 0.25, 0.9)
    )
    assert (ev.event, ev.vm, ev.dst_host) == ("hotspot", "", "h2")
    assert ev.detail == "cpu=0.50 mem=0.25 net=0.90; hot"


def test_rows_cross_the_wire_unchanged() -> None:
    row = timeline_row(
        policy="",
        time_s=10.0,
        host="",
        vm="vm1",
        nic="vf",
        tx_mbps=1 / 3,
        rx_mbps=0.0,
        cpu_usage=0.1,
        io_degree=2.0,
        net_factor=0.5,
        net_degree=7.0,
        io_factor=0.2,
    )
    assert timeline_from_dict(row_dict(row)) == row
    ev = outcome_event(Outcome(1.0, AttachVF("vm1"), Result.FAILED, "busy"))
    assert ev is not None and event_from_dict(row_dict(ev)) == ev
    done = complete_row(row, policy="sova", host="h1", offered_mbps=3.0, response_ms=None)
    assert (done.policy, done.host, done.offered_mbps) == ("sova", "h1", 3.0)


def test_the_csv_headers_are_the_published_ones() -> None:
    # The file format every world writes and every reader parses; order is part of it.
    assert TIMELINE_COLUMNS == [
        "policy", "time_s", "host", "vm", "nic", "vf_rate_mbps", "tx_mbps", "rx_mbps",
        "cpu_usage", "io_degree", "net_factor", "net_degree", "io_factor", "offered_mbps",
        "response_ms", "limit_mbps",
    ]  # fmt: skip
    assert EVENT_COLUMNS == ["policy", "time_s", "event", "vm", "src_host", "dst_host", "detail"]


def test_measured_rates_from_two_counter_readings() -> None:
    from sova.model import VMCounters
    from sova.record import measured_rates

    a = VMCounters(
        "v", 2, cpu_time_ns=0, steal_ns=0, rx_bytes=0, tx_bytes=0, rx_packets=0, tx_packets=0
    )
    # 2 s: 25 MB sent = 100 Mbit/s, 5 MB received = 20 Mbit/s, 2 s of CPU on 2 vCPUs = 0.5
    b = VMCounters("v", 2, 2_000_000_000, 0, 5_000_000, 25_000_000, 0, 0)
    assert measured_rates(a, b, 2.0) == (100.0, 20.0, 0.5)
    assert measured_rates(None, b, 2.0) == (0.0, 0.0, 0.0)
    assert measured_rates(b, a, 2.0) == (0.0, 0.0, 0.0)  # counters reset: no negative traffic
