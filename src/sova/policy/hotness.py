"""What the hotspot policy (:mod:`sova.policy.hotspot`) reads: a host's utilisation, a
VM's share of it, a host's capacity, and how hot a load is (docs/design.md#hotspots).

Apart from the detection and the planning because every stage of both reads these values,
and the cold-spot screening (:mod:`sova.policy.cold_spots`) does without the rest.
:mod:`sova.policy.hotspot` re-exports them: they are what its callers hand it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

import numpy as np
import numpy.typing as npt

from sova.policy import _core

FloatArray = npt.NDArray[np.float64]

RESOURCES: Final = ("cpu", "mem", "net")

# Counters and the sampling clock are read at slightly different instants, so a fully busy
# resource can measure a little above 1. Accept that; anything beyond is a bug upstream.
UTILISATION_SLACK: Final = 0.05

# Volume is 1/Π(1-u): clamping keeps a saturated resource large but finite (≤ 1e9), so hosts
# can still be ranked and logged instead of dividing by zero.
VOLUME_CLAMP: Final = 1.0 - 1e-3


def _check_utilisation(name: str, value: float) -> float:
    if not math.isfinite(value) or value < 0.0 or value > 1.0 + UTILISATION_SLACK:
        raise ValueError(f"{name} utilisation must be in [0, 1], got {value!r}")
    return value


@dataclass(frozen=True)
class Utilisation:
    """Utilisation vector r = (cpu, mem, net) of a host, or a VM's share of its host."""

    cpu: float
    mem: float
    net: float

    def __post_init__(self) -> None:
        # one chained comparison per field first: a manager's round makes one of these per
        # VM of every hot host, and NaN fails it, so only a bad value pays for the check
        top = 1.0 + UTILISATION_SLACK
        if 0.0 <= self.cpu <= top and 0.0 <= self.mem <= top and 0.0 <= self.net <= top:
            return
        for name, value in zip(RESOURCES, self.as_tuple(), strict=True):
            _check_utilisation(name, value)

    def as_tuple(self) -> tuple[float, float, float]:
        return (self.cpu, self.mem, self.net)


@dataclass(frozen=True)
class HostCapacity:
    """Absolute capacity of a host, in any units consistent across hosts (cores, bytes, bit/s)."""

    cpu: float
    mem: float
    net: float

    def __post_init__(self) -> None:
        for name, value in zip(RESOURCES, self.as_tuple(), strict=True):
            if not math.isfinite(value) or value <= 0.0:
                raise ValueError(f"{name} capacity must be > 0, got {value!r}")

    def as_tuple(self) -> tuple[float, float, float]:
        return (self.cpu, self.mem, self.net)


@dataclass(frozen=True)
class VMLoad:
    """One VM as the migration policy sees it.

    ``util`` is the VM's share of its *current host's* capacity per resource, and
    ``memory_bytes`` is what a migration must copy (the MF denominator).
    """

    util: Utilisation
    memory_bytes: int
    migrating: bool = False

    def __post_init__(self) -> None:
        if self.memory_bytes <= 0:
            raise ValueError(f"memory_bytes must be > 0, got {self.memory_bytes!r}")


# --------------------------------------------------------------------------- hotness
# One implementation, the compiled core's (rust/sova-core/src/hotness.rs, docs/design.md
# "The compiled core"): a host's or a VM's hotness for the per-host callers (coordinate,
# the mover choice, Watcher's plug-in) and every host's at once for the manager's round.
# The readable form is kept in tests/hotness_oracle.py as the oracle.


class HotnessMetric(StrEnum):
    VOLUME = "volume"
    SKEWNESS = "skewness"


def skewness(r: Sequence[float]) -> float:
    """Xiao et al.'s skewness, ``sqrt(sum((r_i / mean(r) - 1)^2))``: Sova's eq. 5.

    Sova prints this under the name "volume". It measures imbalance, not load: a uniformly
    saturated host scores 0, like an idle one. An all-zero vector also scores 0, because
    a host with no load has no imbalance (the formula would otherwise divide 0 by 0).
    """
    if not r:
        raise ValueError("skewness needs at least one utilisation")
    for i, value in enumerate(r):
        if not math.isfinite(value) or value < 0.0:
            raise ValueError(f"r[{i}] must be finite and >= 0, got {value!r}")
    return _core.hotness_one([float(x) for x in r], True, VOLUME_CLAMP)


def volume(cpu: float, mem: float, net: float) -> float:
    """Sandpiper's volume ``1 / ((1-cpu)(1-mem)(1-net))``: 1 when idle, large when saturated."""
    for name, value in (("cpu", cpu), ("mem", mem), ("net", net)):
        _check_utilisation(name, value)
    return _core.hotness_one([float(cpu), float(mem), float(net)], False, VOLUME_CLAMP)


def hotness(u: Utilisation, metric: HotnessMetric | str = HotnessMetric.VOLUME) -> float:
    """Hotness of a host or VM under the chosen metric. An unknown name raises ValueError."""
    skew = HotnessMetric(metric) is HotnessMetric.SKEWNESS
    return _core.hotness_one([u.cpu, u.mem, u.net], skew, VOLUME_CLAMP)


def hotness_rows(rows: npt.ArrayLike, metric: HotnessMetric | str) -> FloatArray:
    """:func:`hotness` of every row (cpu, mem, net) of ``rows`` (hosts, 3) at once, float
    for float; each value finite and >= 0 (the round's loads were checked at intake)."""
    skew = HotnessMetric(metric) is HotnessMetric.SKEWNESS
    a = np.ascontiguousarray(rows, dtype=np.float64)
    if a.ndim != 2:
        raise ValueError(f"rows must be (hosts, resources), got shape {a.shape}")
    return _core.hotness_rows(a.ravel(), a.shape[1], skew, VOLUME_CLAMP)
