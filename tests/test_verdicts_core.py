"""The compiled hotspot verdicts (``sova.policy.verdicts``) equal their readable forms.

Both the per-host detector (``HotspotDetector.assess``, the AR(1) helpers) and the
manager's round over every host (``manager/decisions/fastplan.py``) call the core; this holds it,
float for float, to the per-host Python form and to the numpy array form it replaced
(tests/verdicts_oracle.py), on random windows: short and full, constant (variance 0 or
rounding noise), at exactly alpha, past 1 by the slack a counter allows.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests import verdicts_oracle as oracle

from sova.policy.hotspot import HotspotDetector, Utilisation, ar1_coefficient, ar1_forecast
from sova.policy.verdicts import verdict_arrays

share = st.one_of(
    st.floats(0.0, 1.05, allow_nan=False),
    st.sampled_from([0.0, 0.75, 0.1, 0.2, 0.3, 1.0, 1.05, 0.7500000000000001]),
)


@st.composite
def rounds(draw: st.DrawFn) -> tuple[int, int, float, list[list[Utilisation]]]:
    """Detector settings and hosts' histories (some shorter than n, some constant)."""
    n = draw(st.integers(1, 8))
    k = draw(st.integers(1, n))
    alpha = draw(st.sampled_from([0.75, 0.5, 0.9, 1.0]))
    hosts = []
    for _ in range(draw(st.integers(1, 12))):
        length = draw(st.integers(0, n + 3))
        if draw(st.booleans()):
            u = Utilisation(draw(share), draw(share), draw(share))
            hosts.append([u] * length)  # constant: no variance at all
        else:
            hosts.append(
                [Utilisation(draw(share), draw(share), draw(share)) for _ in range(length)]
            )
    return k, n, alpha, hosts


@settings(max_examples=400, deadline=None)
@given(rounds())
def test_verdicts_equal_the_per_host_and_the_array_forms(
    case: tuple[int, int, float, list[list[Utilisation]]],
) -> None:
    k, n, alpha, hosts = case
    detector = HotspotDetector(k, n, alpha)
    for history in hosts:
        # == on the dataclasses: counts, forecasts (floats, exactly) and hot flags
        assert detector.assess(history) == oracle.assess(k, n, alpha, history)
    # the manager's round: hosts with as many observations in one array
    by_len: dict[int, list[list[tuple[float, float, float]]]] = {}
    for history in hosts:
        window = history[-n:]
        if window:
            by_len.setdefault(len(window), []).append([u.as_tuple() for u in window])
    for windows in by_len.values():
        w = np.array(windows, dtype=np.float64)
        got = verdict_arrays(w, alpha, k)
        over, forecast, hot = oracle.verdict_arrays(w, alpha, k)
        assert got.over.tolist() == over.tolist()
        assert got.forecast.tolist() == forecast.tolist()
        assert got.hot.tolist() == hot.tolist()


@settings(max_examples=300, deadline=None)
@given(st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=1, max_size=12))
def test_ar1_helpers_equal_their_readable_forms(series: list[float]) -> None:
    assert ar1_coefficient(series) == oracle.ar1_coefficient(series)
    assert ar1_forecast(series) == oracle.ar1_forecast(series)


def test_bad_windows_are_named() -> None:
    with pytest.raises(ValueError, match=r"series must be finite"):
        ar1_forecast([0.1, float("inf")])
    with pytest.raises(ValueError, match=r"windows must be \(hosts, observations, resources\)"):
        verdict_arrays(np.zeros((2, 3)), 0.75, 1)
    with pytest.raises(ValueError, match=r"windows: 0 observations of 3 resources"):
        verdict_arrays(np.zeros((2, 0, 3)), 0.75, 1)
