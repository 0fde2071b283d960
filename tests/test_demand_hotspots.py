"""Hotspot detection on demand (docs/design.md#demand-hotspots; issue 35 item 2): a censored
VM's unmet demand counts in the loads the manager judges, in the agent's per-host form and
the simulator's array form alike."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests import loads_oracle

from sova.manager.decisions.core import ManagerCore
from sova.policy.hotspot import HotspotDetector, Utilisation, VMLoad
from sova.policy.kernels import LoadArrays, demand_load_arrays
from sova.policy.sensing import LoadShares, VMFactors, demand_loads

LINK = 10e9


def factors(name: str, censored: bool, last_gbit: float, est_gbit: float) -> VMFactors:
    return VMFactors(
        name,
        cpu_usage=0.5,
        io_degree=50.0,
        io_factor=1.0,
        net_degree=0.5,
        net_factor=0.5,
        has_traffic=True,
        demand_bps=last_gbit * 1e9,
        last_rate_bps=last_gbit * 1e9,
        tx_bps=last_gbit * 1e9,
        rx_bps=0.0,
        censored=censored,
        demand_est_bps=est_gbit * 1e9,
    )


@pytest.mark.parametrize(
    ("case", "vms", "host_net", "vm_net"),
    [
        # capped at 2.0 Gbit/s, estimated 3.0: 1.0 Gbit/s unmet = 0.10 of the link;
        # host 0.70 + 0.10 = 0.80, the VM 0.20 + 0.10 = 0.30
        ("censored", [("a", True, 2.0, 3.0)], 0.80, {"a": 0.30}),
        # not censored: what got through stands, whatever the estimate says
        ("free", [("a", False, 2.0, 3.0)], 0.70, {"a": 0.20}),
        # censored but the estimate is not above the rate: nothing unmet
        ("at its rate", [("a", True, 2.0, 1.5)], 0.70, {"a": 0.20}),
        # two censored VMs: 0.10 + 0.25 on a host at 0.70 -> 1.05, at most the whole link
        (
            "two, capped",
            [("a", True, 2.0, 3.0), ("b", True, 1.0, 3.5)],
            1.0,
            {"a": 0.30, "b": 0.35},
        ),
    ],
)
def test_unmet_demand_counts(
    case: str, vms: list[tuple[str, bool, float, float]], host_net: float, vm_net: dict[str, float]
) -> None:
    shares = {n: LoadShares(0.1, 0.1, last * 1e9 / LINK) for n, _, last, _ in vms}
    fac = {n: factors(n, c, last, est) for n, c, last, est in vms}
    host, out = demand_loads(LoadShares(0.3, 0.2, 0.70), shares, fac, LINK)
    assert host.net == pytest.approx(host_net), case
    assert {n: s.net for n, s in out.items()} == pytest.approx(vm_net), case
    assert (host.cpu, host.mem) == (0.3, 0.2)

    # the simulator's form: the same VMs on host 0, host 1 untouched
    k = len(vms)
    loads = LoadArrays(
        host_cpu=np.array([0.3, 0.3]),
        host_mem=np.array([0.2, 0.2]),
        host_net=np.array([0.70, 0.70]),
        host_ok=np.array([True, True]),
        vm_cpu=np.full(k + 1, 0.1),
        vm_mem=np.full(k + 1, 0.1),
        vm_net=np.array([s.net for s in shares.values()] + [0.2]),
        vm_ok=np.ones(k + 1, dtype=bool),
    )
    f = [fac[n] for n in shares] + [factors("other", True, 2.0, 3.0)]
    got = demand_load_arrays(
        loads,
        np.array([0] * k + [1]),
        np.array([x.censored for x in f][:k] + [False]),
        np.array([x.demand_est_bps for x in f]),
        np.array([x.last_rate_bps for x in f]),
        np.array([LINK, LINK]),
    )
    assert got.host_net.tolist() == pytest.approx([host.net, 0.70])
    assert got.vm_net[:k].tolist() == pytest.approx([out[n].net for n in shares])


def test_a_host_held_below_alpha_by_its_paths_is_flagged() -> None:
    """Measured 0.70 < alpha 0.75 every period: never hot. Judged on demand (0.80): hot,
    and the VM whose demand the path censors is the one to move."""
    verdicts = []
    for on_demand in (False, True):
        core = ManagerCore(detector=HotspotDetector(3, 5, 0.75))
        share = {"a": LoadShares(0.1, 0.1, 0.2), "b": LoadShares(0.1, 0.1, 0.05)}
        host = LoadShares(0.3, 0.2, 0.70)
        if on_demand:
            fac = {"a": factors("a", True, 2.0, 3.0), "b": factors("b", False, 0.5, 0.5)}
            host, share = demand_loads(host, share, fac, LINK)
        vms = {n: VMLoad(Utilisation(s.cpu, s.mem, s.net), 2 * 2**30) for n, s in share.items()}
        for t in range(5):
            core.ingest("h1", Utilisation(host.cpu, host.mem, host.net), vms, at=10.0 * t)
            core.ingest("h2", Utilisation(0.1, 0.1, 0.1), {}, at=10.0 * t)
        sig = core.plan(50.0).signals["h1"]
        verdicts.append((sig.flag, sig.vm))
    assert verdicts == [(False, None), (True, "a")]


@st.composite
def demand_fleets(
    draw: st.DrawFn,
) -> tuple[LoadArrays, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Hosts (some without a link size) and VMs: censored or not, with or without a share
    this period, estimates above, at and below their rates, shares near 1."""
    n_hosts = draw(st.integers(1, 4))
    n = draw(st.integers(0, 10))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    host = rng.integers(0, n_hosts, n).astype(np.int64)
    capacity = rng.choice([0.0, 1e9, 1e10, 2.5e10], n_hosts)
    last = rng.choice([0.0, 1e6, 2e9, 9.9e9], n) * rng.uniform(0.5, 1.0, n)
    est = np.where(rng.uniform(size=n) < 0.3, last, last * rng.uniform(0.5, 3.0, n))
    censored = rng.uniform(size=n) < 0.6
    loads = LoadArrays(
        rng.uniform(0, 1, n_hosts), rng.uniform(0, 1, n_hosts),
        rng.choice([0.1, 0.7, 0.99, 1.0], n_hosts), np.ones(n_hosts, dtype=bool),
        rng.uniform(0, 1, n), rng.uniform(0, 1, n), rng.choice([0.0, 0.3, 0.999], n),
        rng.uniform(size=n) < 0.8,
    )  # fmt: skip
    return loads, host, censored, est, last, capacity


