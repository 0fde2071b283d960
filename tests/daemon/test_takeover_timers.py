"""Issue 37 (High): a slow takeover must not end an in-flight migration's lease, nor send
a second migration from the same source.

The scenario as it was measured: ``plan_period_s = 2``, the default leader lease (10 s) and
directive TTL (3 periods). Leader M1 sends h1 ``vm -> h2``; h1 applies it, but M1 is frozen
before h1's acknowledgement reaches it. M2 takes over 10.5 s later and restores the lease
and the directive; its first round, 1.6 s after it leads, came before h1 could reach it
(2 s timeout against the frozen leader, then the next URL), and judged the TTL and the
staleness on M1's receipt times: the directive was withdrawn ("not acknowledged in 6 s"),
the lease ended, and a later round sent h1 a second migration while the first was copying.

Here the two managers are two manager apps on one store, the frozen one simply no longer
called; the clock is injected, so the figures are exact. Now the new leader judges both
from the moment it leads: h1 has one TTL (6 s) and one staleness bound (6 s) from then to
reach it, more than it needs (one period + one 2 s timeout = 4 s).
"""

from __future__ import annotations

from typing import Any

from sova.manager.daemons.schema import build_report, encode
from sova.policy.hotspot import Utilisation, VMLoad

from .conftest import Api, auth, manager_settings

HOT = (0.2, 0.3, 0.9)
COLD = (0.05, 0.1, 0.05)
HOSTS: dict[str, tuple[tuple[float, float, float], dict[str, tuple[float, float, float]]]] = {
    "h1": (HOT, {"big": (0.05, 0.1, 0.5), "small": (0.05, 0.1, 0.3)}),
    "h2": (COLD, {"h2-vm1": (0.05, 0.1, 0.05)}),
    "h3": (COLD, {"h3-vm1": (0.05, 0.1, 0.05)}),
}
PERIOD = 2.0
LEASE = 10.0  # leader_lease_s's default: a frozen leader is deposed after this


class Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def post(
    api: Api, host: str, seq: int, t: float, *, ack: int = 0, leaving: str | None = None
) -> dict[str, Any]:
    util, vms = HOSTS[host]
    loads = {n: VMLoad(Utilisation(*u), 2**30) for n, u in vms.items() if n != leaving}
    body = build_report(
        seq, t, Utilisation(*util), loads, ack=ack, boot="b0", migrating=leaving is not None
    )
    r = api.post(f"/v1/hosts/{host}/reports", content=encode(body), headers=auth(host))
    assert r.status_code == 200, r.text
    return dict(r.json())


def leader(store: Any, clock: Clock) -> Api:
    settings = manager_settings(plan_period_s=PERIOD)
    return Api(settings, store, clock)


def signalled_by_m1(store: Any, clock: Clock) -> tuple[Api, int, str]:
    """M1 flags h1, and h1's report gets the directive (it applies it). Returns M1, the
    directive's id and its VM."""
    m1 = leader(store, clock)
    seq = 0
    while "h1" not in m1.svc.directives or not m1.svc.directives["h1"].flag:
        seq += 1
        assert seq < 10, "h1 never flagged"
        for h in HOSTS:
            post(m1, h, seq, clock.t)
        m1.tick(clock.t)
        clock.t += PERIOD
    dr = m1.svc.directives["h1"]
    d = post(m1, "h1", seq + 1, clock.t)  # delivered: the agent applies it
    assert d["f"] is True and d["i"] == dr.id
    m1.drain()
    assert dr.vm is not None
    return m1, dr.id, dr.vm


def test_the_new_leader_keeps_the_lease_of_a_migration_applied_under_the_frozen_one(
    store: Any,
) -> None:
    clock = Clock(1_000_000.0)
    m1, did, vm = signalled_by_m1(store, clock)
    frozen_at = clock.t  # M1 takes nothing from here on (SIGSTOP)
    clock.t = frozen_at + LEASE + 0.5
    m2 = leader(store, clock)  # the standby leads: restores the lease and the directive
    try:
        assert vm in m2.svc.core.leases
        clock.t += 1.6  # its first round, before h1 could reach it
        m2.tick(clock.t)
        assert vm in m2.svc.core.leases, "the first round ended the in-flight lease"
        assert m2.svc.directives["h1"].id == did and not m2.svc.directives["h1"].acked
        assert m2.svc.store.migration_rows(vm)[0]["result"] == "signalled"  # not ended
        # h1 reaches M2 (a 2 s timeout against M1, then the next URL): its report
        # acknowledges the directive and says it is migrating.
        clock.t += 2.4
        for seq, h in enumerate(HOSTS, start=20):
            post(m2, h, seq, clock.t, ack=did if h == "h1" else 0, leaving=vm if h == "h1" else None)
        # The next rounds, over the old TTL and staleness many times: no second
        # migration from h1, the first's lease intact.
        for i in range(10):
            clock.t += PERIOD
            for h in HOSTS:
                post(m2, h, 30 + i, clock.t, ack=did if h == "h1" else 0, leaving=vm if h == "h1" else None)
            m2.tick(clock.t)
            assert vm in m2.svc.core.leases, f"round {i}: lease lost"
            dr = m2.svc.directives["h1"]
            assert dr.id == did, f"round {i}: a second directive {dr.id} to h1 ({dr.vm})"
        m2.drain()
        (row,) = m2.svc.store.migration_rows(vm)
        assert row["result"] == "signalled", row  # open: the source reports its end
    finally:
        m2.close()
        m1.close()


