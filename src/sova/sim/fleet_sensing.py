"""Every host's sensing of a simulated world in one pass of the policy's sensor kernel.

:meth:`HostAgent.step` reads its host's counters into a :class:`~sova.policy.sensing.HostSensor`
(per-VM deques of period objects) and computes each VM's factors in Python; across a large
world that was a third of the run time. Here the world reads the engine's counter arrays
once per control period, :class:`~sova.policy.kernels.SensorKernel` computes every VM's
factors at once, and each host's agent gets its VMs' factors (:class:`~sova.agent.loop.Sensed`)
and decides, plans and applies as usual. Those per-VM factor objects are built only when
read (:class:`HostFactors`): the hosts the world decides for
(:mod:`sova.sim.fleet_control`) never read them. The host and VM load shares the agent reports to
the manager (``host_load``/``vm_loads`` of the host's last two samples) come from
:func:`~sova.policy.kernels.load_shares` in the same pass, so no agent reads a sample.

What a host's sensor would have seen is reproduced exactly: counters are whole numbers as a
driver reads them, a VM that arrived on a host since the last period starts an empty window
there, and NF is normalised over the VMs of each host (``tests/test_kernels.py`` holds the
kernel equal to ``HostSensor``; ``scripts/golden.py check`` holds the runs byte-identical).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

import numpy as np

from sova.agent.config import ControllerConfig
from sova.agent.loop import Loads, Sensed
from sova.policy.kernels import LoadArrays, SensedFactors, SensorKernel, load_shares
from sova.policy.sensing import LoadShares, VMFactors
from sova.sim.engine import Engine


class HostFactors(Mapping[str, VMFactors]):
    """One host's :class:`~sova.policy.sensing.VMFactors` (``Sensed.factors``) from the
    period's factor arrays, built when first read: the hosts the world decides for take
    their decision and their timeline rows from the arrays, so most hosts' are never read.
    What is built is what the arrays held that period (the kernel makes new ones each
    period)."""

    __slots__ = ("_args", "_built")

    def __init__(self, factors: SensedFactors, names: Sequence[str], rows: list[int]) -> None:
        self._args = (factors, names, rows)
        self._built: dict[str, VMFactors] | None = None

    def _factors(self) -> dict[str, VMFactors]:
        if self._built is None:
            f, names, rows = self._args
            m = np.array(rows, dtype=np.int64)
            cols = zip(
                rows,
                f.cpu_usage[m].tolist(),
                f.io_degree[m].tolist(),
                f.io_factor[m].tolist(),
                f.net_degree[m].tolist(),
                f.net_factor[m].tolist(),
                f.has_traffic[m].tolist(),
                f.demand_bps[m].tolist(),
                f.last_rate_bps[m].tolist(),
                f.tx_bps[m].tolist(),
                f.rx_bps[m].tolist(),
                strict=True,
            )
            self._built = {names[i]: VMFactors(names[i], *vals) for i, *vals in cols}
        return self._built

    def __getitem__(self, vm: str) -> VMFactors:
        return self._factors()[vm]

    def __iter__(self) -> Iterator[str]:
        return iter(self._factors())

    def __len__(self) -> int:
        return len(self._args[2])

    def __reduce__(self) -> tuple[type[dict[str, VMFactors]], tuple[dict[str, VMFactors]]]:
        return dict, (self._factors(),)  # travels as the plain mapping it is


class HostLoads(Mapping[str, LoadShares]):
    """One host's :func:`~sova.policy.sensing.vm_loads` (``Loads.vms``) from the period's
    load arrays, built when first read (the manager reads the VMs of the few hosts it may
    move a VM off or onto)."""

    __slots__ = ("_args", "_built")

    def __init__(self, loads: LoadArrays, names: Sequence[str], rows: list[int]) -> None:
        self._args = (loads, names, rows)
        self._built: dict[str, LoadShares] | None = None

    def _loads(self) -> dict[str, LoadShares]:
        if self._built is None:
            a, names, rows = self._args
            m = np.array(rows, dtype=np.int64)
            cols = zip(
                rows, a.vm_cpu[m].tolist(), a.vm_mem[m].tolist(), a.vm_net[m].tolist(), strict=True
            )
            self._built = {names[i]: LoadShares(c, mem, net) for i, c, mem, net in cols}
        return self._built

    def __getitem__(self, vm: str) -> LoadShares:
        return self._loads()[vm]

    def __iter__(self) -> Iterator[str]:
        return iter(self._loads())

    def __len__(self) -> int:
        return len(self._args[2])

    def __reduce__(self) -> tuple[type[dict[str, LoadShares]], tuple[dict[str, LoadShares]]]:
        return dict, (self._loads(),)  # travels as the plain mapping it is


class FleetSensing:
    def __init__(self, engine: Engine, config: ControllerConfig) -> None:
        s = config.sensing
        self.kernel = SensorKernel(engine.N, s.window, s.epsilon, s.traffic_threshold)
        hosts = engine.hosts
        self.cores = np.array([float(h.cores) for h in hosts])
        self.memory = np.array([float(h.memory_bytes) for h in hosts])
        self.capacity = np.array([h.nic.capacity_bps for h in hosts])
        # the previous reading for the loads: (time, host totals, VM counters, VM hosts)
        self.prev: tuple[float, np.ndarray, np.ndarray, np.ndarray] | None = None
        # the last period's factors of every VM (the world's VF scheduling reads them)
        self.factors: SensedFactors | None = None

    def sense(self, engine: Engine) -> dict[str, Sensed]:
        """One period's reading of every VM; each host's factors and whether it has measured."""
        e = engine
        host = e.host.copy()
        counters = np.floor(np.stack((e.cpu_ns, e.steal_ns, e.rx_b, e.tx_b, e.rx_pk, e.tx_pk)))
        k = self.kernel
        k.observe(e.env.now, counters, e.vcpus, host)
        f = self.factors = k.factors(host, e.H)
        # each host's VMs in index order (the order the agent's sensor lists them)
        order = np.argsort(host, kind="stable")
        cut = np.searchsorted(host[order], np.arange(e.H + 1)).tolist()
        order_l, names = order.tolist(), e.vm_names
        per_host = [HostFactors(f, names, order_l[cut[h] : cut[h + 1]]) for h in range(e.H)]
        measured = np.bincount(host, f.count > 0, minlength=e.H) > 0
        loads = self._loads(e, counters, host)
        return {
            hn: Sensed(per_host[hi], bool(measured[hi]), loads[hi])
            for hi, hn in enumerate(e.host_names)
        }

    def _loads(self, e: Engine, counters: np.ndarray, host: np.ndarray) -> list[Loads]:
        """Every host's loads since the previous period (``HostAgent._observe``'s)."""
        now = e.env.now
        totals = np.trunc(np.stack((e.h_cpu_ns, e.h_rx_b, e.h_tx_b)))
        prev, self.prev = self.prev, (now, totals, counters, host)
        if prev is None:
            return [Loads(False, None, {}) for _ in range(e.H)]
        t0, prev_totals, prev_counters, prev_host = prev
        a = load_shares(
            now - t0,
            prev_totals,
            totals,
            prev_counters,
            counters,
            host != prev_host,
            host,
            np.trunc(e.mem),
            self.cores,
            self.memory,
            self.capacity,
        )
        # each host's measured VMs in index order (vm_loads' order), built when read
        ok = np.flatnonzero(a.vm_ok)
        order = ok[np.argsort(host[ok], kind="stable")]
        cut = np.searchsorted(host[order], np.arange(e.H + 1)).tolist()
        order_l, names = order.tolist(), e.vm_names
        vms = [HostLoads(a, names, order_l[cut[h] : cut[h + 1]]) for h in range(e.H)]
        hosts = zip(
            a.host_ok.tolist(),
            a.host_cpu.tolist(),
            a.host_mem.tolist(),
            a.host_net.tolist(),
            vms,
            strict=True,
        )
        return [
            Loads(True, LoadShares(cpu, mem, net) if ok else None, v)
            for ok, cpu, mem, net, v in hosts
        ]
