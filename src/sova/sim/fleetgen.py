"""Fleet workloads with the statistics of real cluster traces, for trace replay.

Public per-VM traces of production data centres (5-minute samples of network and CPU) share
a few traits that the papers' clean duty cycles lack, and that decide whether a VF or a
migration is worth its cost:

* **heavy-tailed volume**: most VMs send a few Mbit/s or less (an idle majority); a few
  percent carry most of the bytes, with peaks of several Gbit/s. Per-VM mean rates here are
  lognormal for the many and Pareto (index ~1.1) for the heavy few;
* **diurnal cycles**: a business-hours swing, its amplitude and phase varying per VM;
* **autocorrelated noise**: sample-to-sample variation that persists for a few samples
  (AR(1) in log space), not white noise;
* **bursts**: batch jobs and backups that multiply a VM's rate for minutes to an hour,
  arriving as a Poisson process;
* **hybrids**: some VMs are busy on CPU exactly when they are busy on the network (their CPU
  follows their traffic), others are CPU-bound with little traffic.

:func:`generate` draws a fleet from a :class:`FleetShape` and a seed (deterministic: the same
shape and seed give the same fleet, value for value); :func:`write` stores it as a scenario
YAML and one CSV (``time_s``, then ``<vm>_mbps`` and ``<vm>_cpu`` per VM) that ``sova
simulate`` replays with ``kind: trace`` and ``cpu_column``. The statistics are checked by
tests on what is generated (tests/test_fleetgen.py), not by fixed outputs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

DAY_S = 86_400.0
# The roles a VM is drawn into; the generator's tests read them to check each trait.
IDLE, LIGHT, HEAVY, CPU_BOUND = "idle", "light", "heavy", "cpu-bound"

# The simulated hardware of a generated fleet: the Sova paper's testbed profile
# (scenarios/profiles/sova.yaml: hot-plug 2 s / 1 s, one guest's paravirtual path about half
# of a 10 GbE line), written into the scenario so it runs from any folder.
FLEET_PROFILE: dict[str, Any] = {
    "name": "fleet",
    "hotplug_attach": "2s",
    "hotplug_detach": "1s",
    "virtio_pps_limit": 1_200_000,
    "cycle_min": "0.5s",
    "cycle_max": "2s",
    "virtio_flow_limit": "5Gbit",
}


@dataclass(frozen=True)
class FleetShape:
    """What a generated fleet looks like; every share is of the VMs."""

    hosts: int = 8
    vms: int = 200
    duration_s: float = DAY_S
    sample_s: float = 300.0  # the public traces' 5-minute samples
    start_s: float = 0.0  # time of day the trace starts (the diurnal cycle's clock)
    seed: int = 0
    idle_share: float = 0.5  # send well under 1 Mbit/s
    heavy_share: float = 0.05  # Pareto-tailed senders: most of the bytes
    cpu_bound_share: float = 0.08  # CPU-busy, little traffic
    hybrid_share: float = 0.4  # of the heavy senders: CPU follows their traffic
    light_median_mbps: float = 3.0
    heavy_scale_mbps: float = 40.0  # the Pareto's minimum mean rate
    heavy_alpha: float = 1.1
    net_scale: float = 1.0  # multiplies every rate (the "network x4")
    bursts_per_day: float = 2.0  # per light or heavy VM
    nic_capacity_gbit: float = 10.0
    vf_pool: int = 2
    cores: int = 32
    tick_s: float = 5.0

    def __post_init__(self) -> None:
        checks: list[tuple[str, float, bool]] = [
            ("hosts", self.hosts, self.hosts >= 1),
            ("vms", self.vms, self.vms >= 1),
            ("duration_s", self.duration_s, self.duration_s >= self.sample_s),
            ("sample_s", self.sample_s, self.sample_s > 0),
            ("start_s", self.start_s, self.start_s >= 0),
            ("idle_share", self.idle_share, 0 <= self.idle_share <= 1),
            ("heavy_share", self.heavy_share, 0 <= self.heavy_share <= 1),
            ("cpu_bound_share", self.cpu_bound_share, 0 <= self.cpu_bound_share <= 1),
            ("hybrid_share", self.hybrid_share, 0 <= self.hybrid_share <= 1),
            ("net_scale", self.net_scale, self.net_scale > 0),
            ("vf_pool", self.vf_pool, self.vf_pool >= 0),
            ("tick_s", self.tick_s, 0 < self.tick_s <= self.sample_s),
        ]
        for name, value, ok in checks:
            if not ok or not math.isfinite(value):
                raise ValueError(f"{name}: out of range (got {value})")
        if self.idle_share + self.heavy_share + self.cpu_bound_share > 1:
            raise ValueError(
                "idle_share + heavy_share + cpu_bound_share: must be at most 1 (got "
                f"{self.idle_share + self.heavy_share + self.cpu_bound_share:g})"
            )


@dataclass
class Fleet:
    """A generated fleet: per-VM series on one time axis, and where each VM runs."""

    shape: FleetShape
    time_s: np.ndarray  # (T,)
    names: list[str]
    roles: list[str]
    hybrid: np.ndarray  # (N,) bool: CPU follows the VM's traffic
    mbps: np.ndarray  # (N, T) offered network (rx + tx), Mbit/s
    cpu: np.ndarray  # (N, T) CPU busy share of the VM's vCPUs, 0..1
    vcpus: list[int]
    memory_gib: list[int]
    host_of: list[int]
    extra: dict[str, Any] = field(default_factory=dict)


def generate(shape: FleetShape) -> Fleet:
    # Every draw comes from one stream, in a fixed order (roles, means, diurnal swing,
    # noise, bursts, CPU, sizes, placement): the same seed, the same fleet.
    rng = np.random.default_rng([shape.seed, 35])
    n = shape.vms
    t = np.arange(0.0, shape.duration_s, shape.sample_s)
    T = t.size
    roles = _roles(rng, shape)
    is_ = {r: roles == r for r in (IDLE, LIGHT, HEAVY, CPU_BOUND)}
    mean = _mean_rates(rng, shape, is_)

    # diurnal swing: business hours, per-VM amplitude and a phase jitter of ~1 h
    amp = np.where(is_[IDLE], rng.uniform(0.0, 0.3, n), rng.uniform(0.3, 0.9, n))
    phase = 14.0 / 24.0 - 0.25 + rng.normal(0.0, 1.0 / 24.0, n)  # peak about 14:00
    day = (t + shape.start_s)[None, :] / DAY_S
    diurnal = 1.0 + amp[:, None] * np.sin(2 * np.pi * (day - phase[:, None]))

    noise = _ar_noise(rng, n, T)
    burst = _bursts(rng, shape, t, roles, is_)
    cap = 0.9 * shape.nic_capacity_gbit * 1e3
    mbps = np.minimum(mean[:, None] * diurnal * noise * burst * shape.net_scale, cap)
    cpu, hybrid = _cpu(rng, shape, is_, diurnal, mbps)

    vcpus = np.where(is_[HEAVY] | is_[CPU_BOUND], rng.choice([4, 8], n), rng.choice([1, 2, 4], n))
    memory = rng.choice([2, 4, 8, 16], n)
    # balanced placement in a random order: every host gets n/H VMs (±1)
    order = rng.permutation(n)
    host_of = np.empty(n, dtype=int)
    host_of[order] = np.arange(n) % shape.hosts
    width = len(str(n))
    return Fleet(
        shape=shape,
        time_s=t,
        names=[f"vm{i + 1:0{width}d}" for i in range(n)],
        roles=[str(r) for r in roles],
        hybrid=hybrid,
        mbps=np.round(mbps, 4),
        cpu=np.round(cpu, 4),
        vcpus=[int(v) for v in vcpus],
        memory_gib=[int(m) for m in memory],
        host_of=[int(h) for h in host_of],
    )


def _roles(rng: np.random.Generator, shape: FleetShape) -> np.ndarray:
    """Each VM's role, the shares of the shape dealt in a random order."""
    n = shape.vms
    n_idle = round(shape.idle_share * n)
    n_heavy = max(1, round(shape.heavy_share * n)) if shape.heavy_share > 0 else 0
    n_cpu = round(shape.cpu_bound_share * n)
    n_light = max(0, n - n_idle - n_heavy - n_cpu)
    roles = np.array([IDLE] * n_idle + [HEAVY] * n_heavy + [CPU_BOUND] * n_cpu + [LIGHT] * n_light)
    roles = roles[:n]
    rng.shuffle(roles)
    return roles


