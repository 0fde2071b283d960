"""The namespace testbed's plumbing: names, commands, discovery, teardown, rtnetlink, shapers.

Everything here works by prefix and by name, not by memory of what a run built, so that
:func:`teardown` can find and remove a crashed run's namespaces and processes, and a lock
per prefix keeps two runs apart. :mod:`sova.testbed.topology` builds the testbed with it.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULT_PREFIX = "sv-"
PREFIX_RE = re.compile(r"^[a-z][a-z0-9]{0,4}-$")
NETNS_DIR = Path("/run/netns")
STATE_DIR = Path(os.environ.get("SOVA_TESTBED_STATE", "/run/sova-testbed"))
CMD_TIMEOUT_S = 15.0
SINK_IP = "10.95.0.2"
UPLINK_HOST_IP = "10.95.0.1"
VIRTIO_GW = "10.96.0.1"
# Routes: the virtio path is always there; a VF's routes win by metric while attached.
VF_METRIC = 100
VIRTIO_METRIC = 200
MTU_FRAME = 1514  # bytes one MTU-sized packet costs on the wire (HTB counts L2 bytes)


class TestbedError(RuntimeError):
    """The testbed could not be built, changed or inspected."""

    __test__ = False  # not a pytest test class, despite the name


# --------------------------------------------------------------------------- commands


def run_cmd(
    argv: Sequence[str],
    *,
    timeout: float = CMD_TIMEOUT_S,
    input: str | None = None,
    check: bool = True,
) -> subprocess.CompletedProcess[str]:
    """Run one command with a deadline; a failure names the command and its stderr."""
    try:
        proc = subprocess.run(
            list(argv),
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise TestbedError(f"{' '.join(argv)}: no answer after {timeout:g} s") from None
    except FileNotFoundError as exc:
        raise TestbedError(f"{argv[0]}: not installed ({exc})") from None
    if check and proc.returncode != 0:
        what = " ".join(argv) if input is None else f"{' '.join(argv)} <<{input.strip()!r}"
        raise TestbedError(f"{what}: exit {proc.returncode}: {proc.stderr.strip()}")
    return proc


def ip_batch(ns: str, lines: Sequence[str]) -> None:
    if lines:
        run_cmd(["ip", "-n", ns, "-batch", "-"], input="\n".join(lines) + "\n")


def tc_batch(ns: str, lines: Sequence[str]) -> None:
    if lines:
        run_cmd(["tc", "-n", ns, "-batch", "-"], input="\n".join(lines) + "\n")


def sysctl(ns: str, settings: dict[str, str]) -> None:
    args = [f"{k}={v}" for k, v in settings.items()]
    run_cmd(["ip", "netns", "exec", ns, "sysctl", "-q", "-w", *args])


def bits(rate_bps: float) -> str:
    """A tc rate; HTB refuses 0, and 8 kbit/s is as good as stopped on a Gbit link."""
    return f"{max(8000, int(round(rate_bps)))}bit"


# --------------------------------------------------------------------------- names


@dataclass(frozen=True)
class VMPlumbing:
    """Every name and address of one VM's two paths."""

    name: str
    index: int
    ns: str
    ip: str  # the VM's own address (on its loopback): survives failover
    virtio_ip: str  # eth0, on the bridge's /24
    vf_host_ip: str  # host end of the VF veth
    vf_vm_ip: str  # VM end of the VF veth (vf0)
    vf_host_if: str  # host-side VF veth
    vf_ifb: str  # the VF's transmit limiter (max_tx_rate), host side
    tap_if: str  # host-side virtio veth, a bridge port
    tap_ifb: str  # host-side shaper of the virtio path
    sink_ifb: str  # per-VM delivered-bytes counter in the sink
    vf_dev: str = "vf0"
    virtio_dev: str = "eth0"


