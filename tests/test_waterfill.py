"""Weighted max-min fair sharing (water-filling): the compiled core against its oracle.

sova.policy.waterfill calls the core (rust/sova-core/src/waterfill.rs); tests/waterfill_oracle.py
holds the per-link readable form and the numpy form the core replaced. The core must give
the numpy form's floats bit for bit (same arithmetic in the same order: the simulator's
pinned outputs depend on it), and the per-link form's within a stated rounding bound.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests import waterfill_oracle as oracle
from tests.waterfill_oracle import waterfill

from sova.policy.waterfill import (
    Links,
    floored_waterfill,
    grouped_waterfill,
    links_waterfill,
)

U = 2.0**-53  # unit roundoff of float64


def core_one_link(
    capacity: float,
    demands: list[float] | npt.NDArray[np.float64],
    weights: list[float] | npt.NDArray[np.float64] | None = None,
) -> npt.NDArray[np.float64]:
    """The core on one link, in the per-link form's signature."""
    d = np.asarray(demands, dtype=np.float64)
    w = None if weights is None else np.asarray(weights, dtype=np.float64)
    return grouped_waterfill(np.array([capacity]), np.zeros(d.size, dtype=np.int64), d, w)


FORMS = pytest.mark.parametrize("fill", [waterfill, core_one_link], ids=["readable", "core"])


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
@FORMS
def test_waterfill_examples(
    fill: oracle.OneLink,
    capacity: float,
    demands: list[float],
    weights: list[float] | None,
    expected: list[float],
) -> None:
    got = fill(capacity, demands, weights)
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


@FORMS
@settings(max_examples=300, deadline=None)
@given(problems(), st.booleans())
def test_waterfill_properties(
    fill: oracle.OneLink, problem: tuple[float, list[float], list[float]], use_w: bool
) -> None:
    capacity, demands, weights = problem
    w = weights if use_w else [1.0] * len(demands)
    a = fill(capacity, demands, w if use_w else None)
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


@FORMS
@settings(max_examples=100, deadline=None)
@given(problems())
def test_waterfill_monotone_in_capacity(
    fill: oracle.OneLink, problem: tuple[float, list[float], list[float]]
) -> None:
    # more capacity never takes anything from anyone
    capacity, demands, weights = problem
    a = fill(capacity, demands, weights)
    b = fill(capacity + 10.0, demands, weights)
    assert np.all(b >= a - 1e-7 * max(1.0, capacity))


# --------------------------------------------------------------------------- floors


def test_floored_waterfill_floor_or_fair_share_whichever_is_larger() -> None:
    cap = np.array([10.0])
    g = np.array([0, 0])
    # a: floor 7 (> fair share 5) -> 7; b gets the rest, 3.
    got = floored_waterfill(cap, g, np.array([10.0, 10.0]), np.ones(2), np.array([7.0, 0.0]))
    assert got.tolist() == [7.0, 3.0]
    # a: floor 2 (< fair share 5) -> the floor does not bind: 5 / 5.
    got = floored_waterfill(cap, g, np.array([10.0, 10.0]), np.ones(2), np.array([2.0, 0.0]))
    assert got.tolist() == [5.0, 5.0]
    # floors 8 + 8 over-commit 10: they shrink together to 5 + 5.
    got = floored_waterfill(cap, g, np.array([10.0, 10.0]), np.ones(2), np.array([8.0, 8.0]))
    assert got.tolist() == [5.0, 5.0]


@given(
    st.lists(
        st.tuples(
            st.integers(0, 2),
            st.floats(0, 10, allow_subnormal=False),
            st.floats(0.1, 5, allow_subnormal=False),
            st.floats(0, 10, allow_subnormal=False),
        ),
        min_size=1,
        max_size=8,
    ),
    st.lists(st.floats(0, 20, allow_subnormal=False), min_size=3, max_size=3),
)
def test_floored_waterfill_properties(
    flows: list[tuple[int, float, float, float]], caps: list[float]
) -> None:
    g = np.array([f[0] for f in flows])
    d = np.array([f[1] for f in flows])
    w = np.array([f[2] for f in flows])
    lo = np.array([f[3] for f in flows])
    cap = np.array(caps)
    got = floored_waterfill(cap, g, d, w, lo)
    eps = 1e-7
    assert np.all(got <= d + eps) and np.all(got >= -eps)
    for h in range(3):
        m = g == h
        # work-conserving: the link is full, or everyone has their demand
        assert got[m].sum() == pytest.approx(min(cap[h], d[m].sum()), abs=1e-6)
        floors = np.minimum(lo[m], d[m])
        if floors.sum() <= cap[h]:
            assert np.all(got[m] >= floors - eps)  # floors met when they fit


