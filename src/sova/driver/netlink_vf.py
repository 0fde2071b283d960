"""VF rates and per-VF counters through the PF, over rtnetlink (pyroute2).

Why netlink and not ``ip link`` in a subprocess: the kernel's answer comes back as an errno
we can classify (EOPNOTSUPP, EINVAL, ENODEV) instead of text to scrape, and one socket serves
the whole agent. Why probe: NICs differ — many Intel PFs refuse ``min_tx_rate`` with EINVAL,
some refuse rates altogether — so the driver asks the kernel once, on a VF nobody holds, and
reports what it learnt (docs/design.md#tiers, #calibration) instead of assuming.

Rates cross netlink in Mbit/s (``struct ifla_vf_rate``); this module converts from bit/s.
"""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

MBIT = 1_000_000


class VFRateError(RuntimeError):
    """The kernel refused a VF request; ``code`` is the errno."""

    def __init__(self, message: str, code: int = 0) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class VFInfo:
    index: int
    mac: str = ""
    max_tx_mbit: int = 0  # 0 = no cap
    min_tx_mbit: int = 0
    rx_bytes: int | None = None  # None: the NIC exports no IFLA_VF_STATS
    tx_bytes: int | None = None
    rx_packets: int | None = None
    tx_packets: int | None = None


@dataclass(frozen=True)
class RateProbe:
    max_rate: bool
    min_rate: bool
    vf_stats: bool
    notes: tuple[str, ...] = field(default=())


def _errname(code: int) -> str:
    return f"{errno.errorcode.get(code, str(code))} ({os.strerror(code)})" if code else "error"


def to_mbit(bps: float | None) -> int:
    """bit/s → whole Mbit/s for the kernel; a positive rate never rounds down to 0 (= no cap)."""
    if bps is None or bps <= 0:
        return 0
    return max(1, round(bps / MBIT))


