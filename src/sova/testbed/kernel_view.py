"""What the namespace testbed's kernel says, read for the ``netns`` driver
(:mod:`sova.testbed.netns_driver`): links and their counters, root qdiscs, each VM's
default route, the virtio backend's health and the CPU time of each VM's processes.

Apart from the driver, which changes the kernel's state (its actions), because these
reads hold state of their own: one rtnetlink socket per namespace, and the CPU ticks of
processes that have exited, so a VM's CPU time never goes backwards.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterable
from typing import Any

from sova.driver.base import DriverError
from sova.testbed.topology import NETNS_DIR, Topology, rtnl

CLK_TCK = os.sysconf("SC_CLK_TCK")
NS_PER_TICK = 1_000_000_000 // CLK_TCK
ETH = 14  # Ethernet header, pulled before a host-side IFB sees the packet


class KernelView:
    """The reads of one built :class:`~sova.testbed.topology.Topology`, safe from the
    driver's threads (one lock over the sockets)."""

    def __init__(self, topo: Topology, vms: Iterable[str], clock: Callable[[], float]) -> None:
        self.topo = topo
        self._clock = clock
        self._rtnl: dict[str, Any] = {}
        self._rtnl_lock = threading.Lock()
        self._cpu_seen: dict[int, tuple[str, int]] = {}  # pid -> (vm, last cpu ticks)
        self._cpu_done: dict[str, int] = dict.fromkeys(vms, 0)  # ticks of exited pids
        self._backup_cache: tuple[float, bool] = (-1.0, False)
        self._ns_inode = self._namespace_inodes()

    def close(self) -> None:
        with self._rtnl_lock:
            for sock in self._rtnl.values():
                with contextlib.suppress(Exception):
                    sock.close()
            self._rtnl.clear()

    def _sock(self, ns: str) -> Any:
        sock = self._rtnl.get(ns)
        if sock is None:
            sock = rtnl(ns)
            self._rtnl[ns] = sock
        return sock

    def links(self, ns: str) -> dict[str, dict[str, int]]:
        with self._rtnl_lock:
            try:
                msgs = self._sock(ns).get_links()
            except Exception as exc:
                self._rtnl.pop(ns, None)
                raise DriverError(f"cannot read links of {ns}: {exc}") from exc
        out = {}
        for m in msgs:
            stats = m.get("IFLA_STATS64") or {}
            out[m.get("IFLA_IFNAME")] = {
                k: int(stats.get(k, 0))
                for k in ("rx_bytes", "tx_bytes", "rx_packets", "tx_packets")
            } | {"up": int(m.get("IFLA_OPERSTATE") in ("UP", "UNKNOWN"))}
        return out

    def root_qdisc_sent(self, ns: str) -> dict[str, tuple[int, int]]:
        """ifname -> (wire bytes, frames) its root qdisc sent.

        Link counters count a TSO super-packet once; a qdisc counts its segments and
        their headers, as the port's HTB does. At a host-side IFB the Ethernet header is
        already pulled, so it is added back per frame.
        """
        with self._rtnl_lock:
            try:
                sock = self._sock(ns)
                names = {m["index"]: m.get("IFLA_IFNAME") for m in sock.get_links()}
                qdiscs = sock.get_qdiscs()
            except Exception as exc:
                self._rtnl.pop(ns, None)
                raise DriverError(f"cannot read qdiscs of {ns}: {exc}") from exc
        out = {}
        for q in qdiscs:
            if q["parent"] != 0xFFFFFFFF:
                continue
            basic = (q.get("TCA_STATS2") or {}).get("TCA_STATS_BASIC") or {}
            frames = int(basic.get("packets", 0))
            out[names.get(q["index"], "")] = (int(basic.get("bytes", 0)) + ETH * frames, frames)
        return out

    def vms_on_vf(self) -> set[str]:
        out = set()
        with self._rtnl_lock:
            for name, p in self.topo.vms.items():
                try:
                    routes = self._sock(p.ns).get_default_routes(table=254)
                except Exception as exc:
                    self._rtnl.pop(p.ns, None)
                    raise DriverError(f"cannot read routes of {p.ns}: {exc}") from exc
                best = min(routes, key=lambda r: r.get("RTA_PRIORITY") or 0, default=None)
                if best is not None and best.get("RTA_GATEWAY") == p.vf_host_ip:
                    out.add(name)
        return out

    def backup_up(self) -> bool:
        """The shared virtio backend is alive and its links are up (cached 0.5 s)."""
        t, value = self._backup_cache
        now = self._clock()
        if now - t < 0.5:
            return value
        links = self.links(self.topo.names.host_ns)
        n = self.topo.names
        value = bool(self.topo.relay_pids()) and all(
            links.get(dev, {}).get("up", 0) for dev in (n.relay_port, n.relay_host, n.bridge)
        )
        self._backup_cache = (now, value)
        return value

    def _namespace_inodes(self) -> dict[tuple[int, int], str]:
        out = {}
        for name, p in self.topo.vms.items():
            with contextlib.suppress(FileNotFoundError):
                st = os.stat(NETNS_DIR / p.ns)
                out[(st.st_dev, st.st_ino)] = name
        return out

    def vm_cpu_ticks(self) -> dict[str, int]:
        """Cumulative CPU ticks of every process that ever ran in each VM's namespace.

        Processes come and go (an iperf3 run ends); a sum over the live ones would go
        backwards and look like a reset, so exited processes keep their last reading.
        """
        live: dict[int, tuple[str, int]] = {}
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                st = os.stat(f"/proc/{entry}/ns/net")
                vm = self._ns_inode.get((st.st_dev, st.st_ino))
                if vm is None:
                    continue
                with open(f"/proc/{entry}/stat") as fh:
                    fields = fh.read().rsplit(")", 1)[1].split()
                live[int(entry)] = (vm, int(fields[11]) + int(fields[12]))  # utime + stime
            except (OSError, IndexError, ValueError):
                continue
        for pid, (vm, _) in list(self._cpu_seen.items()):
            if pid not in live:
                self._cpu_done[vm] += self._cpu_seen.pop(pid)[1]
        self._cpu_seen.update(live)
        out = dict(self._cpu_done)
        for vm, ticks in live.values():
            out[vm] += ticks
        return out

def host_busy_ns() -> int:
    with open("/proc/stat") as fh:
        fields = fh.readline().split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[:8])
    return (user + nice + system + irq + softirq + steal) * NS_PER_TICK


def memory_used() -> int:
    total = avail = 0
    with open("/proc/meminfo") as fh:
        for line in fh:
            if line.startswith("MemTotal:"):
                total = int(line.split()[1]) * 1024
            elif line.startswith("MemAvailable:"):
                avail = int(line.split()[1]) * 1024
    return max(0, total - avail)
