"""The agent's bandwidth step around the Sova allocator: caps that conserve work.

The allocator answers each VM's fair allocation; a cap at exactly that allocation would
hold a bursty VM (requests arriving in bursts) at its mean rate while the link idles, and
it would queue. The step spreads the capacity nobody is allocated over the caps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from tests.test_agent import HostWorld, Load

from sova.agent import bandwidth as bw
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
    # no guarantee and a mostly idle link: the caps are lifted (docs/design.md#open-link),
    # so none is set; a cap would have to leave each its half of the idle link
    assert caps == {}


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


# --------------------------------------------------------------------------- on a shaped link


class ShapedLink(HostWorld):
    """A 10 Gbit/s link shared per TCP stream among VMs held to the caps the agent set.

    Each VM offers ``rate`` bit/s over ``streams`` TCP streams; a period's sent rates are the
    weighted max-min share of the link (weights = streams) of ``min(offer, cap)``: the
    :func:`~sova.policy.waterfill.grouped_waterfill` the simulator's NIC shares its egress with. A
    limit takes effect when the agent submits it.
    """

    def __init__(self, offers: dict[str, tuple[float, int]], minimum: dict[str, float]) -> None:
        from dataclasses import replace

        from sova.model import SLA, ResourceTuple

        super().__init__({vm: Load(cpu=0.1, bytes_per_s=0.0) for vm in offers}, detach_s=0.0)
        self.offers = dict(offers)
        for vm, m in minimum.items():
            s = self.states[vm]
            sla = SLA(bandwidth=ResourceTuple(minimum=m))
            self.states[vm] = replace(s, vm=replace(s.vm, sla=sla))
        self.caps: dict[str, float | None] = {}
        self.sent: dict[str, float] = {}

    def __call__(self, req: Any) -> Any:
        if req.method == "submit" and isinstance(req.args[0], SetGuestRateLimit):
            self.caps[req.args[0].vm] = req.args[0].rate_bps
        return super().__call__(req)

    def advance(self, dt: float) -> None:
        from sova.policy.waterfill import grouped_waterfill

        names = sorted(self.offers)
        want = np.array([min(self.offers[v][0], self.caps.get(v) or math.inf) for v in names])
        weights = np.array([self.offers[v][1] for v in names], dtype=np.float64)
        one_link = np.zeros(len(names), dtype=np.int64)
        got = grouped_waterfill(np.array([LINK], dtype=np.float64), one_link, want, weights)
        self.sent = dict(zip(names, got.tolist(), strict=True))
        for vm, bps in self.sent.items():
            c = self.counters[vm]
            c[1] += 2 * bps / 8 * dt  # the world counts rx + tx; the guests send, echoes come back
            c[2] += 2 * bps / 8 / 1000 * dt
        self.t += dt


@dataclass
class Period:
    caps: dict[str, float | None]  # in force during the period
    sent: dict[str, float]
    reservation: tuple[int, float] | None  # g's after the decision


def run_link(
    offers: dict[str, tuple[float, int]],
    minimum: dict[str, float],
    periods: int,
    change: tuple[int, str, float] | None = None,
    vf: bool = False,
) -> list[Period]:
    """``periods`` one-second periods of the agent's bandwidth loop on a :class:`ShapedLink`
    (the first decision at period 1: period 0 only reads the counters); ``change`` = (period,
    VM, new offered rate), and with ``vf`` the VM is given a VF then (its path changes)."""
    from dataclasses import replace

    from sova.model import NicKind

    world = ShapedLink(offers, minimum)
    agent = HostAgent(MockDriver(world), ControllerConfig(bandwidth_policy="sova"))
    out = []
    for t in range(periods):
        if change is not None and t == change[0]:
            world.offers[change[1]] = (change[2], world.offers[change[1]][1])
            if vf:
                s = world.states[change[1]]
                world.states[change[1]] = replace(s, nic=NicKind.VF)
        agent.bandwidth_step()
        world.advance(1.0)
        out.append(Period(dict(world.caps), dict(world.sent), agent.reservations.get("g")))
    return out


G = 7e9  # g's minimum
HOLD = bw.HOLD_PERIODS  # 5


@dataclass(frozen=True)
class Case:
    name: str
    offers: dict[str, tuple[float, int]]  # VM -> (offered bit/s, TCP streams)
    change: tuple[int, str, float] | None
    # (from period, to period (exclusive), VM, least sent, most sent) in Gbit/s
    expect: tuple[tuple[int, int, str, float, float], ...]
    vf: bool = False  # the change also gives the VM a VF


CASES = [
    Case(
        # One stream beside four on a full link: uncapped, TCP gives g 10/5 = 2 and be 8;
        # 2 + 8 = 10 >= 0.95 * 10 (full), 2 < 7: g is reserved at once, demand 7 ->
        # g 7, be 10 - 7 = 3 from the first decision on. (Before: g's demand was its 2,
        # its cap climbed 10 % a period from 2: 2 * 1.1^n >= 7 after n = 14 periods.)
        "congestion: the minimum restored at once",
        {"g": (20e9, 1), "be": (20e9, 4)},
        None,
        ((1, 40, "g", 7.0, 7.0), (1, 40, "be", 3.0, 3.0)),
    ),
    Case(
        # g wants 2 of its 7: reserved at the first decision (the link was full: 2 + 8), then
        # reads 2 with be held to 3 (2 + 3 = 5 < 9.5: headroom, g below its cap 7) for HOLD
        # periods and is released at level 2: be climbs back (caps 5.65, 7.11, 7.91) and
        # from then keeps >= 10 - 2 * 1.1^2 = 7.58 of the link; g keeps its 2.
        "truly low demand: the neighbour keeps the link after the hold",
        {"g": (2e9, 1), "be": (20e9, 4)},
        None,
        (
            (1, HOLD + 1, "be", 3.0, 3.0),
            (HOLD + 4, 60, "be", 7.58, 8.0),
            (0, 60, "g", 2.0, 2.0),
        ),
    ),
    Case(
        # released at level 2 as above, then g wants 20 from period 30: held at its cap
        # (2, 2.2 or 2.42 in the probing cycle), it shows 2.2 or more within two periods,
        # > (1 + 0.1/2) * 2 = 2.1: reserved again, g 7 and be 3 within 4 periods of the
        # change, and then for good.
        "a released guarantee that wants more again is restored",
        {"g": (2e9, 1), "be": (20e9, 4)},
        (30, "g", 20e9),
        ((34, 60, "g", 7.0, 7.0), (34, 60, "be", 3.0, 3.0)),
    ),
    Case(
        # released at level 2 on virtio as above; given a VF at period 30 with 20 to send:
        # what it read on virtio says nothing about the VF, so it starts again from no
        # reservation, and on the full link (its 2 + be's 7.8) it is reserved at the first
        # decision on the VF: g 7, be 3 from period 30. (Its level alone would take one more
        # period: it read 2 under the cap of period 29, and shows 2.42 > 2.1 only after 30.)
        "a released guarantee given a VF starts again",
        {"g": (2e9, 1), "be": (20e9, 4)},
        (30, "g", 20e9),
        ((30, 60, "g", 7.0, 7.0), (30, 60, "be", 3.0, 3.0)),
        vf=True,
    ),
    Case(
        # 2 + 3 = 5 of 10: the link has headroom and g is below its cap: its 2 is its demand,
        # never reserved, and be is never held under its 3.
        "headroom: nothing reserved",
        {"g": (2e9, 1), "be": (3e9, 4)},
        None,
        ((0, 60, "g", 2.0, 2.0), (0, 60, "be", 3.0, 3.0)),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_a_guarantee_on_a_shaped_link(case: Case) -> None:
    periods = max(e[1] for e in case.expect)
    run = run_link(case.offers, {"g": G}, periods, case.change, case.vf)
    for start, stop, vm, lo, hi in case.expect:
        for t in range(start, stop):
            sent = run[t].sent[vm] / 1e9
            assert lo * (1 - 1e-6) <= sent <= hi * (1 + 1e-6), (case.name, t, vm, sent, run[t])


def test_a_steady_low_guarantee_beside_a_greedy_neighbour_does_not_oscillate() -> None:
    # 60 periods of g wanting 2 of its 7 beside be wanting the whole link. g is reserved
    # once (the first decision, on the full link) and released once, after HOLD quiet
    # periods; released at level 2, its readings under the probing cycle's caps 2.2 and
    # 2.42 stay 2 <= (1 + 0.1/2) * 2 = 2.1, so it is never reserved again. be's cap moves by more than a tenth
    # of the link three times: 8 -> 3 (reserved; from no cap), 3 -> 5.65 and 5.65 -> 7.11
    # (released: g 2 + half the 4.7 nobody was allocated; then be's probes). The
    # probing cycle afterwards (8, 7.8, 7.58) moves it by <= 0.42.
    run = run_link({"g": (2e9, 1), "be": (20e9, 4)}, {"g": G}, 60)
    starts = [t for t, p in enumerate(run) if p.reservation is not None and p.reservation[0] == 0]
    assert starts == [1], starts
    released = [
        t for t, p in enumerate(run) if p.reservation is not None and p.reservation[0] == HOLD
    ]
    assert released and released[0] == 1 + HOLD and released == list(range(1 + HOLD, 60))
    be = [LINK if p.caps.get("be") is None else p.caps["be"] for p in run]
    swings = [t for t in range(1, 60) if abs(be[t] - be[t - 1]) > 0.1 * LINK]
    assert len(swings) == 3, (swings, be)
    # and no more limit changes than the same link with no guarantee at all (the hold
    # spares the probing cycle's changes while be is held to 3)
    plain = run_link({"g": (2e9, 1), "be": (20e9, 4)}, {}, 60)

    def changes(r: list[Period]) -> int:
        return sum(1 for t in range(1, 60) if r[t].caps != r[t - 1].caps)

    assert changes(run) <= changes(plain), (changes(run), changes(plain))
