"""Heterogeneous hosts: reports carry the host's capacity and the manager screens targets on
the VM's share rescaled to each target (a VM's load is a share of its *source*).

h1 (64 cores) is hot on CPU; its VM uses 0.4 of it, i.e. 25.6 cores. h2 is the coldest host
but has 8 cores: there the VM would be 0.4 · 64 / 8 = 3.2 of the host, far over the limit.
Judged by the source's share alone (0.05 + 0.4 = 0.45 < 0.75) the VM was sent to h2 — the
bug this fixes. h3 (64 cores, cpu 0.2) can take it: 0.2 + 0.4 = 0.6 < 0.75.
"""

from __future__ import annotations

import json
from typing import Any

from sova.manager.daemons.schema import build_report, encode
from sova.policy.hotspot import HostCapacity, Utilisation, VMLoad

from .conftest import ADMIN, auth

BIG = HostCapacity(64, 256 * 2**30, 25e9)  # as a driver gives it: cores, bytes, bit/s
SMALL = HostCapacity(8, 32 * 2**30, 10e9)
HOSTS: dict[str, tuple[tuple[float, float, float], HostCapacity, str]] = {
    "h1": ((0.9, 0.3, 0.1), BIG, "h1-vm1"),
    "h2": ((0.05, 0.05, 0.05), SMALL, "h2-vm1"),
    "h3": ((0.2, 0.1, 0.1), BIG, "h3-vm1"),
}


def body(seq: int, t: float, host: str, with_capacity: bool = True) -> bytes:
    util, cap, vm = HOSTS[host]
    share = (0.4, 0.1, 0.05) if host == "h1" else (0.01, 0.01, 0.01)
    loads = {vm: VMLoad(Utilisation(*share), 4 * 2**30)}
    return encode(
        build_report(seq, t, Utilisation(*util), loads, capacity=cap if with_capacity else None)
    )


def run(api: Any, with_capacity: bool) -> dict[str, Any]:
    for i in range(1, 4):
        for h in HOSTS:
            r = api.post(
                f"/v1/hosts/{h}/reports",
                content=body(i, 10.0 * i, h, with_capacity),
                headers=auth(h),
            )
            assert r.status_code == 200, r.text
        api.tick(10.0 * i)
    return dict(api.get("/v1/hosts/h1/directive", headers=auth("h1")).json())


def test_the_vm_goes_to_a_host_that_can_hold_it(api_factory: Any) -> None:
    api = api_factory(clock="agent", plan_period_s=10, admin_token=ADMIN)
    d = run(api, with_capacity=True)
    assert (d["f"], d["t"], d["v"]) == (True, "h3", "h1-vm1")


def test_without_capacities_hosts_are_taken_as_equal(api_factory: Any) -> None:
    """Older agents (no ``c``): the old rule, stated in the policy — and the wrong target."""
    api = api_factory(clock="agent", plan_period_s=10, admin_token=ADMIN)
    d = run(api, with_capacity=False)
    assert (d["f"], d["t"]) == (True, "h2")


def test_capacity_survives_a_manager_restart(store: Any) -> None:
    from .conftest import Api, manager_settings

    settings = manager_settings(clock="agent", plan_period_s=10, admin_token=ADMIN)
    api = Api(settings, store)
    for i in range(1, 3):
        for h in HOSTS:
            api.post(f"/v1/hosts/{h}/reports", content=body(i, 10.0 * i, h), headers=auth(h))
    api.drain()
    api.close()
    again = Api(settings, store)
    assert again.svc.core.capacity["h2"] == HostCapacity(8, 32768, 10000)
    again.close()


def test_the_report_carries_capacity_in_whole_units_within_the_budget() -> None:
    cap = HostCapacity(48, 384 * 2**30, 25e9)  # as a driver gives it: cores, bytes, bit/s
    vms = {f"vm{i}": VMLoad(Utilisation(0.01 * i, 0.02, 0.03 * i), 8 * 2**30) for i in range(20)}
    raw = encode(build_report(7, 12.5, Utilisation(0.5, 0.4, 0.3), vms, capacity=cap))
    assert json.loads(raw)["c"] == [48, 393216, 25000]
    assert len(raw) <= 304