def _mean_rates(
    rng: np.random.Generator, shape: FleetShape, is_: dict[str, np.ndarray]
) -> np.ndarray:
    """Each VM's mean rate (Mbit/s) by its role: lognormal, heavy-tailed for the heavy."""
    mean = np.empty(shape.vms)
    mean[is_[IDLE]] = rng.lognormal(math.log(0.15), 0.8, int(is_[IDLE].sum()))
    mean[is_[LIGHT]] = rng.lognormal(math.log(shape.light_median_mbps), 1.0, int(is_[LIGHT].sum()))
    mean[is_[CPU_BOUND]] = rng.lognormal(math.log(1.0), 0.8, int(is_[CPU_BOUND].sum()))
    k = int(is_[HEAVY].sum())
    # Pareto (Lomax + 1): P(X > x) = x^-alpha above the scale; capped so that a diurnal peak
    # with a burst still fits the line
    heavy = shape.heavy_scale_mbps * (1.0 + rng.pareto(shape.heavy_alpha, k))
    mean[is_[HEAVY]] = np.minimum(heavy, 0.25 * shape.nic_capacity_gbit * 1e3)
    return mean


def _ar_noise(rng: np.random.Generator, n: int, T: int) -> np.ndarray:
    """AR(1) noise in log space, correlated over a few samples, mean 1."""
    rho, sigma = 0.8, 0.4
    z = rng.normal(0.0, 1.0, (n, T))
    ar = np.empty((n, T))
    ar[:, 0] = z[:, 0]
    for j in range(1, T):
        ar[:, j] = rho * ar[:, j - 1] + math.sqrt(1 - rho * rho) * z[:, j]
    return np.exp(sigma * ar - sigma * sigma / 2)


