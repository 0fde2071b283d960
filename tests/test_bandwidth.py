"""Table-driven tests of the bandwidth allocators (docs/design.md#bandwidth, rows D1 and Q3/Q4 of #experiments).

Rates are written in Mbit/s or Gbit/s in the tables and converted here; the arithmetic
behind each expected number is in the comment next to it.
"""

from __future__ import annotations

import math

import pytest

from sova.agent.registry import ALLOCATORS
from sova.model import GBIT, MBIT, SLA, ResourceTuple
from sova.policy.bandwidth import (
    Allocation,
    BandwidthAllocator,
    DaqsController,
    DbaVmAllocator,
    EqualShareAllocator,
    FlowDemand,
    SovaAllocator,
    StaticAllocator,
    clamped_fill,
)


def flow(
    vm: str,
    demand_mbps: float,
    *,
    min_mbps: float = 0.0,
    max_mbps: float | None = None,
    max_pps: float | None = None,
    packet_bytes: float = 1500.0,
    priority: int = 0,
    weight: float = 1.0,
    seq: int = 0,
) -> FlowDemand:
    return FlowDemand(
        vm=vm,
        demand_bps=demand_mbps * MBIT,
        sla=SLA(
            bandwidth=ResourceTuple(
                minimum=min_mbps * MBIT,
                maximum=None if max_mbps is None else max_mbps * MBIT,
            ),
            max_pps=max_pps,
            priority=priority,
            weight=weight,
        ),
        packet_bytes=packet_bytes,
        created_seq=seq,
    )


def mbps(allocs: dict[str, Allocation]) -> dict[str, float]:
    return {vm: a.rate_bps / MBIT for vm, a in allocs.items()}


def assert_rates(got: dict[str, Allocation], want_mbps: dict[str, float]) -> None:
    assert set(got) == set(want_mbps)
    for vm, want in want_mbps.items():
        assert got[vm].rate_bps / MBIT == pytest.approx(want, rel=1e-9, abs=1e-9), vm


# --------------------------------------------------------------------------- D1


def d1_flows(small_packets: bool, pps: bool) -> list[FlowDemand]:
    """DBA-VM §III/§V: 1 GbE, three VMs each offering 1 Gbit/s, SLA 150/700/150 Mbit/s.

    Scenario 2 sends 64-byte packets from VM1 and VM3; §V adds packet SLAs of
    20/60/60 kpps.
    """
    small = 64.0 if small_packets else 1500.0
    return [
        flow("vm1", 1000, min_mbps=150, max_pps=20e3 if pps else None, packet_bytes=small, seq=1),
        flow("vm2", 1000, min_mbps=700, max_pps=60e3 if pps else None, seq=2),
        flow("vm3", 1000, min_mbps=150, max_pps=60e3 if pps else None, packet_bytes=small, seq=3),
    ]


def test_d1_native_equal_share_misses_the_700_sla() -> None:
    # Native Xen shares equally: 1000 / 3 = 333.3 Mbit/s each (paper: "330 Mb/s each"),
    # so VM2's 700 Mbit/s SLA is missed.
    got = EqualShareAllocator().allocate(GBIT, d1_flows(small_packets=False, pps=False))
    assert_rates(got, {"vm1": 1000 / 3, "vm2": 1000 / 3, "vm3": 1000 / 3})
    assert got["vm2"].rate_bps < 700 * MBIT


def test_d1_dba_vm_meets_the_bit_rate_slas() -> None:
    # Step 1 starts from the native thirds (333.3 each, pool 0). VM1 (first created):
    # 150 <= 333.3, unchanged. VM2: 333.3 < 700, short by 366.7 and the pool is empty,
    # so the same (lowest) class is cut, newest first: VM3 333.3 -> 150 frees 183.3,
    # VM1 333.3 -> 150 frees 183.3; together exactly 366.7 -> VM2 = 700.
    got = DbaVmAllocator().allocate(GBIT, d1_flows(small_packets=False, pps=False))
    assert_rates(got, {"vm1": 150, "vm2": 700, "vm3": 150})
    assert all(a.pps_cap is None for a in got.values())


