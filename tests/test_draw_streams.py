"""The simulated world's random streams, moved from numpy to the compiled core (issue 36):
the new draws must follow the distributions the old ones did, per workload and profile.

The old streams were numpy's ``Generator`` (PCG64 seeded ``[seed, 1]``) drawn in one
sequence: ``uniform`` for duty-cycle lengths and phases, ``lognormal`` rate jitter,
``normal`` CPU jitter, ``poisson`` arrivals. The new ones are counter-based
(rust/sova-core/src/rng.rs). Values differ draw by draw, so what is compared is the
distribution of what a workload offers: for each shipped profile (scenarios/profiles/,
and the schema's defaults) and each workload kind, a world of ``VMS`` identical VMs is run
for ``WARMUP`` ticks by the engine's own offer (new streams) and by the old numpy form
below (old streams), and the ``VMS`` values of the last tick (one independent sample per
VM: no VM's process depends on another's) are compared by a two-sample
Kolmogorov–Smirnov test, for the offered bit/s and for the CPU benchmark's busy share.

The threshold: ``ks_2samp``'s p-value must exceed 0.001. For two samples from one
distribution that fails one time in a thousand; the seeds are fixed, so the outcome is
the same every run (no flake), and a wrong algorithm (a lost factor in the jitter, a
Poisson mean off by one, a cycle length from the wrong interval) gives p-values far below
it at 4,000 samples a side: the KS statistic's critical value there is
1.95 · sqrt(2 / 4,000) ≈ 0.044. Means are checked too, within 5 standard errors of the
difference (sqrt(var_a / n + var_b / n)).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from scipy.stats import ks_2samp
from tests.test_tick_forms import ref_on_fraction

from sova.scenario import parse_scenario
from sova.sim import workload
from sova.sim.engine import Engine

REPO = Path(__file__).resolve().parents[1]
PROFILES = ["default", *sorted(p.stem for p in (REPO / "scenarios" / "profiles").glob("*.yaml"))]
VMS = 4000
WARMUP = 12  # ticks: longer than a default cycle's 4-16 s is not needed, phases are drawn

# The workloads of the paper scenarios (scenarios/*.yaml), one of each kind: netperf and
# lookbusy duty cycles, iperf bulk streams, httperf requests (Table 3's 1,000 req/s of
# 32 KiB), and an scp file.
KINDS: dict[str, dict[str, Any]] = {
    "duty": {"net": 0.6, "cpu": 0.4, "rate": 1e9},
    "bulk": {"kind": "bulk", "rate": 2e9, "streams": 2},
    "requests": {"kind": "requests", "requests_per_s": 1000, "response": 32768},
    "sparse requests": {"kind": "requests", "requests_per_s": 3, "response": 8192},
    "file": {"kind": "file", "size": 10**12, "rate": 3e9},
}


def _profile(name: str) -> dict[str, Any]:
    if name == "default":
        return {}
    data = yaml.safe_load((REPO / "scenarios" / "profiles" / f"{name}.yaml").read_text())
    assert isinstance(data, dict)
    return data


def _world(profile: str, w: dict[str, Any]) -> Engine:
    names = [f"vm{i}" for i in range(VMS)]
    per = 40
    hosts = [
        {"name": f"h{k}", "cores": 64, "memory": "1TiB", "nic": {"capacity": 1e11, "vf_pool": 8},
         "vms": names[k * per : (k + 1) * per]}
        for k in range(VMS // per)
    ]  # fmt: skip
    data = {
        "name": "draws", "seed": 17, "duration": 60, "tick": 1.0,
        "profile": _profile(profile), "hosts": hosts, "vms": [{"name": n} for n in names],
        "workload": [{"at": 0, "vms": dict.fromkeys(names, w)}],
    }  # fmt: skip
    return Engine(parse_scenario(data, "draws"))


# ---------------------------------------------------------------- the old numpy streams


def _old_reset(eng: Engine, rng: np.random.Generator) -> None:
    """The old ``reset_each`` of every VM: four ``random()`` per VM, in VM order."""
    p, n = eng.profile, eng.N
    u = rng.random(4 * n).reshape(n, 4)
    span = p.cycle_max - p.cycle_min
    for col, (start, length) in enumerate(
        ((eng.net_start, eng.net_len), (eng.cpu_start, eng.cpu_len))
    ):
        length[:] = span * u[:, 2 * col] + p.cycle_min
        start[:] = 0.0 - u[:, 2 * col + 1] * length


def _old_offer(
    eng: Engine, rng: np.random.Generator, t0: float, t1: float
) -> tuple[np.ndarray, np.ndarray]:
    """The old tick's offered bit/s and CPU busy share (``cpu_frac · cj``), drawing from
    ``rng`` in the old order: renewals (net, then CPU), jitter, CPU jitter, arrivals."""
    p, n, dt = eng.profile, eng.N, t1 - t0

    def lengths(idx: np.ndarray, i: int) -> np.ndarray:
        return rng.uniform(p.cycle_min, p.cycle_max, idx.size)

    net = ref_on_fraction(eng, eng.net_start, eng.net_len, eng.net_duty, t0, t1, lengths)
    cpu = ref_on_fraction(eng, eng.cpu_start, eng.cpu_len, eng.cpu_duty, t0, t1, lengths)
    jit = rng.lognormal(0.0, p.rate_jitter, n) if p.rate_jitter else np.ones(n)
    cj = 1.0 + (rng.normal(0.0, p.cpu_jitter, n) if p.cpu_jitter else np.zeros(n))
    arrivals = np.zeros(n)
    asks = np.flatnonzero(eng.req_rate)
    if asks.size:
        arrivals[asks] = rng.poisson(eng.req_rate[asks] * dt)
    offered = np.where(eng.kind <= 1, net * eng.rate * eng.streams * jit, 0.0)
    offered = offered + arrivals * eng.resp_bytes * 8.0 / dt * (eng.kind == 2)
    offered = np.where((eng.kind == 3) & (eng.file_left > 0), eng.rate, offered)
    return offered, cpu * cj


def _new_offer(eng: Engine, t0: float, t1: float) -> tuple[np.ndarray, np.ndarray]:
    o = workload.offer(eng, t0, t1)
    eng.ticks += 1  # (Engine.tick counts its ticks; here the offer runs alone)
    return o.offered, o.cpu_frac * o.cj


def _same(a: np.ndarray, b: np.ndarray, what: str) -> None:
    if np.array_equal(a, b):
        return  # e.g. no randomness at all (a file at its full rate, no jitter)
    res = ks_2samp(a, b)
    assert res.pvalue > 1e-3, (what, res, a.mean(), b.mean())
    se = np.sqrt(a.var() / a.size + b.var() / b.size)
    assert abs(a.mean() - b.mean()) <= 5.0 * se, (what, a.mean(), b.mean(), se)


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("profile", PROFILES)
def test_new_draws_follow_the_old_distributions(profile: str, kind: str) -> None:
    new, old = _world(profile, KINDS[kind]), _world(profile, KINDS[kind])
    rng = np.random.default_rng([17, 1])  # the old engine's workload stream
    _old_reset(old, rng)
    for k in range(WARMUP):
        t0, t1 = float(k), float(k + 1)
        got_new, got_old = _new_offer(new, t0, t1), _old_offer(old, rng, t0, t1)
    _same(got_new[0], got_old[0], f"{profile} {kind}: offered bit/s")
    _same(got_new[1], got_old[1], f"{profile} {kind}: CPU busy share")


def test_the_comparison_tells_a_wrong_stream_apart() -> None:
    """The comparison above can fail: a rate jitter of twice the profile's (lognormal
    sigma 0.1 instead of 0.05, as a lost factor would give) is told apart."""
    new, old = _world("default", KINDS["bulk"]), _world("default", KINDS["bulk"])
    new.profile = new.profile.model_copy(update={"rate_jitter": 2 * new.profile.rate_jitter})
    rng = np.random.default_rng([17, 1])
    _old_reset(old, rng)
    got_new, got_old = _new_offer(new, 0.0, 1.0), _old_offer(old, rng, 0.0, 1.0)
    with pytest.raises(AssertionError):
        _same(got_new[0], got_old[0], "doubled jitter")
