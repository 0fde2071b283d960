"""Weighted max-min fair sharing (water-filling)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sova.policy.waterfill import waterfill


@pytest.mark.parametrize(
    ("capacity", "demands", "weights", "expected"),
    [
        # 10 among [2, 8, 8]: level 10/3 = 3.33 ≥ 2 -> 2; rest 8 over 2 -> 4 each
        (10.0, [2, 8, 8], None, [2, 4, 4]),
        # 9 among [1, 2, 10]: 1 (≤ 3), 2 (≤ 4), then 6 left for the last
        (9.0, [1, 2, 10], None, [1, 2, 6]),
        # all saturate above the level: equal thirds
        (9.0, [5, 5, 5], None, [3, 3, 3]),
        # under-subscribed: Σd = 6 ≤ 10 -> demands
        (10.0, [1, 2, 3], None, [1, 2, 3]),
        # exactly subscribed
        (6.0, [1, 2, 3], None, [1, 2, 3]),
        # zero capacity: nothing for anyone
        (0.0, [1, 2], None, [0, 0]),
        # zero demand gets zero
        (4.0, [0, 5, 5], None, [0, 2, 2]),
        # weights 1:3, both hungry: 12 -> 3 and 9
        (12.0, [100, 100], [1, 3], [3, 9]),
        # weights 1:3, level 12/4 = 3: second's saturation 6/3 = 2 < 3 -> gets 6; first 6
        (12.0, [100, 6], [1, 3], [6, 6]),
        # weights 2:1:1, cap 8, demands [10, 1, 10]: level 8/4 = 2: b saturates (1 ≤ 2),
        # 7 left over weights 3 -> level 7/3: a 14/3 = 4.667, c 7/3 = 2.333
        (8.0, [10, 1, 10], [2, 1, 1], [14 / 3, 1, 7 / 3]),
        # order of inputs is the order of outputs
        (10.0, [8, 2, 8], None, [4, 2, 4]),
    ],
)
def test_waterfill_examples(
    capacity: float,
    demands: list[float],
    weights: list[float] | None,
    expected: list[float],
) -> None:
    got = waterfill(capacity, demands, weights)
    assert got.tolist() == pytest.approx(expected)


def test_waterfill_returns_a_copy() -> None:
    d = np.array([1.0, 2.0])
    out = waterfill(10.0, d)
    out[0] = 99.0
    assert d[0] == 1.0


def test_waterfill_empty() -> None:
    assert waterfill(5.0, []).size == 0


@pytest.mark.parametrize(
    ("capacity", "demands", "weights", "match"),
    [
        (-1.0, [1.0], None, "capacity"),
        (math.inf, [1.0], None, "capacity"),
        (math.nan, [1.0], None, "capacity"),
        (1.0, [-1.0], None, "demands"),
        (1.0, [math.nan], None, "demands"),
        (1.0, [math.inf], None, "demands"),
        (1.0, [1.0, 1.0], [1.0, 0.0], "weights"),
        (1.0, [1.0, 1.0], [1.0, -2.0], "weights"),
        (1.0, [1.0, 1.0], [1.0], "weights"),
    ],
)
def test_waterfill_errors(
    capacity: float, demands: list[float], weights: list[float] | None, match: str
) -> None:
    with pytest.raises(ValueError, match=match):
        waterfill(capacity, demands, weights)


@st.composite
def problems(draw: st.DrawFn) -> tuple[float, list[float], list[float]]:
    n = draw(st.integers(1, 8))
    demands = draw(st.lists(st.floats(0, 1000, allow_subnormal=False), min_size=n, max_size=n))
    weights = draw(st.lists(st.floats(0.1, 10, allow_subnormal=False), min_size=n, max_size=n))
    capacity = draw(st.floats(0, 5000, allow_subnormal=False))
    return capacity, demands, weights


@settings(max_examples=300, deadline=None)
@given(problems(), st.booleans())
def test_waterfill_properties(problem: tuple[float, list[float], list[float]], use_w: bool) -> None:
    capacity, demands, weights = problem
    w = weights if use_w else [1.0] * len(demands)
    a = waterfill(capacity, demands, w if use_w else None)
    d = np.asarray(demands)
    tol = 1e-7 * max(1.0, capacity, float(d.sum()))
    # Σ allocation = min(capacity, Σ demand)
    assert a.sum() == pytest.approx(min(capacity, d.sum()), abs=tol)
    # nobody above its demand, nobody below 0
    assert np.all(a <= d + tol) and np.all(a >= -tol)
    # weighted max-min: an unsatisfied flow's normalised share a_i/w_i is the highest of all
    # (nobody could give it more without taking from someone with an equal or smaller share)
    norm = a / np.asarray(w)
    for i in range(len(d)):
        if a[i] < d[i] - tol:
            assert norm[i] >= norm.max() - tol


@settings(max_examples=100, deadline=None)
@given(problems())
def test_waterfill_monotone_in_capacity(problem: tuple[float, list[float], list[float]]) -> None:
    # more capacity never takes anything from anyone
    capacity, demands, weights = problem
    a = waterfill(capacity, demands, weights)
    b = waterfill(capacity + 10.0, demands, weights)
    assert np.all(b >= a - 1e-7 * max(1.0, capacity))