def test_d1_dba_vm_packet_rate_slas_with_64_byte_packets() -> None:
    got = DbaVmAllocator().allocate(GBIT, d1_flows(small_packets=True, pps=True))
    # Step 1 is unchanged: 150 / 700 / 150 Mbit/s.
    assert_rates(got, {"vm1": 150, "vm2": 700, "vm3": 150})
    # Step 2: one interface per VM, so B_i / BT_VM = 1 and the cap is the VM's max_pps.
    assert got["vm1"].pps_cap == pytest.approx(20e3)
    assert got["vm2"].pps_cap == pytest.approx(60e3)
    assert got["vm3"].pps_cap == pytest.approx(60e3)

    vm1 = got["vm1"].effective_bps(64) / MBIT
    vm2 = got["vm2"].effective_bps(1500) / MBIT
    vm3 = got["vm3"].effective_bps(64) / MBIT
    # VM1: 20e3 pkt/s * 64 B * 8 = 10.24 Mbit/s. The paper measured 9.1 Mbit/s (§V) and
    # docs/design.md#exp-d1 says "about 9-10": iperf counts payload, not the 64-byte frame, and the
    # guests did not quite reach their packet caps; 10.24 is the ceiling that the
    # packet SLA implies.
    assert vm1 == pytest.approx(10.24)
    assert 9.0 <= vm1 <= 10.5
    # VM3: 60e3 * 64 * 8 = 30.72 Mbit/s; the paper measured 22 (design range 22-31: its
    # VM3 sent ~43 kpps, below the 60 kpps cap, competing for the ~190 kpps driver
    # domain).
    assert vm3 == pytest.approx(30.72)
    assert 22.0 <= vm3 <= 31.0
    # VM2: 60e3 * 1500 * 8 = 720 Mbit/s > its 700 Mbit/s bit cap, so the bit cap
    # binds and VM2 keeps its SLA ("near 700").
    assert vm2 == pytest.approx(700)


def test_d1_sova_is_work_conserving_where_dba_vm_reserves() -> None:
    # With the packet caps as ceilings: VM1 <= 10.24, VM3 <= 30.72, VM2 <= 720
    # (60 kpps of 1500 B). Sova gives every VM its ceiling (10.24 + 720 + 30.72 =
    # 760.96 < 1000): all three are limited by their own SLA, not by the link.
    got = SovaAllocator().allocate(GBIT, d1_flows(small_packets=True, pps=True))
    assert_rates(got, {"vm1": 10.24, "vm2": 720, "vm3": 30.72})
    # Scenario 1 (no packet caps): VM2's floor 700 is above the fair share, the other
    # two share 1000 - 700 = 300 equally: 150 / 700 / 150.
    got = SovaAllocator().allocate(GBIT, d1_flows(small_packets=False, pps=False))
    assert_rates(got, {"vm1": 150, "vm2": 700, "vm3": 150})


# --------------------------------------------------------------------------- DBA-VM

