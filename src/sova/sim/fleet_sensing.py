"""Every host's sensing of a simulated world in one pass of the policy's sensor kernel.

:meth:`HostAgent.step` reads its host's counters into a :class:`~sova.policy.sensing.HostSensor`
(the compiled sensor over that host's VMs) once per agent; across a large world that was a
third of the run time. Here the world reads the engine's counter arrays once per control
period and the same compiled sensor, :class:`~sova.policy.sensing.SensorKernel` over every
VM of the world, computes every VM's factors at once, and each host's agent gets its VMs' factors (:class:`~sova.agent.loop.Sensed`)
and decides, plans and applies as usual. Those per-VM factor objects are built only when
read (:class:`HostFactors`): the hosts the world decides for
(:mod:`sova.sim.fleet_control`) never read them. The host and VM load shares the agent reports to
the manager (``host_load``/``vm_loads`` of the host's last two samples) come from
:func:`~sova.policy.kernels.load_shares` in the same pass, so no agent reads a sample.
A period's whole sensing is built per host only when read too (:class:`FleetSensed`), and
hands on its arrays to readers that take every host at once.

What a host's sensor would have seen is reproduced exactly: counters are whole numbers as a
driver reads them, a VM that arrived on a host since the last period starts an empty window
there, and NF is normalised over the VMs of each host (``tests/test_kernels.py`` holds the
fleet's factors equal to the readable per-host form's, tests/sensing_oracle.py;
``scripts/golden.py check`` holds the runs byte-identical).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from sova.agent.config import ControllerConfig
from sova.agent.loop import Loads, Sensed
from sova.lazymap import LazyMapping
from sova.policy.kernels import LoadArrays, demand_load_arrays, load_shares
from sova.policy.sensing import LoadShares, SensedFactors, SensorKernel, VMFactors
from sova.sim.engine import Engine


class HostFactors(LazyMapping[str, VMFactors]):
    """One host's :class:`~sova.policy.sensing.VMFactors` (``Sensed.factors``) from the
    period's factor arrays, built when first read: the hosts the world decides for take
    their decision and their timeline rows from the arrays, so most hosts' are never read.
    What is built is what the arrays held that period (the kernel makes new ones each
    period)."""

    __slots__ = ("_args",)

    def __init__(self, factors: SensedFactors, names: Sequence[str], rows: list[int]) -> None:
        self._built = None
        self._args = (factors, names, rows)

    def _build(self) -> dict[str, VMFactors]:
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
            f.censored[m].tolist(),
            f.demand_est_bps[m].tolist(),
            strict=True,
        )
        return {names[i]: VMFactors(names[i], *vals) for i, *vals in cols}

    def __len__(self) -> int:
        return len(self._args[2])


class HostLoads(LazyMapping[str, LoadShares]):
    """One host's :func:`~sova.policy.sensing.vm_loads` (``Loads.vms``) from the period's
    load arrays, built when first read (the manager reads the VMs of the few hosts it may
    move a VM off or onto): its VMs are ``loaded[start:stop]`` (``FleetSensed.loaded``,
    which nothing changes after the period), sliced only then, not for every host."""

    __slots__ = ("_args",)

    def __init__(
        self, loads: LoadArrays, names: Sequence[str], loaded: np.ndarray, start: int, stop: int
    ) -> None:
        self._built = None
        self._args = (loads, names, loaded, start, stop)

    def _build(self) -> dict[str, LoadShares]:
        a, names, loaded, start, stop = self._args
        m = loaded[start:stop]
        cols = zip(
            m.tolist(),
            a.vm_cpu[m].tolist(),
            a.vm_mem[m].tolist(),
            a.vm_net[m].tolist(),
            strict=True,
        )
        return {names[i]: LoadShares(c, mem, net) for i, c, mem, net in cols}

    def columns(self) -> tuple[list[str], list[float], list[float], list[float]]:
        """The VMs' names and cpu, mem, net shares as lists, in the mapping's order,
        without its LoadShares (what a round's ranking reads: VMLoadReports.mover_columns)."""
        a, names, loaded, start, stop = self._args
        m = loaded[start:stop]
        return (
            [names[i] for i in m.tolist()],
            a.vm_cpu[m].tolist(),
            a.vm_mem[m].tolist(),
            a.vm_net[m].tolist(),
        )

    def __len__(self) -> int:
        return self._args[4] - self._args[3]


class _PerHost(NamedTuple):
    """One period's sensing per host, as lists by host index (:meth:`FleetSensed._host_lists`);
    the load columns are empty in the first period (no loads yet)."""

    cut: list[int]  # host h's VMs are FleetSensed.members[cut[h] : cut[h + 1]]
    measured: list[bool]
    loaded_cut: list[int]  # its VMs with a load share: FleetSensed.loaded[lcut[h] : lcut[h + 1]]
    ok: list[bool]  # whether its host share was measured (a counter did not go back)
    cpu: list[float]
    mem: list[float]
    net: list[float]


class FleetSensed(Mapping[str, Sensed]):
    """One period's :class:`~sova.agent.loop.Sensed` of every host (host name -> it),
    each built when first read, and the arrays it is built from for readers that take
    every host at once (the world's VF scheduling, its manager's reports): building a
    ``Sensed`` with its factor and load mappings for each of 1,000 hosts every period was
    most of the sensing pass.

    ``factors`` every VM's factors; ``measured`` per host: some VM has a full period in its
    window; ``loads`` every host's and VM's load shares (None in the first period: no
    earlier reading); ``members`` every VM in host order (index order within a host, the
    sensor's), host ``h``'s at ``members[cut[h]:cut[h + 1]]``; ``loaded`` and
    ``loaded_cut`` the same of the VMs with a load share (``vm_loads``' order)."""

    __slots__ = (
        "factors",
        "measured",
        "loads",
        "members",
        "cut",
        "loaded",
        "loaded_cut",
        "_names",
        "_index",
        "_vm_names",
        "_lists",
        "_built",
    )

    def __init__(
        self,
        engine: Engine,
        factors: SensedFactors,
        measured: np.ndarray,
        members: np.ndarray,
        cut: np.ndarray,
        loads: LoadArrays | None,
        loaded: np.ndarray,
        loaded_cut: np.ndarray,
    ) -> None:
        self.factors, self.measured, self.loads = factors, measured, loads
        self.members, self.cut, self.loaded, self.loaded_cut = members, cut, loaded, loaded_cut
        self._names, self._index, self._vm_names = (
            engine.host_names,
            engine.host_index,
            engine.vm_names,
        )
        self._lists: _PerHost | None = None
        self._built: list[Sensed | None] = [None] * len(engine.host_names)

    def __getitem__(self, host: str) -> Sensed:
        hi = self._index[host]
        s = self._built[hi]
        if s is None:
            p = self._host_lists()
            members = self.members[p.cut[hi] : p.cut[hi + 1]].tolist()
            f = HostFactors(self.factors, self._vm_names, members)
            s = self._built[hi] = Sensed(f, p.measured[hi], self.loads_at(hi))
        return s

    def decided(self, hi: int, sensed: Sensed) -> None:
        """Host ``hi``'s reading with the world's VF decision and inventory
        (:meth:`~sova.sim.fleet_control.FleetControl.decide`): what its agent steps with."""
        self._built[hi] = sensed

    def measured_list(self) -> list[bool]:
        """``measured`` as a list (host index -> whether the host has measured)."""
        return self._host_lists().measured

    def loads_at(self, hi: int) -> Loads:
        """Host ``hi``'s ``Sensed.loads`` without its factors: the agents that step or are
        settled one by one take theirs (most of a world's settled hosts take none: their
        agents read :meth:`vm_loads_at` if anything reads their loads,
        sim/fleet_settle.py)."""
        s = self._built[hi]
        if s is not None and s.loads is not None:
            return s.loads
        if self.loads is None:
            return Loads(False, None, {})
        p = self._host_lists()
        host = LoadShares(p.cpu[hi], p.mem[hi], p.net[hi]) if p.ok[hi] else None
        return Loads(True, host, self.vm_loads_at(hi))

    def vm_loads_at(self, hi: int) -> HostLoads:
        """Host ``hi``'s VM loads (``Loads.vms``); only in a period with loads."""
        a = self.loads
        assert a is not None
        cut = self._host_lists().loaded_cut
        return HostLoads(a, self._vm_names, self.loaded, cut[hi], cut[hi + 1])

    def _host_lists(self) -> _PerHost:
        """What a host's reading takes, as lists by host index, read once per period."""
        if self._lists is None:
            cut = self.cut.tolist()
            a = self.loads
            columns: tuple[list[Any], ...] = (
                ([],) * 4
                if a is None
                else (
                    a.host_ok.tolist(),
                    a.host_cpu.tolist(),
                    a.host_mem.tolist(),
                    a.host_net.tolist(),
                )
            )
            # (a host's members and loaded VMs are read when its Sensed or its VM loads
            # are built: few hosts' are)
            self._lists = _PerHost(cut, self.measured.tolist(), self.loaded_cut.tolist(), *columns)
        return self._lists

    def __contains__(self, host: object) -> bool:
        return host in self._index

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


class FleetSensing:
    def __init__(self, engine: Engine, config: ControllerConfig) -> None:
        s = config.sensing
        self.on_demand = s.hotspot_on_demand  # HostAgent._observe's demand_loads
        self.virtio = config.scheduler.virtio_lossless  # path_ceilings' virtio ceiling
        self.kernel = SensorKernel(
            engine.N, s.window, s.epsilon, s.traffic_threshold, s.censor_margin, s.cpu_saturation
        )
        hosts = engine.hosts
        self.cores = np.array([float(h.cores) for h in hosts])
        self.memory = np.array([float(h.memory_bytes) for h in hosts])
        self.capacity = np.array([h.nic.capacity_bps for h in hosts])
        # the previous reading for the loads: (time, host totals, VM counters, VM hosts)
        self.prev: tuple[float, np.ndarray, np.ndarray, np.ndarray] | None = None
        # the last period's factors of every VM (the world's VF scheduling reads them)
        self.factors: SensedFactors | None = None
        # the last period's sensing, with the readings of the hosts the world decided for
        # (FleetSensed.decided)
        self.last: FleetSensed | None = None
        # each host's last measured load (cpu, mem, net) and whether it has one: every
        # agent's ``last_load`` (a host whose counter went back keeps its previous one), as
        # the world hands them to its manager (World._plan)
        self.last_load = np.zeros((engine.H, 3))
        self.has_load = np.zeros(engine.H, dtype=bool)

    def sense(self, engine: Engine) -> FleetSensed:
        """One period's reading of every VM; each host's factors and whether it has measured."""
        e = engine
        host = e.host.copy()
        counters = np.floor(np.stack((e.cpu_ns, e.steal_ns, e.rx_b, e.tx_b, e.rx_pk, e.tx_pk)))
        k = self.kernel
        # each VM's path ceiling as the agent reads it from its inventory (path_ceilings)
        virtio = ~e.on_vf
        ceiling = np.minimum(
            np.minimum(np.where(e.on_vf, e.vf_max, self.virtio), e.guest_limit),
            self.capacity[host],
        )
        k.observe(e.env.now, counters, e.vcpus, host, ceiling, virtio)
        f = self.factors = k.factors(host, e.H)
        # each host's VMs in index order (the order the agent's sensor lists them)
        bounds = np.arange(e.H + 1)
        order = np.argsort(host, kind="stable")
        cut = np.searchsorted(host[order], bounds)
        measured = np.bincount(host, f.count > 0, minlength=e.H) > 0
        loads = self._loads(e, counters, host)
        if loads is None:
            loaded, loaded_cut = order[:0], np.zeros(e.H + 1, dtype=np.int64)
        else:
            # each host's VMs with a load share in index order (vm_loads' order)
            ok = np.flatnonzero(loads.vm_ok)
            loaded = ok[np.argsort(host[ok], kind="stable")]
            loaded_cut = np.searchsorted(host[loaded], bounds)
        self.last = FleetSensed(e, f, measured, order, cut, loads, loaded, loaded_cut)
        return self.last

    def _loads(self, e: Engine, counters: np.ndarray, host: np.ndarray) -> LoadArrays | None:
        """Every host's loads since the previous period (``HostAgent._observe``'s); None
        in the first period."""
        now = e.env.now
        totals = np.trunc(np.stack((e.h_cpu_ns, e.h_rx_b, e.h_tx_b)))
        prev, self.prev = self.prev, (now, totals, counters, host)
        if prev is None:
            return None
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
        if self.on_demand and self.factors is not None:
            f = self.factors
            a = demand_load_arrays(
                a, host, f.censored, f.demand_est_bps, f.last_rate_bps, self.capacity
            )
        ok_h = a.host_ok
        self.last_load[ok_h] = np.stack((a.host_cpu, a.host_mem, a.host_net), axis=1)[ok_h]
        self.has_load |= ok_h
        return a