def _flat_waterfill(
    cap: npt.NDArray[np.float64],
    g: npt.NDArray[np.int64],
    d: npt.NDArray[np.float64],
    w: npt.NDArray[np.float64] | None,
) -> npt.NDArray[np.float64]:
    """The one-array form grouped_waterfill had before the per-link layout (all flows
    sorted by link and level at once, one running sum over them): the oracle the layout
    must match float for float, since simulated runs must stay byte-identical."""
    n = d.size
    ww = np.ones(n) if w is None else w
    sat = d / ww
    order = np.lexsort((sat, g))
    gs, ds, ws, ss = g[order], d[order], ww[order], sat[order]
    starts = np.flatnonzero(np.r_[True, gs[1:] != gs[:-1]])
    lengths = np.diff(np.r_[starts, n])
    cum_d, cum_w = np.cumsum(ds), np.cumsum(ws)
    before_d = cum_d - ds - np.repeat((cum_d - ds)[starts], lengths)
    total_w = np.repeat(np.add.reduceat(ws, starts), lengths)
    before_w = cum_w - ws - np.repeat((cum_w - ws)[starts], lengths)
    level = (cap[gs] - before_d) / (total_w - before_w)
    pos = np.arange(n)
    first = np.repeat(np.minimum.reduceat(np.where(ss > level, pos, n), starts), lengths)
    stop = np.where(first < n, level[np.minimum(first, n - 1)], np.inf)
    out = np.empty(n)
    out[order] = np.where(pos < first, ds, np.minimum(ds, stop * ws))
    return out


@settings(max_examples=300, deadline=None)
@given(
    st.integers(1, 12),
    st.lists(
        st.tuples(
            st.integers(0, 11),
            # whole Gbit/s (ties, links exactly full) or any rate
            st.one_of(
                st.integers(0, 6).map(lambda k: k * 1e9),
                st.floats(0, 6e9, allow_subnormal=False),
            ),
            st.sampled_from([1.0, 2.0, 3.0, 0.7, 1.3]),
            st.booleans(),
        ),
        min_size=1,
        max_size=60,
    ),
    st.lists(
        # whole Gbit/s (links exactly full, the no-sort path's edge) or any capacity
        st.one_of(
            st.integers(0, 20).map(lambda k: k * 1e9), st.floats(0, 2e10, allow_subnormal=False)
        ),
        min_size=12,
        max_size=12,
    ),
    st.booleans(),
)
def test_links_waterfill_equals_the_flat_form_bit_for_bit(
    n_links: int,
    flows: list[tuple[int, float, float, bool]],
    caps: list[float],
    weighted: bool,
) -> None:
    g = np.array([f[0] % n_links for f in flows], dtype=np.int64)
    d = np.array([f[1] for f in flows])
    w = np.array([f[2] for f in flows]) if weighted else None
    cap = np.array(caps[:n_links])
    want = _flat_waterfill(cap, g, d, w)
    assert np.array_equal(grouped_waterfill(cap, g, d, w), want)
    assert np.array_equal(links_waterfill(cap, Links.of(g, n_links), d, w), want)
    # a subset of the flows (the engine's virtio flows) keeps its indices; others get 0
    member = np.array([f[3] for f in flows])
    sub = links_waterfill(cap, Links.of(g, n_links).subset(member), d, w)
    idx = np.flatnonzero(member)
    if idx.size:
        ws = None if w is None else w[idx]
        assert np.array_equal(sub[idx], _flat_waterfill(cap, g[idx], d[idx], ws))
    assert not sub[~member].any()
    by_mask = links_waterfill(cap, Links.of(g, n_links), d, w, member=member)
    assert np.array_equal(by_mask, sub)


def test_links_waterfill_per_link_matches_waterfill() -> None:
    # link 0: 10 among [2, 8, 8] -> [2, 4, 4]; link 1: 12 among [100, 6] w 1:3 -> [6, 6];
    # link 2 has no flow
    g = np.array([0, 1, 0, 0, 1])
    d = np.array([2.0, 100.0, 8.0, 8.0, 6.0])
    w = np.array([1.0, 1.0, 1.0, 1.0, 3.0])
    got = links_waterfill(np.array([10.0, 12.0, 5.0]), Links.of(g, 3), d, w)
    assert got.tolist() == pytest.approx([2.0, 6.0, 4.0, 4.0, 6.0])


# ------------------------------------------------------- the core against the numpy form


