"""The actuator's change-based listings (sova.orchestrator.openstack_view) against the
in-memory cloud: what each look costs, and that a new, changed or deleted server is seen and
a missed change healed. The same view runs against Nova's own API in tests/openstack/tier_nova.
"""

from __future__ import annotations

from typing import Any

from fakecloud import FakeCloud, FakeCloudError, FakeCloudTimeout

from sova.driver.base import OpState
from sova.model import NIC, VM, AttachVF, Host, Inventory, NicKind, VMState
from sova.orchestrator.openstack import OpenStackActuator
from sova.orchestrator.openstack_view import CloudView


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s


def viewed(cloud: FakeCloud, host: str = "cmp1") -> tuple[OpenStackActuator, Clock]:
    clock = Clock()
    act = OpenStackActuator(
        cloud,
        host,
        errors=(FakeCloudError,),
        timeouts=(FakeCloudTimeout,),
        spawn=lambda fn: fn(),
        clock=clock,
        sleep=clock.sleep,
        view=CloudView(cloud, host, refresh_s=120, resync_s=600, busy_s=10),
    )
    return act, clock


def sensed(cloud: FakeCloud, host: str = "cmp1", pool: int = 2) -> Inventory:
    """The host's view: the domains of the servers Nova placed here (a VF where a direct port
    is bound), as libvirt would show them."""
    vms = {}
    for s in cloud.servers.values():
        if s.compute_host != host:
            continue
        vf = any(
            p.device_id == s.id and p.binding_vnic_type == "direct" for p in cloud.ports.values()
        )
        vms[s.name] = VMState(
            VM(s.name, 2, 1 << 30),
            nic=NicKind.VF if vf else NicKind.VIRTIO,
            running=s.status != "SHUTOFF",
        )
    return Inventory(Host(host, 8, 16 << 30, NIC("pf0", 10e9, pool)), vms)


class _Since:
    """Any changes-since value (Nova's newest ``updated`` minus the overlap)."""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, str)

    def __hash__(self) -> int:
        return 0


SINCE = _Since()


def looks(cloud: FakeCloud) -> list[Any]:
    """The listings made since the last call: ("servers", changes-since or None), ("ports",)."""
    out = [
        ("servers", a["since"]) if c == "servers" else ("ports",)
        for c, a in cloud.calls
        if c == "servers" or (c == "ports" and "binding:host_id" in a)
    ]
    cloud.calls.clear()
    return out


def period(act: OpenStackActuator, clock: Clock, cloud: FakeCloud, dt: float = 10.0) -> Inventory:
    clock.t += dt
    return act.reconcile(sensed(cloud))


def test_quiet_host_is_asked_once_per_refresh_and_listed_in_full_once_per_resync() -> None:
    # 10 s periods, refresh 120 s, resync 600 s: over 600 s of a host where nothing
    # changes, 1 full look (2 listings) + 4 changes-since looks (at 120, 240, 360, 480 s)
    # + 1 full look at 600 s = 8 requests, against 2 x 60 = 120 listing every period.
    cloud = FakeCloud(vfs_per_host={"cmp1": 2})
    cloud.add_server("vm1", "cmp1")
    cloud.add_server("vm2", "cmp1")
    act, clock = viewed(cloud)
    act.reconcile(sensed(cloud))
    assert looks(cloud) == [("servers", None), ("ports",)]
    made = []
    for _ in range(60):
        period(act, clock, cloud)
        made += looks(cloud)
    assert [m[0] for m in made] == ["servers"] * 4 + ["servers", "ports"]
    assert all(m[1] is not None for m in made[:4]) and made[4] == ("servers", None)
    assert act.view is not None and act.view.calls == 2 + 6


def test_a_new_server_sensed_on_the_host_is_listed_at_once() -> None:
    cloud = FakeCloud(vfs_per_host={"cmp1": 2})
    cloud.add_server("vm1", "cmp1")
    act, clock = viewed(cloud)
    act.reconcile(sensed(cloud))
    period(act, clock, cloud)
    looks(cloud)
    cloud.add_server("vm2", "cmp1")  # booted (or migrated in): its domain appears
    inv = period(act, clock, cloud)
    assert looks(cloud) == [("servers", None), ("ports",)]
    assert inv.vms["vm2"].running and not act.discrepancies


