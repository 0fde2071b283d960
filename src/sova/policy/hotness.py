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
    mean = sum(r) / len(r)
    if mean == 0.0:
        return 0.0
    # d * d rather than d ** 2: C pow() may differ from a plain product in the last bit, and
    # the batch controller must reproduce this value exactly.
    return math.sqrt(sum((d := value / mean - 1.0) * d for value in r))


def volume(cpu: float, mem: float, net: float) -> float:
    """Sandpiper's volume ``1 / ((1-cpu)(1-mem)(1-net))``: 1 when idle, large when saturated."""
    product = 1.0
    for name, value in (("cpu", cpu), ("mem", mem), ("net", net)):
        product *= 1.0 - min(_check_utilisation(name, value), VOLUME_CLAMP)
    return 1.0 / product


class HotnessMetric(StrEnum):
    VOLUME = "volume"
    SKEWNESS = "skewness"


def hotness(u: Utilisation, metric: HotnessMetric | str = HotnessMetric.VOLUME) -> float:
    """Hotness of a host or VM under the chosen metric. An unknown name raises ValueError."""
    if HotnessMetric(metric) is HotnessMetric.SKEWNESS:
        return skewness(u.as_tuple())
    return volume(u.cpu, u.mem, u.net)