DBA_CASES = [
    pytest.param(
        # Native 500/500. A > max 300 -> 300, pool +200. Left-over: B's room is
        # 800 - 500 = 300, it takes the whole 200 -> 700.
        1000,
        [flow("a", 800, max_mbps=300, seq=0), flow("b", 800, seq=1)],
        {"a": 300, "b": 700},
        id="over-max-returns-excess-to-pool",
    ),
    pytest.param(
        # Native 333.3 each. H (class 1) needs 600 - 333.3 = 266.7, pool empty: cut the
        # lowest class newest first: L2 (seq 2, min 0) loses 266.7 -> 66.7; L1 untouched
        # because only the shortfall is cut.
        1000,
        [
            flow("l1", 1000, min_mbps=100, seq=1),
            flow("l2", 1000, seq=2),
            flow("h", 1000, min_mbps=600, priority=1, seq=3),
        ],
        {"h": 600, "l1": 1000 / 3, "l2": 1000 / 3 - (600 - 1000 / 3)},
        id="cut-lowest-class-newest-first",
    ),
    pytest.param(
        # Native 333.3 each. H needs 700 - 333.3 = 366.7. Class 0 first: L (seq 2)
        # 333.3 -> its min 200 frees 133.3; still short 233.3, so next class up: M
        # (class 1) 333.3 -> min 100 frees 233.3. H = 700, M = 100, L = 200.
        1000,
        [
            flow("l", 1000, min_mbps=200, seq=2),
            flow("m", 1000, min_mbps=100, priority=1, seq=1),
            flow("h", 1000, min_mbps=700, priority=2, seq=0),
        ],
        {"h": 700, "m": 100, "l": 200},
        id="cut-next-class-up-to-own-min",
    ),
    pytest.param(
        # Native 500/500. H (class 1) fine. L (class 0) needs 300 but the only other
        # interface is in a higher class, which is never cut: L stays at 500.
        1000,
        [flow("h", 1000, priority=1), flow("l", 1000, min_mbps=800)],
        {"h": 500, "l": 500},
        id="higher-class-never-cut",
    ),
    pytest.param(
        # Reservation: G sends 50 but has min 400. Native: G 50, B 950. G < min, short
        # 350, pool empty: B is cut 950 -> 600 although G will not use it.
        1000,
        [flow("g", 50, min_mbps=400, seq=0), flow("b", 1000, seq=1)],
        {"g": 400, "b": 600},
        id="idle-guarantee-is-reserved",
    ),
    pytest.param(
        # Native 400 each. C (class 2): 400 > 300 -> 300, pool 100. A (class 1): no SLA.
        # B (class 0): 400 > 200 -> 200, pool 300. Left-over by priority: C has no room
        # (its max), A has 1000 - 400 = 600 and takes all 300 -> 700. B gets nothing.
        1200,
        [
            flow("a", 1000, priority=1, seq=0),
            flow("b", 1000, max_mbps=200, priority=0, seq=1),
            flow("c", 1000, max_mbps=300, priority=2, seq=2),
        ],
        {"a": 700, "b": 200, "c": 300},
        id="left-over-by-priority",
    ),
    pytest.param(
        # Native 400 each (Z's 450 is above the share). X: 400 > 200 -> 200, pool 200.
        # Left-over inside the class is water-filled: Z's room 50, Y's 600: 200 split
        # as Z +50 (full), Y +150 -> 550.
        1200,
        [flow("x", 1000, max_mbps=200, seq=0), flow("y", 1000, seq=1), flow("z", 450, seq=2)],
        {"x": 200, "y": 550, "z": 450},
        id="left-over-water-filled-inside-class",
    ),
    pytest.param(
        # Under-subscribed: native gives everyone its demand (100, 200), pool 700;
        # nobody has room below demand, so the pool stays unallocated.
        1000,
        [flow("a", 100, seq=0), flow("b", 200, seq=1)],
        {"a": 100, "b": 200},
        id="under-subscribed",
    ),
    pytest.param(
        # Guarantees over capacity: native 500/500. A (class 1) needs 400 more; B, the
        # only lower-class interface, is already at its own min 500, so nothing can be
        # cut: A stays at 500. Priority never pre-empts another VM's guarantee.
        1000,
        [flow("a", 1000, min_mbps=900, priority=1), flow("b", 1000, min_mbps=500)],
        {"a": 500, "b": 500},
        id="guarantee-of-lower-class-not-cut-below-min",
    ),
]


@pytest.mark.parametrize(("capacity_mbps", "demands", "want"), DBA_CASES)
def test_dba_vm_step1(
    capacity_mbps: float, demands: list[FlowDemand], want: dict[str, float]
) -> None:
    got = DbaVmAllocator().allocate(capacity_mbps * MBIT, demands)
    assert_rates(got, want)
    assert sum(a.rate_bps for a in got.values()) <= capacity_mbps * MBIT * (1 + 1e-12)


def test_dba_vm_step2_splits_packet_budget_by_interface_share() -> None:
    # VM "a" sends 300 Mbit/s on eth0 and 100 on eth1: BT_VM = 400, so its 40 kpps are
    # split 40e3 * 300/400 = 30e3 and 40e3 * 100/400 = 10e3.
    result = DbaVmAllocator().allocate_host(
        {
            "eth0": (GBIT, [flow("a", 300, max_pps=40e3), flow("b", 200)]),
            "eth1": (GBIT, [flow("a", 100, max_pps=40e3)]),
        }
    )
    assert result["eth0"]["a"].pps_cap == pytest.approx(30e3)
    assert result["eth1"]["a"].pps_cap == pytest.approx(10e3)
    assert result["eth0"]["b"].pps_cap is None


