"""Sensing (docs/design.md#sensing): cumulative counters -> period stats -> io/net factors -> HostSensor.

The factors' arithmetic is checked on the readable per-VM form (tests/sensing_oracle.py);
every HostSensor scenario runs the compiled sensor (sova.policy.sensing) beside it and
demands the same factors, float for float, and the same windows' lengths and resets.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests import sensing_oracle
from tests.sensing_oracle import (
    GOTTEN_FLOOR_FRACTION,
    PeriodStats,
    io_degree,
    io_factor,
    net_degree,
    network_factors,
    period_stats,
    traffic_freq,
)

from sova.model import HostCounters, HostSample, VMCounters
from sova.policy.sensing import DEFAULT_TRAFFIC_THRESHOLD_BPS, HostSensor, VMFactors

NS = 1_000_000_000


def ctr(
    cpu: int = 0,
    steal: int = 0,
    rx: int = 0,
    tx: int = 0,
    rxp: int = 0,
    txp: int = 0,
    vcpus: int = 1,
    vm: str = "vm",
) -> VMCounters:
    return VMCounters(
        vm=vm,
        vcpus=vcpus,
        cpu_time_ns=cpu,
        steal_ns=steal,
        rx_bytes=rx,
        tx_bytes=tx,
        rx_packets=rxp,
        tx_packets=txp,
    )


def ps(
    *,
    dt: float = 10.0,
    vcpus: int = 1,
    cpu_usage: float = 0.0,
    gotten: float = 0.0,
    blocked: float = 0.0,
    rx: int = 0,
    tx: int = 0,
    packets: int = 0,
) -> PeriodStats:
    return PeriodStats(dt, vcpus, cpu_usage, gotten, blocked, rx, tx, packets)


# --------------------------------------------------------------------------- period_stats


@pytest.mark.parametrize(
    ("prev", "cur", "dt", "usage", "gotten", "blocked"),
    [
        # 2 vCPUs, 10 s: capacity = 10·1e9·2 = 2e10 ns. Δcpu = 5e9 -> usage 5e9/2e10 = 0.25;
        # Δsteal = 1e9 -> blocked = 2e10 − 5e9 − 1e9 = 1.4e10.
        (ctr(vcpus=2), ctr(cpu=5 * NS, steal=NS, vcpus=2), 10.0, 0.25, 5e9, 1.4e10),
        # 1 vCPU, 10 s, Δcpu = 12e9 > capacity 1e10 (clock skew) -> usage clamped to 1.0,
        # blocked = max(0, 1e10 − 1.2e10) = 0.
        (ctr(), ctr(cpu=12 * NS), 10.0, 1.0, 12e9, 0.0),
        # 4 vCPUs, 5 s: capacity 2e10. Δcpu = 2e10 -> usage 1.0 exactly, blocked 0.
        (ctr(vcpus=4), ctr(cpu=20 * NS, vcpus=4), 5.0, 1.0, 2e10, 0.0),
        # idle, 1 vCPU, 10 s: usage 0, blocked = the whole 1e10.
        (ctr(cpu=7), ctr(cpu=7), 10.0, 0.0, 0.0, 1e10),
        # vcpus = 0 reported (domain shutting down) is treated as 1: capacity 1e10,
        # Δcpu 1e9 -> 0.1; blocked = 1e10 − 1e9 − 0 = 9e9.
        (ctr(vcpus=0), ctr(cpu=NS, vcpus=0), 10.0, 0.1, 1e9, 9e9),
        # the VM's own vCPU count is used, from the *current* reading (vCPU hot-plug 1 -> 2):
        # capacity 2·10·1e9 = 2e10, Δcpu 1e10 -> 0.5, blocked 1e10.
        (ctr(vcpus=1), ctr(cpu=10 * NS, vcpus=2), 10.0, 0.5, 1e10, 1e10),
    ],
)
def test_period_stats_cpu(
    prev: VMCounters, cur: VMCounters, dt: float, usage: float, gotten: float, blocked: float
) -> None:
    s = period_stats(prev, cur, dt)
    assert s is not None
    assert s.cpu_usage == pytest.approx(usage)
    assert s.gotten_ns == pytest.approx(gotten)
    assert s.blocked_ns == pytest.approx(blocked)
    assert s.dt_s == dt


def test_period_stats_network() -> None:
    # Δrx = 1000 B, Δtx = 500 B, Δpackets = (7 + 3) + (4 + 1) = 15 over 10 s;
    # rate = 8·1500/10 = 1200 bit/s.
    s = period_stats(
        ctr(rx=100, tx=200, rxp=1, txp=2),
        ctr(rx=1100, tx=700, rxp=8, txp=10),
        10.0,
    )
    assert s is not None
    assert (s.rx_bytes, s.tx_bytes, s.bytes, s.packets) == (1000, 500, 1500, 15)
    assert s.rate_bps == pytest.approx(1200.0)


_FORWARD = ctr(cpu=10 * NS, steal=NS, rx=10_000, tx=10_000, rxp=100, txp=100)


@pytest.mark.parametrize(
    "backwards",
    [
        # each counter in turn goes back by one unit while every other counter moves
        # forward a lot, so a sum of counters would still look positive
        {"cpu_time_ns": 5 * NS - 1},
        {"steal_ns": NS // 2 - 1},
        {"rx_bytes": 4_999},
        {"tx_bytes": 4_999},
        {"rx_packets": 49},
        {"tx_packets": 49},
    ],
)
def test_period_stats_any_counter_reset_is_none(backwards: dict[str, Any]) -> None:
    prev = ctr(cpu=5 * NS, steal=NS // 2, rx=5_000, tx=5_000, rxp=50, txp=50)
    assert period_stats(prev, _FORWARD, 10.0) is not None
    cur = replace(_FORWARD, **backwards)
    assert period_stats(prev, cur, 10.0) is None


def test_period_stats_equal_counters_are_not_a_reset() -> None:
    s = period_stats(_FORWARD, _FORWARD, 10.0)
    assert s is not None
    assert s.bytes == 0 and s.packets == 0 and s.cpu_usage == 0.0


@pytest.mark.parametrize("dt", [0.0, -1.0, -1e-9])
def test_period_stats_non_positive_dt_raises(dt: float) -> None:
    with pytest.raises(ValueError, match="dt_s"):
        period_stats(ctr(), ctr(cpu=NS), dt)


@settings(max_examples=200, deadline=None)
@given(
    vcpus=st.integers(0, 64),
    d_cpu=st.integers(0, 10**13),
    d_steal=st.integers(0, 10**13),
    dt=st.floats(0.001, 1000.0, allow_nan=False),
)
def test_period_stats_bounds(vcpus: int, d_cpu: int, d_steal: int, dt: float) -> None:
    s = period_stats(ctr(vcpus=vcpus), ctr(cpu=d_cpu, steal=d_steal, vcpus=vcpus), dt)
    assert s is not None
    assert 0.0 <= s.cpu_usage <= 1.0
    assert 0.0 <= s.blocked_ns <= dt * NS * max(1, vcpus) + 1e-3
    assert s.gotten_ns == d_cpu


# --------------------------------------------------------------------------- io factors


@pytest.mark.parametrize(
    ("usages", "expected"),
    [
        ([], 100.0),  # nothing known: not shown as CPU-bound
        ([0.0], 100.0),
        ([1.0], 0.0),
        # mean (0.25 + 0.75)/2 = 0.5 -> 100·(1 − 0.5) = 50
        ([0.25, 0.75], 50.0),
        # mean (0.1 + 0.2 + 0.3)/3 = 0.2 -> 80
        ([0.1, 0.2, 0.3], 80.0),
        # DSR-IOV Table 2's VM10 (100 % lookbusy) has io_degree 7.82 -> usage 0.9218
        ([0.9218], 7.82),
    ],
)
def test_io_degree(usages: list[float], expected: float) -> None:
    assert io_degree([ps(cpu_usage=u) for u in usages]) == pytest.approx(expected)


def test_io_factor_mean_of_ratios() -> None:
    # period 1: blocked 1.4e10 / gotten 5e9 = 2.8; period 2: 1e10 / 1e10 = 1.0;
    # mean (2.8 + 1.0)/2 = 1.9 (a mean of ratios, not Σblocked/Σgotten = 2.4e10/1.5e10 = 1.6)
    w = [
        ps(vcpus=2, gotten=5e9, blocked=1.4e10),
        ps(vcpus=2, gotten=1e10, blocked=1e10),
    ]
    assert io_factor(w) == pytest.approx(1.9)


def test_io_factor_idle_vm_gets_large_finite_value() -> None:
    # idle over 10 s on 2 vCPUs: gotten 0, blocked 2e10; floor = 1e-3·2e10 = 2e7
    # -> IF = 2e10 / 2e7 = 1000 = 1 / GOTTEN_FLOOR_FRACTION
    s = period_stats(ctr(vcpus=2), ctr(vcpus=2), 10.0)
    assert s is not None
    value = io_factor([s])
    assert math.isfinite(value)
    assert value == pytest.approx(1.0 / GOTTEN_FLOOR_FRACTION)
    assert value == pytest.approx(1000.0)


def test_io_factor_floor_applies_below_it_only() -> None:
    # 1 vCPU, 10 s: floor = 1e-3·1e10 = 1e7 ns.
    # gotten 1e6 (< floor): IF = (1e10 − 1e6)/1e7 = 999.9
    assert io_factor([ps(gotten=1e6, blocked=1e10 - 1e6)]) == pytest.approx(999.9)
    # gotten 2e7 (> floor): IF = 8e9 / 2e7 = 400 — the floor does not cap it
    assert io_factor([ps(gotten=2e7, blocked=8e9)]) == pytest.approx(400.0)


def test_io_factor_empty_and_ordering() -> None:
    assert io_factor([]) == 0.0
    # Sova Table 1 ordering: CPU-bound (usage 0.9) ≪ network/idle-ish (usage 0.05)
    cpu = period_stats(ctr(), ctr(cpu=9 * NS), 10.0)  # blocked 1e9 / gotten 9e9 = 0.111
    net = period_stats(ctr(), ctr(cpu=NS // 2), 10.0)  # blocked 9.5e9 / 5e8 = 19
    assert cpu is not None and net is not None
    assert io_factor([cpu]) == pytest.approx(1 / 9)
    assert io_factor([net]) == pytest.approx(19.0)


# --------------------------------------------------------------------------- traffic


@pytest.mark.parametrize(
    ("byte_counts", "threshold", "expected"),
    [
        # dt 10 s, default threshold 10 kbit/s <=> 12,500 B per period.
        # 12,500 B -> 10,000 bit/s (>= threshold: traffic); 12,499 B -> 9,999.2 (not).
        ([12_500], DEFAULT_TRAFFIC_THRESHOLD_BPS, 1.0),
        ([12_499], DEFAULT_TRAFFIC_THRESHOLD_BPS, 0.0),
        # 2 of 4 periods over the threshold
        ([12_500, 12_499, 0, 1_000_000], DEFAULT_TRAFFIC_THRESHOLD_BPS, 0.5),
        # threshold 1 Mbit/s <=> 1,250,000 B per 10 s: 1e6 B (800 kbit/s) is below it
        ([12_500, 1_000_000], 1e6, 0.0),
        ([1_250_000, 0, 0], 1e6, 1 / 3),
        ([], DEFAULT_TRAFFIC_THRESHOLD_BPS, 0.0),
    ],
)
def test_traffic_freq(byte_counts: list[int], threshold: float, expected: float) -> None:
    w = [ps(rx=b) for b in byte_counts]
    assert traffic_freq(w, threshold) == pytest.approx(expected)


def test_net_degree_hand_example() -> None:
    # two 10 s periods: 600,000 + 400,000 B = 1e6 B -> 100 kB/s; then 0 B -> 0 kB/s.
    # data_avg = (100 + 0)/2 = 50 kB/s; traffic_freq = 1/2 (800 kbit/s ≥ 10 kbit/s; 0 not)
    # net_degree = 0.7·50 + 0.3·0.5 = 35 + 0.15 = 35.15
    w = [ps(rx=600_000, tx=400_000), ps()]
    assert net_degree(w) == pytest.approx(35.15)
    # ε = 0 -> only the frequency; ε = 1 -> only the kB/s
    assert net_degree(w, epsilon=0.0) == pytest.approx(0.5)
    assert net_degree(w, epsilon=1.0) == pytest.approx(50.0)
    assert net_degree([]) == 0.0


def test_net_degree_is_independent_of_period_length() -> None:
    # the same 100 kB/s over 5 s periods (500 kB each) and 10 s periods (1 MB each)
    a = [ps(dt=5.0, rx=500_000)] * 4
    b = [ps(dt=10.0, rx=1_000_000)] * 2
    # 0.7·100 + 0.3·1 = 70.3 for both
    assert net_degree(a) == pytest.approx(70.3)
    assert net_degree(b) == pytest.approx(70.3)


def test_net_degree_grows_with_network_share() -> None:
    # DSR-IOV Table 2: the longer netperf runs, the larger net_degree
    busy = ps(rx=10_000_000)
    idle = ps()
    degrees = [net_degree([busy] * k + [idle] * (6 - k)) for k in range(7)]
    assert degrees == sorted(degrees)
    assert len(set(degrees)) == 7


# --------------------------------------------------------------------------- Sova NF


def _busy(pps: float, dt: float = 10.0) -> PeriodStats:
    # 1 MB per period: 800 kbit/s at 10 s, far over the threshold
    return ps(dt=dt, rx=1_000_000, packets=int(pps * dt))


def test_network_factors_min_max_across_host() -> None:
    # busy-sample packet rates on the host: a 1000, 2000; b 500 -> lo 500, hi 2000, span 1500
    # a: norm (1000−500)/1500 = 1/3 and 1 -> avg 2/3; freq 2/2 = 1 -> 0.7·1 + 0.3·2/3 = 0.9
    # b: norm 0, freq 1/2 -> 0.7·0.5 + 0.3·0 = 0.35
    # c: chatter of 100 B (80 bit/s, below the threshold) with 10 packets: no traffic -> 0,
    #    and its 1 pps does not lower the host minimum
    # d: empty window -> 0
    windows = {
        "a": [_busy(1000), _busy(2000)],
        "b": [_busy(500), ps()],
        "c": [ps(rx=100, packets=10), ps(rx=100, packets=10)],
        "d": [],
    }
    nf = network_factors(windows)
    assert nf == pytest.approx({"a": 0.9, "b": 0.35, "c": 0.0, "d": 0.0})


def test_network_factors_single_busy_level_is_one() -> None:
    # every busy sample at 1000 pps -> span 0 -> each counts as the maximum (1.0)
    # a: 0.7·1 + 0.3·1 = 1.0; b: freq 1/2 -> 0.35 + 0.3 = 0.65
    windows = {"a": [_busy(1000)] * 2, "b": [_busy(1000), ps()], "idle": [ps()] * 2}
    assert network_factors(windows) == pytest.approx({"a": 1.0, "b": 0.65, "idle": 0.0})


def test_network_factors_epsilon_and_threshold() -> None:
    # ε = 0.5, threshold 1 Mbit/s: only the 2 MB sample (1.6 Mbit/s) counts as traffic.
    # a: [2 MB @ 300 pps, 1 MB @ 100 pps] -> busy rates [300]; b: [1 MB] -> none.
    # lo = hi = 300 -> a: 0.5·(1/2) + 0.5·1 = 0.75; b: 0
    windows = {
        "a": [ps(rx=2_000_000, packets=3000), ps(rx=1_000_000, packets=1000)],
        "b": [ps(rx=1_000_000, packets=9000)],
    }
    nf = network_factors(windows, epsilon=0.5, threshold_bps=1e6)
    assert nf == pytest.approx({"a": 0.75, "b": 0.0})


def test_network_factors_grow_with_network_share() -> None:
    # Sova Table 1: NF grows with the share of time the VM sends
    windows = {f"vm{k}": [_busy(1000)] * k + [ps()] * (6 - k) for k in range(7)}
    nf = network_factors(windows)
    values = [nf[f"vm{k}"] for k in range(7)]
    assert values == sorted(values) and len(set(values)) == 7


@settings(max_examples=150, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(["a", "b", "c", "d"]),
        st.lists(st.tuples(st.integers(0, 10_000_000), st.integers(0, 1_000_000)), max_size=6),
        max_size=4,
    ),
    st.floats(0.0, 1.0),
)
def test_network_factors_in_unit_interval(
    raw: dict[str, list[tuple[int, int]]], eps: float
) -> None:
    windows = {vm: [ps(rx=b, packets=p) for b, p in w] for vm, w in raw.items()}
    nf = network_factors(windows, epsilon=eps)
    assert set(nf) == set(windows)
    for vm, value in nf.items():
        assert -1e-12 <= value <= 1.0 + 1e-12
        if traffic_freq(windows[vm]) == 0.0:
            assert value == 0.0


# --------------------------------------------------------------------------- HostSensor


def sample(t: float, **vms: VMCounters) -> HostSample:
    return HostSample(
        host="h1",
        time_s=t,
        vms={name: replace(c, vm=name) for name, c in vms.items()},
        totals=HostCounters(0, 0, 0, 0),
    )


class Sensors:
    """The compiled HostSensor and the readable one fed the same readings; every read
    holds them equal (factors == on floats, windows' lengths, resets)."""

    def __init__(self, **settings: Any) -> None:
        self.core = HostSensor(**settings)
        self.oracle = sensing_oracle.HostSensor(**settings)

    def observe(
        self,
        sample: HostSample,
        ceilings: Mapping[str, float] | None = None,
        virtio: Collection[str] = (),
    ) -> None:
        self.core.observe(sample, ceilings, virtio)
        self.oracle.observe(sample, ceilings, virtio)

    def windows(self) -> dict[str, Sequence[PeriodStats]]:
        w = self.oracle.windows()
        assert self.core.periods() == {vm: len(p) for vm, p in w.items()}
        return w

    def factors(self) -> dict[str, VMFactors]:
        f = self.core.factors()
        assert list(f.items()) == list(self.oracle.factors().items())
        return f

    @property
    def resets(self) -> int:
        assert self.core.resets == self.oracle.resets
        return self.core.resets


def feed(sensor: Sensors, rows: list[HostSample]) -> None:
    for r in rows:
        sensor.observe(r)


def test_sensor_window_keeps_last_num_periods() -> None:
    # 6 samples at 10 s -> 5 periods; rx grows by k·100 kB in period k (k = 1..5).
    # num = 3 keeps periods 3, 4, 5 -> 300, 400, 500 kB.
    s = Sensors(num=3)
    rx = 0
    rows = [sample(0.0, a=ctr(rx=0))]
    for k in range(1, 6):
        rx += k * 100_000
        rows.append(sample(10.0 * k, a=ctr(rx=rx)))
    feed(s, rows)
    w = s.windows()["a"]
    assert [p.rx_bytes for p in w] == [300_000, 400_000, 500_000]
    assert s.resets == 0


def test_sensor_first_sample_gives_empty_windows() -> None:
    s = Sensors()
    s.observe(sample(0.0, a=ctr(), b=ctr()))
    assert s.windows() == {"a": (), "b": ()}
    f = s.factors()
    assert f["a"].has_traffic is False and f["a"].io_degree == 100.0


def test_sensor_reset_is_counted_and_dropped() -> None:
    # t=0 rx 0; t=10 rx 1e6 (period +1e6); t=20 rx 1000 (reset: dropped);
    # t=30 rx 51,000 (period +50,000, measured from the post-reset reading)
    s = Sensors(num=6)
    feed(
        s,
        [
            sample(0.0, a=ctr(rx=0)),
            sample(10.0, a=ctr(rx=1_000_000)),
            sample(20.0, a=ctr(rx=1_000)),
            sample(30.0, a=ctr(rx=51_000)),
        ],
    )
    assert s.resets == 1
    assert [p.rx_bytes for p in s.windows()["a"]] == [1_000_000, 50_000]


def test_sensor_forgets_vanished_vm_and_restarts_it_empty() -> None:
    s = Sensors()
    feed(
        s,
        [
            sample(0.0, a=ctr(), b=ctr()),
            sample(10.0, a=ctr(rx=1_000_000), b=ctr(rx=1_000_000)),
        ],
    )
    assert len(s.windows()["b"]) == 1
    s.observe(sample(20.0, a=ctr(rx=2_000_000)))  # b migrated away
    assert set(s.windows()) == {"a"}
    assert "b" not in s.factors()
    s.observe(sample(30.0, a=ctr(rx=3_000_000), b=ctr(rx=5)))  # b is back, counters new
    assert s.windows()["b"] == ()
    s.observe(sample(40.0, a=ctr(rx=4_000_000), b=ctr(rx=15)))
    assert [p.rx_bytes for p in s.windows()["b"]] == [10]
    assert s.resets == 0


def test_sensor_new_vm_starts_empty() -> None:
    s = Sensors()
    feed(
        s,
        [
            sample(0.0, a=ctr()),
            sample(10.0, a=ctr(rx=10), c=ctr(rx=999)),
            sample(20.0, a=ctr(rx=20), c=ctr(rx=1999)),
        ],
    )
    assert [p.rx_bytes for p in s.windows()["a"]] == [10, 10]
    assert [p.rx_bytes for p in s.windows()["c"]] == [1000]


@pytest.mark.parametrize(
    "noise",
    [
        # the same timestamp read twice with identical counters
        sample(10.0, a=ctr(rx=1_000_000)),
        # the same timestamp with different counters (a racy second read)
        sample(10.0, a=ctr(rx=0)),
        # an out-of-order reading
        sample(5.0, a=ctr(rx=500)),
        # a repeated timestamp missing a VM must not make it vanish either
        sample(10.0),
    ],
)
def test_sensor_ignores_repeated_or_out_of_order_sample(noise: HostSample) -> None:
    # Reference without noise: periods 0->10 (+1e6 B) and 10->20 (+1e6 B).
    rows = [
        sample(0.0, a=ctr(rx=0)),
        sample(10.0, a=ctr(rx=1_000_000)),
        sample(20.0, a=ctr(rx=2_000_000)),
    ]
    clean = Sensors()
    feed(clean, rows)
    noisy = Sensors()
    feed(noisy, [rows[0], rows[1], noise, rows[2]])
    assert noisy.windows() == clean.windows()
    assert [p.rx_bytes for p in noisy.windows()["a"]] == [1_000_000, 1_000_000]
    assert [p.dt_s for p in noisy.windows()["a"]] == [10.0, 10.0]
    assert noisy.resets == 0


def test_sensor_factors_end_to_end() -> None:
    # one VM, 2 vCPUs, 2 periods of 10 s:
    #   period 1: Δcpu 5e9 (usage 5e9/2e10 = 0.25), rx 600 kB, tx 400 kB, 1000 packets
    #   period 2: Δcpu 1.5e10 (usage 0.75), rx 0, tx 250 kB, 200 packets
    # io_degree = 100·(1 − 0.5) = 50
    # IF: blocked 1.5e10 / 5e9 = 3 and 5e9 / 1.5e10 = 1/3 -> mean 5/3
    # net_degree: kB/s 100 and 25 -> avg 62.5; freq 1 -> 0.7·62.5 + 0.3 = 44.05
    # demand: 800 kbit/s and 200 kbit/s -> 500 kbit/s; last 200 kbit/s, tx 200k, rx 0
    # NF alone on the host: busy pps 100 and 20 -> norm 1 and 0 -> 0.7 + 0.3·0.5 = 0.85
    s = Sensors(num=6)
    feed(
        s,
        [
            sample(0.0, a=ctr(vcpus=2)),
            sample(10.0, a=ctr(cpu=5 * NS, rx=600_000, tx=400_000, rxp=600, txp=400, vcpus=2)),
            sample(20.0, a=ctr(cpu=20 * NS, rx=600_000, tx=650_000, rxp=600, txp=600, vcpus=2)),
        ],
    )
    f = s.factors()["a"]
    assert f.vm == "a"
    assert f.cpu_usage == pytest.approx(0.75)
    assert f.io_degree == pytest.approx(50.0)
    assert f.io_factor == pytest.approx(5 / 3)
    assert f.net_degree == pytest.approx(44.05)
    assert f.net_factor == pytest.approx(0.85)
    assert f.has_traffic is True
    assert f.demand_bps == pytest.approx(500_000.0)
    assert f.last_rate_bps == pytest.approx(200_000.0)
    assert f.tx_bps == pytest.approx(200_000.0)
    assert f.rx_bps == 0.0


@pytest.mark.parametrize(("num", "eps"), [(0, 0.7), (-1, 0.7), (6, -0.1), (6, 1.01)])
def test_sensor_rejects_bad_parameters(num: int, eps: float) -> None:
    with pytest.raises(ValueError, match="num must be >= 1|epsilon must be in"):
        HostSensor(num=num, epsilon=eps)


# --------------------------------------------------------------------------- censored demand


def test_a_vm_held_at_its_ceiling_is_censored_and_its_estimate_grows() -> None:
    # Three 10 s periods; a: tx 1.25e9 B/period = 1.0 Gbit/s against a 1.05 Gbit/s VF cap
    # (>= 0.9 x 1.05 = 0.945: censored); b: the same rate under no ceiling; c: 0.5 Gbit/s
    # under the 1.05 cap (< 0.945: not censored). a's estimate: each censored period
    # counts 1.1 x 1.0 Gbit/s = 1.1 Gbit/s.
    s = Sensors(num=6, censor_margin=0.10)
    caps = {"a": 1.05e9, "c": 1.05e9}
    for k in range(4):
        full, half = k * 1_250_000_000, k * 625_000_000
        s.observe(sample(10.0 * k, a=ctr(tx=full), b=ctr(tx=full), c=ctr(tx=half)), caps)
    f = s.factors()
    assert f["a"].censored and not f["b"].censored and not f["c"].censored
    assert f["a"].demand_bps == pytest.approx(1.0e9)
    assert f["a"].demand_est_bps == pytest.approx(1.1e9)
    assert f["b"].demand_est_bps == f["b"].demand_bps
    assert f["c"].demand_est_bps == f["c"].demand_bps


def test_a_vm_sending_on_virtio_with_full_vcpus_is_censored() -> None:
    # 10 s periods, 1 vCPU. a: 9.7 s of CPU per period (0.97 >= 0.95) and 10 Mbit/s on
    # virtio: virtio's per-packet cost is its ceiling. b: the same on a VF (not virtio).
    # c: full vCPU on virtio but no traffic (a CPU-bound VM, nothing held back).
    # d: 0.5 of its vCPU on virtio with traffic.
    s = Sensors(num=6)
    for k in range(3):
        busy, tx = k * 9_700_000_000, k * 12_500_000
        s.observe(
            sample(
                10.0 * k,
                a=ctr(cpu=busy, tx=tx),
                b=ctr(cpu=busy, tx=tx),
                c=ctr(cpu=busy),
                d=ctr(cpu=k * 5_000_000_000, tx=tx),
            ),
            virtio={"a", "c", "d"},
        )
    f = s.factors()
    assert [f[v].censored for v in "abcd"] == [True, False, False, False]


def test_a_path_ceiling_lifted_ends_the_censoring() -> None:
    # The latest period decides ``censored``; the estimate remembers the window.
    s = Sensors(num=6)
    s.observe(sample(0.0, a=ctr()), {"a": 1e9})
    s.observe(sample(10.0, a=ctr(tx=1_250_000_000)), {"a": 1e9})
    assert s.factors()["a"].censored
    s.observe(sample(20.0, a=ctr(tx=2_500_000_000)), {})
    f = s.factors()["a"]
    # periods: 1 Gbit/s censored (1.1), 1 Gbit/s free (1.0): mean 1.05 Gbit/s
    assert not f.censored and f.demand_est_bps == pytest.approx(1.05e9)
