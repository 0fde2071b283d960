"""Hotspot verdicts: per host and resource, the k-of-n count over α and the AR(1)
forecast of the next observation (docs/design.md#hotspots, #ar1).

One implementation, the compiled core's (rust/sova-core/src/verdicts.rs, docs/design.md
"The compiled core"): :meth:`~sova.policy.hotspot.HotspotDetector.assess` and the AR(1)
helpers call :func:`verdict_arrays` for one host's window, the manager's round
(``manager/decisions/fastplan.py``) for every host with as many observations at once. Sums run left
to right, oldest first, as Python's ``sum`` does on the interpreter the project pins; the
readable per-host form is kept in tests/verdicts_oracle.py as the oracle.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from sova.policy import _core

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True)
class VerdictArrays:
    """One entry per host and resource, shaped (hosts, resources)."""

    over: IntArray  # observations above alpha
    phi: FloatArray  # the window's lag-1 autocorrelation, in [-1, 1]
    forecast: FloatArray  # the AR(1) forecast of the next observation
    hot: BoolArray  # over >= k and forecast > alpha


def verdict_arrays(windows: npt.ArrayLike, alpha: float, k: int) -> VerdictArrays:
    """The verdicts of ``windows`` (hosts, observations, resources), oldest first; at least
    one observation and one resource."""
    w = np.ascontiguousarray(windows, dtype=np.float64)
    if w.ndim != 3:
        raise ValueError(f"windows must be (hosts, observations, resources), got shape {w.shape}")
    hosts, n_obs, width = w.shape
    over, phi, forecast, hot = _core.hotspot_verdicts(
        w.ravel(), n_obs, width, float(alpha), int(k)
    )
    shape = (hosts, width)
    return VerdictArrays(
        over.reshape(shape), phi.reshape(shape), forecast.reshape(shape), hot.reshape(shape)
    )