def test_dba_vm_silent_vm_keeps_its_whole_packet_budget() -> None:
    # B_i / BT_VM is 0/0 for a VM that sends nothing; with one interface it gets max_pps.
    got = DbaVmAllocator().allocate(GBIT, [flow("a", 0, max_pps=5e3)])
    assert got["a"].pps_cap == pytest.approx(5e3)
    assert got["a"].rate_bps == 0


def test_dba_vm_rejects_inconsistent_max_pps_across_interfaces() -> None:
    with pytest.raises(ValueError, match="max_pps"):
        DbaVmAllocator().allocate_host(
            {
                "eth0": (GBIT, [flow("a", 300, max_pps=40e3)]),
                "eth1": (GBIT, [flow("a", 100, max_pps=10e3)]),
            }
        )


# --------------------------------------------------------------------------- DAQS

LINK = 40 * GBIT  # DAQS §IV: ConnectX-5 40 GbE
GUARANTEE = 10 * GBIT  # Fig. 3 / Fig. 4 guarantee of the guarantee VM


def daqs_demands(g_gbps: float, **be_gbps: float) -> list[FlowDemand]:
    g = FlowDemand("g", g_gbps * GBIT, SLA(bandwidth=ResourceTuple(minimum=GUARANTEE)))
    return [g] + [FlowDemand(vm, r * GBIT, SLA()) for vm, r in be_gbps.items()]


# Thresholds on a 40 GbE link with target 10 Gbit/s:
#   congested: total >= 0.838 * 40 = 33.52    spare: 0.904 * 40 = 36.16 > total + 0.3
#   generous guarantee: G > 1.45 * 10 + 1.15 = 15.65 (and best-effort > 1)
# R is in Gbit/s in this table, None = no caps; caps are per best-effort VM.
DAQS_SCRIPT: list[tuple[str, list[FlowDemand], float | None, dict[str, float]]] = [
    # G = 0.5 < 1: no guarantee VM active, nothing is capped.
    ("idle guarantee", daqs_demands(0.5, b1=30), None, {}),
    # G = 8 < 10 while uncapped: start R at the link rate (published code), not lower it.
    ("first cap = link", daqs_demands(8, b1=30), 40.0, {"b1": 40.0}),
    # total 38 >= 33.52: congested, lower by 0.3.
    ("congested -0.3", daqs_demands(8, b1=30), 39.7, {"b1": 39.7}),
    # total 8 + 20 + 6 = 34 >= 33.52: lower again; two heavy BE VMs share it: 39.4 / 2.
    ("split 2 heavy", daqs_demands(8, b1=20, b2=6), 39.4, {"b1": 19.7, "b2": 19.7}),
    # total 9 + 12 + 12 = 33 < 33.52 and 36.16 > 33.3: spare, raise by 0.3.
    ("spare +0.3", daqs_demands(9, b1=12, b2=12), 39.7, {"b1": 19.85, "b2": 19.85}),
    # total 9 + 13 + 13 + 0.5 = 35.5: congested. b3 sends 0.5 <= 1: never capped.
    ("light BE not capped", daqs_demands(9, b1=13, b2=13, b3=0.5), 39.4, {"b1": 19.7, "b2": 19.7}),
    # 10 <= G = 12 <= 15.65: guarantee met, hold.
    ("hold", daqs_demands(12, b1=12, b2=12), 39.4, {"b1": 19.7, "b2": 19.7}),
    # G = 16 > 15.65 and BE 12.5 > 1: raise. Only b1 is heavy: it gets all of R; b2
    # (0.5) keeps its previous 19.7 (the published code only touches heavy VMs).
    ("generous +0.3", daqs_demands(16, b1=12, b2=0.5), 39.7, {"b1": 39.7, "b2": 19.7}),
    # G = 16 but BE 0.4 + 0.5 = 0.9 <= 1: hold, and no heavy VM: caps unchanged.
    ("generous, BE idle", daqs_demands(16, b1=0.4, b2=0.5), 39.7, {"b1": 39.7, "b2": 19.7}),
    # Raise again: 39.7 + 0.3 = 40.0, the ceiling (the link rate).
    ("raise to link", daqs_demands(16, b1=12), 40.0, {"b1": 40.0, "b2": 19.7}),
    ("ceiling", daqs_demands(16, b1=12), 40.0, {"b1": 40.0, "b2": 19.7}),
    # G = 0.8 < 1: remove all caps, b2's stale one too (docs/design.md#daqs; the code forgets it).
    ("G < 1 removes caps", daqs_demands(0.8, b1=12, b2=0.5), None, {}),
    # G = 20 > 15.65 while uncapped: raising "no cap" stays uncapped (the code would
    # add 0.3 to its -1 sentinel and reach a 0.2 Gbit/s cap after four periods).
    ("raise while uncapped", daqs_demands(20, b1=12), None, {}),
    ("raise while uncapped 2", daqs_demands(20, b1=12), None, {}),
    ("raise while uncapped 3", daqs_demands(20, b1=12), None, {}),
    ("raise while uncapped 4", daqs_demands(20, b1=12), None, {}),
]