@dataclass(frozen=True)
class Names:
    prefix: str = DEFAULT_PREFIX

    def __post_init__(self) -> None:
        if not PREFIX_RE.match(self.prefix):
            raise ValueError(
                f"prefix must be 1-5 lower-case letters/digits and a '-', got {self.prefix!r}"
            )

    @property
    def host_ns(self) -> str:
        return f"{self.prefix}host"

    @property
    def sink_ns(self) -> str:
        return f"{self.prefix}sink"

    def vm_ns(self, vm: str) -> str:
        return f"{self.prefix}vm-{vm}"

    @property
    def uplink(self) -> str:
        return f"{self.prefix}up"

    @property
    def bridge(self) -> str:
        return f"{self.prefix}br"

    @property
    def relay_port(self) -> str:  # bridge side of the backend
        return f"{self.prefix}rl0"

    @property
    def relay_host(self) -> str:  # routed side of the backend
        return f"{self.prefix}rl1"

    @property
    def state_file(self) -> Path:
        return STATE_DIR / f"{self.prefix}state.json"

    @property
    def lock_file(self) -> Path:
        return STATE_DIR / f"{self.prefix}lock"

    def vm(self, name: str, index: int) -> VMPlumbing:
        p = self.prefix
        return VMPlumbing(
            name=name,
            index=index,
            ns=self.vm_ns(name),
            ip=f"10.99.0.{10 + index}",
            virtio_ip=f"10.96.0.{10 + index}",
            vf_host_ip=f"10.98.{index}.1",
            vf_vm_ip=f"10.98.{index}.2",
            vf_host_if=f"{p}{index}vf",
            vf_ifb=f"{p}{index}q",
            tap_if=f"{p}{index}tp",
            tap_ifb=f"{p}{index}w",
            sink_ifb=f"{p}k{index}",
        )


# --------------------------------------------------------------------------- discovery


def list_namespaces(prefix: str = DEFAULT_PREFIX) -> list[str]:
    try:
        return sorted(n for n in os.listdir(NETNS_DIR) if n.startswith(prefix))
    except FileNotFoundError:
        return []


def netns_pids(ns: str) -> list[int]:
    """Processes whose network namespace is ``ns`` (what ``ip netns pids`` does)."""
    try:
        target = os.stat(NETNS_DIR / ns)
    except FileNotFoundError:
        return []
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            st = os.stat(f"/proc/{entry}/ns/net")
        except OSError:
            continue
        if (st.st_dev, st.st_ino) == (target.st_dev, target.st_ino):
            pids.append(int(entry))
    return sorted(pids)


def netns_inodes(prefix: str = DEFAULT_PREFIX) -> dict[str, tuple[int, int]]:
    out = {}
    for ns in list_namespaces(prefix):
        with contextlib.suppress(FileNotFoundError):
            st = os.stat(NETNS_DIR / ns)
            out[ns] = (st.st_dev, st.st_ino)
    return out


