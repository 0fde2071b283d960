"""Real traffic for the testbed: iperf3 flows, ping probes, and the sink's delivered counters.

Each scenario flow is one ``iperf3`` client in its VM's namespace talking to its own
one-shot server in the sink (one server per flow, so flows of one VM may overlap).
Clients bind to the VM's own address, which is what keeps a TCP connection alive when
the VM's traffic moves between its VF and virtio paths.

What each VM *delivered* is measured where the remote clients are: the sink counts every
VM's packets in a per-VM IFB (:class:`SinkMeter`), so the acceptance figures come from
the kernel, not from iperf3's own report. Bytes are counted as the port's HTB counts
them (IP packet + 14-byte Ethernet header), so a guarantee of X bit/s and a measured X
bit/s mean the same thing on the wire.
"""

from __future__ import annotations

import contextlib
import math
import re
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sova.testbed.scenario import FlowSpec, TestbedScenario
from sova.testbed.topology import SINK_IP, Topology, rtnl

BASE_PORT = 5201
ETH_HEADER = 14
_PING_LINE = re.compile(r"^\[(\d+\.\d+)\].*icmp_seq=(\d+)")


def _spawn(argv: list[str], log: Path) -> subprocess.Popen[bytes]:
    fh = log.open("ab")
    try:
        return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=fh, stderr=subprocess.STDOUT)
    finally:
        fh.close()


def _stop(procs: list[subprocess.Popen[bytes]], grace_s: float = 2.0) -> None:
    for p in procs:
        if p.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                p.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for p in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(timeout=max(0.01, deadline - time.monotonic()))
    for p in procs:
        if p.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                p.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=grace_s)


@dataclass
class Traffic:
    """Starts and stops the scenario's processes; everything it starts it also stops."""

    topo: Topology
    scn: TestbedScenario
    log_dir: Path
    servers: list[subprocess.Popen[bytes]] = field(default_factory=list)
    clients: dict[int, subprocess.Popen[bytes]] = field(default_factory=dict)
    pings: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def ping_log(self, vm: str) -> Path:
        return self.log_dir / f"ping-{vm}.log"

    def start_servers(self) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        sink = self.topo.names.sink_ns
        for k, _ in enumerate(self.scn.traffic):
            self.servers.append(
                _spawn(
                    ["ip", "netns", "exec", sink, "iperf3", "-s", "-1", "-B", SINK_IP]
                    + ["-p", str(BASE_PORT + k), "-i", "0"],
                    self.log_dir / f"server-{k}.log",
                )
            )
        # A client that connects before its server listens fails the whole flow.
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline:
            out = subprocess.run(
                ["ip", "netns", "exec", sink, "ss", "-ltnH"],
                capture_output=True,
                text=True,
                timeout=5,
                check=False,
            ).stdout
            if all(f":{BASE_PORT + k} " in out for k in range(len(self.scn.traffic))):
                return
            time.sleep(0.05)

    def start_flow(self, k: int, flow: FlowSpec, until_s: float) -> None:
        p = self.topo.vms[flow.vm]
        seconds = max(1, int(math.ceil(until_s - flow.start)))
        argv = ["ip", "netns", "exec", p.ns, "iperf3", "-c", SINK_IP, "-B", p.ip]
        argv += ["-p", str(BASE_PORT + k), "-P", str(flow.streams), "-t", str(seconds)]
        argv += ["-i", "0", "--connect-timeout", "3000"]
        if flow.rate is not None:
            # Kernel pacing (SO_MAX_PACING_RATE, TCP's internal pacer without fq), not -b:
            # iperf3's -b averages over the whole test and bursts to catch up after being
            # squeezed, which no rate-limited application does. The pacer counts IP bytes;
            # the wire adds 14 per 1500, so pace a little lower for the wire rate asked.
            argv += ["--fq-rate", str(int(flow.rate * 1500 / 1514 / flow.streams))]
        self.clients[k] = _spawn(argv, self.log_dir / f"client-{k}-{flow.vm}.log")

    def stop_flow(self, k: int) -> None:
        proc = self.clients.get(k)
        if proc is not None:
            _stop([proc])

    def start_pings(self, interval_s: float) -> None:
        for name, p in self.topo.vms.items():
            self.pings[name] = _spawn(
                ["ip", "netns", "exec", p.ns, "ping", "-D", "-n", "-i", f"{interval_s:g}"]
                + ["-W", "1", SINK_IP],
                self.ping_log(name),
            )

    def stop_all(self) -> None:
        _stop(list(self.clients.values()) + list(self.pings.values()) + self.servers)

    def ping_replies(self, vm: str) -> list[tuple[float, int]]:
        """(wall-clock receive time, icmp_seq) of every echo reply the VM got."""
        try:
            text = self.ping_log(vm).read_text(errors="replace")
        except FileNotFoundError:
            return []
        out = []
        for line in text.splitlines():
            m = _PING_LINE.match(line)
            if m:
                out.append((float(m.group(1)), int(m.group(2))))
        return out