def test_daqs_scripted_sequence() -> None:
    ctl = DaqsController()
    assert ctl.R is None  # initial state: uncapped
    for label, demands, want_r, want_caps in DAQS_SCRIPT:
        got = ctl.allocate(LINK, demands)
        if want_r is None:
            assert ctl.R is None, label
        else:
            r = ctl.R
            assert r is not None, label
            assert r / GBIT == pytest.approx(want_r, abs=1e-9), label
        assert {vm: c / GBIT for vm, c in ctl.caps.items()} == pytest.approx(want_caps), label
        # The guarantee VM is never capped; VMs without a cap get the link rate.
        assert got["g"].rate_bps == LINK, label
        for d in demands[1:]:
            want = want_caps.get(d.vm)
            assert got[d.vm].rate_bps / GBIT == pytest.approx(40.0 if want is None else want), (
                label,
                d.vm,
            )


def test_daqs_lowers_to_the_1_gbit_floor_and_stays() -> None:
    ctl = DaqsController()
    congested = daqs_demands(8, b1=30)  # total 38 >= 33.52 every period
    ctl.allocate(LINK, congested)  # R = 40 (first cap)
    # (40 - 1) / 0.3 = 130 periods to reach the floor exactly.
    for k in range(1, 131):
        ctl.allocate(LINK, congested)
        r = ctl.R
        assert r == pytest.approx(max(1.0, 40 - 0.3 * k) * GBIT)
    assert r == pytest.approx(1 * GBIT)
    ctl.allocate(LINK, congested)
    r = ctl.R
    assert r == pytest.approx(1 * GBIT)  # floor: 1 - 0.3 is clamped back to 1


def test_daqs_no_guarantee_vm_means_no_caps() -> None:
    # No guarantee VM: G = 0 < 1 Gbit/s, so even a saturated link caps nobody.
    ctl = DaqsController()
    got = ctl.allocate(LINK, [FlowDemand("b1", 39 * GBIT, SLA())])
    assert ctl.R is None
    assert got["b1"].rate_bps == LINK


def test_daqs_reset_forgets_state() -> None:
    ctl = DaqsController()
    ctl.allocate(LINK, daqs_demands(8, b1=30))
    assert ctl.R == LINK
    ctl.reset()
    assert ctl.R is None
    assert ctl.caps == {}


# --------------------------------------------------------------------------- Sova

