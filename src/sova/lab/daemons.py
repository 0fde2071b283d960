"""Two libvirt daemons on one machine, each believing it is a whole hypervisor.

libvirt keys its state on fixed paths (/etc/libvirt, /run/libvirt, /var/lib/libvirt, …) and
refuses to migrate a guest to a daemon with its own host UUID. So each lab daemon runs in a
private mount namespace whose libvirt directories are bind mounts of the lab's own, with
its own ``host_uuid``; both share the network namespace, so guests of both meet on the
lab's bridges. There is no systemd here: the daemons are started directly and tracked by
pid.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

from sova.lab.settings import HOST_DIRS, LabSettings


class LabError(RuntimeError):
    """The lab could not be built or torn down; the message says what and why."""


def _libvirtd_conf(s: LabSettings, host: str) -> str:
    return (
        f'host_uuid = "{s.host_uuid(host)}"\n'
        'auth_unix_rw = "none"\n'
        'unix_sock_rw_perms = "0700"\n'
        'log_outputs = "3:file:/var/log/libvirt/libvirtd.log"\n'
        "keepalive_interval = 5\n"
    )


def _qemu_conf(index: int) -> str:
    # No cgroups (no systemd, and a container's cgroup tree is not ours), no virtlogd
    # (one less daemon per host), QEMU as root without a security driver (the lab's
    # files are root's), and a migration port range per daemon.
    lo = 49152 + 100 * index
    return (
        "cgroup_controllers = [ ]\n"
        'stdio_handler = "file"\n'
        'user = "root"\ngroup = "root"\n'
        "dynamic_ownership = 0\n"
        'security_driver = "none"\n'
        "namespaces = [ ]\n"
        f"migration_port_min = {lo}\nmigration_port_max = {lo + 63}\n"
    )


def prepare_host(s: LabSettings, host: str, index: int) -> Path:
    d = s.host_dir(host)
    for sub in HOST_DIRS:
        (d / sub).mkdir(parents=True, exist_ok=True)
    for sub in ("etc", "log", "lib", "run", "cache"):
        (d / sub / "qemu").mkdir(exist_ok=True)
    (d / "etc" / "libvirtd.conf").write_text(_libvirtd_conf(s, host))
    (d / "etc" / "qemu.conf").write_text(_qemu_conf(index))
    return d


def start_daemon(s: LabSettings, host: str, index: int, timeout_s: float = 30.0) -> int:
    """Start ``host``'s libvirtd in its own mount namespace; its pid once its socket answers."""
    for tool in ("libvirtd", "unshare", "qemu-system-x86_64"):
        if shutil.which(tool) is None:
            raise LabError(f"{tool} not found (scripts/ci-setup-lab.sh installs it)")
    d = prepare_host(s, host, index)
    for target in HOST_DIRS.values():
        Path(target).mkdir(parents=True, exist_ok=True)
    binds = " && ".join(f"mount --bind {d / sub} {target}" for sub, target in HOST_DIRS.items())
    script = f"{binds} && exec libvirtd -f /etc/libvirt/libvirtd.conf -p /run/libvirt/libvirtd.pid"
    log = open(d / "daemon.out", "ab")  # noqa: SIM115 - handed to the child
    proc = subprocess.Popen(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=log,
        start_new_session=True,  # a Ctrl-C of `sova lab up` must not take the daemon down
    )
    log.close()
    (d / "daemon.pid").write_text(str(proc.pid))
    deadline = time.monotonic() + timeout_s
    sock = s.socket(host)
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = (d / "daemon.out").read_text(errors="replace").strip().splitlines()[-3:]
            raise LabError(f"libvirtd for {host} exited {proc.returncode}: {' | '.join(tail)}")
        if sock.exists() and _answers(s.uri(host)):
            return proc.pid
        time.sleep(0.2)
    raise LabError(f"libvirtd for {host} did not open {sock} within {timeout_s:g}s")


def _answers(uri: str) -> bool:
    r = subprocess.run(["virsh", "-c", uri, "uri"], capture_output=True, timeout=10, check=False)
    return r.returncode == 0


def lab_pids(s: LabSettings) -> list[int]:
    """Every process whose command line or root names the lab directory: daemons and QEMUs.

    Found by the lab's own path, never by a program name, so nothing else is touched.
    """
    mark = str(s.root)
    out: list[int] = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit() or int(p.name) == os.getpid():
            continue
        try:
            cmd = (p / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if mark in cmd:
            out.append(int(p.name))
    return out


def daemon_pid(s: LabSettings, host: str) -> int | None:
    f = s.host_dir(host) / "daemon.pid"
    try:
        return int(f.read_text().strip())
    except (OSError, ValueError):
        return None


def kill_all(s: LabSettings, grace_s: float = 5.0) -> list[int]:
    """TERM then KILL every lab process (daemons by pid file, QEMUs by their lab paths)."""
    pids = set(lab_pids(s))
    for host in s.hosts:
        pid = daemon_pid(s, host)
        if pid is not None and Path(f"/proc/{pid}").exists():
            pids.add(pid)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(Path(f"/proc/{p}").exists() for p in pids):
        time.sleep(0.1)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    for pid in pids:
        # reap our own children (daemons started by this process) so none stays a zombie
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
    return sorted(pids)
