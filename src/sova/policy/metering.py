"""Rate metering: each VM's egress rate and mean packet size between two counter readings.

The bandwidth controllers run on a shorter period than the VF scheduler (DAQS: 200 ms) and
need the latest rate, not a window mean. One implementation, the compiled core's
(rust/sova-core/src/metering.rs, docs/design.md "The compiled core"): :func:`measure` for
arrays of counters (the agent's bandwidth step, the simulator's every host at once) and
:class:`RateMeter` for a host's samples (the namespace testbed) both call it once per
reading for every VM. The per-VM readable form is kept in tests/test_kernels.py as the
oracle they are held to.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from sova.model import HostSample
from sova.policy import _core

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True)
class Measured:
    valid: BoolArray  # a rate was measured (a previous reading, no counter went back)
    bps: FloatArray  # egress bit/s
    packet_bytes: FloatArray  # mean egress packet size (1500 when no packet was counted)


def measure(
    prev_tx: FloatArray, prev_pk: FloatArray, tx: FloatArray, pk: FloatArray, dt: float
) -> Measured:
    """The rates between two readings of whole counters (bytes and packets sent), ``dt``
    seconds apart. Counters below 2^53 subtract exactly as floats, so the rates are the
    ones integer arithmetic gives."""

    def f64(a: FloatArray) -> FloatArray:
        return np.ascontiguousarray(a, dtype=np.float64)

    valid, bps, pkt = _core.measure(f64(prev_tx), f64(prev_pk), f64(tx), f64(pk), float(dt))
    return Measured(valid, bps, pkt)


class RateMeter:
    """Per-VM egress rate and mean packet size between a host's two latest samples."""

    def __init__(self) -> None:
        self._last: HostSample | None = None

    def observe(self, sample: HostSample) -> dict[str, tuple[float, float]]:
        """vm -> (tx bit/s, mean tx packet bytes) since the previous sample, for the VMs
        in both samples whose counters did not go back."""
        prev, self._last = self._last, sample
        if prev is None:
            return {}
        dt = sample.time_s - prev.time_s
        if dt <= 0:
            return {}
        names = [vm for vm in sample.vms if vm in prev.vms]
        before = [prev.vms[vm] for vm in names]
        now = [sample.vms[vm] for vm in names]
        m = measure(
            np.array([c.tx_bytes for c in before], dtype=np.float64),
            np.array([c.tx_packets for c in before], dtype=np.float64),
            np.array([c.tx_bytes for c in now], dtype=np.float64),
            np.array([c.tx_packets for c in now], dtype=np.float64),
            dt,
        )
        return {
            vm: (bps, pkt)
            for vm, ok, bps, pkt in zip(
                names, m.valid.tolist(), m.bps.tolist(), m.packet_bytes.tolist(), strict=True
            )
            if ok
        }