@settings(max_examples=300, deadline=None)
@given(demand_fleets())
def test_demand_loads_equal_their_readable_forms(
    fleet: tuple[LoadArrays, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray],
) -> None:
    # The core against the numpy form the simulator ran (every host at once) and the agent's
    # per-host form against its readable Python (one host's dicts): == on floats.
    loads, host, censored, est, last, capacity = fleet
    got = demand_load_arrays(loads, host, censored, est, last, capacity)
    want = loads_oracle.demand_load_arrays(loads, host, censored, est, last, capacity)
    assert got.host_net.tolist() == want.host_net.tolist()
    assert got.vm_net.tolist() == want.vm_net.tolist()
    for h in range(len(capacity)):
        mine = [i for i in np.flatnonzero(host == h).tolist() if loads.vm_ok[i]]
        shares = {f"v{i}": LoadShares(0.1, 0.2, float(loads.vm_net[i])) for i in mine}
        fac = {
            f"v{i}": factors(f"v{i}", bool(censored[i]), last[i] / 1e9, est[i] / 1e9)
            for i in mine
        }
        hl = LoadShares(0.3, 0.4, float(loads.host_net[h]))
        args = (hl, shares, fac, float(capacity[h]))
        assert demand_loads(*args) == loads_oracle.demand_loads(*args)