def test_a_change_only_nova_sees_is_seen_at_the_next_refresh_and_followed_to_its_end() -> None:
    # An operator's resize takes the task state; the domain runs on unchanged until Nova
    # moves it, so only changes-since shows it: within refresh_s, then every busy_s.
    cloud = FakeCloud(vfs_per_host={"cmp1": 2, "cmp2": 2})
    cloud.add_server("vm1", "cmp1")
    act, clock = viewed(cloud)
    act.reconcile(sensed(cloud))
    cloud.begin("uuid-vm1", "resize")
    seen_at = None
    for _ in range(12):
        inv = period(act, clock, cloud)
        if "vm1" not in inv.vms:
            seen_at = clock.t
            break
    assert seen_at == 120.0, seen_at  # the first refresh after the first look
    assert any("Nova is operating on it" in n for n in act.discrepancies)
    assert [c for c in looks(cloud) if c[0] == "servers"][-1][1] is not None  # changes-since
    period(act, clock, cloud)  # busy: followed at busy_s (= the period here)
    assert [m[0] for m in looks(cloud)] == ["servers"]
    cloud.servers["uuid-vm1"].task_state = None  # Nova gives up (still on cmp1)
    cloud.servers["uuid-vm1"].status = "ACTIVE"
    inv = period(act, clock, cloud)
    assert "vm1" in inv.vms and looks(cloud) == [("servers", SINCE), ("ports",)]


def test_a_server_nova_deleted_is_dropped_by_changes_since() -> None:
    # Deleted in Nova while the host still shows its domain (the compute has not torn it
    # down yet): changes-since lists it DELETED, and the actuator no longer has it here.
    cloud = FakeCloud(vfs_per_host={"cmp1": 2})
    cloud.add_server("vm1", "cmp1")
    cloud.add_server("vm2", "cmp1")
    act, clock = viewed(cloud)
    still = sensed(cloud)
    act.reconcile(still)
    cloud.delete_server("uuid-vm2")
    clock.t = 120.0
    inv = act.reconcile(still)
    assert looks(cloud)[-2:] == [("servers", SINCE), ("ports",)]
    assert not inv.vms["vm2"].running and inv.vms["vm1"].running
    assert "vm2: sensed on cmp1 but Nova places no such server here" in act.discrepancies


def test_a_change_changes_since_misses_is_healed_by_the_resync() -> None:
    # A compute node whose clock is behind stamps the rebuild earlier than the marker minus
    # the overlap: changes-since misses it, the next full listing (resync_s) does not.
    cloud = FakeCloud(vfs_per_host={"cmp1": 2})
    vm1 = cloud.add_server("vm1", "cmp1")
    act, clock = viewed(cloud)
    assert act.poll(act.submit(AttachVF("vm1"))).state is OpState.SUCCEEDED
    act.reconcile(sensed(cloud))
    t0 = clock.t  # the first full listing
    vm1.launched_at = "2026-12-07T03:00:00+rebuilt"  # Nova re-spawned it between periods
    vm1.updated_at = "2026-11-30T00:00:00+00:00"  # ... stamped by a clock hours behind
    given_back_at = None
    for _ in range(60):
        start = clock.t + 10.0  # the period's inventory (the inline give-back sleeps on)
        period(act, clock, cloud)
        if any("given back" in n for n in act.discrepancies):
            given_back_at = start
            break
    assert given_back_at == t0 + 600.0, (t0, given_back_at)
    assert not [p for p in cloud.ports.values() if p.tags]


