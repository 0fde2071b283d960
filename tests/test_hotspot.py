"""Hotspot detection and migration planning (docs/design.md#hotspots; Sova eq. 5-6, Alg. 1-2, Fig. 5)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sova.model import MIB
from sova.policy.cold_spots import choose_target
from sova.policy.hotness import UTILISATION_SLACK
from sova.policy.hotspot import (
    HostCapacity,
    HostReport,
    HotnessMetric,
    HotspotDetector,
    MigrationSignal,
    Utilisation,
    VMLoad,
    ar1_coefficient,
    ar1_forecast,
    choose_vm,
    coordinate,
    hotness,
    skewness,
    volume,
)


def u(cpu: float = 0.0, mem: float = 0.0, net: float = 0.0) -> Utilisation:
    return Utilisation(cpu, mem, net)


# --------------------------------------------------------------------------- skewness / volume


@pytest.mark.parametrize(
    ("r", "expected"),
    [
        ((1.0, 1.0, 1.0), 0.0),  # uniformly saturated: eq. 5 calls this "cold"
        ((0.5, 0.5, 0.5), 0.0),
        ((0.0, 0.0, 0.0), 0.0),  # idle: defined as 0 rather than 0/0
        ((0.0, 0.0, 1.0), math.sqrt(6)),  # mean 1/3 → ratios 0,0,3 → 1 + 1 + 4
        ((0.2, 0.4, 0.6), math.sqrt(0.5)),  # mean 0.4 → ratios .5,1,1.5 → .25 + 0 + .25
        ((0.0, 0.0, 0.1), math.sqrt(6)),  # scale-free: same as (0, 0, 1)
    ],
)
def test_skewness(r: tuple[float, ...], expected: float) -> None:
    assert skewness(r) == pytest.approx(expected)


def test_skewness_rejects_empty_and_negative() -> None:
    with pytest.raises(ValueError):
        skewness(())
    with pytest.raises(ValueError, match=r"r\[1\]"):
        skewness((0.1, -0.1))


@pytest.mark.parametrize(
    ("cpu", "mem", "net", "expected"),
    [
        (0.0, 0.0, 0.0, 1.0),  # idle host: 1/(1·1·1)
        (0.5, 0.0, 0.0, 2.0),  # 1/0.5
        (0.5, 0.5, 0.5, 8.0),  # 1/0.125
        (0.2, 0.5, 0.75, 10.0),  # 1/(0.8·0.5·0.25) = 1/0.1
        (1.0, 0.0, 0.0, 1e3),  # saturated: clamped to 1 - 1e-3 → 1/1e-3
        (1.0, 1.0, 1.0, 1e9),  # all saturated: (1e-3)^-3, large but finite
        (1.04, 0.0, 0.0, 1e3),  # measurement slack above 1 is accepted and clamped
    ],
)
def test_volume(cpu: float, mem: float, net: float, expected: float) -> None:
    assert volume(cpu, mem, net) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("cpu", "mem", "net", "field"),
    [(-0.1, 0.0, 0.0, "cpu"), (0.0, math.nan, 0.0, "mem"), (0.0, 0.0, 1.2, "net")],
)
def test_volume_names_the_bad_field(cpu: float, mem: float, net: float, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        volume(cpu, mem, net)


def test_utilisation_validates_like_volume() -> None:
    with pytest.raises(ValueError, match="net"):
        Utilisation(0.1, 0.1, 2.0)


def test_hotness_metric_is_selectable_and_volume_is_default() -> None:
    saturated = u(1.0, 1.0, 1.0)
    assert hotness(saturated) == pytest.approx(1e9)
    assert hotness(saturated, "volume") == hotness(saturated, HotnessMetric.VOLUME)
    # The reason docs/design.md#hotness refuses eq. 5 as a hotness measure: a saturated host scores 0.
    assert hotness(saturated, "skewness") == 0.0
    with pytest.raises(ValueError):
        hotness(saturated, "sheer-volume")


# --------------------------------------------------------------------------- AR(1)


def test_rising_series_forecasts_above_the_mean_but_not_beyond_the_last() -> None:
    # 1..5: μ = 3, deviations -2,-1,0,1,2; Σd² = 10; Σ d_t·d_{t+1} = 2 + 0 + 0 + 2 = 4
    # → φ = 0.4, x̂ = 3 + 0.4·(5 - 3) = 3.8. With φ <= 1 AR(1) around the window mean
    # reverts towards μ and never extrapolates the trend beyond x_p = 5.
    series = [1.0, 2.0, 3.0, 4.0, 5.0]
    assert ar1_coefficient(series) == pytest.approx(0.4)
    assert ar1_forecast(series) == pytest.approx(3.8)


def test_constant_series_forecasts_the_constant() -> None:
    assert ar1_coefficient([0.6] * 5) == 0.0  # zero variance: φ = 0, no division
    assert ar1_forecast([0.6] * 5) == pytest.approx(0.6)
    assert ar1_forecast([0.42]) == pytest.approx(0.42)


def test_rounding_noise_is_not_a_trend() -> None:
    # 0.4 + 0.3 != 0.7 in floats; the window is constant for all practical purposes.
    series = [0.7, 0.7, 0.4 + 0.3, 0.7, 0.4 + 0.3]
    assert ar1_coefficient(series) == 0.0


def test_alternating_series_has_negative_phi() -> None:
    # 0,1,0,1,0: μ = 0.4; d = -.4,.6,-.4,.6,-.4; Σd² = 1.2; Σ d_t·d_{t+1} = 4·(-.24) = -.96
    # → φ = -0.8, x̂ = 0.4 + (-0.8)(0 - 0.4) = 0.72: expects the swing back up.
    series = [0.0, 1.0, 0.0, 1.0, 0.0]
    assert ar1_coefficient(series) == pytest.approx(-0.8)
    assert ar1_forecast(series) == pytest.approx(0.72)


def test_ar1_rejects_empty_and_nonfinite() -> None:
    with pytest.raises(ValueError):
        ar1_forecast([])
    with pytest.raises(ValueError):
        ar1_forecast([0.1, math.inf])


@given(st.lists(st.floats(min_value=0.0, max_value=1.05), min_size=1, max_size=20))
def test_phi_is_clamped_and_forecast_is_bounded(series: list[float]) -> None:
    phi = ar1_coefficient(series)
    assert -1.0 <= phi <= 1.0
    # |φ| <= 1 keeps the forecast within |x_p - μ| of the mean.
    mean = sum(series) / len(series)
    spread = abs(series[-1] - mean)
    assert mean - spread - 1e-12 <= ar1_forecast(series) <= mean + spread + 1e-12


# --------------------------------------------------------------------------- k of n


def net_history(*values: float) -> list[Utilisation]:
    return [u(cpu=0.1, mem=0.2, net=v) for v in values]


DETECTOR = HotspotDetector(k=3, n=5, alpha=0.75)


def test_two_of_five_over_alpha_is_not_hot_even_with_a_high_forecast() -> None:
    # 0.7 is not over 0.75, so 2/5 over. μ = 0.8, φ = 0.0275/0.075 = 0.367,
    # x̂ = 0.8 + 0.367·0.15 = 0.855 > α. The count alone keeps the host cold.
    verdict = DETECTOR.assess(net_history(0.7, 0.7, 0.7, 0.95, 0.95))
    net = verdict.resources[2]
    assert (net.over, net.window) == (2, 5)
    assert net.forecast > 0.75
    assert not verdict.hot


def test_three_of_five_over_alpha_but_falling_forecast_is_not_hot() -> None:
    # μ = 0.74, d = .16,.16,.16,-.24,-.24; Σd² = 0.192; Σ d_t·d_{t+1} = 0.0704
    # → φ = 0.367, x̂ = 0.74 + 0.367·(-0.24) = 0.652 < α.
    verdict = DETECTOR.assess(net_history(0.9, 0.9, 0.9, 0.5, 0.5))
    net = verdict.resources[2]
    assert net.over == 3
    assert net.forecast == pytest.approx(0.652, abs=1e-3)
    assert not verdict.hot
    assert "net 3/5 over 0.75" in verdict.reason


def test_three_of_five_over_alpha_and_rising_forecast_is_hot() -> None:
    # μ = 0.74, d = -.24,-.24,.16,.16,.16; φ = 0.0704/0.192 = 0.367, x̂ = 0.74 + 0.0587 = 0.799.
    verdict = DETECTOR.assess(net_history(0.5, 0.5, 0.9, 0.9, 0.9))
    assert verdict.hot
    assert verdict.hot_resources == ("net",)
    assert verdict.resources[2].forecast == pytest.approx(0.799, abs=1e-3)


def test_only_the_last_n_observations_count() -> None:
    assert not DETECTOR.assess(net_history(0.9, 0.9, 0.9, 0.5, 0.5, 0.5, 0.5, 0.5)).hot


def test_short_history_is_judged_as_it_is() -> None:
    assert not DETECTOR.assess(net_history(0.9, 0.9)).hot  # only 2 of the needed 3
    assert DETECTOR.assess(net_history(0.9, 0.9, 0.9)).hot
    verdict = DETECTOR.assess([])
    assert not verdict.hot
    assert verdict.reason == "no observations"


def test_any_hot_resource_makes_the_host_hot() -> None:
    verdict = DETECTOR.assess([u(cpu=0.95, mem=0.2, net=0.1)] * 5)
    assert verdict.hot_resources == ("cpu",)


def test_step_onto_a_plateau_is_flagged_when_the_window_fills() -> None:
    # Fig. 5: HM1 jumps from idle to 80 % net at t = 0; reports every 10 s; flagged at t = 50 s.
    # Report 3 ([0,0,.8,.8,.8]): x̂ = 0.48 + 0.367·0.32 = 0.597. Report 4: φ = -0.05,
    # x̂ = 0.632. Report 5: the window is constant at 0.8, so φ = 0 and x̂ = 0.8 > α.
    history = net_history(0.0, 0.0, 0.0, 0.0, 0.0)
    flagged_at = None
    for report in range(1, 8):
        history.append(u(cpu=0.1, mem=0.2, net=0.8))
        if DETECTOR.assess(history).hot:
            flagged_at = report * 10
            break
    assert flagged_at == 50


@pytest.mark.parametrize(
    "kwargs", [{"k": 6, "n": 5}, {"k": 0}, {"alpha": 0.0}, {"alpha": 1.5}, {"alpha": math.nan}]
)
def test_detector_rejects_bad_parameters(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        HotspotDetector(**kwargs)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- choose_vm


def vm(net: float, mb: int, *, mem: float = 0.0, migrating: bool = False) -> VMLoad:
    return VMLoad(u(cpu=0.05, mem=mem, net=net), mb * MIB, migrating)


def test_largest_mf_wins() -> None:
    # Equal memory: the heavier VM. volume(.05,0,.5) = 2.105 vs volume(.05,0,.3) = 1.504.
    assert choose_vm({"vm1": vm(0.5, 512), "vm2": vm(0.3, 512)}) == "vm1"
    # Equal load: the smaller VM (MF per byte copied).
    assert choose_vm({"vm5": vm(0.4, 1024), "vm1": vm(0.4, 512)}) == "vm1"


def test_ties_break_by_name() -> None:
    assert choose_vm({"b": vm(0.4, 512), "a": vm(0.4, 512)}) == "a"


def test_migrating_vms_are_excluded() -> None:
    vms = {"vm1": vm(0.5, 512, migrating=True), "vm2": vm(0.3, 512)}
    assert choose_vm(vms) == "vm2"
    assert choose_vm({"vm1": vm(0.5, 512, migrating=True)}) is None
    assert choose_vm({}) is None


def test_hot_resource_filter_skips_vms_that_would_relieve_nothing() -> None:
    # Volume is >= 1 even when idle: a 64 MiB idle VM has MF 1.05/64Mi > 2.1/2048Mi.
    vms = {"idle": vm(0.0, 64), "busy": vm(0.5, 2048)}
    assert choose_vm(vms) == "idle"
    assert choose_vm(vms, resources=("net",)) == "busy"
    with pytest.raises(ValueError, match="disk"):
        choose_vm(vms, resources=("disk",))


# --------------------------------------------------------------------------- choose_target

HOSTS = {
    "hm1": u(0.1, 0.2, 0.8),  # source
    "hm2": u(0.1, 0.2, 0.1),  # coldest
    "hm3": u(0.1, 0.2, 0.3),
    "hm4": u(0.1, 0.2, 0.6),
}
SMALL = vm(0.2, 512)


def test_target_is_the_least_hot_other_host() -> None:
    assert choose_target(HOSTS, "hm1", SMALL, 0.75) == "hm2"


def test_target_excludes_the_source() -> None:
    only_source = {"hm1": u(0.0, 0.0, 0.0)}
    assert choose_target(only_source, "hm1", SMALL, 0.75) is None


def test_target_excludes_hosts_already_taken() -> None:
    assert choose_target(HOSTS, "hm1", SMALL, 0.75, taken={"hm2"}) == "hm3"


def test_target_must_stay_below_alpha_after_receiving() -> None:
    # VM net 0.5: hm2 → 0.6 ok. With hm2 taken: hm3 → 0.8 >= 0.75, hm4 → 1.1: none.
    big = vm(0.5, 512)
    assert choose_target(HOSTS, "hm1", big, 0.75) == "hm2"
    assert choose_target(HOSTS, "hm1", big, 0.75, taken={"hm2"}) is None
    # A ceiling of 1.0 ("the VM fits") accepts hm3 at 0.8, but never hm4 (0.6 + 0.5 = 1.1).
    assert choose_target(HOSTS, "hm1", big, 0.75, taken={"hm2"}, ceiling=1.0) == "hm3"


def test_target_already_over_alpha_is_refused_even_with_a_loose_ceiling() -> None:
    hosts = {"src": u(net=0.9), "warm": u(net=0.76)}
    assert choose_target(hosts, "src", vm(0.01, 512), 0.75, ceiling=1.0) is None


def test_vm_share_is_rescaled_to_the_target_capacity() -> None:
    # VM uses 0.5 of a 10 G link; on a 40 G host that is 0.125: 0.6 + 0.125 = 0.725 < 0.75.
    # Taken as identical hosts it would be 0.6 + 0.5 = 1.1 and refused.
    hosts = {"src": u(net=0.9), "big": u(net=0.6)}
    caps = {"src": HostCapacity(16, 64e9, 10e9), "big": HostCapacity(16, 64e9, 40e9)}
    load = vm(0.5, 512)
    assert choose_target(hosts, "src", load, 0.75) is None
    assert choose_target(hosts, "src", load, 0.75, capacities=caps) == "big"
    with pytest.raises(ValueError, match="'big'"):
        choose_target(hosts, "src", load, 0.75, capacities={"src": caps["src"]})


def test_skewness_ranking_prefers_a_uniformly_busy_host() -> None:
    # Why volume is the default: "even" at 70 % has skewness 0 (volume 37), "light" at
    # (.1,.1,.4) has skewness sqrt(1.5) (volume 2.06). Both accept a tiny VM below α.
    hosts = {"src": u(net=0.9), "even": u(0.7, 0.7, 0.7), "light": u(0.1, 0.1, 0.4)}
    tiny = VMLoad(u(net=0.01), 512 * MIB)
    assert choose_target(hosts, "src", tiny, 0.75) == "light"
    assert choose_target(hosts, "src", tiny, 0.75, metric="skewness") == "even"


# --------------------------------------------------------------------------- Sova Fig. 5 / Table 3
#
# Three identical hosts (8 GiB, 10 GbE), five VMs. Table 3 gives, per stage, the share of
# time each VM runs netperf at line rate; we read it as the VM's share of its host's link, so
# a host's net utilisation is the sum over its VMs. CPU and memory stay low throughout and
# only tilt volume, never cross α: every VM adds 0.05 CPU and RAM/8 GiB memory, and every
# host adds a 0.05 CPU / 0.10 memory base.
#
# α = 0.75, detection k = 3 of n = 5 on steady stage loads:
#   stage 1: HM1 = VM1 .5 + VM2 .3 = .8 > α, hot. HM2 = .3 + .3 = .6, HM3 = VM5 .2.
#            VM1 wins MF (equal RAM, higher load). Least hot is HM3: .2 + .5 = .7 < α. Move it.
#   stage 2: HM1 = VM2 .7, HM2 = .4 + .3 = .7, HM3 = VM5 .4 + VM1 .4 = .8 > α, hot.
#            VM1 wins MF (same load, half of VM5's RAM). HM1: .7 + .4 = 1.1 and
#            HM2: .7 + .4 = 1.1, so no cold spot and no migration.
#   stage 3: HM2 = .3 + .2 = .5, HM3 still .8, hot. VM1 again. HM2 has .5 < α now and
#            .5 + .4 = .9 after receiving. That is within the link (ceiling 1.0) but above α,
#            and even above HM3's own .8. The design's "stays below α after receiving" rule
#            (ceiling = α) therefore refuses it, and no α can satisfy both .8 > α (HM3 hot)
#            and .9 < α. The paper's move comes from Alg. 2 line 8, which checks the target's
#            current load only. We reproduce it with ceiling = 1.0 and show the design default
#            separately.

HOST_RAM = 8 * 1024 * MIB
RAM_MB = {"VM1": 512, "VM2": 512, "VM3": 512, "VM4": 512, "VM5": 1024}
HOMES = {"VM1": "HM1", "VM2": "HM1", "VM3": "HM2", "VM4": "HM2", "VM5": "HM3"}
TABLE3 = {  # VM: (stage 1, stage 2, stage 3) netperf share
    "VM1": (0.5, 0.4, 0.4),
    "VM2": (0.3, 0.7, 0.7),
    "VM3": (0.3, 0.4, 0.3),
    "VM4": (0.3, 0.3, 0.2),
    "VM5": (0.2, 0.4, 0.4),
}
S5_DETECTOR = HotspotDetector(k=3, n=5, alpha=0.75)


def s5_reports(placement: dict[str, str], stage: int) -> dict[str, HostReport]:
    vms = {
        name: VMLoad(
            Utilisation(0.05, RAM_MB[name] * MIB / HOST_RAM, TABLE3[name][stage - 1]),
            RAM_MB[name] * MIB,
        )
        for name in RAM_MB
    }
    reports = {}
    for host in ("HM1", "HM2", "HM3"):
        resident = {name: load for name, load in vms.items() if placement[name] == host}
        now = Utilisation(
            0.05 + sum(v.util.cpu for v in resident.values()),
            0.10 + sum(v.util.mem for v in resident.values()),
            sum(v.util.net for v in resident.values()),
        )
        reports[host] = HostReport(history=(now,) * 5, vms=resident)
    return reports


def run_stage(
    placement: dict[str, str], stage: int, ceiling: float | None = 1.0
) -> tuple[dict[str, MigrationSignal], list[tuple[str, str, str]]]:
    reports = s5_reports(placement, stage)
    signals = coordinate(reports, S5_DETECTOR, ceiling=ceiling)
    moves = []
    for src, signal in signals.items():
        if signal.flag:
            assert signal.target is not None and signal.vm is not None
            # The Effector's own Alg. 1 pick agrees with the VM the target was checked for.
            assert choose_vm(reports[src].vms, resources=signal.hot_resources) == signal.vm
            moves.append((signal.vm, src, signal.target))
            placement[signal.vm] = signal.target
    return signals, moves


def test_s5_fig5_three_stages() -> None:
    placement = dict(HOMES)

    signals, moves = run_stage(placement, 1)
    assert moves == [("VM1", "HM1", "HM3")]
    assert signals["HM1"].hot_resources == ("net",)
    assert not signals["HM2"].flag and not signals["HM3"].flag

    signals, moves = run_stage(placement, 2)
    assert moves == []
    assert signals["HM3"].hot_resources == ("net",)  # the hotspot is seen...
    assert "no cold spot for VM1" in signals["HM3"].reason  # ...but has nowhere to go
    assert signals["HM1"].hot_resources == () and signals["HM2"].hot_resources == ()

    signals, moves = run_stage(placement, 3)
    assert moves == [("VM1", "HM3", "HM2")]
    assert placement == {"VM1": "HM2", "VM2": "HM1", "VM3": "HM2", "VM4": "HM2", "VM5": "HM3"}


def test_s5_stage3_under_the_spec_default_ceiling_makes_no_move() -> None:
    # Same state as stage 3 of Fig. 5, with ceiling = α: HM2 would reach .9 >= .75.
    placement = dict(HOMES, VM1="HM3")
    signals, moves = run_stage(placement, 3, ceiling=None)
    assert moves == []
    assert "HM2: would reach net 0.500->0.900" in signals["HM3"].reason


# --------------------------------------------------------------------------- coordinate


def steady(net: float, vms: dict[str, VMLoad] | None = None) -> HostReport:
    return HostReport(history=(u(0.1, 0.2, net),) * 5, vms=vms or {})


def test_hottest_host_gets_the_only_cold_spot() -> None:
    reports = {
        "a": steady(0.8, {"a1": vm(0.3, 512)}),
        "b": steady(0.9, {"b1": vm(0.3, 512)}),
        "c": steady(0.1),
    }
    signals = coordinate(reports, DETECTOR)
    assert signals["b"] == MigrationSignal(True, "c", signals["b"].reason, "b1", ("net",))
    # c received b1 this round (0.1 + 0.3 → 0.4); a hot host is never a target, so a has none.
    assert not signals["a"].flag
    assert "no other host available" in signals["a"].reason
    assert not signals["c"].flag


def test_leased_hosts_are_neither_source_nor_target() -> None:
    reports = {
        "a": steady(0.9, {"a1": vm(0.3, 512)}),
        "b": steady(0.9, {"b1": vm(0.3, 512)}),
        "cold": steady(0.1),
        "colder": steady(0.0),
    }
    signals = coordinate(reports, DETECTOR, leased={"a", "colder"})
    assert not signals["a"].flag and "in progress" in signals["a"].reason
    assert signals["b"].target == "cold"


def test_hosts_without_observations_are_not_targets() -> None:
    reports = {"hot": steady(0.9, {"v": vm(0.3, 512)}), "new": HostReport(history=())}
    signals = coordinate(reports, DETECTOR)
    assert not signals["hot"].flag
    assert signals["new"] == MigrationSignal(False, None, "no observations")


def test_hot_host_without_a_movable_vm_gets_no_signal() -> None:
    reports = {
        "hot": steady(0.9, {"v": vm(0.3, 512, migrating=True)}),
        "cold": steady(0.1),
    }
    signal = coordinate(reports, DETECTOR)["hot"]
    assert not signal.flag and "no VM to move" in signal.reason


def test_capacities_must_be_all_or_nothing() -> None:
    cap = HostCapacity(16, 64e9, 10e9)
    reports = {
        "a": HostReport(history=(u(net=0.9),) * 5, capacity=cap),
        "b": HostReport(history=(u(net=0.1),) * 5),
    }
    with pytest.raises(ValueError, match="'b'"):
        coordinate(reports, DETECTOR)


@pytest.mark.parametrize("field", ["cpu", "mem", "net"])
@pytest.mark.parametrize(
    "value", [math.nan, math.inf, -math.inf, -0.001, 1.0 + UTILISATION_SLACK + 1e-9]
)
def test_utilisation_refuses_each_bad_value_in_each_field(field: str, value: float) -> None:
    # the in-range fast path must not let NaN (which fails every comparison) or an
    # infinity through: each is named with its field
    vals = {"cpu": 0.5, "mem": 0.5, "net": 0.5, field: value}
    with pytest.raises(ValueError, match=f"^{field} utilisation must be in \\[0, 1\\], got"):
        Utilisation(**vals)


def test_utilisation_takes_the_slack_at_the_top() -> None:
    # 1 + slack is allowed (counters overshoot a little), 0 too
    u = Utilisation(0.0, 1.0 + UTILISATION_SLACK, 1.0)
    assert u.as_tuple() == (0.0, 1.0 + UTILISATION_SLACK, 1.0)
