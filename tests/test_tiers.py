"""VF rate tiers (docs/design.md#tiers, DSR-IOV eq. 7): ladder, assignment and fitting from demand."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sova.model import GBIT, MBIT
from sova.policy.tiers import assign_tiers, fit_tiers, tier_rates

# --------------------------------------------------------------------------- tier_rates


def test_ladder_steps_up_from_vf0() -> None:
    # VF_n = 1 G + (n-1)·0.5 G for n = 1..4 → 1, 1.5, 2, 2.5 G; Σ = 7 G <= 10 G.
    assert tier_rates(1 * GBIT, 0.5 * GBIT, 4, 10 * GBIT) == (
        1.0 * GBIT,
        1.5 * GBIT,
        2.0 * GBIT,
        2.5 * GBIT,
    )


def test_ladder_may_use_exactly_the_whole_link() -> None:
    # 4 tiers of 2.5 G, δ = 0: Σ = 10 G = B is allowed (<=).
    assert sum(tier_rates(2.5 * GBIT, 0.0, 4, 10 * GBIT)) == 10 * GBIT
    # 0.1 + 0.2 + 0.3 + 0.4 (δ = 0.1) sums to 1.0000000000000002 in floats; still accepted.
    assert len(tier_rates(0.1, 0.1, 4, 1.0)) == 4


def test_ladder_over_capacity_names_capacity() -> None:
    # 2 + 3 + 4 + 5 G = 14 G > 10 G.
    with pytest.raises(ValueError, match="capacity_bps"):
        tier_rates(2 * GBIT, 1 * GBIT, 4, 10 * GBIT)


@pytest.mark.parametrize(
    ("args", "name"),
    [
        ((-1.0, 0.0, 2, 10.0), "vf0_bps"),
        ((math.nan, 0.0, 2, 10.0), "vf0_bps"),
        ((0.0, 1.0, 2, 10.0), "vf0_bps"),  # max_tx_rate 0 = unlimited
        ((1.0, -0.5, 2, 10.0), "delta_bps"),
        ((1.0, math.inf, 2, 10.0), "delta_bps"),
        ((1.0, 0.0, 2, -10.0), "capacity_bps"),
        ((1.0, 0.0, 0, 10.0), "n"),
    ],
)
def test_ladder_rejects_bad_parameters(args: tuple[float, float, int, float], name: str) -> None:
    with pytest.raises(ValueError, match=name):
        tier_rates(*args)


# --------------------------------------------------------------------------- assign_tiers


def test_highest_demand_gets_highest_tier() -> None:
    tiers = (1.0, 2.0, 3.0)
    got = assign_tiers({"vm1": 50.0, "vm2": 900.0, "vm3": 300.0}, tiers)
    assert got == {"vm2": 3.0, "vm3": 2.0, "vm1": 1.0}


def test_equal_demand_breaks_ties_by_name() -> None:
    got = assign_tiers({"vmb": 5.0, "vma": 5.0}, (10.0, 20.0))
    assert got == {"vma": 20.0, "vmb": 10.0}


def test_fewer_vms_than_tiers_use_the_top_tiers() -> None:
    # Tiers in any order: the two VMs get 40 and 30, and 10 and 20 stay unused.
    got = assign_tiers({"a": 1.0, "b": 2.0}, (30.0, 10.0, 40.0, 20.0))
    assert got == {"b": 40.0, "a": 30.0}


def test_more_vms_than_tiers_raises() -> None:
    with pytest.raises(ValueError, match="demands"):
        assign_tiers({"a": 1.0, "b": 2.0, "c": 3.0}, (1.0, 2.0))


def test_assign_rejects_negative_demand() -> None:
    with pytest.raises(ValueError, match="'a'"):
        assign_tiers({"a": -1.0}, (1.0,))


# --------------------------------------------------------------------------- fit_tiers


def test_fit_from_demand_quantiles() -> None:
    # Demands 1..9 Gbit/s (sorted, 9 values), N = 2, headroom 0 to keep the arithmetic exact.
    # Band medians: q(0.25) at position 0.25·8 = 2 → 3 G; q(0.75) at 6 → 7 G.
    # VF_1 = 3 G, VF_2 = 7 G, δ = 4 G; Σ = 10 G <= 20 G, so nothing is scaled.
    demands = [float(i) * GBIT for i in range(1, 10)]
    vf0, delta = fit_tiers(demands, 2, 20 * GBIT, headroom=0.0)
    assert vf0 == pytest.approx(3 * GBIT)
    assert delta == pytest.approx(4 * GBIT)


def test_fit_applies_headroom() -> None:
    # Same as above with 20 % headroom: VF_1 = 3.6 G, VF_2 = 8.4 G, δ = 4.8 G; Σ = 12 G <= 20 G.
    demands = [float(i) * GBIT for i in range(1, 10)]
    vf0, delta = fit_tiers(demands, 2, 20 * GBIT, headroom=0.2)
    assert vf0 == pytest.approx(3.6 * GBIT)
    assert delta == pytest.approx(4.8 * GBIT)


def test_fit_scales_down_to_the_link() -> None:
    # Unscaled VF_1 = 3 G, VF_2 = 7 G sum to 10 G on a 5 G link: both halve → 1.5 G, 3.5 G.
    demands = [float(i) * GBIT for i in range(1, 10)]
    vf0, delta = fit_tiers(demands, 2, 5 * GBIT, headroom=0.0)
    assert vf0 == pytest.approx(1.5 * GBIT)
    assert delta == pytest.approx(2 * GBIT)
    assert sum(tier_rates(vf0, delta, 2, 5 * GBIT)) == pytest.approx(5 * GBIT)


@pytest.mark.parametrize("demands", [[], [0.0, 0.0, 0.0]])
def test_fit_without_demand_splits_equally(demands: list[float]) -> None:
    # Nothing to go on: B/N each, δ = 0 → 4 × 2.5 G.
    assert fit_tiers(demands, 4, 10 * GBIT) == (2.5 * GBIT, 0.0)


def test_fit_never_yields_a_zero_tier() -> None:
    # Mostly idle VMs: q(0.125) = 0, so VF_1 would be 0 (= unlimited for max_tx_rate).
    # The floor lifts it to 1 Mbit/s.
    vf0, delta = fit_tiers([0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 8 * GBIT], 4, 10 * GBIT)
    assert vf0 == MBIT
    assert delta >= 0.0


def test_fit_single_tier_uses_the_median() -> None:
    # N = 1: one cap, the median 2 G plus 20 % → 2.4 G.
    vf0, delta = fit_tiers([1 * GBIT, 2 * GBIT, 3 * GBIT], 1, 10 * GBIT)
    assert vf0 == pytest.approx(2.4 * GBIT)
    assert delta == 0.0


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"observed_demands": [1.0, -2.0], "n": 2, "capacity_bps": 10.0}, "observed_demands"),
        ({"observed_demands": [1.0], "n": 0, "capacity_bps": 10.0}, "n"),
        ({"observed_demands": [1.0], "n": 2, "capacity_bps": 0.0}, "capacity_bps"),
        (
            {"observed_demands": [1.0], "n": 2, "capacity_bps": 10.0, "headroom": -0.1},
            "headroom",
        ),
    ],
)
def test_fit_rejects_bad_parameters(kwargs: dict[str, object], name: str) -> None:
    with pytest.raises(ValueError, match=name):
        fit_tiers(**kwargs)  # type: ignore[arg-type]


@given(
    demands=st.lists(st.floats(min_value=0.0, max_value=1e12), max_size=64),
    n=st.integers(min_value=1, max_value=32),
    capacity=st.floats(min_value=1.0, max_value=4e11),
    headroom=st.floats(min_value=0.0, max_value=2.0),
)
def test_fitted_ladder_always_fits_and_steps_up(
    demands: list[float], n: int, capacity: float, headroom: float
) -> None:
    vf0, delta = fit_tiers(demands, n, capacity, headroom)
    rates = tier_rates(vf0, delta, n, capacity)  # raises if Σ > B
    assert math.fsum(rates) <= capacity * (1 + 1e-9)
    assert all(a <= b for a, b in zip(rates, rates[1:], strict=False))
    assert rates[0] > 0.0
