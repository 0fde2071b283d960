"""Hotspot verdicts' readable forms, the oracle the compiled core is held to.

``ar1_coefficient``/``ar1_forecast``/``assess`` are the per-host detector as the manager
ran it before the core (rust/sova-core/src/verdicts.rs, behind ``sova.policy.verdicts``)
replaced it, one resource at a time with Python's ``sum``; ``verdict_arrays`` is the numpy
form the manager's round (``manager/decisions/fastplan.py``) ran for every host at once, kept step
for step. tests/test_verdicts_core.py asks the core for the same floats as both.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from sova.policy.hotspot import RESOURCES, HotspotVerdict, ResourceVerdict, Utilisation


def ar1_coefficient(series: Sequence[float]) -> float:
    """Lag-1 sample autocorrelation of the window (Box-Jenkins estimator), in [-1, 1].

    A window with no variance (constant, or a single value) has no measurable dependence.
    φ is then 0, so the forecast falls back to the mean, which equals the constant.
    """
    if not series:
        raise ValueError("series must not be empty")
    if not all(math.isfinite(x) for x in series):
        raise ValueError("series must be finite")
    mean = sum(series) / len(series)
    dev = [x - mean for x in series]
    variance = sum(d * d for d in dev)
    # Relative cut-off: a "constant" window built from float sums has variance ~1e-33, and
    # dividing rounding noise by rounding noise would give an arbitrary φ.
    if variance <= 1e-24 * max(1.0, mean * mean) * len(series):
        return 0.0
    phi = sum(a * b for a, b in zip(dev, dev[1:], strict=False)) / variance
    # Cauchy-Schwarz bounds this estimator by 1 in exact arithmetic. The clamp guards against
    # rounding and keeps the documented contract (docs/design.md#ar1) if the estimator is ever swapped.
    return max(-1.0, min(1.0, phi))


def ar1_forecast(series: Sequence[float]) -> float:
    """AR(1) one-step forecast ``μ + φ(x_p - μ)`` of the next observation (Sova eq. 6)."""
    phi = ar1_coefficient(series)  # validates: non-empty, finite
    mean = sum(series) / len(series)
    return mean + phi * (series[-1] - mean)


def assess(k: int, n: int, alpha: float, history: Sequence[Utilisation]) -> HotspotVerdict:
    window = history[-n:]
    verdicts: list[ResourceVerdict] = []
    if window:
        for i, name in enumerate(RESOURCES):
            series = [u.as_tuple()[i] for u in window]
            over = sum(1 for x in series if x > alpha)
            forecast = ar1_forecast(series)
            hot = over >= k and forecast > alpha
            verdicts.append(ResourceVerdict(name, over, len(series), forecast, hot))
    return HotspotVerdict(
        hot=any(v.hot for v in verdicts), alpha=alpha, k=k, n=n, resources=tuple(verdicts)
    )


def verdict_arrays(
    windows: np.ndarray, alpha: float, k: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``windows``: (hosts, L, 3). Returns over-counts (hosts, 3), forecasts, hot (hosts, 3)."""
    n_obs = windows.shape[1]
    x = [windows[:, i, :] for i in range(n_obs)]
    total = x[0].copy()
    for xi in x[1:]:
        total = total + xi
    mean = total / n_obs
    dev = [xi - mean for xi in x]
    var = dev[0] * dev[0]
    for d in dev[1:]:
        var = var + d * d
    if n_obs > 1:
        cov = dev[0] * dev[1]
        for a, b in zip(dev[1:], dev[2:], strict=False):
            cov = cov + a * b
    else:
        cov = np.zeros_like(var)
    flat = var <= 1e-24 * np.maximum(1.0, mean * mean) * n_obs
    with np.errstate(divide="ignore", invalid="ignore"):
        phi = np.where(flat, 0.0, cov / np.where(flat, 1.0, var))
    phi = np.maximum(-1.0, np.minimum(1.0, phi))
    forecast = mean + phi * (x[-1] - mean)
    over = (windows > alpha).sum(axis=1)
    hot = (over >= k) & (forecast > alpha)
    return over, forecast, hot