SOVA_CASES = [
    pytest.param(
        # Weights 1:2 on 900: lam = 900 / 3 = 300 -> 300 / 600.
        900,
        [flow("a", 1000, weight=1), flow("b", 1000, weight=2)],
        {"a": 300, "b": 600},
        id="weighted",
    ),
    pytest.param(
        # A's floor 700 is above the fair share 333: A keeps 700, B and C split 300.
        1000,
        [flow("a", 1000, min_mbps=700), flow("b", 1000), flow("c", 1000)],
        {"a": 700, "b": 150, "c": 150},
        id="floor-above-fair-share",
    ),
    pytest.param(
        # A's floor 200 is below the fair share 500: floors count toward the share, so
        # A does not get 200 + half of the rest — plain 500 / 500.
        1000,
        [flow("a", 1000, min_mbps=200), flow("b", 1000)],
        {"a": 500, "b": 500},
        id="floor-below-fair-share-is-not-added",
    ),
    pytest.param(
        # A sends 100 < its floor 700: it gets 100 (min(demand, floor)) and B takes the
        # other 900 — the work-conserving answer DBA-VM misses (it would reserve 700).
        1000,
        [flow("a", 100, min_mbps=700), flow("b", 1000)],
        {"a": 100, "b": 900},
        id="idle-guarantee-not-reserved",
    ),
    pytest.param(
        # A's SLA max 200; B takes the remaining 800.
        1000,
        [flow("a", 1000, max_mbps=200), flow("b", 1000)],
        {"a": 200, "b": 800},
        id="sla-max",
    ),
    pytest.param(
        # A: 10 kpps * 1000 B * 8 = 80 Mbit/s ceiling; B takes 920.
        1000,
        [flow("a", 1000, max_pps=10e3, packet_bytes=1000), flow("b", 1000)],
        {"a": 80, "b": 920},
        id="packet-rate-cap",
    ),
    pytest.param(
        # Floor limited by the packet cap: A's floor 500 but 10 kpps * 1500 B * 8 =
        # 120 Mbit/s; the floor is min(500, 120) = 120 and B gets 880.
        1000,
        [flow("a", 1000, min_mbps=500, max_pps=10e3), flow("b", 1000)],
        {"a": 120, "b": 880},
        id="floor-limited-by-packet-cap",
    ),
    pytest.param(
        # Under-subscribed: everyone gets its demand, 300 of 1000 used.
        1000,
        [flow("a", 100), flow("b", 200)],
        {"a": 100, "b": 200},
        id="under-subscribed",
    ),
    pytest.param(
        # Water-filling with a small demand: C (100) is satisfied, A and B split the
        # rest with weights 1:3 -> 900 * 1/4 = 225 and 675.
        1000,
        [flow("a", 1000), flow("b", 1000, weight=3), flow("c", 100, weight=5)],
        {"a": 225, "b": 675, "c": 100},
        id="water-fill-small-demand",
    ),
    pytest.param(
        # Guarantees 800 + 400 = 1200 > 1000: scaled by 1000/1200 -> 666.7 and 333.3;
        # best-effort C gets nothing.
        1000,
        [flow("a", 1000, min_mbps=800), flow("b", 1000, min_mbps=400), flow("c", 1000)],
        {"a": 800 * 1000 / 1200, "b": 400 * 1000 / 1200, "c": 0},
        id="over-committed-guarantees-scaled",
    ),
    pytest.param(
        0,
        [flow("a", 1000, min_mbps=100), flow("b", 1000)],
        {"a": 0, "b": 0},
        id="zero-capacity",
    ),
    pytest.param(1000, [], {}, id="no-vms"),
]


@pytest.mark.parametrize(("capacity_mbps", "demands", "want"), SOVA_CASES)
def test_sova_allocator(
    capacity_mbps: float, demands: list[FlowDemand], want: dict[str, float]
) -> None:
    got = SovaAllocator().allocate(capacity_mbps * MBIT, demands)
    assert_rates(got, want)
    for d in demands:
        assert got[d.vm].pps_cap == d.sla.max_pps


# --------------------------------------------------------------------------- baselines


def test_equal_share_is_demand_limited_max_min() -> None:
    # A's 100 is below the share 333: satisfied; B and C split 900 -> 450 each.
    got = EqualShareAllocator().allocate(
        1000 * MBIT, [flow("a", 100), flow("b", 600), flow("c", 600)]
    )
    assert_rates(got, {"a": 100, "b": 450, "c": 450})


def test_equal_share_ignores_sla() -> None:
    got = EqualShareAllocator().allocate(
        1000 * MBIT, [flow("a", 1000, min_mbps=900), flow("b", 1000, max_mbps=10)]
    )
    assert_rates(got, {"a": 500, "b": 500})


def test_static_caps() -> None:
    # a: configured 300; b: default 200; c has a cap above the link: clamped to 1000.
    alloc = StaticAllocator({"a": 300 * MBIT, "c": 5000 * MBIT}, default_bps=200 * MBIT)
    got = alloc.allocate(1000 * MBIT, [flow("a", 10), flow("b", 900), flow("c", 900)])
    assert_rates(got, {"a": 300, "b": 200, "c": 1000})
    # Without a default an unconfigured VM is uncapped (a cap at line rate).
    got = StaticAllocator({}).allocate(1000 * MBIT, [flow("x", 10)])
    assert_rates(got, {"x": 1000})


