"""The compiled hotness (``sova.policy.hotness``) equals its readable forms.

The per-host callers (``coordinate``, the mover choice, Watcher's plug-in) and the
manager's round over every host call the core; this holds it, float for float, to the
per-host Python form and to the numpy form the round ran (tests/hotness_oracle.py), on
random loads: idle, saturated past the clamp, within the measurement slack above 1,
denormal, uniform (skewness 0), and the sums whose order shows in the last bit. Exact,
not within a tolerance: the core runs the same IEEE operations in the same order (no
fused multiply-add, sqrt correctly rounded in both).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests import hotness_oracle as oracle

from sova.policy.hotness import (
    VOLUME_CLAMP,
    HotnessMetric,
    Utilisation,
    hotness,
    hotness_rows,
    skewness,
    volume,
)

share = st.one_of(
    st.floats(0.0, 1.05, allow_nan=False),
    st.sampled_from(
        [0.0, 1.0, 1.05, VOLUME_CLAMP, math.nextafter(VOLUME_CLAMP, 1.0), 0.1, 0.2, 0.3, 5e-324]
    ),
)
rows = st.lists(st.tuples(share, share, share), min_size=0, max_size=40)
metrics = st.sampled_from(list(HotnessMetric))


@settings(max_examples=500, deadline=None)
@given(rows, metrics)
def test_the_core_is_the_readable_and_the_array_form(
    loads: list[tuple[float, float, float]], metric: HotnessMetric
) -> None:
    loads = [*loads, (0.0, 0.0, 0.0), (1.05, VOLUME_CLAMP, 0.0), (0.5, 0.5, 0.5)]
    want = [oracle.hotness(Utilisation(*r), metric) for r in loads]
    assert [hotness(Utilisation(*r), metric) for r in loads] == want
    a = np.array(loads, dtype=np.float64)
    assert hotness_rows(a, metric).tolist() == want
    assert oracle.hotness_array(a, metric).tolist() == want
    # the string names, as configuration gives them
    assert hotness_rows(a, metric.value).tolist() == want


@settings(max_examples=300, deadline=None)
@given(st.lists(st.floats(0.0, 1e6, allow_nan=False), min_size=1, max_size=8))
def test_skewness_of_any_width(r: list[float]) -> None:
    assert skewness(r) == oracle.skewness(r)
    assert hotness_rows([r], "skewness").tolist() == [oracle.skewness(r)]


@settings(max_examples=300, deadline=None)
@given(share, share, share)
def test_volume(cpu: float, mem: float, net: float) -> None:
    assert volume(cpu, mem, net) == oracle.volume(cpu, mem, net)


def test_the_order_of_the_sum_shows() -> None:
    # 0.1 + 0.2 + 0.3 left to right is 0.6000000000000001: a different order gives another
    # mean and another last bit, so this case tells the orders apart
    assert (0.1 + 0.2) + 0.3 != 0.1 + (0.2 + 0.3)
    assert skewness((0.1, 0.2, 0.3)) == oracle.skewness((0.1, 0.2, 0.3))


@pytest.mark.parametrize(
    ("rows", "match"),
    [
        ([[0.1, -0.1, 0.0]], r"values\[1\] must be finite and >= 0, got -0.1"),
        ([[0.1, 0.2, 0.3], [0.0, math.inf, 0.0]], r"values\[4\] must be finite"),
        ([[[0.1]]], r"rows must be \(hosts, resources\)"),
        (np.zeros((2, 0)), "width must be > 0"),
    ],
)
def test_bad_rows_are_refused_naming_the_value(rows: object, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        hotness_rows(rows, "volume")  # type: ignore[arg-type]


def test_an_unknown_metric_is_refused() -> None:
    with pytest.raises(ValueError, match="sheer-volume"):
        hotness_rows([[0.1, 0.2, 0.3]], "sheer-volume")
