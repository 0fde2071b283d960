"""The batch benchmark harness makes exactly the scalar policy's decisions (issue 3, scale).

BatchController (benchmarks/batch_controller.py) exists only for speed, so equality is demanded, not closeness: each
vectorised function is fed random inputs alongside the scalar function it replaces
(sensing.HostSensor, vfsched.schedule, HotspotDetector.assess, hotness, plan_actions) and
must return identical floats and decisions. The end-to-end test then runs a small
multi-host sova world twice — scalar HostAgents + ManagerCore, and the same engine driven by
BatchController — and requires the same VF holders and VM placements at every tick and the
same migrations, including with hot-plug and migration failures.
"""

from __future__ import annotations

import io
import math
import sys
from contextlib import redirect_stdout
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sova.agent.config import PAPERS_MANAGER
from sova.agent.loop import plan_actions
from sova.model import (
    NIC,
    VM,
    Action,
    AttachVF,
    DetachVF,
    Host,
    HostCounters,
    HostSample,
    Inventory,
    Migrate,
    NicKind,
    VMCounters,
    VMState,
)
from sova.policy.hotspot import HotspotDetector, Utilisation, hotness
from sova.policy.sensing import HostSensor
from sova.policy.vfsched import Candidate, VFSchedulerConfig, schedule
from sova.scenario import Scenario, parse_scenario
from sova.sim.world import World

ROOT = Path(__file__).resolve().parents[1]
# The harness is a benchmark script's module, not part of the package.
sys.path.insert(0, str(ROOT / "benchmarks"))
from batch_controller import (  # noqa: E402
    BatchController,
    BatchSensor,
    assess_batch,
    hotness_batch,
    plan_batch,
    schedule_batch,
)

# --------------------------------------------------------------------------- sensing


@st.composite
def counter_runs(draw: st.DrawFn) -> dict[str, object]:
    """Cumulative counters of VMs on hosts over several readings, with resets and moves."""
    hosts = draw(st.integers(1, 3))
    n = draw(st.integers(1, 6))
    steps = draw(st.integers(1, 10))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    host = rng.integers(0, hosts, n)
    vcpus = rng.choice([1, 2, 4], n).astype(float)
    c = np.zeros((6, n))
    times: list[float] = []
    hosts_at: list[np.ndarray] = []
    readings: list[np.ndarray] = []
    t = 0.0
    # a few discrete traffic levels so NF sees ties and single-level hosts (span 0)
    levels = np.array([0.0, 0.0, 100.0, 5_000.0, 1e6, 1e6, 3e7])
    for _ in range(steps + 1):
        t += float(rng.choice([10.0, 10.0, 7.5, 0.25]))
        dt = t - (times[-1] if times else 0.0)
        c[0] += np.floor(rng.uniform(0, 1.05, n) * dt * 1e9 * vcpus)
        c[1] += np.floor(rng.uniform(0, 0.2, n) * dt * 1e9)
        rate = rng.choice(levels, n)
        c[2] += np.floor(rate * dt * 0.02)
        c[3] += np.floor(rate * dt)
        c[4] += np.floor(rate * dt / 1500 * rng.choice([0.5, 1.0], n))
        c[5] += np.floor(rate * dt / 1500)
        reset = rng.uniform(size=n) < 0.08
        c[:, reset] = np.floor(c[:, reset] * rng.uniform(0, 0.5))
        move = rng.uniform(size=n) < 0.08
        host = np.where(move, rng.integers(0, hosts, n), host)
        times.append(t)
        hosts_at.append(host.copy())
        readings.append(c.copy())
    return {
        "hosts": hosts,
        "times": times,
        "host": hosts_at,
        "c": readings,
        "vcpus": vcpus,
        "num": draw(st.integers(1, 6)),
        "epsilon": draw(st.sampled_from([0.0, 0.3, 0.7, 1.0])),
        "threshold": draw(st.sampled_from([0.0, 10_000.0, 1e6])),
    }


