"""The VF rate path against the real kernel.

In a network namespace the test creates (so the host's links are never touched), the
loopback device has no VFs: the kernel must refuse IFLA_VF_RATE, and the driver must report
max/min rate as unsupported with the kernel's reason — not crash, not pretend.
"""

from __future__ import annotations

import errno
import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

pyroute2 = pytest.importorskip(
    "pyroute2", reason="pyroute2 not installed (scripts/ci-setup-libvirt.sh installs it)"
)

from sova.driver.netlink_vf import NetlinkVF, VFRateError, to_mbit  # noqa: E402


@pytest.fixture
def netns() -> Iterator[str]:
    if os.geteuid() != 0:
        pytest.skip("needs root to create a network namespace")
    from pyroute2 import netns as nsmod

    name = f"sova-test-{uuid.uuid4().hex[:8]}"
    try:
        nsmod.create(name)
    except Exception as e:  # e.g. a container without CAP_SYS_ADMIN
        pytest.skip(f"cannot create a network namespace here: {e}")
    try:
        yield name
    finally:
        nsmod.remove(name)


def nl(netns: str, ifname: str = "lo") -> NetlinkVF:
    from pyroute2 import NetNS

    return NetlinkVF(ifname, ipr_factory=lambda: NetNS(netns))


def test_kernel_refuses_vf_rate_on_an_interface_without_vfs(netns):
    link = nl(netns)
    try:
        assert link.vfs() == {}
        with pytest.raises(VFRateError) as exc:
            link.set_rate(0, 100e6)
        assert exc.value.code in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENODEV)
        assert "refused by the kernel" in str(exc.value)
        probe = link.probe(None)
        assert probe.max_rate is False and probe.min_rate is False
        assert any(
            n.startswith("max_tx_rate unsupported") and "refused by the kernel" in n
            for n in probe.notes
        ), probe.notes
    finally:
        link.close()


def test_missing_pf_is_reported_not_raised(netns):
    link = nl(netns, "enp99s0f0")
    try:
        probe = link.probe(None)
        assert not probe.max_rate and "not found" in probe.notes[0]
    finally:
        link.close()


def test_driver_reports_rates_unsupported_with_the_kernels_reason(netns, closing):
    lv: Any = pytest.importorskip("libvirt", reason="libvirt-python not installed")
    lv.registerErrorHandler(lambda _c, _e: None, None)
    from conftest import NODE_XML

    from sova.driver.libvirt_driver import LibvirtDriver, LibvirtDriverConfig

    drv = LibvirtDriver(
        LibvirtDriverConfig(uri=f"test://{NODE_XML}", pf="lo", sysfs_root="/nonexistent"),
        netlink=nl(netns),
    )
    closing.append(drv)
    caps = drv.capabilities()
    assert caps.nic.max_rate is False and caps.nic.min_rate is False
    assert any(
        "max_tx_rate unsupported" in n and "Operation not supported" in n for n in caps.notes
    ) or any("max_tx_rate unsupported" in n and "Invalid argument" in n for n in caps.notes), (
        caps.notes
    )
    assert drv.inventory().host.nic.caps.max_rate is False


def test_rate_conversion_never_rounds_a_cap_to_unlimited():
    assert to_mbit(None) == 0 and to_mbit(0) == 0
    assert to_mbit(1.0) == 1  # 1 bit/s must not become 0 = "no cap"
    assert to_mbit(2.5e9) == 2500