def test_a_source_that_never_reaches_the_new_leader_is_judged_on_the_new_leader_s_clock(
    store: Any,
) -> None:
    """The other side of the bound: h1 never reports to M2 (its agent died with M1's
    freeze). Its directive is withdrawn and its lease ends, but only once the new leader
    has given it the time an agent needs to reach it (a period + the 2 s report timeout =
    4 s) and then one staleness bound (3 periods = 6 s) of its own: 10 s."""
    clock = Clock(2_000_000.0)
    m1, did, vm = signalled_by_m1(store, clock)
    clock.t += LEASE + 0.5
    m2 = leader(store, clock)
    led = clock.t
    try:
        for dt in (1.6, 3.6, 5.6, 7.6, 9.6):  # rounds inside the bound: the lease holds
            clock.t = led + dt
            for seq, h in enumerate(("h2", "h3"), start=int(dt * 10)):
                post(m2, h, seq, clock.t)
            m2.tick(clock.t)
            assert vm in m2.svc.core.leases, f"lease ended {dt} s after the takeover"
        clock.t = led + 11.6
        for h in ("h2", "h3"):
            post(m2, h, 190, clock.t)
        m2.tick(clock.t)
        assert vm not in m2.svc.core.leases, "a silent source pins its target for ever"
        m2.drain()
        (row,) = m2.svc.store.migration_rows(vm)
        assert row["result"] == "expired" and "h1" in row["detail"], row
    finally:
        m2.close()
        m1.close()


def test_a_source_reaching_the_new_leader_a_ttl_after_the_takeover_keeps_its_lease(
    store: Any,
) -> None:
    """h1 is slower than the bound's parts suggest (its agent starved as the leader froze):
    it reaches M2 7 s after the takeover, one TTL (6 s) and more. The new leader gives an
    agent the time it needs to reach it (a period + the report timeout) before its TTL
    and staleness run, so the round at 6.6 s keeps the lease; timed from the takeover
    alone, it withdrew the directive h1 had applied."""
    clock = Clock(4_000_000.0)
    m1, did, vm = signalled_by_m1(store, clock)
    clock.t += LEASE + 0.5
    m2 = leader(store, clock)
    led = clock.t
    try:
        for dt in (1.6, 3.6, 5.6, 6.6):
            clock.t = led + dt
            for seq, h in enumerate(("h2", "h3"), start=int(dt * 10)):
                post(m2, h, seq, clock.t)
            m2.tick(clock.t)
            assert vm in m2.svc.core.leases, f"lease ended {dt} s after the takeover"
        clock.t = led + 7.0
        post(m2, "h1", 70, clock.t, ack=did, leaving=vm)
        for i in range(5):
            clock.t += PERIOD
            for h in HOSTS:
                post(m2, h, 80 + i, clock.t, ack=did if h == "h1" else 0, leaving=vm if h == "h1" else None)
            m2.tick(clock.t)
            assert vm in m2.svc.core.leases, f"round {i}: lease lost"
            assert m2.svc.directives["h1"].id == did, "a second directive to h1"
    finally:
        m2.close()
        m1.close()


def test_a_leader_stalled_for_less_than_its_lease_keeps_the_lease_when_it_resumes(
    store: Any,
) -> None:
    """M1 is frozen for 8 s (under its 10 s lease: nobody takes over) right after h1 got
    the directive; h1's acknowledging report timed out against it meanwhile. On waking,
    the stall watch (a pulse, and a look before every timed round) sees the gap and times
    the hosts and directives from then: the first round keeps the lease. Before, it
    withdrew the directive h1 had applied ("not acknowledged in 6 s")."""
    clock = Clock(3_000_000.0)
    m1, did, vm = signalled_by_m1(store, clock)
    try:
        assert m1.svc.check_stall() == 0.0  # the watch's first look
        clock.t += 0.25
        assert m1.svc.check_stall() == 0.0  # on time: nothing to do
        clock.t += 8.0  # SIGSTOP ... SIGCONT
        stall = m1.svc.check_stall()
        assert abs(stall - 7.75) < 1e-9, stall  # 8 s between looks, 0.25 s of it the pulse
        assert m1.svc.metrics.stalls._value.get() == 1.0
        clock.t += 0.1
        m1.tick(clock.t)
        assert vm in m1.svc.core.leases, "the round after the stall ended the lease"
        assert not m1.svc.directives["h1"].acked
        clock.t += 1.5  # h1's next report gets through and acknowledges it
        post(m1, "h1", 50, clock.t, ack=did, leaving=vm)
        assert m1.svc.directives["h1"].acked
    finally:
        m1.close()


def test_a_source_that_says_it_is_migrating_is_sent_no_migration_without_a_lease(
    store: Any,
) -> None:
    """The manager side of one migration per source, for a lease lost for any reason: a
    hot h1 whose reports say a migration leaves it (``g``) is never flagged. Before, only
    a lease made a host busy, and "small" was sent after "big"."""
    clock = Clock(4_000_000.0)
    m = leader(store, clock)
    try:
        for seq in range(1, 9):
            for h in HOSTS:
                post(m, h, seq, clock.t, leaving="big" if h == "h1" else None)
            m.tick(clock.t)
            clock.t += PERIOD
            assert "h1" not in m.svc.directives, m.svc.directives.get("h1")
        assert "h1" in m.svc.core.migrating_hosts
        # The copy ends: the next report says so, and h1 may be a source again.
        for seq in range(9, 12):
            for h in HOSTS:
                post(m, h, seq, clock.t, leaving="big" if h == "h1" and seq < 9 else None)
            m.tick(clock.t)
            clock.t += PERIOD
        assert "h1" not in m.svc.core.migrating_hosts
        assert m.svc.directives["h1"].flag
    finally:
        m.close()