def _sample(host: int, t: float, c: np.ndarray, hosts: np.ndarray, vcpus: np.ndarray) -> HostSample:
    vms = {
        f"vm{i}": VMCounters(
            f"vm{i}",
            int(vcpus[i]),
            int(c[0, i]),
            int(c[1, i]),
            int(c[2, i]),
            int(c[3, i]),
            int(c[4, i]),
            int(c[5, i]),
        )
        for i in np.flatnonzero(hosts == host)
    }
    return HostSample(f"h{host}", t, vms, HostCounters(0, 0, 0, 0))


@settings(max_examples=300, deadline=None)
@given(counter_runs())
def test_sensor_factors_equal_host_sensor(run: dict[str, object]) -> None:
    # Every factor of every VM after every reading: == on floats, not approx.
    hosts, times, vcpus = run["hosts"], run["times"], run["vcpus"]
    assert isinstance(hosts, int) and isinstance(times, list) and isinstance(vcpus, np.ndarray)
    num, eps, thr = run["num"], run["epsilon"], run["threshold"]
    assert isinstance(num, int) and isinstance(eps, float) and isinstance(thr, float)
    scalar = [HostSensor(num, eps, thr) for _ in range(hosts)]
    batch = BatchSensor(vcpus.size, num, eps, thr)
    for t, host, c in zip(times, run["host"], run["c"], strict=True):  # type: ignore[call-overload]
        for h in range(hosts):
            scalar[h].observe(_sample(h, t, c, host, vcpus))
        batch.observe(t, c, vcpus, host)
        f = batch.factors(host, hosts)
        for h in range(hosts):
            sf = scalar[h].factors()
            assert set(sf) == {f"vm{i}" for i in np.flatnonzero(host == h)}
            for name, s in sf.items():
                i = int(name[2:])
                got = (
                    f.io_degree[i],
                    f.io_factor[i],
                    f.net_degree[i],
                    f.net_factor[i],
                    bool(f.has_traffic[i]),
                    f.cpu_usage[i],
                )
                want = (
                    s.io_degree,
                    s.io_factor,
                    s.net_degree,
                    s.net_factor,
                    s.has_traffic,
                    s.cpu_usage,
                )
                assert got == want, (name, got, want)


# --------------------------------------------------------------------------- VF scheduling


@st.composite
def host_candidates(draw: st.DrawFn) -> dict[str, object]:
    hosts = draw(st.integers(1, 4))
    n = draw(st.integers(0, 14))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    # coarse score grids make exact ties and tolerance-boundary cases common
    grid = draw(st.sampled_from([1.0, 0.5, 0.05, 0.0]))

    def score(lo: float, hi: float) -> np.ndarray:
        x = rng.uniform(lo, hi, n)
        return np.round(x / grid) * grid if grid else x

    return {
        "hosts": hosts,
        "host": rng.integers(0, hosts, n),
        "io": score(0.0, 100.0),
        "net": score(0.0, 10.0),
        "traffic": rng.uniform(size=n) < 0.8,
        "eligible": rng.uniform(size=n) < 0.85,
        "holder": rng.uniform(size=n) < 0.35,
        "since": rng.choice([0.0, 50.0, 75.0, 99.0, 100.0], n),
        "vf_count": rng.integers(0, 5, hosts),
        "names": [f"vm{k}" for k in rng.permutation(max(n, 1) * 3)[:n]],
        "config": VFSchedulerConfig(
            io_filter=draw(st.sampled_from(["threshold", "top-q"])),
            io_threshold=draw(st.sampled_from([0.0, 50.0, 65.0])),
            top_q=draw(st.integers(0, 5)),
            tolerance=draw(st.sampled_from([0.0, 0.1, 0.25, 1.0])),
            hysteresis=draw(st.sampled_from([0.0, 0.05, 0.5])),
            min_dwell_s=draw(st.sampled_from([0.0, 30.0, 60.0])),
        ),
    }