class SinkMeter:
    """Per-VM delivered bytes at the sink, read from the per-VM IFBs' counters."""

    def __init__(self, topo: Topology) -> None:
        self.topo = topo
        self._ipr: Any = rtnl(topo.names.sink_ns)
        self._lock = threading.Lock()
        self._by_ifb = {p.sink_ifb: name for name, p in topo.vms.items()}
        self._index: dict[int, str] | None = None

    def read(self) -> dict[str, int]:
        """vm -> cumulative wire bytes delivered (IP bytes + Ethernet header per frame).

        From the IFB's root qdisc, which counts TSO/GRO super-packets as the frames they
        stand for (link counters count them once and would under-report by ~4 %).
        """
        with self._lock:
            if self._index is None:
                self._index = {
                    m["index"]: self._by_ifb[m.get("IFLA_IFNAME")]
                    for m in self._ipr.get_links()
                    if m.get("IFLA_IFNAME") in self._by_ifb
                }
            qdiscs = self._ipr.get_qdiscs()
        out = dict.fromkeys(self.topo.vms, 0)
        for q in qdiscs:
            vm = self._index.get(q["index"])
            if vm is None or q["parent"] != 0xFFFFFFFF:
                continue
            basic = (q.get("TCA_STATS2") or {}).get("TCA_STATS_BASIC") or {}
            out[vm] = int(basic.get("bytes", 0)) + ETH_HEADER * int(basic.get("packets", 0))
        return out

    def close(self) -> None:
        with self._lock, contextlib.suppress(Exception):
            self._ipr.close()


class GapRecorder:
    """Reads the sink's counters every ``resolution`` seconds on its own thread.

    A TCP stream that keeps delivering across a VF switch shows no interval without
    bytes; the longest such interval is the break the switch caused. The thread opens its
    own rtnetlink socket: pyroute2 sockets belong to the thread that made them.
    """

    def __init__(self, topo: Topology, resolution_s: float, clock: Any = time.monotonic):
        self.topo = topo
        self.resolution_s = resolution_s
        self.clock = clock
        self.samples: list[tuple[float, dict[str, int]]] = []
        self.error: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gap-recorder", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        try:
            meter = SinkMeter(self.topo)
        except Exception as exc:
            self.error = f"{type(exc).__name__}: {exc}"
            return
        try:
            nxt = self.clock()
            while not self._stop.is_set():
                try:
                    self.samples.append((self.clock(), meter.read()))
                except Exception as exc:  # the namespace went away: stop recording
                    self.error = f"{type(exc).__name__}: {exc}"
                    return
                nxt += self.resolution_s
                self._stop.wait(max(0.0, nxt - self.clock()))
        finally:
            meter.close()

    def longest_gap(self, vm: str, t0: float, t1: float) -> float | None:
        """Longest time in ``[t0, t1]`` (recorder clock) during which ``vm`` delivered nothing."""
        pts = [(t, s[vm]) for t, s in self.samples if t0 <= t <= t1]
        if len(pts) < 2:
            return None
        longest, since = 0.0, pts[0][0]
        for (ta, ba), (tb, bb) in zip(pts, pts[1:], strict=False):
            if bb > ba:
                longest = max(longest, ta - since)
                since = tb
        return max(longest, pts[-1][0] - since)