class NetlinkVF:
    """Rate control and VF counters of one PF.

    ``ipr_factory`` returns a pyroute2 ``IPRoute``-like object (tests pass a ``NetNS``
    factory so the request runs in a namespace they own). One socket, guarded by a lock:
    pyroute2 sockets are not safe to share between the agent's worker threads.
    """

    def __init__(self, pf: str, ipr_factory: Callable[[], Any] | None = None) -> None:
        self.pf = pf
        if ipr_factory is None:
            from pyroute2 import IPRoute  # type: ignore[import-untyped]

            ipr_factory = IPRoute
        self._factory = ipr_factory
        self._ipr: Any = None
        self._lock = threading.Lock()

    def close(self) -> None:
        with self._lock:
            if self._ipr is not None:
                self._ipr.close()
                self._ipr = None

    def _sock(self) -> Any:
        if self._ipr is None:
            self._ipr = self._factory()
        return self._ipr

    def _index(self) -> int:
        idx = self._sock().link_lookup(ifname=self.pf)
        if not idx:
            raise VFRateError(f"PF {self.pf!r} not found in this network namespace", errno.ENODEV)
        return int(idx[0])

    def set_rate(self, vf: int, max_bps: float | None, min_bps: float | None = None) -> None:
        """Set VF ``vf``'s tx rate caps; None/0 removes a cap. Raises :class:`VFRateError`."""
        from pyroute2.netlink.exceptions import NetlinkError  # type: ignore[import-untyped]

        max_m, min_m = to_mbit(max_bps), to_mbit(min_bps)
        with self._lock:
            try:
                self._sock().link(
                    "set",
                    index=self._index(),
                    vf={"vf": vf, "rate": {"min_tx_rate": min_m, "max_tx_rate": max_m}},
                )
            except NetlinkError as e:
                raise VFRateError(
                    f"{self.pf} vf {vf} rate (max {max_m} Mbit/s, min {min_m} Mbit/s) "
                    f"refused by the kernel: {_errname(e.code)}",
                    e.code,
                ) from e

    def vfs(self) -> dict[int, VFInfo]:
        """Current VF table of the PF (MAC, rates, counters where exported)."""
        from pyroute2.netlink.exceptions import NetlinkError

        with self._lock:
            try:
                # ext_mask=1 is RTEXT_FILTER_VF: without it the kernel omits IFLA_VFINFO_LIST.
                msgs = self._sock().link("get", index=self._index(), ext_mask=1)
            except NetlinkError as e:
                raise VFRateError(
                    f"{self.pf}: cannot read VF table: {_errname(e.code)}", e.code
                ) from e
        out: dict[int, VFInfo] = {}
        if not msgs:
            return out
        vflist = msgs[0].get_attr("IFLA_VFINFO_LIST")
        if vflist is None:
            return out
        for info in vflist.get_attrs("IFLA_VF_INFO"):
            mac_a = info.get_attr("IFLA_VF_MAC")
            rate = info.get_attr("IFLA_VF_RATE")
            stats = info.get_attr("IFLA_VF_STATS")
            if mac_a is None:
                continue
            idx = int(mac_a["vf"])

            def st(name: str, stats: Any = stats) -> int | None:
                if stats is None:
                    return None
                v = stats.get_attr(name)
                return int(v) if v is not None else None

            out[idx] = VFInfo(
                index=idx,
                mac=str(mac_a.get("mac", "")).lower(),
                max_tx_mbit=int(rate["max_tx_rate"]) if rate is not None else 0,
                min_tx_mbit=int(rate["min_tx_rate"]) if rate is not None else 0,
                rx_bytes=st("IFLA_VF_STATS_RX_BYTES"),
                tx_bytes=st("IFLA_VF_STATS_TX_BYTES"),
                rx_packets=st("IFLA_VF_STATS_RX_PACKETS"),
                tx_packets=st("IFLA_VF_STATS_TX_PACKETS"),
            )
        return out

    def probe(self, free_vf: int | None, link_mbit: int = 0) -> RateProbe:
        """Find out whether max/min tx rates work, by asking the kernel.

        With a free VF: write a max cap equal to the line rate (no real limit), then a
        small min rate, then restore what was there. Without one (no VFs at all, or all
        held): a no-op request on VF 0, which a PF without VFs refuses — reported as such.
        """
        notes: list[str] = []
        try:
            table = self.vfs()
        except VFRateError as e:
            return RateProbe(False, False, False, (f"rate control unavailable: {e}",))
        vf_stats, stats_note = stats_usable(table)
        if stats_note:
            notes.append(stats_note)
        if table and (free_vf is None or free_vf not in table):
            # Every VF is held: writing a rate would change a running VM's service.
            notes.append(
                "rates not probed: no free VF to test on; assuming max_tx_rate only "
                "(min_tx_rate is refused by many NICs)"
            )
            return RateProbe(True, False, vf_stats, tuple(notes))
        if free_vf is None or free_vf not in table:
            # No VF at all, so VF 0 does not exist and the request cannot change anything.
            try:
                self.set_rate(0, None, None)
            except VFRateError as e:
                notes.append(f"max_tx_rate unsupported: {e}")
                notes.append("min_tx_rate unsupported: no VF accepts rate requests on this PF")
                return RateProbe(False, False, vf_stats, tuple(notes))
            notes.append(
                f"{self.pf} accepted a rate request but lists no VFs: treating rates as unsupported"
            )
            return RateProbe(False, False, vf_stats, tuple(notes))
        cur = table[free_vf]
        test_max = link_mbit if link_mbit > 0 else 10_000
        max_ok = min_ok = False
        try:
            self.set_rate(free_vf, test_max * MBIT, None)
            max_ok = True
        except VFRateError as e:
            notes.append(f"max_tx_rate unsupported: {e}")
        try:
            self.set_rate(free_vf, test_max * MBIT if max_ok else None, 10 * MBIT)
            min_ok = True
        except VFRateError as e:
            notes.append(f"min_tx_rate unsupported: {e}; falling back to guest-side HTB")
        try:
            self.set_rate(free_vf, cur.max_tx_mbit * MBIT, cur.min_tx_mbit * MBIT)
        except VFRateError as e:
            notes.append(f"could not restore vf {free_vf} rates after probing: {e}")
        if max_ok:
            notes.append(
                "max_tx_rate accepted by the kernel; whether the NIC enforces it is not "
                "visible here (an emulated igb accepts it and does not)"
            )
        return RateProbe(max_ok, min_ok, vf_stats, tuple(notes))


def stats_usable(table: dict[int, VFInfo]) -> tuple[bool, str]:
    """Whether the PF's per-VF counters can be trusted, and a note when not.

    The kernel sends IFLA_VF_STATS for every VF, filled with zeros when the driver does not
    count per VF (igb, ixgbe): its presence proves nothing. Only a counter that moved does,
    so an all-zero table is taken as "no VF counters" (the conservative side: the driver
    then counts inside the guest rather than seeing a VF-holding VM as idle).
    """
    if not any(v.rx_bytes is not None for v in table.values()):
        return False, "no IFLA_VF_STATS: VF traffic is not visible from the host"
    moved = any(
        (v.rx_bytes or 0) + (v.tx_bytes or 0) + (v.rx_packets or 0) + (v.tx_packets or 0) > 0
        for v in table.values()
    )
    if moved:
        return True, ""
    return False, (
        "IFLA_VF_STATS all zero: the kernel sends zeros for a driver that does not count "
        "per VF (igb does not); VF counters treated as unavailable"
    )