@settings(max_examples=400, deadline=None)
@given(host_candidates())
def test_schedule_batch_equals_schedule(c: dict[str, object]) -> None:
    host, names = c["host"], c["names"]
    assert isinstance(host, np.ndarray) and isinstance(names, list)
    cfg = c["config"]
    assert isinstance(cfg, VFSchedulerConfig)
    io_s, net_s, traffic, eligible, holder, since, vfc = (
        np.asarray(c[k])
        for k in ("io", "net", "traffic", "eligible", "holder", "since", "vf_count")
    )
    name_rank = np.empty(len(names), dtype=np.int64)
    name_rank[np.argsort(np.array(names, dtype=str), kind="stable")] = np.arange(len(names))
    now = 100.0
    dec = schedule_batch(
        host, name_rank, io_s, net_s, traffic, eligible, holder, since, vfc, now, cfg
    )
    for h in range(int(c["hosts"])):  # type: ignore[call-overload]
        idx = np.flatnonzero(host == h)
        cands = [
            Candidate(
                names[i], float(io_s[i]), float(net_s[i]), bool(traffic[i]), bool(eligible[i])
            )
            for i in idx
        ]
        holders = {names[i]: float(since[i]) for i in idx if holder[i]}
        want = schedule(cands, holders, int(vfc[h]), now, cfg)
        got_pq = {names[i] for i in idx if dec.pq[i]}
        ranked = sorted((i for i in idx if dec.rank[i] >= 0), key=lambda i: dec.rank[i])
        assert got_pq == set(want.pq)
        assert tuple(names[i] for i in ranked) == want.ranking


# --------------------------------------------------------------------------- hotspots


@st.composite
def histories(draw: st.DrawFn) -> dict[str, object]:
    n = draw(st.integers(1, 6))
    k = draw(st.integers(1, n))
    hosts = draw(st.integers(1, 12))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    alpha = draw(st.sampled_from([0.5, 0.75, 0.8, 1.0]))
    # constant windows (φ = 0 by the variance cut-off), values at α exactly, and noise
    pick = rng.integers(0, 4, (hosts, n, 3))
    noise = rng.uniform(0, 1, (hosts, n, 3))
    flat = np.repeat(rng.uniform(0, 1, (hosts, 1, 3)), n, axis=1)
    hist = np.choose(pick, [noise, flat, np.full_like(noise, alpha), np.round(noise, 1)])
    return {"hist": hist, "count": rng.integers(0, n + 1, hosts), "k": k, "n": n, "alpha": alpha}


@settings(max_examples=300, deadline=None)
@given(histories())
def test_assess_batch_equals_detector(c: dict[str, object]) -> None:
    hist, count = c["hist"], c["count"]
    assert isinstance(hist, np.ndarray) and isinstance(count, np.ndarray)
    det = HotspotDetector(k=int(c["k"]), n=int(c["n"]), alpha=float(c["alpha"]))  # type: ignore[call-overload, arg-type]
    v = assess_batch(hist, count, det)
    for h in range(hist.shape[0]):
        window = [Utilisation(*map(float, x)) for x in hist[h, hist.shape[1] - count[h] :]]
        want = det.assess(window)
        assert bool(v.hot[h]) == want.hot
        if not window:
            assert not v.hot_res[h].any()
            continue
        for r, rv in enumerate(want.resources):
            assert (int(v.over[h, r]), float(v.forecast[h, r]), bool(v.hot_res[h, r])) == (
                rv.over,
                rv.forecast,
                rv.hot,
            )


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(*(st.floats(0.0, 1.0),) * 3), min_size=1, max_size=20),
    st.sampled_from(["volume", "skewness"]),
)
def test_hotness_batch_equals_hotness(rows: list[tuple[float, float, float]], metric: str) -> None:
    got = hotness_batch(np.array(rows), metric)
    want = [hotness(Utilisation(*r), metric) for r in rows]
    assert got.tolist() == want