def test_clamped_fill_examples() -> None:
    # clamp(lam * w, lo, hi) summing to 10: lo (0, 4), hi (10, 10), w (1, 1): lam = 5.
    assert clamped_fill(10, [0, 4], [10, 10], [1, 1]) == pytest.approx([5, 5])
    # Floor 7 above the share: (3, 7).
    assert clamped_fill(10, [0, 7], [10, 10], [1, 1]) == pytest.approx([3, 7])
    # Target above sum(hi) -> hi; below sum(lo) -> lo.
    assert clamped_fill(100, [0, 0], [3, 4], [1, 1]) == [3, 4]
    assert clamped_fill(1, [2, 3], [5, 5], [1, 1]) == [2, 3]
    with pytest.raises(ValueError, match="same length"):
        clamped_fill(1, [0], [1, 2], [1])
    with pytest.raises(ValueError, match="weights must be > 0"):
        clamped_fill(1, [0, 0], [1, 2], [1, 0])


def test_a_sum_math_fsum_refuses_is_refused() -> None:
    # Two ceilings of 1e308 sum past the largest float: math.fsum raises (the readable form
    # in tests/bandwidth_oracle.py with it), and the core says so as links_fsum does, rather
    # than filling from a wrong sum (it gave 1.0 each for a target of 1.0).
    with pytest.raises(ValueError, match=r"^hi: intermediate overflow in fsum$"):
        clamped_fill(1.0, [0.0, 0.0], [1e308, 1e308], [1.0, 1.0])
    with pytest.raises(ValueError, match=r"^hi: -inf \+ inf in fsum$"):
        clamped_fill(1.0, [0.0, -math.inf], [math.inf, -math.inf], [1.0, 1.0])
    huge = [flow("a", 1e302), flow("b", 1e302)]  # 1e308 bit/s each
    with pytest.raises(ValueError, match=r"^link 0: hi: intermediate overflow in fsum$"):
        SovaAllocator().allocate(GBIT, huge)


# --------------------------------------------------------------------------- registry


def test_registry_names_and_protocol() -> None:
    assert set(ALLOCATORS) == {"equal-share", "ip-link-static", "dba-vm", "daqs", "sova"}
    demands = [flow("a", 600, min_mbps=100), flow("b", 600)]
    for name, plugin in ALLOCATORS.items():
        alloc: BandwidthAllocator = plugin.build({})
        assert alloc.name == name
        got = alloc.allocate(GBIT, demands)
        assert set(got) == {"a", "b"}
        assert all(0 <= a.rate_bps <= GBIT for a in got.values())


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("name", sorted(ALLOCATORS))
def test_negative_capacity_rejected(name: str) -> None:
    alloc = ALLOCATORS[name].build({})
    with pytest.raises(ValueError, match=r"capacity_bps must be >= 0, got -1"):
        alloc.allocate(-1.0, [flow("a", 10)])


@pytest.mark.parametrize(
    ("kwargs", "pattern"),
    [
        ({"demand_bps": -5.0}, r"demand_bps must be >= 0 \(VM 'a'\), got -5"),
        ({"demand_bps": math.nan}, r"demand_bps must be finite \(VM 'a'\), got nan"),
        ({"packet_bytes": 0.0}, r"packet_bytes must be > 0 \(VM 'a'\), got 0"),
        ({"sla": SLA(weight=0.0)}, r"sla.weight must be > 0 \(VM 'a'\), got 0"),
        ({"sla": SLA(max_pps=-1.0)}, r"sla.max_pps must be >= 0 \(VM 'a'\), got -1"),
    ],
)
def test_bad_flow_demand_rejected(kwargs: dict[str, object], pattern: str) -> None:
    base: dict[str, object] = {"vm": "a", "demand_bps": 1.0, "sla": SLA()}
    base.update(kwargs)
    with pytest.raises(ValueError, match=pattern):
        FlowDemand(**base)  # type: ignore[arg-type]


def test_infinite_capacity_and_duplicate_vm_rejected() -> None:
    with pytest.raises(ValueError, match="capacity_bps must be finite"):
        SovaAllocator().allocate(math.inf, [flow("a", 10)])
    with pytest.raises(ValueError, match="'a' appears twice"):
        SovaAllocator().allocate(GBIT, [flow("a", 10), flow("a", 20)])
    with pytest.raises(ValueError, match=r"caps_bps must be >= 0 \(VM 'a'\), got -3"):
        StaticAllocator({"a": -3.0})
