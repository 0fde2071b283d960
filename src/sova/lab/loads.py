"""Guest loads started and watched through the real guest agent, and pings from outside."""

from __future__ import annotations

import base64
import ctypes
import re
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sova.driver.guest_agent import GuestAgent, GuestAgentError
from sova.lab.settings import LabSettings

IPERF_BASE_PORT = 5200


def _die_with_parent() -> None:
    """Children of `lab run` die with it, even on kill -9 (PR_SET_PDEATHSIG)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL)


@dataclass
class GuestJob:
    guest: str
    load: str
    pid: int
    exitcode: int | None = None
    stderr: str = ""
    stdout: str = ""
    started_s: float = 0.0  # monotonic time it was started


class Loads:
    def __init__(self, s: LabSettings, agent: GuestAgent, iperf_json: bool = False) -> None:
        self.s = s
        self.agent = agent
        self.jobs: list[GuestJob] = []
        # iperf3 -J: the guest's own per-second throughput, read back when the job ends
        self.iperf_json = iperf_json

    def start_phase(
        self,
        phases: Sequence[Any],
        i: int,
        dom_of: Callable[[str], Any],
        net_mbit: float,
        streams: Mapping[str, int] | None = None,
    ) -> list[GuestJob]:
        """Start phase ``i``'s loads in every guest (``net+cpu``: both); the jobs started.

        A guest sending in consecutive phases keeps one TCP stream across them (iperf3's
        server takes one test at a time, and a stream that lives through a fast-path switch
        or a migration is what shows none broke it): it is started in the first of them
        for all of them, and not again.
        """
        started: list[GuestJob] = []
        ph = phases[i]
        for g, load in sorted(ph.loads.items()):
            parts = set(load.split("+")) - {"idle"}
            before = set(phases[i - 1].loads.get(g, "idle").split("+")) if i > 0 else set()
            if "net" in parts and "net" in before:
                parts.discard("net")  # its stream from the previous phase goes on
            for one in sorted(parts):
                secs = ph.duration_s
                if one == "net":
                    j = i + 1
                    while j < len(phases) and "net" in phases[j].loads.get(g, "idle").split("+"):
                        secs += phases[j].duration_s
                        j += 1
                n = (streams or {}).get(g, 1)
                started.append(self._start_one(dom_of(g), g, one, secs, net_mbit, n))
        return started

    def _start_one(
        self, dom: Any, guest: str, load: str, duration_s: float, net_mbit: float, streams: int = 1
    ) -> GuestJob:
        n = int(guest[1:])
        secs = max(1, int(duration_s))
        if load == "net":
            secs = max(1, secs - 3)  # its end-of-test exchange finishes inside the phase
            args = [
                "-c",
                self.s.peer_ip,
                "-p",
                str(IPERF_BASE_PORT + n),
                "-t",
                str(secs),
                "-b",
                f"{net_mbit:g}M",
                "--connect-timeout",
                "5000",
            ] + (["-J"] if self.iperf_json else [])
            if streams > 1:  # parallel TCP streams, each offering net_mbit
                args += ["-P", str(streams)]
            path = "/usr/bin/iperf3"
        else:
            args = ["--cpu", "1", "--timeout", f"{secs}s", "--quiet"]
            path = "/usr/bin/stress-ng"
        ret = self.agent.command(
            dom, "guest-exec", {"path": path, "arg": args, "capture-output": True}
        )
        job = GuestJob(guest, load, int(ret["pid"]), started_s=time.monotonic())
        self.jobs.append(job)
        return job

    def finish(self, dom_of: Any, wait_s: float = 30.0) -> None:
        """Collect every job's exit code, waiting up to ``wait_s`` for stragglers (a TCP
        stream's last exchange under TCG can take seconds); one still running then keeps
        ``exitcode`` None and is reported as not finished. ``dom_of`` maps a guest to its
        domain, or is a function doing so (a guest that migrated is found where it is now)."""
        deadline = time.monotonic() + wait_s
        while True:
            for j in self.jobs:
                if j.exitcode is not None:
                    continue
                try:
                    dom = dom_of(j.guest) if callable(dom_of) else dom_of[j.guest]
                    st = self.agent.command(dom, "guest-exec-status", {"pid": j.pid})
                except GuestAgentError as e:
                    j.stderr = str(e)
                    continue
                if st.get("exited"):
                    j.exitcode = int(st.get("exitcode", -1))
                    err = st.get("err-data")
                    j.stderr = base64.b64decode(err).decode(errors="replace")[-300:] if err else ""
                    out = st.get("out-data")
                    j.stdout = base64.b64decode(out).decode(errors="replace") if out else ""
            if all(j.exitcode is not None for j in self.jobs) or time.monotonic() > deadline:
                return
            time.sleep(1.0)


class Peer:
    """iperf3 servers and pings in the lab's peer namespace."""

    def __init__(self, s: LabSettings, log_dir: Path) -> None:
        self.s = s
        self.log_dir = log_dir
        self.procs: list[subprocess.Popen[bytes]] = []
        self.ping_logs: dict[str, Path] = {}

    def _spawn(self, args: list[str], log: Path) -> None:
        with log.open("wb") as fh:
            self.procs.append(
                subprocess.Popen(
                    ["ip", "netns", "exec", self.s.peer_ns, *args],
                    stdout=fh,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    preexec_fn=_die_with_parent,
                )
            )

    def servers(self, guests: int) -> None:
        for n in range(1, guests + 1):
            port = IPERF_BASE_PORT + n
            self._spawn(["iperf3", "-s", "-p", str(port)], self.log_dir / f"iperf3-server-g{n}.log")

    def pings(self, guests: int, interval_s: float, duration_s: float) -> None:
        for n in range(1, guests + 1):
            log = self.log_dir / f"ping-g{n}.log"
            self.ping_logs[f"g{n}"] = log
            self._spawn(
                [
                    "ping",
                    "-D",
                    "-n",
                    "-i",
                    f"{interval_s:g}",
                    "-w",
                    str(int(duration_s) + 5),
                    self.s.guest_ip(n),
                ],
                log,
            )

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)


_REPLY = re.compile(r"^\[(\d+\.\d+)\] \d+ bytes from \S+ icmp_seq=(\d+)", re.M)


def ping_gaps(log: Path, start: float, end: float, interval_s: float) -> dict[str, float]:
    """Continuity seen by a ping at ``interval_s`` within [start, end] (epoch seconds).

    ``max_gap_s`` is the longest time without an answered request, in *send* time: the
    distance between consecutive answered sequence numbers times the interval — what a
    failover costs. ``max_arrival_gap_s`` is the longest time between replies arriving,
    which also includes round-trip spikes when the host starves a TCG guest of CPU (seen
    mid-phase, away from any switch). ``lost`` counts requests never answered.
    """
    replies = [(float(t), int(q)) for t, q in _REPLY.findall(log.read_text(errors="replace"))]
    replies = [(t, q) for t, q in replies if start <= t <= end]
    if len(replies) < 2:
        inf = float("inf")
        return {"max_gap_s": inf, "max_arrival_gap_s": inf, "replies": len(replies), "lost": 0}
    ts = [t for t, _ in replies]
    seqs = sorted({q for _, q in replies})
    arrival = max(b - a for a, b in zip(ts, ts[1:], strict=False))
    send = max(b - a for a, b in zip(seqs, seqs[1:], strict=False)) * interval_s
    return {
        "max_gap_s": round(send, 3),
        "max_arrival_gap_s": round(arrival, 3),
        "replies": len(replies),
        "lost": (seqs[-1] - seqs[0] + 1) - len(seqs),
    }