# --------------------------------------------------------------------------- planning


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 4), st.integers(0, 12))
def test_plan_batch_equals_plan_actions(seed: int, hosts: int, n: int) -> None:
    rng = np.random.default_rng(seed)
    host = rng.integers(0, hosts, n)
    names = [f"vm{k}" for k in rng.permutation(n * 2 + 1)[:n]]
    name_rank = np.empty(n, dtype=np.int64)
    name_rank[np.argsort(np.array(names, dtype=str), kind="stable")] = np.arange(n)
    pool = rng.integers(0, 5, hosts)
    holder = np.zeros(n, dtype=bool)
    for h in range(hosts):  # at most pool VFs held on each host
        idx = rng.permutation(np.flatnonzero(host == h))
        holder[idx[: rng.integers(0, pool[h] + 1)]] = True
    desired = rng.uniform(size=n) < 0.5
    rank = np.full(n, -1, dtype=np.int64)
    for h in range(hosts):
        idx = rng.permutation(np.flatnonzero((host == h) & desired))
        rank[idx] = np.arange(idx.size)
    busy = rng.uniform(size=n) < 0.2
    pending: dict[int, list[Action]] = {h: [] for h in range(hosts)}
    pending_attach = np.zeros(hosts, dtype=np.int64)
    for i in np.flatnonzero(busy):
        options: tuple[Action, ...] = (
            AttachVF(names[i]),
            DetachVF(names[i]),
            Migrate(names[i], "x"),
        )
        a = options[int(rng.integers(0, 3))]
        pending[int(host[i])].append(a)
        pending_attach[host[i]] += isinstance(a, AttachVF)
    budget = rng.integers(0, 6, hosts)
    got = plan_batch(
        np.arange(hosts), host, name_rank, rank, desired, holder, busy, pool, pending_attach, budget
    )
    for h in range(hosts):
        idx = np.flatnonzero(host == h)
        inv = Inventory(
            Host(f"h{h}", 8, 2**34, NIC("pf", 1e10, int(pool[h]))),
            {
                names[i]: VMState(
                    VM(names[i], 1, 2**29), NicKind.VF if holder[i] else NicKind.VIRTIO
                )
                for i in idx
            },
        )
        want_desired = {names[i]: None for i in idx if desired[i]}
        ranking = [names[i] for i in sorted(idx[desired[idx]], key=lambda i: rank[i])]
        if budget[h] > 0:
            want = plan_actions(want_desired, ranking, inv, pending[h], int(budget[h]))
        else:
            want = []
        mine = [(names[i], k) for hh, i, k in got if hh == h]
        assert mine == [(a.vm, "attach" if isinstance(a, AttachVF) else "detach") for a in want]


# --------------------------------------------------------------------------- end to end


def small_world(failures: float, seed: int) -> Scenario:
    """4 hosts x 5 VMs, 2 VFs each; at 2 min host 0 surges into a hotspot, at 400 s more."""
    hosts = [
        {
            "name": f"hm{h}",
            "cores": 8,
            "memory": "32GiB",
            "nic": {"capacity": "10Gbit", "vf_pool": 2},
            "vms": [f"vm{h}{j}" for j in range(5)],
        }
        for h in range(4)
    ]
    vms = [
        {"name": f"vm{h}{j}", "memory": "1GiB" if j == 0 else "512MiB"}
        for h in range(4)
        for j in range(5)
    ]
    start = {
        f"vm{h}{j}": {"net": round(0.15 * j + 0.1, 2), "cpu": 0.1 * (j % 3), "rate": "1Gbit"}
        for h in range(4)
        for j in range(5)
    }
    surge = {
        "vm00": {"kind": "bulk", "rate": "4Gbit", "streams": 2},
        "vm01": {"kind": "bulk", "rate": "3Gbit"},
        "vm02": {"kind": "bulk", "rate": "2Gbit"},
    }
    later = {"vm13": {"cpu": 0.9}, "vm21": {"net": 1.0, "rate": "2Gbit"}}
    return parse_scenario(
        {
            "name": "batch-e2e",
            "seed": seed,
            "duration": 700,
            "hosts": hosts,
            "vms": vms,
            "workload": [
                {"at": 0, "vms": start},
                {"at": 120, "vms": surge},
                {"at": 400, "vms": later},
            ],
            "controller": {
                "vf_policy": "sova",
                "scheduler": {"io_threshold": 50, "tolerance": 0.2, "min_dwell": "30s"},
                "manager": {"alpha": 0.6, "ceiling": 1.0, **PAPERS_MANAGER},
            },
            "profile": {"hotplug_failure_rate": failures, "migration_failure_rate": failures},
        }
    )


