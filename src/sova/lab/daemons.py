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

from sova.lab.qemu import LabQemu, from_record
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


def proc_start_time(pid: int) -> str | None:
    """The kernel's start time of ``pid`` (clock ticks since boot), None if it is gone: with
    the pid it names one process, so a pid the kernel reused is never taken for ours."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # the command name (field 2) may hold spaces: fields are counted after its ')'
    fields = stat.rsplit(")", 1)[1].split()
    # A zombie (a daemon the lab started, killed, not yet reaped) keeps its /proc entry
    # but runs nothing: it must not pass for the running daemon.
    if fields[0] in ("Z", "X"):
        return None
    return fields[19]


def record_pid(s: LabSettings, pid: int, what: str) -> None:
    """Append a process the lab started to its ledger (``<root>/pids``), the record `down`
    kills from: a daemon's command line does not name the lab, and a pid file can be
    overwritten (a second start of the same host) or never written (a crash)."""
    record_pid_at(s.root, pid, what)


def record_pid_at(root: Path, pid: int, what: str) -> None:
    root.mkdir(parents=True, exist_ok=True)
    with (root / "pids").open("a") as f:
        f.write(f"{pid} {proc_start_time(pid) or '?'} {what}\n")


def ledger_pids(root: Path) -> dict[int, str]:
    """pid -> what, for every ledger entry that is still that same process."""
    out: dict[int, str] = {}
    with contextlib.suppress(OSError):
        for line in (root / "pids").read_text().splitlines():
            parts = line.split(maxsplit=2)
            if len(parts) == 3 and parts[0].isdigit():
                pid, start, what = int(parts[0]), parts[1], parts[2]
                if proc_start_time(pid) == start:
                    out[pid] = what
    return out


def kill_pids(pids: set[int], grace_s: float = 5.0) -> list[int]:
    """TERM, then KILL what is left after ``grace_s``; our own children are reaped."""
    pids = pids - {os.getpid()}
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(Path(f"/proc/{p}").exists() for p in pids):
        for pid in pids:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
        time.sleep(0.1)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    for pid in pids:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
    return sorted(pids)


def recorded_pids(s: LabSettings) -> dict[int, str]:
    """pid -> what, for every process the lab recorded that is still that same process:
    the ledger, each daemon's pid file, and the pid files libvirt itself writes in each
    host's private directories (libvirtd's and each QEMU's)."""
    out = ledger_pids(s.root)
    for host in s.hosts:
        d = s.host_dir(host)
        files = [d / "daemon.pid", d / "run" / "libvirtd.pid"]
        with contextlib.suppress(OSError):
            files += sorted((d / "run" / "qemu").glob("*.pid"))
        for f in files:
            found = _pid_in(f)
            # a pid file without a start time: ours only if that process sees the lab's
            # directories in its mounts (the daemons' bind mounts, QEMU's disk paths)
            if found is not None and found not in out and _sees_lab(found, s):
                out[found] = f"{host} {f.name}"
    return out


