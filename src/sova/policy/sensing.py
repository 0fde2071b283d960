"""Sensing: from cumulative counters to the factors the VF scheduler ranks by.

Drivers hand us cumulative counters (libvirt ``cpu.time``, tap/VF byte counters); a
*sample* is the difference between two readings over the period Δt. Counters go
backwards when a VM reboots, migrates or re-plugs its NIC; such a negative difference is a
reset, and that period is dropped from the window instead of being read as a huge burst.

The factors, with the papers' errors fixed as docs/design.md#sensing decides:

* ``cpu_usage = Δcpu_time_ns / (Δt·1e9·vcpus)``. DSR-IOV eq. (2) divides by the *host's*
  cores and multiplies by 100, but its own Table 2 (a 100 %-busy VM has io_degree 7.82)
  only fits a fraction normalised by the VM's own vCPUs.
* ``io_degree = 100·(1 − mean cpu_usage)`` (DSR-IOV eq. 3).
* Sova ``IF`` (eq. 1) = mean of ``blocked/gotten`` where on KVM gotten = Δcpu_time and
  blocked = Δt·vcpus − Δcpu_time − Δsteal. Gotten is floored so an idle VM has a large,
  finite IF.
* DSR-IOV ``net_degree`` (eq. 4–6) = ε·data_avg + (1−ε)·traffic_freq with data_avg in
  kB/s (1 kB = 1000 B) so it does not depend on the sampling period; its Table 2 values
  (27,703 … 175,117) are of that order for 0.2–1.3 Gbit/s.
* Sova ``NF`` (eq. 2–4) = ε·Traffic_freq + (1−ε)·Traffic_avg. The paper's min/max are
  ambiguous; we min–max normalise packet counts across *all VMs of the host* over the
  window, so NF ∈ [0, 1] and NFs of different VMs are comparable (a per-VM normalisation
  would give every steadily busy VM the same NF).

Censored demand (docs/design.md#censored-demand). What got through is not what a VM
wanted when its path held it back, so each period is also marked *censored* when the VM
sent at its path's ceiling — within ``censor_margin`` of the lowest of its VF max rate,
its guest rate limit and the line rate — or sent on virtio with its vCPUs saturated
(``cpu_saturation``: on virtio every packet costs the guest VM exits, so a full vCPU is
virtio's ceiling for that guest). The drivers report no drops or queue lengths
(:class:`~sova.model.VMCounters`), so those are not read. ``VMFactors.censored`` is the
latest period's mark; ``VMFactors.demand_est_bps`` the window mean with every censored
period counted ``(1 + censor_margin)`` times its rate: a lower bound that grows, like the
bandwidth loop's probe, for as long as the path keeps holding the VM back.

One implementation, the compiled core's (rust/sova-core/src/sensing.rs, docs/design.md
"The compiled core"): :class:`SensorKernel` keeps the windows of every VM it is given and
computes their factors in one call each, for a whole simulated fleet (``sim/fleet_sensing.py``)
or, through :class:`HostSensor`, for the VMs of one host (the agent: a fleet of one). The
readable per-VM form it replaced is kept in tests/sensing_oracle.py as the oracle it is held
to, float for float.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from sova.model import HostSample
from sova.policy import _core
from sova.policy.loads import LoadShares as LoadShares
from sova.policy.loads import demand_loads as demand_loads
from sova.policy.loads import host_load as host_load
from sova.policy.loads import vm_loads as vm_loads

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

# Below this rate a period counts as "no traffic": ARP, NTP and DHCP chatter of an idle
# guest must not make it look network-active.
DEFAULT_TRAFFIC_THRESHOLD_BPS = 10_000.0
# A VM sending at >= (1 - margin) of its ceiling may want more (the bandwidth loop's probe).
DEFAULT_CENSOR_MARGIN = 0.10
# vCPU use at or above this on virtio, with traffic, is virtio's ceiling for that guest.
DEFAULT_CPU_SATURATION = 0.95


@dataclass(frozen=True)
class VMFactors:
    vm: str
    cpu_usage: float  # of the latest period
    io_degree: float
    io_factor: float
    net_degree: float
    net_factor: float  # Sova NF, host-normalised
    has_traffic: bool  # any period of the window carried traffic
    demand_bps: float  # mean rx+tx rate over the window
    last_rate_bps: float
    tx_bps: float  # latest period
    rx_bps: float
    censored: bool = False  # the latest period was held back by the path (module docstring)
    demand_est_bps: float = 0.0  # demand estimate: censored periods count (1 + margin) x


@dataclass(frozen=True)
class SensedFactors:
    """:class:`VMFactors` of every VM, one array per field."""

    cpu_usage: FloatArray
    io_degree: FloatArray
    io_factor: FloatArray
    net_degree: FloatArray
    net_factor: FloatArray
    has_traffic: BoolArray
    demand_bps: FloatArray
    last_rate_bps: FloatArray
    tx_bps: FloatArray
    rx_bps: FloatArray
    count: IntArray  # periods in each VM's window (0 = nothing measured yet)
    censored: BoolArray  # the latest period was held back by the path (module docstring)
    demand_est_bps: FloatArray  # censored periods count (1 + censor_margin) x


class SensorKernel:
    """The windows of ``n_vms`` VMs, one row each, and their factors (the core's).

    A VM whose host changed since the last reading starts an empty window and skips that
    period (the new host's sensor has no previous reading of it); a VM whose counter went
    back skips it too (a reset, counted in :attr:`resets`); a repeated or out-of-order
    reading is ignored.
    """

    def __init__(
        self,
        n_vms: int,
        num: int = 6,
        epsilon: float = 0.7,
        threshold_bps: float = DEFAULT_TRAFFIC_THRESHOLD_BPS,
        censor_margin: float = DEFAULT_CENSOR_MARGIN,
        cpu_saturation: float = DEFAULT_CPU_SATURATION,
    ) -> None:
        self._sensor = _core.Sensor(
            n_vms, num, epsilon, threshold_bps, censor_margin, cpu_saturation
        )

    @classmethod
    def _of(cls, sensor: _core.Sensor) -> SensorKernel:
        kernel = cls.__new__(cls)
        kernel._sensor = sensor
        return kernel

    @property
    def resets(self) -> int:
        return self._sensor.resets

    def accepts(self, t: float) -> bool:
        """Whether a reading at ``t`` would be taken (it is later than the last one)."""
        return self._sensor.accepts(t)

    def measured(self) -> bool:
        """Whether some VM has a full period in its window."""
        return self._sensor.measured()

    def remap(self, keep: list[int]) -> SensorKernel:
        """These windows over another list of VMs: row ``i`` is the old row ``keep[i]``, or
        a VM not seen before where it is -1."""
        return SensorKernel._of(self._sensor.remap(np.array(keep, dtype=np.int64)))

    def observe(
        self,
        t: float,
        counters: npt.ArrayLike,
        vcpus: FloatArray,
        host: IntArray,
        ceiling: FloatArray | None = None,
        virtio: BoolArray | None = None,
    ) -> None:
        """Take a reading: ``counters`` is (6, N) cpu, steal, rx_b, tx_b, rx_pk, tx_pk, whole
        numbers as a driver reads them; ``host`` is each VM's host now; ``ceiling`` each
        VM's path ceiling in bit/s (inf = none) and ``virtio`` whether it is on virtio, as
        :meth:`HostSensor.observe` takes them (None: no ceiling, nobody on virtio)."""

        def f64(a: npt.ArrayLike) -> FloatArray:
            return np.ascontiguousarray(a, dtype=np.float64)

        self._sensor.observe(
            float(t),
            np.ascontiguousarray(counters, dtype=np.int64).reshape(-1),
            f64(vcpus),
            np.ascontiguousarray(host, dtype=np.int64),
            None if ceiling is None else f64(ceiling),
            None if virtio is None else np.ascontiguousarray(virtio, dtype=np.bool_),
        )

    def factors(self, host: IntArray, n_hosts: int) -> SensedFactors:
        """Every VM's factors; NF is normalised over the VMs of its host (``host``)."""
        f = self._sensor.factors(np.ascontiguousarray(host, dtype=np.int64), n_hosts)
        return SensedFactors(
            cpu_usage=f[0],
            io_degree=f[1],
            io_factor=f[2],
            net_degree=f[3],
            net_factor=f[4],
            has_traffic=f[5],
            demand_bps=f[6],
            last_rate_bps=f[7],
            tx_bps=f[8],
            rx_bps=f[9],
            count=self._sensor.count,
            censored=f[10],
            demand_est_bps=f[11],
        )


class HostSensor:
    """One host's VMs as a fleet of one :class:`SensorKernel`, by name.

    Feed it :class:`HostSample` objects in time order, read factors. VMs that disappear
    from a sample (migrated away, destroyed) are forgotten; a VM that appears starts with
    an empty window.
    """

    def __init__(
        self,
        num: int = 6,
        epsilon: float = 0.7,
        traffic_threshold_bps: float = DEFAULT_TRAFFIC_THRESHOLD_BPS,
        censor_margin: float = DEFAULT_CENSOR_MARGIN,
        cpu_saturation: float = DEFAULT_CPU_SATURATION,
    ) -> None:
        self._kernel = SensorKernel(
            0, num, epsilon, traffic_threshold_bps, censor_margin, cpu_saturation
        )
        self._names: list[str] = []  # the kernel's rows: kept VMs in order, then new ones
        self._rows: dict[str, int] = {}

    @property
    def resets(self) -> int:
        return self._kernel.resets

    def observe(
        self,
        sample: HostSample,
        ceilings: Mapping[str, float] | None = None,
        virtio: Collection[str] = (),
    ) -> None:
        """Take a reading. ``ceilings``: each VM's path ceiling in bit/s (the lowest of its
        VF max rate, guest limit and the line rate; a VM not named has none); ``virtio``:
        the VMs on virtio. Both as the host is when the reading is taken: a path changed
        inside the period is judged by its new ceiling for that one period."""
        if not self._kernel.accepts(sample.time_s):
            # a repeated or out-of-order reading carries no new information: its VMs are
            # not forgotten either, or the next period would lose them
            return
        rows = self._rows
        names = [
            *(vm for vm in self._names if vm in sample.vms),
            *(vm for vm in sample.vms if vm not in rows),
        ]
        if names != self._names:
            self._kernel = self._kernel.remap([rows.get(vm, -1) for vm in names])
            self._names, self._rows = names, {vm: i for i, vm in enumerate(names)}
        vms = [sample.vms[vm] for vm in names]
        counters = [
            [c.cpu_time_ns for c in vms],
            [c.steal_ns for c in vms],
            [c.rx_bytes for c in vms],
            [c.tx_bytes for c in vms],
            [c.rx_packets for c in vms],
            [c.tx_packets for c in vms],
        ]
        limits = ceilings or {}
        self._kernel.observe(
            sample.time_s,
            np.array(counters, dtype=np.int64),
            np.array([c.vcpus for c in vms], dtype=np.float64),
            np.zeros(len(vms), dtype=np.int64),
            np.array([limits.get(vm, math.inf) for vm in names], dtype=np.float64),
            np.array([vm in virtio for vm in names], dtype=np.bool_),
        )

    def measured(self) -> bool:
        """Whether some VM has a full period in its window."""
        return self._kernel.measured()

    def periods(self) -> dict[str, int]:
        """Each VM's periods in its window."""
        f = self._kernel.factors(np.zeros(len(self._names), dtype=np.int64), 1)
        return dict(zip(self._names, f.count.tolist(), strict=True))

    def factors(self) -> dict[str, VMFactors]:
        f = self._kernel.factors(np.zeros(len(self._names), dtype=np.int64), 1)
        cols = zip(
            self._names,
            f.cpu_usage.tolist(),
            f.io_degree.tolist(),
            f.io_factor.tolist(),
            f.net_degree.tolist(),
            f.net_factor.tolist(),
            f.has_traffic.tolist(),
            f.demand_bps.tolist(),
            f.last_rate_bps.tolist(),
            f.tx_bps.tolist(),
            f.rx_bps.tolist(),
            f.censored.tolist(),
            f.demand_est_bps.tolist(),
            strict=True,
        )
        return {c[0]: VMFactors(*c) for c in cols}
