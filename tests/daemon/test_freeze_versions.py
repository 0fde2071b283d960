"""Issue 21, build item 4: the VF-freeze list (``k``) rides on a report's response only when
it changed. The response says the list's version (``y``); the agent acknowledges the
version it holds in its reports (``y``); the manager leaves the list out of the response to
an agent that holds the current one. An agent that acknowledges nothing — an older agent,
or one just restarted — gets the list every time.

Measured here with 4,096 frozen VMs (names ``frozen-vm-0000`` …, 17 bytes each in the
list): a response carrying the list is 69,694 bytes, one to an agent holding the current
version 66 bytes (exact figures: the same names give the same bytes; the test bounds them at
> 60,000 and < 200). The issue's cluster (longer names) measured 274 KB per response.

The agent side runs the real agent daemon against the real manager app in-process (the
agent's HTTP client is bridged into the app's ASGI interface): what it freezes comes out of
the responses it got.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from sova.manager.daemons.agent.daemon import POLL, STEP, AgentDaemon, ManagerClient
from sova.manager.daemons.config import AgentSettings
from sova.manager.daemons.schema import PROTOCOL, Directive, for_agent

from .conftest import ADMIN, TOKENS, Api, auth, report
from .fakes import FakeHost, FakeVM

ADMIN_H = {"authorization": f"Bearer {ADMIN}"}
FROZEN = [f"frozen-vm-{i:04d}" for i in range(4095)] + ["vm-a"]  # 4,096


def freeze(api: Api, names: list[str]) -> None:
    for n in names:
        api.run(api.svc.set_fence("vf-freeze-vm", n, "ops", ""))


class Bridge:
    """The agent's synchronous HTTP client, answered by the manager app in-process; the
    bytes of every report's response are recorded."""

    def __init__(self, api: Api) -> None:
        self.api = api
        self.sizes: list[int] = []
        self.bodies: list[dict[str, Any]] = []

    def handle(self, request: httpx.Request) -> httpx.Response:
        r = self.api.run(
            self.api.client.request(
                request.method,
                request.url.path,
                params=request.url.params,
                content=request.content,
                headers={k: v for k, v in request.headers.items() if k != "host"},
            )
        )
        if request.url.path.endswith("/reports"):
            self.sizes.append(len(r.content))
            self.bodies.append(json.loads(r.content))
        return httpx.Response(r.status_code, content=r.content, headers=r.headers)


def agent(bridge: Bridge, host: FakeHost) -> AgentDaemon:
    settings = AgentSettings.model_validate(
        {
            "driver": "mock",
            "host": "h1",
            "report_retries": 0,
            "controller": {"period": 10, "vf_policy": "sova", "sensing": {"window": 3}},
        }
    )
    client = ManagerClient(
        "http://manager",
        "h1",
        TOKENS["h1"],
        retries=0,
        transport=httpx.MockTransport(bridge.handle),
    )
    d = AgentDaemon(settings, host.driver(), client=client)
    d.reconcile()
    return d


def run(d: AgentDaemon, host: FakeHost, seconds: int) -> None:
    for _ in range(seconds):
        host.advance(1.0)
        d.do_phase(POLL)
        if round(host.now) % 10 == 0:
            d.do_phase(STEP)


@pytest.fixture
def frozen_api(api_factory: Any) -> Api:
    """Three frozen VMs: enough for what the wire says (the size is the first test's)."""
    api: Api = api_factory(clock="agent", admin_token=ADMIN)
    freeze(api, FROZEN[-3:])
    return api


def test_the_list_goes_only_to_an_agent_that_lacks_it(api_factory: Any) -> None:
    api = api_factory(clock="agent", admin_token=ADMIN)
    freeze(api, FROZEN)  # through the operator path, one store write each (~1 min)
    bridge = Bridge(api)
    host = FakeHost()
    host.vms = {"vm-a": FakeVM("vm-a", 2e9), "vm-b": FakeVM("vm-b", 2e8)}
    d = agent(bridge, host)
    run(d, host, 40)  # reports at t = 30, 40 (the first full period is measured at 30)
    first, second = bridge.bodies[0], bridge.bodies[-1]
    assert len(bridge.bodies) >= 2
    assert len(first["k"]) == 4096 and first["y"] > 0
    assert d.agent.vf_freeze_vms == frozenset(FROZEN)
    # It acknowledged the version; the next response leaves the list out ...
    assert "k" not in second and second["y"] == first["y"], second
    assert bridge.sizes[0] > 60_000 and bridge.sizes[-1] < 200, bridge.sizes
    # ... and the agent keeps what it holds.
    assert d.agent.vf_freeze_vms == frozenset(FROZEN)

    # A fence change: the next response carries the new list and a new version.
    api.run(api.svc.clear_fence("vf-freeze-vm", "vm-a", "ops", ""))
    n = len(bridge.bodies)
    run(d, host, 10)
    changed = bridge.bodies[n]
    assert len(changed["k"]) == 4095 and changed["y"] not in (0, first["y"])
    assert d.agent.vf_freeze_vms == frozenset(FROZEN[:-1])
    run(d, host, 10)
    assert "k" not in bridge.bodies[-1]

    # The agent restarts (a new process: it holds nothing and acknowledges nothing).
    again = agent(bridge, host)
    n = len(bridge.bodies)
    run(again, host, 40)
    assert len(bridge.bodies[n]["k"]) == 4095
    assert again.agent.vf_freeze_vms == frozenset(FROZEN[:-1])
    assert "k" not in bridge.bodies[-1]


@pytest.mark.parametrize("protocol", [0, 1])
def test_an_older_agent_gets_the_list_every_time(frozen_api: Api, protocol: int) -> None:
    """An agent of protocol 1 (no version acknowledged) or 0 (unversioned: it refuses fields
    it does not know) gets the whole list in every response, and no ``y``."""
    api = frozen_api
    for seq in (1, 2, 3):
        body = json.loads(report(seq, 10.0 * seq, (0.1, 0.1, 0.1), boot="b1"))
        body["y"] = 12345  # ignored from an older agent (it cannot hold a version)
        if protocol:
            body["p"] = protocol
        else:
            body.pop("p")
        r = api.post("/v1/hosts/h1/reports", content=json.dumps(body), headers=auth("h1"))
        assert r.status_code == 200, r.text
        d = r.json()
        assert d["k"] == sorted(FROZEN[-3:]) and "y" not in d, sorted(d)


def test_a_stale_or_foreign_version_gets_the_list(frozen_api: Api) -> None:
    api = frozen_api
    version = api.svc.directive_for("h1").vf_freeze_version
    for seq, y, carried in ((1, version + 1, True), (2, version, False), (3, 0, True)):
        body = json.loads(report(seq, 10.0 * seq, (0.1, 0.1, 0.1), boot="b1"))
        body["y"] = y
        r = api.post("/v1/hosts/h1/reports", content=json.dumps(body), headers=auth("h1"))
        assert ("k" in r.json()) is carried, (y, version)


def test_an_empty_list_is_versioned_too() -> None:
    """No fence at all is a list as well (empty): an agent holding it is sent nothing."""
    d = Directive(id=0, flag=False, vf_freeze_version=7)
    assert "k" not in for_agent(d, PROTOCOL, 7)
    assert for_agent(d, PROTOCOL, 6)["k"] == []
