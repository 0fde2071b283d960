"""Hot-plug, migration and guest-agent failure modes, against a scripted libvirt stand-in.

libvirt's test driver supports none of these, so a fake speaking libvirt-python's interfaces
plays the host: it raises ``libvirtError`` and sends (or withholds) device events the way
QEMU does. Each test scripts one failure mode operators report and asserts what the driver
does about it.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

libvirt = pytest.importorskip(
    "libvirt", reason="libvirt-python not installed (scripts/ci-setup-libvirt.sh installs it)"
)

from conftest import wait_done  # noqa: E402
from libvirt_fakes import (  # noqa: E402
    FakeConn,
    FakeGuest,
    domain_xml,
    plain_hostdev,
    vf_iface,
    virtio,
)

from sova.driver.base import OpState  # noqa: E402
from sova.driver.guest_agent import GuestAgent  # noqa: E402
from sova.driver.libvirt_driver import LibvirtDriver, LibvirtDriverConfig  # noqa: E402
from sova.driver.libvirt_xml import parse_domain  # noqa: E402
from sova.model import (  # noqa: E402
    AttachVF,
    DetachVF,
    Migrate,
    SetGuestRateLimit,
    SetVFRate,
)

MAC_A = "52:54:00:aa:00:01"
MAC_B = "52:54:00:aa:00:02"
MAC_C = "52:54:00:aa:00:03"
MAC_D = "52:54:00:aa:00:04"


@pytest.fixture
def world() -> FakeConn:
    return FakeConn(
        {
            "holder": domain_xml("holder", virtio(MAC_A) + vf_iface(MAC_A, 0)),
            "ready": domain_xml("ready", virtio(MAC_B)),
            "legacy": domain_xml("legacy", virtio(MAC_C, teaming=False)),
            "plain": domain_xml("plain", virtio(MAC_D, teaming=False) + plain_hostdev(2)),
        }
    )


def make(world: FakeConn, fast: dict[str, Any], closing: list[Any], **kw: Any) -> LibvirtDriver:
    cfg = LibvirtDriverConfig(uri="fake:///", sysfs_root="/nonexistent", **(fast | kw))
    drv = LibvirtDriver(cfg, conn=world)
    closing.append(drv)
    return drv


def calls(world: FakeConn, vm: str, what: str) -> int:
    return sum(1 for c in world.domains[vm].calls if c[0] == what)


def held_vf(world: FakeConn, vm: str) -> str | None:
    vf = parse_domain(world.domains[vm].xml).sova_vf()
    return vf.pci if vf else None


# --------------------------------------------------------------------------- attach


def test_attach_plugs_a_transient_partner_of_the_virtio_backup(world, fast, closing):
    drv = make(world, fast, closing)
    st = wait_done(drv, drv.submit(AttachVF("ready")))
    assert st.state is OpState.SUCCEEDED, st
    assert "DEVICE_ADDED" in st.detail
    info = parse_domain(world.domains["ready"].xml)
    vf = info.sova_vf()
    assert vf is not None
    assert vf.mac == MAC_B  # same MAC as the virtio backup: net_failover pairs them by it
    assert (vf.teaming_type, vf.teaming_persistent) == ("transient", "ua-net0")
    # VF 0 is held by "holder", VF 1 (10.2) as plain hostdev by "plain": next free is 10.4.
    assert vf.pci == "0000:03:10.4"
    assert drv.inventory().vms["ready"].vf_index == 2


def test_attach_to_a_vm_that_already_holds_a_vf_is_a_noop_success(world, fast, closing):
    drv = make(world, fast, closing)
    st = wait_done(drv, drv.submit(AttachVF("holder")))
    assert st.state is OpState.SUCCEEDED
    assert "no-op" in st.detail
    assert calls(world, "holder", "attach") == 0


def test_vm_without_failover_ready_virtio_never_gets_a_vf(world, fast, closing):
    drv = make(world, fast, closing)
    st = wait_done(drv, drv.submit(AttachVF("legacy")))
    assert st.state is OpState.FAILED
    assert "not failover-ready" in st.detail and "teaming" in st.detail
    assert calls(world, "legacy", "attach") == 0
    assert drv.inventory().vms["legacy"].failover_ready is False


def test_attach_confirmed_from_live_xml_when_the_event_is_missed(world, fast, closing):
    world.domains["ready"].on_attach = "silent"
    drv = make(world, fast, closing)
    st = wait_done(drv, drv.submit(AttachVF("ready")))
    assert st.state is OpState.SUCCEEDED
    assert "live XML" in st.detail
    assert calls(world, "ready", "attach") == 1


def test_attach_error_is_retried_a_bounded_number_of_times(world, fast, closing):
    world.domains["ready"].on_attach = "error"
    drv = make(world, fast, closing)
    st = wait_done(drv, drv.submit(AttachVF("ready")))
    assert st.state is OpState.FAILED
    assert "after 3 attempts" in st.detail and "device_add" in st.detail
    assert calls(world, "ready", "attach") == 3
    assert held_vf(world, "ready") is None


def test_pool_limit_is_respected(world, fast, closing):
    drv = make(world, fast, closing, vf_pool=2)  # holder + plain already use two
    st = wait_done(drv, drv.submit(AttachVF("ready")))
    assert st.state is OpState.FAILED and "pool of 2" in st.detail
    assert calls(world, "ready", "attach") == 0


# --------------------------------------------------------------------------- detach


def test_detach_confirmed_by_device_removed(world, fast, closing):
    drv = make(world, fast, closing)
    st = wait_done(drv, drv.submit(DetachVF("holder")))
    assert st.state is OpState.SUCCEEDED and "DEVICE_REMOVED" in st.detail
    assert held_vf(world, "holder") is None
    assert parse_domain(world.domains["holder"].xml).failover_backup() is not None


def test_removal_that_never_completes_fails_with_a_clear_detail(world, fast, closing):
    world.domains["holder"].on_detach = ["never"]
    drv = make(world, fast, closing)
    t0 = time.monotonic()
    op = drv.submit(DetachVF("holder"))
    assert time.monotonic() - t0 < 0.1, "submit must not block on the unplug"
    assert drv.poll(op).state is OpState.PENDING
    st = wait_done(drv, op)
    assert st.state is OpState.FAILED
    assert "not completed within 0.3s" in st.detail
    assert "after 3 attempts" in st.detail and "virtio path unchanged" in st.detail
    assert calls(world, "holder", "detach") == 3  # bounded
    assert held_vf(world, "holder") == "0000:03:10.0"  # still there, and reported so
    assert drv.inventory().vms["holder"].vf_index == 0


def test_removal_failed_event_is_retried_then_reported(world, fast, closing):
    world.domains["holder"].on_detach = ["fail"]
    drv = make(world, fast, closing)
    st = wait_done(drv, drv.submit(DetachVF("holder")))
    assert st.state is OpState.FAILED
    assert "DEVICE_REMOVAL_FAILED" in st.detail
    assert calls(world, "holder", "detach") == 3
    assert held_vf(world, "holder") is not None


def test_transient_busy_then_removed_succeeds_on_retry(world, fast, closing):
    world.domains["holder"].on_detach = ["busy", "fail", "ok"]
    drv = make(world, fast, closing)
    st = wait_done(drv, drv.submit(DetachVF("holder")))
    assert st.state is OpState.SUCCEEDED, st
    assert calls(world, "holder", "detach") == 3
    assert held_vf(world, "holder") is None


def test_vf_is_never_pulled_while_the_virtio_path_is_down(world, fast, closing):
    world.domains["holder"].xml = domain_xml(
        "holder", virtio(MAC_A, link="down") + vf_iface(MAC_A, 0)
    )
    drv = make(world, fast, closing)
    st = wait_done(drv, drv.submit(DetachVF("holder")))
    assert st.state is OpState.FAILED and "link-down" in st.detail
    assert calls(world, "holder", "detach") == 0
    assert drv.inventory().vms["holder"].backup_link_up is False


def test_plain_hostdev_vf_is_not_pulled(world, fast, closing):
    drv = make(world, fast, closing)
    st = wait_done(drv, drv.submit(DetachVF("plain")))
    assert st.state is OpState.FAILED and "plain <hostdev>" in st.detail
    assert calls(world, "plain", "detach") == 0


def test_detach_without_vf_is_a_noop_success(world, fast, closing):
    drv = make(world, fast, closing)
    st = wait_done(drv, drv.submit(DetachVF("ready")))
    assert st.state is OpState.SUCCEEDED and "no-op" in st.detail
    assert calls(world, "ready", "detach") == 0


def test_unknown_vm_and_unknown_op(world, fast, closing):
    drv = make(world, fast, closing)
    st = wait_done(drv, drv.submit(DetachVF("ghost")))
    assert st.state is OpState.FAILED and "ghost not found" in st.detail
    assert drv.poll("nope").state is OpState.FAILED


def test_read_only_driver_refuses_every_action(world, fast, closing):
    drv = make(world, fast, closing, read_only=True)
    st = drv.poll(drv.submit(AttachVF("ready")))
    assert st.state is OpState.FAILED and "read-only" in st.detail
    assert calls(world, "ready", "attach") == 0


def test_set_vf_rate_without_netlink_fails_clearly(world, fast, closing):
    drv = make(world, fast, closing)
    st = wait_done(drv, drv.submit(SetVFRate("holder", 1e9)))
    assert st.state is OpState.FAILED and "netlink" in st.detail
    st = wait_done(drv, drv.submit(SetVFRate("ready", 1e9)))
    assert st.state is OpState.FAILED and "holds no VF" in st.detail


# --------------------------------------------------------------------------- migration

MIGRATE_FLAGS = (
    libvirt.VIR_MIGRATE_LIVE
    | libvirt.VIR_MIGRATE_PEER2PEER
    | libvirt.VIR_MIGRATE_PERSIST_DEST
    | libvirt.VIR_MIGRATE_UNDEFINE_SOURCE
)


def test_migration_unplugs_the_vf_first_then_migrates_with_cap(world, fast, closing):
    drv = make(world, fast, closing, migration_uri_template="qemu+tls://{host}/system")
    st = wait_done(drv, drv.submit(Migrate("holder", "hv2", bandwidth_cap_bps=8 * 100 * 2**20)))
    assert st.state is OpState.SUCCEEDED, st
    dom = world.domains["holder"]
    order = [c[0] for c in dom.calls]
    assert order.index("detach") < order.index("migrate")
    assert dom.migrate_args is not None
    uri, params, flags = dom.migrate_args
    assert uri == "qemu+tls://hv2/system"
    assert flags & MIGRATE_FLAGS == MIGRATE_FLAGS
    assert params[libvirt.VIR_MIGRATE_PARAM_BANDWIDTH] == 100  # MiB/s
    # the lifecycle event (stopped, migrated) reaches the driver's event log
    assert any(
        e.vm == "holder"
        and e.event == libvirt.VIR_DOMAIN_EVENT_STOPPED
        and e.detail == libvirt.VIR_DOMAIN_EVENT_STOPPED_MIGRATED
        for e in _wait_events(drv)
    )


def _wait_events(drv: LibvirtDriver) -> list[Any]:
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline and not any(e.kind == "lifecycle" for e in drv.events()):
        time.sleep(0.01)
    return drv.events()


def test_migration_that_hangs_is_aborted_at_the_deadline(world, fast, closing):
    world.domains["ready"].on_migrate = "hang"
    drv = make(world, fast, closing)
    op = drv.submit(Migrate("ready", "hv2"))
    time.sleep(0.2)
    pending = drv.poll(op)
    assert pending.state is OpState.PENDING and "60% of memory" in pending.detail
    assert drv.inventory().vms["ready"].migrating is True
    st = wait_done(drv, op)
    assert st.state is OpState.FAILED
    assert "timed out after 0.5s" in st.detail and "aborted" in st.detail
    assert "stays on this host" in st.detail
    assert calls(world, "ready", "abortJob") == 1
    assert drv.inventory().vms["ready"].migrating is False


def test_migration_error_is_reported_and_vm_stays(world, fast, closing):
    world.domains["ready"].on_migrate = "error"
    drv = make(world, fast, closing)
    st = wait_done(drv, drv.submit(Migrate("ready", "hv2")))
    assert st.state is OpState.FAILED and "unexpectedly failed" in st.detail
    assert world.domains["ready"].active


def test_migration_not_started_when_vf_unplug_fails(world, fast, closing):
    world.domains["holder"].on_detach = ["never"]
    drv = make(world, fast, closing)
    st = wait_done(drv, drv.submit(Migrate("holder", "hv2")))
    assert st.state is OpState.FAILED and "could not be unplugged first" in st.detail
    assert calls(world, "holder", "migrate") == 0


def test_teamed_vf_is_detached_by_alias_not_by_its_shared_mac(world, fast, closing):
    """libvirt finds an <interface> to detach by MAC; the VF shares it with its virtio
    partner, so detach-by-XML is refused ("multiple devices matching MAC address … found",
    measured with libvirt 9.0). Failed before the fix: every detach of a teamed VF."""
    drv = make(world, fast, closing)
    st = wait_done(drv, drv.submit(DetachVF("holder")))
    assert st.state is OpState.SUCCEEDED, st
    assert [c[1] for c in world.domains["holder"].calls if c[0] == "detach"] == ["ua-sova-vf"]


def test_vf_plugged_by_someone_else_is_detached_by_its_own_alias(fast, closing):
    """A VF found in the live XML after an agent restart (an operator's, alias hostdev0) is
    taken back by the alias libvirt gave it."""
    theirs = vf_iface(MAC_A, 0).replace("ua-sova-vf", "hostdev0")
    world = FakeConn({"holder": domain_xml("holder", virtio(MAC_A) + theirs)})
    drv = make(world, fast, closing)
    st = wait_done(drv, drv.submit(DetachVF("holder")))
    assert st.state is OpState.SUCCEEDED, st
    assert [c[1] for c in world.domains["holder"].calls if c[0] == "detach"] == ["hostdev0"]
    assert held_vf(world, "holder") is None


def test_attached_vf_carries_sovas_user_alias(world, fast, closing):
    drv = make(world, fast, closing)
    assert wait_done(drv, drv.submit(AttachVF("ready"))).state is OpState.SUCCEEDED
    vf = parse_domain(world.domains["ready"].xml).sova_vf()
    assert vf is not None and vf.alias == "ua-sova-vf"


@pytest.mark.parametrize("mode", ["migrated", "migrated-quietly"])
def test_detach_racing_an_outgoing_migration_releases_the_vf(world, fast, closing, mode):
    """Someone else live-migrates a teamed guest while Sova takes its VF back: QEMU unplugs
    the failover primary itself, no DEVICE_REMOVED comes, the domain leaves (its lifecycle
    event possibly missed). The VF is free on the source, not "still attached", and the
    next VM gets it. Failed before the fix (migrated-quietly): the op failed with
    ``libvirtError: Domain not found``."""
    world.domains["holder"].on_detach = [mode]
    drv = make(world, fast, closing)
    st = wait_done(drv, drv.submit(DetachVF("holder")))
    assert st.state is OpState.SUCCEEDED, st
    assert "left this host" in st.detail or "stopped" in st.detail
    assert "holder" not in drv.inventory().vms
    st = wait_done(drv, drv.submit(AttachVF("ready")))
    assert st.state is OpState.SUCCEEDED, st
    assert held_vf(world, "ready") == "0000:03:10.0"  # holder's VF, back in the pool


def test_attach_to_a_vm_that_migrates_away_meanwhile_books_nothing(world, fast, closing):
    world.domains["ready"].on_attach = "migrated-quietly"
    drv = make(world, fast, closing)
    st = wait_done(drv, drv.submit(AttachVF("ready")))
    assert st.state is OpState.FAILED and "left this host" in st.detail, st
    assert drv.inventory().vms.keys() == {"holder", "legacy", "plain"}
    # its reservation is gone: the pool has vf 2 (10.4) and vf 3 (10.6) free for others
    assert drv._plug.reserved == {}


def test_destination_books_the_vf_qemu_replugged_after_a_migration(fast, closing):
    """On the destination, libvirt re-plugs a VF of its own into the arriving teamed guest;
    the destination's pool counts it from the live XML and gives the next VM another."""
    dst = FakeConn({"ready": domain_xml("ready", virtio(MAC_B))})
    drv = make(dst, fast, closing)
    assert drv.inventory().vms["ready"].vf_index is None
    dst.domains["arrived"] = FakeDomainFor(dst, "arrived", virtio(MAC_A) + vf_iface(MAC_A, 0))
    inv = drv.inventory()
    assert inv.vms["arrived"].vf_index == 0 and inv.vms["arrived"].nic.value == "vf"
    assert wait_done(drv, drv.submit(AttachVF("ready"))).state is OpState.SUCCEEDED
    assert held_vf(dst, "ready") != "0000:03:10.0"


def FakeDomainFor(conn: FakeConn, name: str, nics: str) -> Any:
    from libvirt_fakes import FakeDomain

    return FakeDomain(conn, name, domain_xml(name, nics))


def test_plain_hostdev_vm_is_not_migrated(world, fast, closing):
    drv = make(world, fast, closing)
    st = wait_done(drv, drv.submit(Migrate("plain", "hv2")))
    assert st.state is OpState.FAILED and "teaming type='transient'" in st.detail
    assert calls(world, "plain", "migrate") == 0


# --------------------------------------------------------------------------- guest agent


def guest_driver(world, fast, closing, guest: FakeGuest) -> LibvirtDriver:
    agent = GuestAgent(guest, exec_timeout_s=0.3, poll_interval_s=0.02)
    drv = LibvirtDriver(
        LibvirtDriverConfig(uri="fake:///", sysfs_root="/nonexistent", **fast),
        conn=world,
        agent=agent,
    )
    closing.append(drv)
    return drv


def test_guest_htb_checks_the_exit_code(world, fast, closing):
    guest = FakeGuest(exitcode=2, stderr="Error: Specified qdisc kind is unknown.\n")
    drv = guest_driver(world, fast, closing, guest)
    st = wait_done(drv, drv.submit(SetGuestRateLimit("ready", 500e6)))
    assert st.state is OpState.FAILED
    assert "exited 2" in st.detail and "qdisc kind is unknown" in st.detail
    assert [c["execute"] for c in guest.commands] == ["guest-exec", "guest-exec-status"]
    # one short line naming the command, not the whole script (failed before: ~600 chars)
    assert "\n" not in st.detail and len(st.detail) < 200, st.detail
    assert f"sova-htb {MAC_B}" in st.detail


def test_guest_htb_success_shapes_the_failover_master_by_mac(world, fast, closing):
    guest = FakeGuest(exitcode=0)
    drv = guest_driver(world, fast, closing, guest)
    st = wait_done(drv, drv.submit(SetGuestRateLimit("ready", 500e6, max_pps=1000)))
    assert st.state is OpState.SUCCEEDED, st
    assert "max_pps not enforceable" in st.detail
    args = guest.commands[0]["arguments"]
    assert args["path"] == "/bin/sh" and args["arg"][-1] == MAC_B
    assert "rate 500000000bit" in args["arg"][1]
    assert guest.commands[1] == {"execute": "guest-exec-status", "arguments": {"pid": 4242}}


def test_guest_command_that_never_exits_times_out(world, fast, closing):
    guest = FakeGuest(never_exits=True)
    drv = guest_driver(world, fast, closing, guest)
    st = wait_done(drv, drv.submit(SetGuestRateLimit("ready", None)))
    assert st.state is OpState.FAILED and "did not finish within 0.3s" in st.detail


def test_an_agent_given_after_construction_reaches_the_shaping_part(world, fast, closing):
    # LibvirtDriver.open and the lab set the guest agent on a built driver (drv._agent = ...):
    # the parts must read it from there, not keep what they were built with (None).
    guest = FakeGuest(exitcode=0)
    drv = make(world, fast, closing)
    drv._agent = GuestAgent(guest, exec_timeout_s=0.3, poll_interval_s=0.02)
    st = wait_done(drv, drv.submit(SetGuestRateLimit("ready", 500e6)))
    assert st.state is OpState.SUCCEEDED and st.detail.startswith("guest HTB"), st
    assert [c["execute"] for c in guest.commands] == ["guest-exec", "guest-exec-status"]


def test_a_subclass_failover_is_the_one_hot_plug_consults(world, fast, closing):
    # The lab's fault tests put their own failover in by overriding the _failover property.
    from sova.driver.libvirt_driver.failover import FailoverError, Teaming

    class Refusing(Teaming):
        def before_unplug(self, dom: Any, fast: Any, backup: Any) -> str:
            raise FailoverError("backup not answering")

    class Driver(LibvirtDriver):
        @property
        def _failover(self) -> Any:
            return Refusing()

    drv = Driver(LibvirtDriverConfig(uri="fake:///", sysfs_root="/nonexistent", **fast), world)
    closing.append(drv)
    st = wait_done(drv, drv.submit(DetachVF("holder")))
    assert st.state is OpState.FAILED and "backup not answering" in st.detail, st
    assert calls(world, "holder", "detach") == 0


def test_without_agent_the_limit_falls_back_to_host_side_bandwidth(world, fast, closing):
    drv = make(world, {**fast, "host_side_shaping": "bandwidth"}, closing)
    st = wait_done(drv, drv.submit(SetGuestRateLimit("ready", 8 * 1024 * 1000)))
    assert st.state is OpState.SUCCEEDED and "virtio path only" in st.detail
    (dev, params) = next(
        c[1] for c in world.domains["ready"].calls if c[0] == "setInterfaceParameters"
    )
    assert dev == "vnet3" and params["outbound.average"] == 1000


def test_guest_agent_sampling_takes_the_failover_master(world, fast, closing):
    guest = FakeGuest()
    guest.interfaces = [
        {
            "name": "eth0",
            "hardware-address": MAC_B,
            "statistics": {"rx-bytes": 900, "tx-bytes": 900, "rx-packets": 9, "tx-packets": 9},
        },
        {
            "name": "eth0nsby",
            "hardware-address": MAC_B,
            "statistics": {"rx-bytes": 100, "tx-bytes": 100, "rx-packets": 1, "tx-packets": 1},
        },
        {
            "name": "lo",
            "hardware-address": "00:00:00:00:00:00",
            "statistics": {"rx-bytes": 5, "tx-bytes": 5, "rx-packets": 5, "tx-packets": 5},
        },
    ]
    agent = GuestAgent(guest)
    drv = LibvirtDriver(
        LibvirtDriverConfig(uri="fake:///", sysfs_root="/nonexistent", sampling="guest-agent"),
        conn=world,
        agent=agent,
    )
    closing.append(drv)
    c = drv.sample().vms["ready"]
    assert (c.rx_bytes, c.tx_bytes, c.rx_packets) == (900, 900, 9)


# --------------------------------------------------------------------------- VF rates


class ScriptedNetlink:
    """NetlinkVF's surface with a NIC that caps max rate but refuses min rate (Intel-like)."""

    def __init__(self, refuse_all: bool = False, vf_stats: bool = True) -> None:
        self.refuse_all = refuse_all
        self.vf_stats = vf_stats
        self.set_calls: list[tuple[int, float | None, float | None]] = []

    def probe(self, free_vf: int | None, link_mbit: int = 0) -> Any:
        from sova.driver.netlink_vf import RateProbe

        return RateProbe(True, False, self.vf_stats, ("min_tx_rate unsupported: EINVAL",))

    def set_rate(self, vf: int, max_bps: float | None, min_bps: float | None = None) -> None:
        from sova.driver.netlink_vf import VFRateError

        self.set_calls.append((vf, max_bps, min_bps))
        if self.refuse_all or min_bps:
            raise VFRateError(f"enp3s0f0 vf {vf} rate refused by the kernel: EINVAL", 22)

    def vfs(self) -> dict[int, Any]:
        return {}

    def close(self) -> None:
        pass


def test_attach_with_tier_falls_back_when_min_rate_is_unsupported(world, fast, closing):
    nl = ScriptedNetlink()
    drv = LibvirtDriver(
        LibvirtDriverConfig(uri="fake:///", sysfs_root="/nonexistent", **fast),
        conn=world,
        netlink=nl,  # type: ignore[arg-type]
    )
    closing.append(drv)
    caps = drv.capabilities()
    assert caps.nic.max_rate and not caps.nic.min_rate
    st = wait_done(drv, drv.submit(AttachVF("ready", max_bps=1e9, min_bps=1e8)))
    assert st.state is OpState.SUCCEEDED, st
    assert "min_tx_rate unsupported" in st.detail
    assert nl.set_calls == [(2, 1e9, None)]  # max applied, min never sent to the NIC


def test_set_vf_rate_refused_by_the_nic_is_a_failed_op(world, fast, closing):
    nl = ScriptedNetlink(refuse_all=True)
    drv = LibvirtDriver(
        LibvirtDriverConfig(uri="fake:///", sysfs_root="/nonexistent", **fast),
        conn=world,
        netlink=nl,  # type: ignore[arg-type]
    )
    closing.append(drv)
    st = wait_done(drv, drv.submit(SetVFRate("holder", 5e8)))
    assert st.state is OpState.FAILED and "refused by the kernel: EINVAL" in st.detail
    assert nl.set_calls == [(0, 5e8, None)]


def test_bandwidth_is_not_relied_on_where_the_kernel_lacks_sfq_u32_police(tmp_path):
    """libvirt <bandwidth> builds on sfq, u32 and police; without them Sova uses tap HTB."""
    import gzip

    from sova.driver.libvirt_driver.tap_shaping import libvirt_bandwidth_usable

    lacking = tmp_path / "lacking.gz"
    with gzip.open(lacking, "wt") as f:
        f.write("CONFIG_NET_SCH_HTB=y\n# CONFIG_NET_SCH_SFQ is not set\nCONFIG_NET_CLS_U32=m\n")
    ok, why = libvirt_bandwidth_usable(str(lacking))
    assert not ok and "no sfq, police" in why and "HTB on the tap" in why
    full = tmp_path / "full.gz"
    with gzip.open(full, "wt") as f:
        f.write("CONFIG_NET_SCH_SFQ=m\nCONFIG_NET_CLS_U32=y\nCONFIG_NET_ACT_POLICE=m\n")
    assert libvirt_bandwidth_usable(str(full))[0]


def test_driver_config_rejects_unknown_strategies_by_name():
    with pytest.raises(ValueError, match="fast_path: 'vf' is not one of lab-nic, sriov-vf"):
        LibvirtDriverConfig(fast_path="vf")
    with pytest.raises(ValueError, match="failover: 'bond'"):
        LibvirtDriverConfig(failover="bond")


def test_without_vf_counters_every_vm_is_counted_inside_the_guest(world, fast, closing):
    """igb leaves IFLA_VF_STATS at 0: a VF-holding VM's traffic is then on neither the tap
    nor the PF. The driver says so in its capabilities and counts every VM through the
    guest agent (the net_failover master carries VF and virtio traffic), though sampling is
    "host". Failed before the fix: the tap's 1000/2000 bytes were reported."""
    guest = FakeGuest()
    guest.interfaces = [
        {
            "name": "eth0",
            "hardware-address": MAC_A,
            "statistics": {"rx-bytes": 7e6, "tx-bytes": 3e6, "rx-packets": 7, "tx-packets": 3},
        }
    ]
    drv = LibvirtDriver(
        LibvirtDriverConfig(uri="fake:///", sysfs_root="/nonexistent", **fast),
        conn=world,
        netlink=ScriptedNetlink(vf_stats=False),  # type: ignore[arg-type]
        agent=GuestAgent(guest),
    )
    closing.append(drv)
    caps = drv.capabilities()
    assert not caps.nic.vf_stats
    assert any(n.startswith("VF counters unavailable; fallback: every VM") for n in caps.notes)
    c = drv.sample().vms["holder"]
    assert (c.rx_bytes, c.tx_bytes) == (7_000_000, 3_000_000)


def test_with_vf_counters_host_sampling_stays_black_box(world, fast, closing):
    guest = FakeGuest()
    drv = LibvirtDriver(
        LibvirtDriverConfig(uri="fake:///", sysfs_root="/nonexistent", **fast),
        conn=world,
        netlink=ScriptedNetlink(vf_stats=True),  # type: ignore[arg-type]
        agent=GuestAgent(guest),
    )
    closing.append(drv)
    c = drv.sample().vms["holder"]
    assert (c.rx_bytes, c.tx_bytes) == (1000, 2000)  # the tap (FakeDomain.interfaceStats)
    assert not guest.commands  # the guest agent was never asked
