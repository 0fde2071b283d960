"""The policy's arithmetic as array kernels over every host of a cluster at once.

What is left of them here is the layout the bandwidth step groups flows by and an exact
per-host sum; the allocator itself is the compiled core's (:mod:`sova.policy.allocation`).

Flows are grouped by host: :class:`Groups` builds the layout once per round from a host
index per flow (a row and slot per flow, and the compiled core's ``order``/``start``).

Exactness. The specification sums with :func:`math.fsum` (correctly rounded); the core's
``links_fsum`` is CPython's algorithm (rust/sova-core/src/sum.rs), so every host's sum is
the float ``math.fsum`` returns. The numpy form it replaced (error-free TwoSum terms,
certified by a bound, ``fsum`` for the rows the bound could not certify) is kept in
tests/test_kernels.py beside ``math.fsum`` as the oracles.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from sova.policy import _core
from sova.policy.loads import LoadArrays as LoadArrays
from sova.policy.loads import demand_load_arrays as demand_load_arrays
from sova.policy.loads import load_shares as load_shares

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True)
class Groups:
    """Flows grouped by host: ``row[i], slot[i]`` is flow ``i``'s cell in a host matrix."""

    n_hosts: int
    row: IntArray
    slot: IntArray
    count: IntArray  # flows per host
    # host h's flows in slot order are order[start[h]:start[h + 1]] (the compiled core's layout)
    order: IntArray
    start: IntArray

    @classmethod
    def of(cls, host: IntArray, n_hosts: int) -> Groups:
        host = np.asarray(host, dtype=np.int64)
        count = np.bincount(host, minlength=n_hosts).astype(np.int64)
        order = np.argsort(host, kind="stable")
        starts = np.concatenate(([0], np.cumsum(count)[:-1]))
        slot = np.empty(len(host), dtype=np.int64)
        slot[order] = np.arange(len(host), dtype=np.int64) - starts[host[order]]
        start = np.concatenate(([0], np.cumsum(count))).astype(np.int64)
        return cls(n_hosts, host, slot, count, order.astype(np.int64), start)

    def fsum(self, values: FloatArray) -> FloatArray:
        """``math.fsum`` of each host's flows (0.0 for a host without flows)."""
        v = np.ascontiguousarray(values, dtype=np.float64)
        return _core.links_fsum(self.order, self.start, v)
