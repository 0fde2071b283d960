"""Issue 11: the manager's migration limits, through its HTTP API (agent clock, in-process).

A held migration is not signalled, its decision in ``/v1/decisions`` says which limit held
it, and the per-VM cool-down survives a manager restart (read back from the store).
"""

from __future__ import annotations

from typing import Any

from .conftest import ADMIN, TOKENS, Api, manager_settings, report

HOT = (0.2, 0.3, 0.9)
COLD = (0.1, 0.2, 0.1)
VMS1 = {"h1-vm1": (0.1, 0.1, 0.5)}
VMS2 = {"h2-vm1": (0.05, 0.1, 0.05)}
VMS3 = {"h3-vm1": (0.05, 0.1, 0.05)}
VMS4 = {"h4-vm1": (0.05, 0.1, 0.05)}
PLANNER = {"alpha": 0.75, "k": 3, "n": 5}
TOK = {**TOKENS, "h4": "t4-" + "d" * 29}
HOSTS = {h: {"token": t} for h, t in TOK.items()}


def auth(host: str) -> dict[str, str]:
    return {"authorization": f"Bearer {TOK[host]}", "content-type": "application/json"}


def post(api: Api, host: str, seq: int, t: float, util: Any, vms: Any) -> Any:
    r = api.post(f"/v1/hosts/{host}/reports", content=report(seq, t, util, vms), headers=auth(host))
    assert r.status_code == 200, r.text
    return r.json()


def decisions(api: Api) -> list[dict[str, Any]]:
    api.drain()
    r = api.get("/v1/decisions?limit=1000", headers={"authorization": f"Bearer {ADMIN}"})
    assert r.status_code == 200, r.text
    body = r.json()
    return list(body["decisions"] if isinstance(body, dict) else body)


def rounds(api: Api, seqs: range, hosts: dict[str, tuple[Any, Any]]) -> None:
    for i in seqs:
        for h, (util, vms) in hosts.items():
            post(api, h, i, 10.0 * i, util, vms)
        api.tick(10.0 * i)


def test_concurrent_limit_through_the_api(api_factory) -> None:  # type: ignore[no-untyped-def]
    """h1 and h3 are hot at once, h2 and h4 could take a VM each; one migration may run:
    only one is signalled, the other's decision says why."""
    api = api_factory(
        hosts=HOSTS,
        clock="agent",
        plan_period_s=10,
        admin_token=ADMIN,
        planner={**PLANNER, "max_concurrent_migrations": 1},
    )
    hosts = {"h1": (HOT, VMS1), "h2": (COLD, VMS2), "h3": (HOT, VMS3), "h4": (COLD, VMS4)}
    rounds(api, range(1, 4), hosts)
    flagged = [
        api.get(f"/v1/hosts/{h}/directive", headers=auth(h)).json()["f"] for h in ("h1", "h3")
    ]
    assert sorted(flagged) == [False, True]
    held = [d for d in decisions(api) if "held" in d["inputs"]]
    assert held and all("max_concurrent_migrations = 1" in d["inputs"]["held"] for d in held)
    assert all(not d["flag"] for d in held)
    # the decision record names the planning stage and plug-in that decided
    # (docs/design.md#the-planning-pipeline): the brake held one, the lease started the other
    decided = {d["inputs"]["decided"]["plugin"] for d in decisions(api) if d["vm"]}
    assert all(
        d["inputs"]["decided"] == {"stage": "permit", "plugin": "migration-brakes", "code": "held"}
        for d in held
    )
    assert {"migration-brakes", "leases"} <= decided


def test_cool_down_holds_and_survives_a_restart(store) -> None:  # type: ignore[no-untyped-def]
    settings = manager_settings(
        clock="agent",
        plan_period_s=10,
        admin_token=ADMIN,
        planner={**PLANNER, "vm_cooldown_s": 300},
    )
    api = Api(settings, store)
    hosts = {"h1": (HOT, VMS1), "h2": (COLD, VMS2)}
    rounds(api, range(1, 4), hosts)
    d = api.get("/v1/hosts/h1/directive", headers=auth("h1")).json()
    assert d["f"] is True and d["v"] == "h1-vm1"
    # the source declines (the VM stays): h1 is still hot, h1-vm1 cools down
    r = api.post(
        "/v1/migrations/h1-vm1/done",
        json={"result": "declined"},
        headers={**auth("h1"), "x-sova-host": "h1"},
    )
    assert r.status_code == 200, r.text
    rounds(api, range(4, 10), hosts)
    assert api.get("/v1/hosts/h1/directive", headers=auth("h1")).json()["f"] is False
    held = [x for x in decisions(api) if "held" in x["inputs"]]
    assert held and "vm_cooldown_s = 300" in held[-1]["inputs"]["held"]
    api.close()

    again = Api(settings, store)  # a restarted manager on the same store
    rounds(again, range(10, 30), hosts)  # up to t = 290 s: still within the cool-down
    assert again.get("/v1/hosts/h1/directive", headers=auth("h1")).json()["f"] is False
    rounds(again, range(30, 36), hosts)  # t = 300 s after the signal at 30 s: free again
    assert again.get("/v1/hosts/h1/directive", headers=auth("h1")).json()["f"] is True
    again.close()