def _bursts(
    rng: np.random.Generator,
    shape: FleetShape,
    t: np.ndarray,
    roles: np.ndarray,
    is_: dict[str, np.ndarray],
) -> np.ndarray:
    """Burst multipliers: Poisson arrivals, exponential lengths (mean 20 min), lognormal
    gains."""
    n = shape.vms
    burst = np.ones((n, t.size))
    days = shape.duration_s / DAY_S
    rate = np.where(is_[IDLE] | is_[CPU_BOUND], 0.2, 1.0) * shape.bursts_per_day * days
    counts = rng.poisson(rate)
    for i in range(n):
        for _ in range(int(counts[i])):
            start = rng.uniform(0.0, shape.duration_s)
            length = max(shape.sample_s, rng.exponential(1200.0))
            gain = rng.lognormal(math.log(4.0 if roles[i] == HEAVY else 10.0), 0.6)
            on = (t >= start) & (t < start + length)
            burst[i, on] *= gain
    return burst


def _cpu(
    rng: np.random.Generator,
    shape: FleetShape,
    is_: dict[str, np.ndarray],
    diurnal: np.ndarray,
    mbps: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """CPU: a per-VM base with the same diurnal swing and its own noise; CPU-bound VMs busy;
    hybrids add CPU in proportion to their traffic relative to their own peak. Returns the
    CPU share per VM and sample, and which VMs are hybrids."""
    n, T = shape.vms, mbps.shape[1]
    base = np.where(
        is_[CPU_BOUND],
        rng.uniform(0.45, 0.8, n),
        np.where(is_[IDLE], rng.uniform(0.01, 0.06, n), rng.beta(2.0, 18.0, n)),
    )
    cpu_noise = np.exp(0.2 * rng.normal(0.0, 1.0, (n, T)) - 0.02)
    cpu = base[:, None] * (1.0 + 0.5 * (diurnal - 1.0)) * cpu_noise
    hybrid = np.zeros(n, dtype=bool)
    heavy_idx = np.flatnonzero(is_[HEAVY])
    if heavy_idx.size and shape.hybrid_share > 0:
        m = max(1, round(shape.hybrid_share * heavy_idx.size))
        hybrid[rng.choice(heavy_idx, m, replace=False)] = True
    gain_cpu = rng.uniform(0.5, 0.8, n)
    peak = np.maximum(mbps.max(axis=1), 1e-9)
    cpu = np.where(hybrid[:, None], cpu + gain_cpu[:, None] * mbps / peak[:, None], cpu)
    return np.clip(cpu, 0.0, 1.0), hybrid


def scenario_data(fleet: Fleet, trace_name: str, name: str) -> dict[str, Any]:
    """The scenario mapping that replays ``fleet`` from CSV ``trace_name`` (beside it)."""
    s = fleet.shape
    hosts = []
    for h in range(s.hosts):
        members = [v for v, hv in zip(fleet.names, fleet.host_of, strict=True) if hv == h]
        need = sum(m for m, hv in zip(fleet.memory_gib, fleet.host_of, strict=True) if hv == h)
        hosts.append(
            {
                "name": f"host{h + 1}",
                "cores": s.cores,
                "memory": f"{max(64, 2 * need)}GiB",
                "nic": {
                    "name": "ens1f0",
                    "capacity": f"{s.nic_capacity_gbit:g}Gbit",
                    "vf_pool": s.vf_pool,
                },
                "vms": members,
            }
        )
    return {
        "name": name,
        "description": (
            f"Generated fleet (sova.sim.fleetgen): {s.vms} VMs on {s.hosts} hosts, seed "
            f"{s.seed}, {s.duration_s / 3600:g} h of {s.sample_s:g} s samples; heavy-tailed "
            "volume, diurnal cycles, bursts, CPU-and-network hybrids, an idle majority."
        ),
        "seed": s.seed,
        "duration": f"{s.duration_s:g}s",
        "tick": f"{s.tick_s:g}s",
        "profile": dict(FLEET_PROFILE),
        "hosts": hosts,
        "vms": [
            {"name": v, "vcpus": c, "memory": f"{m}GiB"}
            for v, c, m in zip(fleet.names, fleet.vcpus, fleet.memory_gib, strict=True)
        ],
        "workload": [
            {
                "at": 0,
                "vms": {
                    v: {
                        "kind": "trace",
                        "trace": trace_name,
                        "column": f"{v}_mbps",
                        "cpu_column": f"{v}_cpu",
                    }
                    for v in fleet.names
                },
            }
        ],
        "compare": [
            {"name": "do-nothing", "vf": "default", "bandwidth": "none"},
            "static-sriov",
            "dsr-iov",
            {"name": "sova", "vf": "sova", "bandwidth": "sova"},
        ],
    }


def write(fleet: Fleet, out_dir: Path, name: str | None = None) -> Path:
    """Write ``<name>.yaml`` and ``<name>.csv`` into ``out_dir``; returns the YAML's path."""
    s = fleet.shape
    name = name or f"fleet-h{s.hosts}-v{s.vms}-s{s.seed}"
    out_dir.mkdir(parents=True, exist_ok=True)
    csv_path = out_dir / f"{name}.csv"
    header = ["time_s"] + [c for v in fleet.names for c in (f"{v}_mbps", f"{v}_cpu")]
    cols = np.empty((fleet.time_s.size, 1 + 2 * len(fleet.names)))
    cols[:, 0] = fleet.time_s
    cols[:, 1::2] = fleet.mbps.T
    cols[:, 2::2] = fleet.cpu.T
    tmp = csv_path.with_suffix(".csv.tmp")
    with tmp.open("w") as fh:
        fh.write(",".join(header) + "\n")
        np.savetxt(fh, cols, delimiter=",", fmt="%.10g")
    tmp.replace(csv_path)
    yaml_path = out_dir / f"{name}.yaml"
    data = scenario_data(fleet, csv_path.name, name)
    tmp = yaml_path.with_suffix(".yaml.tmp")
    tmp.write_text(yaml.safe_dump(data, sort_keys=False, width=100))
    tmp.replace(yaml_path)
    return yaml_path