def test_an_operation_of_the_actuator_lists_again_at_the_next_inventory() -> None:
    cloud = FakeCloud(vfs_per_host={"cmp1": 2})
    cloud.add_server("vm1", "cmp1")
    act, clock = viewed(cloud)
    act.reconcile(sensed(cloud))
    looks(cloud)
    assert act.poll(act.submit(AttachVF("vm1"))).state is OpState.SUCCEEDED
    looks(cloud)
    # The host's VF shows too, but the view is stale by the operation itself.
    clock.t += 1.0
    inv = act.reconcile(sensed(cloud))
    assert looks(cloud) == [("servers", None), ("ports",)]
    assert inv.vms["vm1"].nic is NicKind.VF and not act.discrepancies


def test_the_sweep_runs_once_per_resync_and_asks_nova_about_no_listed_server() -> None:
    cloud = FakeCloud(vfs_per_host={"cmp1": 2})
    cloud.add_server("vm1", "cmp1")
    act, clock = viewed(cloud)
    assert act.poll(act.submit(AttachVF("vm1"))).state is OpState.SUCCEEDED
    asked: list[str] = []
    find = cloud.compute.find_server
    cloud.compute.find_server = lambda sid, **kw: asked.append(sid) or find(sid, **kw)  # type: ignore[method-assign]
    act.reconcile(sensed(cloud))
    cloud.calls.clear()
    for _ in range(600):  # 600 s of a bandwidth controller reading the inventory each second
        period(act, clock, cloud, dt=1.0)
    sweeps = [a for c, a in cloud.calls if c == "ports" and "tags" in a]
    assert len(sweeps) == 1  # at 600 s, not every 30 inventories
    # vm1's Sova port is bound to a server Nova listed here: no GET /servers/{id} for it.
    assert asked == []


def test_settings_build_the_view_with_its_periods_or_none(tmp_path: Any, monkeypatch: Any) -> None:
    import pytest

    import sova.orchestrator.openstack as osmod
    from sova.manager.daemons.config import ConfigError, load_agent_settings
    from sova.orchestrator.settings import openstack_actuator

    monkeypatch.setattr(osmod, "connect", lambda name, timeout: FakeCloud())
    cfg = tmp_path / "sova.toml"
    head = 'orchestrator = "openstack"\ncloud = "prod"\n[openstack]\n'
    cfg.write_text(head)
    view = openstack_actuator(load_agent_settings(cfg, environ={}), "cmp1").view
    assert view is not None and (view.refresh_s, view.resync_s, view.host) == (180, 900, "cmp1")
    cfg.write_text(f"{head}refresh_s = 60\nresync_s = 300\n")
    view = openstack_actuator(load_agent_settings(cfg, environ={}), "cmp1").view
    assert view is not None and (view.refresh_s, view.resync_s) == (60, 300)
    cfg.write_text(f"{head}refresh_s = 0\n")
    assert openstack_actuator(load_agent_settings(cfg, environ={}), "cmp1").view is None
    cfg.write_text(f"{head}refresh_s = 1000\n")
    with pytest.raises(ConfigError, match="refresh_s = 1000: above resync_s = 900"):
        load_agent_settings(cfg, environ={})
    cfg.write_text(f"{head}resync_s = 0\n")
    with pytest.raises(ConfigError, match="resync_s"):
        load_agent_settings(cfg, environ={})


class _Listings:
    """A connection whose compute and network answer from ``listed``, recording each query."""

    def __init__(self, listed: list[Any]) -> None:
        self.listed = listed
        self.asked: list[tuple[str, dict[str, Any]]] = []
        self.compute = self.network = self

    def __getattr__(self, name: str) -> Any:  # conn.compute.servers / conn.network.ports
        def listing(**query: Any) -> list[Any]:
            self.asked.append((name, query))
            return list(self.listed) if name == "servers" else []

        return listing

    def take(self) -> list[tuple[str, Any]]:
        out = [(n, q.get("changes_since")) for n, q in self.asked]
        self.asked.clear()
        return out


def _server(sid: str, **attrs: Any) -> Any:
    from types import SimpleNamespace

    fields = {"status": "ACTIVE", "task_state": None, "compute_host": "cmp1", **attrs}
    return SimpleNamespace(id=sid, **fields)