def _pid_in(f: Path) -> int | None:
    try:
        return int(f.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _sees_lab(pid: int, s: LabSettings) -> bool:
    mark = str(s.root)
    for name in ("mountinfo", "cmdline"):
        with contextlib.suppress(OSError):
            if mark in (Path(f"/proc/{pid}") / name).read_bytes().decode(errors="replace"):
                return True
    return False


def running_daemon(s: LabSettings, host: str) -> int | None:
    """The pid of ``host``'s libvirtd the lab started, if that very process still runs."""
    try:
        pid_s, start = (s.host_dir(host) / "daemon.pid").read_text().split()[:2]
    except (OSError, ValueError):
        return None
    pid = int(pid_s)
    return pid if proc_start_time(pid) == start else None


def lab_qemu(s: LabSettings) -> LabQemu:
    """The QEMU `up` recorded for this lab (the machine's own when nothing is recorded)."""
    try:
        text = s.qemu_record.read_text()
    except OSError:
        return LabQemu()
    return from_record(text)


def start_daemon(s: LabSettings, host: str, index: int, timeout_s: float = 30.0) -> int:
    """Start ``host``'s libvirtd in its own mount namespace; its pid once *it* answers.

    Refuses when one already serves the host: a second libvirtd would exit on the pid
    file lock ("Failed to acquire pid file … Resource temporarily unavailable") while the
    first one's socket still answers, and that must not pass for a start.
    """
    for tool in ("libvirtd", "unshare", "qemu-system-x86_64"):
        if shutil.which(tool) is None:
            raise LabError(f"{tool} not found (scripts/ci-setup-lab.sh installs it)")
    running = running_daemon(s, host)
    if running is not None:
        raise LabError(f"libvirtd for {host} already runs (pid {running}): not starting another")
    d = prepare_host(s, host, index)
    sock = s.socket(host)
    if sock.exists() and _answers(s.uri(host)):
        raise LabError(f"a libvirtd the lab did not record already answers at {sock}")
    for target in HOST_DIRS.values():
        Path(target).mkdir(parents=True, exist_ok=True)
    binds = " && ".join(f"mount --bind {d / sub} {target}" for sub, target in HOST_DIRS.items())
    # the lab's QEMU over the machine's, in this namespace only: libvirtd and the QEMUs it
    # starts see it at /usr/bin/qemu-system-x86_64 with its own modules and firmware
    overlay = lab_qemu(s).mount_script()
    if overlay:
        binds = f"{binds} && {overlay}"
    script = f"{binds} && exec libvirtd -f /etc/libvirt/libvirtd.conf -p /run/libvirt/libvirtd.pid"
    log = open(d / "daemon.out", "ab")  # noqa: SIM115 - handed to the child
    # unshare and sh exec: the pid of this child is libvirtd's own
    proc = subprocess.Popen(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=log,
        start_new_session=True,  # a Ctrl-C of `sova lab up` must not take the daemon down
    )
    log.close()
    record_pid(s, proc.pid, f"{host} libvirtd")
    (d / "daemon.pid").write_text(f"{proc.pid} {proc_start_time(proc.pid) or '?'}\n")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        # libvirtd writes its pid file once it holds the lock, before it opens the socket
        ours = _pid_in(d / "run" / "libvirtd.pid") == proc.pid
        if ours and _answers(s.uri(host)) and proc.poll() is None:
            return proc.pid
        time.sleep(0.2)
    if proc.poll() is not None:
        tail = (d / "daemon.out").read_text(errors="replace").strip().splitlines()[-3:]
        raise LabError(f"libvirtd for {host} exited {proc.returncode}: {' | '.join(tail)}")
    raise LabError(f"libvirtd for {host} did not open {sock} within {timeout_s:g}s")


def ensure_daemon(s: LabSettings, host: str, index: int) -> int:
    """``host``'s libvirtd: the one running, or a new one if it is not (after a fault test
    killed it). Never a second one beside a live first."""
    pid = running_daemon(s, host)
    return pid if pid is not None else start_daemon(s, host, index)


def _answers(uri: str) -> bool:
    try:
        r = subprocess.run(["virsh", "-c", uri, "uri"], capture_output=True, timeout=10)
    except subprocess.TimeoutExpired:
        return False
    return r.returncode == 0


def lab_pids(s: LabSettings) -> list[int]:
    """Every process whose command line names the lab directory (the QEMUs: their disks
    and logs are under it). Found by the lab's own path, never by a program name."""
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
    """The pid recorded for ``host``'s libvirtd (running or not)."""
    return _pid_in(s.host_dir(host) / "daemon.pid")


def kill_all(s: LabSettings, grace_s: float = 5.0) -> list[int]:
    """TERM then KILL every lab process: what the lab recorded (ledger, pid files, each
    still the same process) and the QEMUs named by their lab paths."""
    return kill_pids(set(lab_pids(s)) | set(recorded_pids(s)), grace_s)