def trajectory(
    scn: Scenario, batch: bool
) -> tuple[World, list[tuple[np.ndarray, np.ndarray]], BatchController | None]:
    policy = scn.policy_specs[0]
    world = World(scn, policy, with_agents=not batch)
    ctl = BatchController.for_world(world.engine, scn, policy) if batch else None
    period = int(round(scn.controller.period / scn.tick))
    snaps = []
    while world.k < int(round(scn.duration / scn.tick)):
        world.advance()  # with agents: poll, step, manager; without: physics only
        if ctl is not None:
            t = world.k * world.tick_s
            ctl.poll(t)
            if world.k % period == 0:
                ctl.step(t)
        snaps.append((world.engine.on_vf.copy(), world.engine.host.copy()))
    return world, snaps, ctl


@pytest.mark.parametrize(("failures", "seed"), [(0.0, 3), (0.2, 5)])
def test_batch_controller_matches_scalar_world(failures: float, seed: int) -> None:
    # Same engine, same seed: every operation is submitted in the same order at the same
    # time, so the engine's operation RNG draws the same delays and failures, and VF holders
    # and placements must agree at every one of the 700 ticks.
    scn = small_world(failures, seed)
    scalar, a, _ = trajectory(scn, batch=False)
    batched, b, ctl = trajectory(scn, batch=True)
    assert ctl is not None
    for k, ((vf_a, host_a), (vf_b, host_b)) in enumerate(zip(a, b, strict=True)):
        assert np.array_equal(vf_a, vf_b), f"VF holders differ at tick {k + 1}"
        assert np.array_equal(host_a, host_b), f"placements differ at tick {k + 1}"
    assert scalar.engine.migration_log == batched.engine.migration_log
    # the scenario must exercise what it claims to: VF moves, hotspots and migrations
    assert ctl.stats.vf_attaches > 10 and ctl.stats.hotspots > 0
    assert ctl.stats.migrations_done >= 3
    assert ctl.stats.coordinate_fallbacks == 0
    if failures:
        assert any(m["ok"] == "no" for m in batched.engine.migration_log)


def test_batch_refuses_what_it_does_not_model() -> None:
    scn = small_world(0.0, 1)
    policy = scn.policy_specs[0].model_copy(update={"bandwidth": "sova"})
    with pytest.raises(ValueError, match="bandwidth"):
        BatchController.for_world(World(scn, policy, with_agents=False).engine, scn, policy)


@pytest.mark.parametrize(
    ("manager", "refused"),
    [
        ({"restart_window_after_migration": True}, "manager.restart_window_after_migration=True"),
        ({"return_tabu": 300.0}, "manager.return_tabu=300"),
        ({"max_concurrent_migrations": 2}, "manager.max_concurrent_migrations=2"),
        ({"max_migrations_per_hour": 10}, "manager.max_migrations_per_hour=10"),
        ({"vm_cooldown": 60.0}, "manager.vm_cooldown=60"),
    ],
)
def test_batch_refuses_manager_options_it_does_not_model(
    manager: dict[str, object], refused: str
) -> None:
    # It once dropped these silently and answered like a manager without them.
    base = small_world(0.0, 1)
    m = base.controller.manager.model_copy(update=manager)
    scn = base.model_copy(update={"controller": base.controller.model_copy(update={"manager": m})})
    policy = scn.policy_specs[0]
    engine = World(scn, policy, with_agents=False).engine
    with pytest.raises(ValueError, match=refused.replace(".", r"\.")) as e:
        BatchController.for_world(engine, scn, policy)
    assert "sova simulate" in str(e.value)


def test_sim_scale_script_runs_small() -> None:
    # The benchmark itself, at 40 hosts x 20 VMs for 10 minutes: every figure is printed.
    import importlib.util

    spec = importlib.util.spec_from_file_location("sim_scale", ROOT / "benchmarks/sim_scale.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = io.StringIO()
    with redirect_stdout(out):
        assert mod.main(["--hosts", "40", "--duration", "600"]) == 0
    text = out.getvalue()
    for label in ("hosts", "VMs", "ticks", "VM-steps", "wall time", "VM-steps/s", "peak memory"):
        assert f"{label}:" in text
    assert "VMs: 800" in text
    steps = float(text.split("VM-steps/s:")[1].split()[0].replace(",", ""))
    assert math.isfinite(steps) and steps > 0
