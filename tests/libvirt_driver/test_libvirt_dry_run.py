"""``sova agent --driver libvirt --dry-run``: prints what it sees and would do, changes nothing."""

from __future__ import annotations

import io
from typing import Any

import pytest

libvirt = pytest.importorskip(
    "libvirt", reason="libvirt-python not installed (scripts/ci-setup-libvirt.sh installs it)"
)

from sova.driver.base import Driver  # noqa: E402
from sova.driver.inventory_report import dry_run  # noqa: E402
from sova.model import Action, AttachVF, DetachVF, Migrate, NicKind  # noqa: E402


def snapshot(conn: Any) -> dict[str, tuple[int, str]]:
    return {
        d.name(): (d.state()[0], d.XMLDesc(0))
        for d in sorted(conn.listAllDomains(0), key=lambda d: d.name())
    }


def give_vfs_to_virtio_vms(drv: Driver) -> list[Action]:
    """A plan that, if submitted, would change the host in every way it can."""
    inv = drv.inventory()
    acts: list[Action] = []
    for name, st in sorted(inv.vms.items()):
        if st.nic is NicKind.VIRTIO and st.failover_ready and st.running:
            acts.append(AttachVF(name, max_bps=2e9))
        elif st.nic is NicKind.VF:
            acts.append(DetachVF(name))
    acts.append(Migrate("web1", "hv2", bandwidth_cap_bps=1e9))
    return acts


@pytest.fixture
def shared_conn(monkeypatch, node_uri):
    """Hand dry_run the test's own connection, so a change it made would be visible here.

    (Each ``test:///file.xml`` open gets private state; this makes "before == after" mean
    something, and records that dry_run asked for a read-only connection.)
    """
    conn = libvirt.open(node_uri)
    opened: list[str] = []

    def open_ro(uri: str) -> Any:
        opened.append(f"ro:{uri}")
        return conn

    def open_rw(uri: str) -> Any:
        opened.append(f"rw:{uri}")
        return conn

    monkeypatch.setattr(libvirt, "openReadOnly", open_ro)
    monkeypatch.setattr(libvirt, "open", open_rw)
    yield conn, opened
    conn.close()


def test_dry_run_prints_inventory_and_plan_and_changes_nothing(shared_conn, node_uri):
    conn, opened = shared_conn
    before = snapshot(conn)
    out = io.StringIO()
    code = dry_run(node_uri, give_vfs_to_virtio_vms, out)
    text = out.getvalue()
    assert code == 0, text
    assert opened == [f"ro:{node_uri}"]
    assert snapshot(conn) == before
    for expected in (
        "enp3s0f0",
        "0000:03:10.6",
        "web1 (failover)",
        "plain1 (plain-hostdev)",
        "NOT READY",
        "max_tx_rate: no",
        "read-only connection",
    ):
        assert expected in text, (expected, text)
    assert "vf_attach    db1" in text and "vf_detach    web1" in text
    assert "migrate      web1" in text and "none submitted" in text


def test_planner_that_submits_is_refused(shared_conn, node_uri):
    conn, _ = shared_conn
    before = snapshot(conn)

    def sneaky(drv: Driver) -> list[Action]:
        drv.submit(DetachVF("web1"))
        return []

    out = io.StringIO()
    assert dry_run(node_uri, sneaky, out) == 3
    assert "refus" in out.getvalue()
    assert snapshot(conn) == before


def test_dry_run_on_the_shared_default_host(lv):
    # test:///default is shared by every connection in the process: a real, unpatched
    # read-only open, compared before and after through a second connection.
    watcher = libvirt.open("test:///default")
    before = snapshot(watcher)
    out = io.StringIO()
    assert dry_run("test:///default", lambda d: [AttachVF("test")], out) == 0
    assert "vf_attach    test" in out.getvalue()
    assert "no SR-IOV PF found" in out.getvalue()
    assert snapshot(watcher) == before
    watcher.close()


def test_unreachable_uri_is_an_error_code_not_a_traceback(lv):
    out = io.StringIO()
    assert dry_run("test:///nonexistent/node.xml", None, out) == 2
    assert "cannot connect" in out.getvalue()