def _inventory() -> Inventory:
    return Inventory(Host("cmp1", 8, 16 << 30, NIC("pf0", 10e9, 2)), {})


def test_by_default_a_busy_host_is_asked_every_10_s_from_a_minute_before_novas_newest() -> None:
    # The agent's settings pass neither busy_s nor overlap_s: the defaults are what runs.
    # A server in a task, Nova's newest stamp 08:00:00: 10 s later the view asks for the
    # changes since 07:59:00 (the overlap covers compute nodes' clock skew); at 9 s, nothing.
    conn = _Listings([_server("s1", task_state="migrating", updated_at="2026-12-07T08:00:00Z")])
    view = CloudView(conn, "cmp1")
    assert view.last_look == "none"
    view.look(_inventory(), 0.0)
    assert conn.take() == [("servers", None), ("ports", None)] and view.last_look == "full"
    view.look(_inventory(), 9.0)
    assert (conn.take(), view.last_look) == ([], "cached")
    view.look(_inventory(), 10.0)
    assert conn.take() == [("servers", "2026-12-07T07:59:00+00:00")]


def test_servers_without_novas_stamp_are_listed_in_full_at_each_changes_look() -> None:
    # No `updated` to ask changes-since from: each changes look lists the host's servers
    # (one request); the ports are listed again only when the answer differs.
    conn = _Listings([_server("s1"), _server("s2")])
    view = CloudView(conn, "cmp1", refresh_s=60, resync_s=600)
    view.look(_inventory(), 0.0)
    conn.take()
    servers, _ = view.look(_inventory(), 60.0)
    assert conn.take() == [("servers", None)] and view.last_look == "changes"
    assert sorted(s.id for s in servers) == ["s1", "s2"]
    conn.listed = [_server("s1")]  # s2 went away (deleted and purged, or moved off)
    servers, _ = view.look(_inventory(), 120.0)
    assert conn.take() == [("servers", None), ("ports", None)]
    assert [s.id for s in servers] == ["s1"]
    conn.listed = [_server("s1", status="DELETED")]  # Nova lists a deleted one as such
    servers, _ = view.look(_inventory(), 180.0)
    assert conn.take() == [("servers", None), ("ports", None)]
    assert servers == [] and not view.has_server("s1")


def test_each_field_nova_reports_of_a_server_is_a_change_that_lists_the_ports_again() -> None:
    # Without a stamp the fields themselves say whether a server changed; with one, a newer
    # `updated` alone does (a save Nova made for a reason the other fields do not show).
    for field, before, after in (
        ("status", "ACTIVE", "SHUTOFF"),
        ("task_state", None, "rebooting"),
        ("launched_at", "2026-12-07T07:00:00", "2026-12-07T08:00:00"),
        ("updated_at", "2026-12-07T08:00:00Z", "2026-12-07T08:00:05Z"),
    ):
        conn = _Listings([_server("s1", **{field: before})])
        view = CloudView(conn, "cmp1", refresh_s=60, resync_s=600)
        view.look(_inventory(), 0.0)
        conn.take()
        view.look(_inventory(), 60.0)
        assert [n for n, _ in conn.take()] == ["servers"], field  # unchanged: no ports
        conn.listed = [_server("s1", **{field: after})]
        [server], _ = view.look(_inventory(), 120.0)
        assert [n for n, _ in conn.take()] == ["servers", "ports"], field
        assert getattr(server, field) == after


def test_an_invalidated_view_lists_everything_at_the_next_look() -> None:
    # An operation of the actuator ended: even with the host's domains as they were, the
    # next look is a full one, not the cache.
    conn = _Listings([_server("s1", updated_at="2026-12-07T08:00:00Z")])
    view = CloudView(conn, "cmp1", refresh_s=60, resync_s=600)
    view.look(_inventory(), 0.0)
    conn.take()
    view.look(_inventory(), 1.0)
    assert conn.take() == [] and view.last_look == "cached"
    view.invalidate()
    view.look(_inventory(), 2.0)
    assert conn.take() == [("servers", None), ("ports", None)] and view.last_look == "full"