def _case(
    seed: int,
) -> tuple[
    npt.NDArray[np.float64],
    npt.NDArray[np.int64],
    npt.NDArray[np.float64],
    npt.NDArray[np.float64] | None,
    npt.NDArray[np.bool_],
    npt.NDArray[np.float64],
]:
    """A random heterogeneous cluster's links: 1-60 links, up to 400 flows (some links with
    over 128, where numpy's pairwise sums change shape), whole or fractional weights or
    none, demands of every scale with ties and zeros, links under, exactly at and over
    their capacity, a random subset of member flows, floors."""
    rng = np.random.default_rng(seed)
    n_links = int(rng.integers(1, 61))
    n = int(rng.integers(0, 401))
    skew = rng.random(n_links) ** 3  # a few links crowded, most quiet
    g = rng.choice(n_links, size=n, p=skew / skew.sum()).astype(np.int64)
    scale = rng.choice([1.0, 1e3, 1e9, 1e10])
    d = np.where(rng.random(n) < 0.2, rng.integers(0, 7, n) * scale / 4, rng.random(n) * scale)
    d[rng.random(n) < 0.05] = 0.0
    kind = rng.integers(0, 3)
    w = (
        None
        if kind == 0
        else rng.integers(1, 9, n).astype(np.float64)
        if kind == 1
        else rng.choice([0.3, 0.7, 1.0, 1.3, 2.5], n) * rng.random(n) + 0.05
    )
    totals = np.bincount(g, d, minlength=n_links)
    cap = totals * rng.choice([0.0, 0.3, 0.9, 1.0, 1.5], n_links)
    cap[rng.random(n_links) < 0.1] = rng.random() * scale
    member = rng.random(n) < 0.7
    floors = d * rng.random(n) * (rng.random(n) < 0.4)
    return cap, g, d, w, member, floors


@settings(max_examples=400, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_core_equals_the_numpy_form_bit_for_bit(seed: int) -> None:
    cap, g, d, w, member, floors = _case(seed)
    n_links = cap.size
    old = oracle.Links.of(g, n_links)
    new = Links.of(g, n_links)
    want = oracle.links_waterfill(cap, old, d, w)
    assert np.array_equal(grouped_waterfill(cap, g, d, w), oracle.grouped_waterfill(cap, g, d, w))
    assert np.array_equal(links_waterfill(cap, new, d, w), want)
    # the caller's word on whole weights takes the same path the check would
    whole = w is None or bool(np.array_equal(w, np.trunc(w)))
    assert np.array_equal(links_waterfill(cap, new, d, w, whole=whole), want)
    assert np.array_equal(
        links_waterfill(cap, new, d, w, member=member),
        oracle.links_waterfill(cap, old, d, w, member=member),
    )
    assert np.array_equal(
        links_waterfill(cap, new.subset(member), d, w),
        oracle.links_waterfill(cap, old.subset(member), d, w),
    )
    ww = np.ones(d.size) if w is None else w
    assert np.array_equal(
        floored_waterfill(cap, g, d, ww, floors), oracle.floored_waterfill(cap, g, d, ww, floors)
    )


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_core_within_rounding_of_the_per_link_form(seed: int) -> None:
    """The per-link form subtracts each allocation from what is left; the core forms each
    level from running sums that run across all links. Both are within a few roundings of
    the exact fill, and a fill is continuous in its sums (a flow at the level gets its
    demand either way), so they differ by at most the running sums' error bound,
    (2n + 4)·u·(S + max C) for n flows of total demand S (the bound sova-core's no-sort
    shortcut is derived from), here taken 4x over."""
    cap, g, d, w, _, _ = _case(seed)
    got = grouped_waterfill(cap, g, d, w)
    tol = 8.0 * (d.size + 2) * U * (d.sum() + cap.max())
    for h in range(cap.size):
        m = g == h
        if m.any():
            want = waterfill(float(cap[h]), d[m], None if w is None else w[m])
            assert np.abs(got[m] - want).max() <= tol, (h, got[m], want)


def test_bad_input_is_refused_naming_the_field() -> None:
    with pytest.raises(ValueError, match=r"group: link 3 outside 0\.\.2"):
        grouped_waterfill(np.ones(2), np.array([0, 3]), np.ones(2))
    with pytest.raises(ValueError, match="weights: 1 values for 2 demands"):
        links_waterfill(np.ones(1), Links.of(np.zeros(2, dtype=np.int64), 1), np.ones(2), np.ones(1))
    with pytest.raises(ValueError, match="capacity: 2 links, the layout has 1"):
        links_waterfill(np.ones(2), Links.of(np.zeros(2, dtype=np.int64), 1), np.ones(2))
    with pytest.raises(ValueError, match="floors: 1 values for 2 demands"):
        floored_waterfill(np.ones(1), np.zeros(2, dtype=np.int64), np.ones(2), np.ones(2), np.ones(1))
