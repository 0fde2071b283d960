"""Every host's sensing of a simulated world in one pass of the policy's sensor kernel.

:meth:`HostAgent.step` reads its host's counters into a :class:`~sova.policy.sensing.HostSensor`
(per-VM deques of period objects) and computes each VM's factors in Python; across a large
world that was a third of the run time. Here the world reads the engine's counter arrays
once per control period, :class:`~sova.policy.kernels.SensorKernel` computes every VM's
factors at once, and each host's agent gets its VMs' factors (:class:`~sova.agent.loop.Sensed`)
and decides, plans and applies as usual.

What a host's sensor would have seen is reproduced exactly: counters are whole numbers as a
driver reads them, a VM that arrived on a host since the last period starts an empty window
there, and NF is normalised over the VMs of each host (``tests/test_kernels.py`` holds the
kernel equal to ``HostSensor``; ``scripts/golden.py check`` holds the runs byte-identical).
"""

from __future__ import annotations

import numpy as np

from sova.agent.config import ControllerConfig
from sova.agent.loop import Sensed
from sova.policy.kernels import SensorKernel
from sova.policy.sensing import VMFactors
from sova.sim.engine import Engine


class FleetSensing:
    def __init__(self, engine: Engine, config: ControllerConfig) -> None:
        s = config.sensing
        self.kernel = SensorKernel(engine.N, s.window, s.epsilon, s.traffic_threshold)

    def sense(self, engine: Engine) -> dict[str, Sensed]:
        """One period's reading of every VM; each host's factors and whether it has measured."""
        e = engine
        host = e.host.copy()
        counters = np.floor(np.stack((e.cpu_ns, e.steal_ns, e.rx_b, e.tx_b, e.rx_pk, e.tx_pk)))
        k = self.kernel
        k.observe(e.env.now, counters, e.vcpus, host)
        f = k.factors(host, e.H)
        per_host: list[dict[str, VMFactors]] = [{} for _ in range(e.H)]
        cols = zip(
            e.vm_names,
            host.tolist(),
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
            strict=True,
        )
        for name, h, *vals in cols:
            per_host[h][name] = VMFactors(name, *vals)
        measured = np.bincount(host, f.count > 0, minlength=e.H) > 0
        return {hn: Sensed(per_host[hi], bool(measured[hi])) for hi, hn in enumerate(e.host_names)}