def pids_in(inodes: set[tuple[int, int]]) -> list[int]:
    """Processes still living in any of these namespaces (even after the names are gone)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            st = os.stat(f"/proc/{entry}/ns/net")
        except OSError:
            continue
        if (st.st_dev, st.st_ino) in inodes:
            found.append(int(entry))
    return sorted(found)


def _kill_all(pids: Sequence[int], grace_s: float = 2.0) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    alive = list(pids)
    while alive and time.monotonic() < deadline:
        time.sleep(0.05)
        alive = [p for p in alive if _alive(p)]
    for pid in alive:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + grace_s
    while alive and time.monotonic() < deadline:
        time.sleep(0.05)
        alive = [p for p in alive if _alive(p)]


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            state = fh.read().rsplit(")", 1)[1].split()[0]
        if state == "Z":
            # Our own child that exited: reap it so it stops counting as alive.
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
            return False
        return True
    except (OSError, IndexError):
        return False


def teardown(prefix: str = DEFAULT_PREFIX) -> list[str]:
    """Remove every namespace with ``prefix``, its processes first. Returns what was removed.

    Deleting a namespace's name does not free it while a process still lives in it, and
    its links and qdiscs live as long as the namespace; so every process in it (iperf3,
    ping, the relay) is terminated first, then the names are deleted, and finally the
    namespaces' inodes are checked for stragglers.
    """
    Names(prefix)  # validate
    inodes = netns_inodes(prefix)
    for ns in inodes:
        _kill_all(netns_pids(ns))
    removed = []
    for ns in inodes:
        proc = run_cmd(["ip", "netns", "del", ns], check=False)
        if proc.returncode != 0 and (NETNS_DIR / ns).exists():
            raise TestbedError(f"ip netns del {ns}: {proc.stderr.strip()}")
        removed.append(ns)
    stragglers = pids_in(set(inodes.values()))
    if stragglers:
        _kill_all(stragglers)
    with contextlib.suppress(FileNotFoundError):
        Names(prefix).state_file.unlink()
    return removed


# --------------------------------------------------------------------------- rtnetlink

_CLONE_NEWNET = 0x40000000


def rtnl(ns: str) -> Any:
    """A pyroute2 ``IPRoute`` talking to namespace ``ns``, opened without forking.

    pyroute2 opens a namespace's socket in a forked child of this process, and a fork of
    an agent with worker threads and signal handlers is not something to kill safely in
    the middle of a teardown. ``setns`` on a short-lived thread moves only that thread, so
    the socket is created inside ``ns`` while the process stays where it is.
    """
    import ctypes
    import socket
    import threading

    try:
        from pyroute2 import IPRoute  # type: ignore[import-untyped]
    except ImportError:
        raise TestbedError(
            "pyroute2 is not installed: pip install 'pyroute2>=0.9' (the testbed reads "
            "kernel counters through rtnetlink)"
        ) from None

    box: dict[str, Any] = {}

    def work() -> None:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            fd = os.open(NETNS_DIR / ns, os.O_RDONLY)
            try:
                if libc.setns(fd, _CLONE_NEWNET) != 0:
                    err = ctypes.get_errno()
                    raise OSError(err, f"setns {ns}: {os.strerror(err)}")
            finally:
                os.close(fd)
            box["sock"] = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, 0)
        except BaseException as exc:  # handed to the caller's thread
            box["error"] = exc

    t = threading.Thread(target=work, name=f"setns-{ns}", daemon=True)
    t.start()
    t.join(timeout=5.0)
    if "error" in box:
        raise TestbedError(f"cannot open rtnetlink in {ns}: {box['error']}")
    if "sock" not in box:
        raise TestbedError(f"cannot open rtnetlink in {ns}: no answer in 5 s")
    return IPRoute(use_socket=box["sock"], groups=0)


# --------------------------------------------------------------------------- lock


@contextlib.contextmanager
def exclusive(prefix: str = DEFAULT_PREFIX) -> Iterator[None]:
    """One run per prefix at a time: two runs would tear down each other's namespaces."""
    import fcntl

    lock = Names(prefix).lock_file
    lock.parent.mkdir(parents=True, exist_ok=True)
    with lock.open("w") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise TestbedError(
                f"another testbed run with prefix {prefix!r} is in progress ({lock})"
            ) from None
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


# --------------------------------------------------------------------------- shapers


def htb_lines(dev: str, rate_bps: float, pps: float | None, queue: int) -> list[str]:
    """A one-class HTB limiter: 1:1 caps bits/s, its child 1:10 caps packets/s.

    There is no packet-rate qdisc in this kernel; HTB's ``mpu`` makes every packet cost
    at least one MTU frame, so a class at ``pps * 1514 B`` passes at most ``pps`` small
    packets per second while MTU-sized traffic sees it as a byte rate.
    """
    leaf = _leaf_rate(rate_bps, pps)
    return [
        f"qdisc replace dev {dev} root handle 1: htb default 10",
        f"class replace dev {dev} parent 1: classid 1:1 htb rate {bits(rate_bps)} "
        f"ceil {bits(rate_bps)} quantum 60000",
        f"class replace dev {dev} parent 1:1 classid 1:10 htb {leaf} quantum 60000",
        f"qdisc replace dev {dev} parent 1:10 handle 10: pfifo limit {queue}",
    ]


def htb_change_lines(dev: str, rate_bps: float, pps: float | None) -> list[str]:
    return [
        f"class change dev {dev} parent 1: classid 1:1 htb rate {bits(rate_bps)} "
        f"ceil {bits(rate_bps)} quantum 60000",
        f"class change dev {dev} parent 1:1 classid 1:10 htb {_leaf_rate(rate_bps, pps)} "
        "quantum 60000",
    ]


def _leaf_rate(rate_bps: float, pps: float | None) -> str:
    if pps is None:
        return f"rate {bits(rate_bps)} ceil {bits(rate_bps)}"
    pps_bps = pps * MTU_FRAME * 8
    return f"rate {bits(pps_bps)} ceil {bits(pps_bps)} mpu {MTU_FRAME}"
