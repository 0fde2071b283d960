"""The agent's bandwidth step around the Sova allocator: caps that conserve work.

The allocator answers each VM's fair allocation; a cap at exactly that allocation would
hold a bursty VM (requests arriving in bursts) at its mean rate while the link idles, and
it would queue. The step spreads the capacity nobody is allocated over the caps.
"""

from __future__ import annotations

import pytest
from tests.test_agent import HostWorld, Load

from sova.agent.config import ControllerConfig
from sova.agent.loop import HostAgent
from sova.driver.base import MockDriver
from sova.model import SetGuestRateLimit

LINK = 10e9  # tests.test_agent.inventory's NIC


def caps_after(loads: dict[str, Load], policy: str, steps: int = 4) -> dict[str, float | None]:
    world = HostWorld(loads)
    drv = MockDriver(world)
    agent = HostAgent(drv, ControllerConfig(bandwidth_policy=policy))
    for _ in range(steps):
        agent.bandwidth_step()
        world.advance(1.0)
    caps: dict[str, float | None] = {}
    for a in drv.submitted():
        if isinstance(a, SetGuestRateLimit):
            caps[a.vm] = a.rate_bps
    return caps


def test_caps_on_a_lightly_used_link_leave_bursty_vms_the_idle_capacity() -> None:
    # 2 x 100 MB/s (0.8 Gbit/s of rx + tx each, about 0.4 Gbit/s sent): the link is mostly idle.
    loads = {"web": Load(cpu=0.1, bytes_per_s=100e6), "db": Load(cpu=0.1, bytes_per_s=100e6)}
    caps = caps_after(loads, "sova")
    assert set(caps) == {"web", "db"}
    for vm, cap in caps.items():
        # no cap at all is also work-conserving; a cap must leave each its half of the idle link
        assert cap is None or cap >= 0.45 * LINK, (vm, cap)


def test_spread_caps_never_add_up_to_more_than_the_link() -> None:
    loads = {f"vm{i}": Load(cpu=0.1, bytes_per_s=0.5e9) for i in range(4)}
    caps = caps_after(loads, "sova")
    assert sum(LINK if c is None else c for c in caps.values()) <= LINK * (1 + 1e-9)


def test_a_guarantee_still_binds_when_the_link_is_full() -> None:
    from dataclasses import replace

    from sova.model import SLA, ResourceTuple

    loads = {"g": Load(cpu=0.1, bytes_per_s=2.4e9), "be": Load(cpu=0.1, bytes_per_s=2.4e9)}
    world = HostWorld(loads)
    world.states["g"] = replace(
        world.states["g"],
        vm=replace(world.states["g"].vm, sla=SLA(bandwidth=ResourceTuple(minimum=6e9))),
    )
    drv = MockDriver(world)
    agent = HostAgent(drv, ControllerConfig(bandwidth_policy="sova"))
    for _ in range(4):
        agent.bandwidth_step()
        world.advance(1.0)
    caps = {a.vm: a.rate_bps for a in drv.submitted() if isinstance(a, SetGuestRateLimit)}
    assert caps["be"] == pytest.approx(LINK - 6e9, rel=0.02)


@pytest.mark.xfail(
    strict=True,
    reason="missing mechanism (issue 18, docs/lab.md guarantee): a guaranteed VM under its "
    "minimum on a full link is taken to want only the rate TCP left it",
)
def test_a_guarantee_under_its_minimum_on_a_full_link_is_restored_at_once() -> None:
    # The lab's guarantee scenario, scaled to this link: g (one TCP stream, minimum 7 Gbit/s)
    # gets what TCP leaves it beside a many-stream neighbour on a full link: 2 Gbit/s sent
    # (0.5 GB/s of rx + tx), be 8 Gbit/s; 2 + 8 = the link. g offers more than its minimum;
    # its rate is the link's congestion, not its demand. Measured in the lab (2026-11-27,
    # QEMU 10): at the guest-side phase's start g1's caps went 14.2, 7.5, 11.8, 7.9 ... Mbit/s
    # against its 35 minimum and took 30 s of +20 % probes to reach it; a reading under 80 %
    # of its cap inside the judged window dropped its cap to 31.2 (g1 31.05 < 31.5).
    from dataclasses import replace

    from sova.model import SLA, ResourceTuple

    loads = {"g": Load(cpu=0.1, bytes_per_s=0.5e9), "be": Load(cpu=0.1, bytes_per_s=2e9)}
    world = HostWorld(loads)
    world.states["g"] = replace(
        world.states["g"],
        vm=replace(world.states["g"].vm, sla=SLA(bandwidth=ResourceTuple(minimum=7e9))),
    )
    drv = MockDriver(world)
    agent = HostAgent(drv, ControllerConfig(bandwidth_policy="sova"))
    for _ in range(2):  # the first step only reads the counters
        agent.bandwidth_step()
        world.advance(1.0)
    caps = {a.vm: a.rate_bps for a in drv.submitted() if isinstance(a, SetGuestRateLimit)}
    # g's minimum is left free at the first decision: be is held to the rest (10 - 7)
    assert caps.get("be") is not None and caps["be"] <= (LINK - 7e9) * 1.02, caps
    assert caps.get("g") is None or caps["g"] >= 7e9, caps
