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


class _Attrs:
    """The slice of pyroute2's nla objects NetlinkVF reads: get_attr / get_attrs / [key]."""

    def __init__(self, attrs: dict[str, Any], items: dict[str, Any] | None = None) -> None:
        self._attrs = attrs
        self._items = items or {}

    def get_attr(self, name: str) -> Any:
        return self._attrs.get(name)

    def get_attrs(self, name: str) -> list[Any]:
        v = self._attrs.get(name)
        return v if isinstance(v, list) else []

    def __getitem__(self, key: str) -> Any:
        return self._items[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self._items.get(key, default)


class IgbLikePF:
    """An IPRoute stand-in answering as an igb PF does (measured in the nested lab):
    max_tx_rate accepted, any min_tx_rate refused with EINVAL, IFLA_VF_STATS all zero."""

    def __init__(self, vfs: int = 2) -> None:
        self.rates = {i: (0, 0) for i in range(vfs)}
        self.sets: list[dict[str, Any]] = []

    def link_lookup(self, ifname: str) -> list[int]:
        return [7]

    def link(self, cmd: str, **kw: Any) -> Any:
        from pyroute2.netlink.exceptions import NetlinkError

        if cmd == "set":
            vf = kw["vf"]
            self.sets.append(vf)
            if vf["rate"]["min_tx_rate"]:
                raise NetlinkError(errno.EINVAL, "Invalid argument")
            self.rates[vf["vf"]] = (vf["rate"]["max_tx_rate"], 0)
            return []
        infos = []
        for i, (mx, mn) in self.rates.items():
            zero = {
                k: 0
                for k in (
                    "IFLA_VF_STATS_RX_BYTES",
                    "IFLA_VF_STATS_TX_BYTES",
                    "IFLA_VF_STATS_RX_PACKETS",
                    "IFLA_VF_STATS_TX_PACKETS",
                )
            }
            infos.append(
                _Attrs(
                    {
                        "IFLA_VF_MAC": _Attrs({}, {"vf": i, "mac": f"00:00:00:00:00:0{i}"}),
                        "IFLA_VF_RATE": _Attrs({}, {"max_tx_rate": mx, "min_tx_rate": mn}),
                        "IFLA_VF_STATS": _Attrs(zero),
                    }
                )
            )
        return [_Attrs({"IFLA_VFINFO_LIST": _Attrs({"IFLA_VF_INFO": infos})})]

    def close(self) -> None:
        pass


def test_probe_reports_what_an_igb_pf_can_and_cannot_do():
    """Failed before the fix on vf_stats: all-zero IFLA_VF_STATS (the kernel's filler when
    the driver does not count per VF) were taken as working VF counters."""
    pf = IgbLikePF()
    link = NetlinkVF("enp0s6", ipr_factory=lambda: pf)
    probe = link.probe(free_vf=1, link_mbit=1000)
    assert (probe.max_rate, probe.min_rate, probe.vf_stats) == (True, False, False)
    notes = " | ".join(probe.notes)
    assert "min_tx_rate unsupported" in notes and "EINVAL" in notes
    assert "IFLA_VF_STATS all zero" in notes
    assert "whether the NIC enforces it is not visible" in notes
    assert pf.rates[1] == (0, 0)  # the probe restored the free VF's rates


def test_vf_counters_that_moved_are_trusted():
    from sova.driver.netlink_vf import VFInfo, stats_usable

    moved = {0: VFInfo(0, rx_bytes=0, tx_bytes=0), 1: VFInfo(1, rx_bytes=1500, tx_bytes=0)}
    assert stats_usable(moved) == (True, "")
    assert stats_usable({0: VFInfo(0)})[0] is False  # no IFLA_VF_STATS at all
