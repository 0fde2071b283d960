"""The driver on a real libvirtd that is killed and restarted (issue 18: it never reconnected).

A private ``libvirtd`` serves libvirt's ``test`` driver on a socket in a temporary
directory. It runs in its own mount namespace in which /etc/libvirt, /run/libvirt,
/var/lib/libvirt, /var/cache/libvirt and /var/log/libvirt are the test's directories and the
directory of libvirt's hypervisor modules is empty: it loads no QEMU, network or storage
driver, so it touches neither the machine's libvirt state nor a system ``libvirtd``, which
it never talks to. Needs root, ``libvirtd``, ``unshare`` and libvirt-python; skips saying
which is missing.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import eventually

# libvirt's own directories, shadowed inside the daemon's mount namespace
SHADOWED = (
    "/etc/libvirt",
    "/run/libvirt",
    "/var/lib/libvirt",
    "/var/cache/libvirt",
    "/var/log/libvirt",
)


def _module_dir() -> str | None:
    # Debian's multiarch directory, Fedora's lib64, a plain lib
    found = sorted(glob.glob("/usr/lib/*/libvirt/connection-driver"))
    found += sorted(glob.glob("/usr/lib*/libvirt/connection-driver"))
    return found[0] if found else None


class PrivateLibvirtd:
    """One libvirtd of the test's own, started, killed and started again by pid."""

    def __init__(self, root: Path, modules: str) -> None:
        self.root = root
        self.modules = modules
        self.sock = root / "sock" / "libvirt-sock"
        self.uri = f"test+unix:///default?socket={self.sock}"
        self.proc: subprocess.Popen[bytes] | None = None
        for sub in ("etc", "run", "lib", "cache", "log", "sock", "empty"):
            (root / sub).mkdir()
        (root / "etc" / "libvirtd.conf").write_text(
            f'unix_sock_dir = "{root / "sock"}"\n'
            'auth_unix_rw = "none"\nauth_unix_ro = "none"\n'
            'unix_sock_rw_perms = "0700"\nunix_sock_ro_perms = "0700"\n'
            'log_outputs = "3:stderr"\n'
        )

    def start(self, lv: Any, timeout_s: float = 60.0) -> int:
        dirs = dict(zip(SHADOWED, ("etc", "run", "lib", "cache", "log"), strict=True))
        binds = [f"mount --bind {self.root / 'empty'} {self.modules}"] + [
            f"mount --bind {self.root / sub} {target}" for target, sub in dirs.items()
        ]
        script = " && ".join(
            [
                *binds,
                f"exec libvirtd -f {self.root / 'etc/libvirtd.conf'} -p "
                f"{self.root / 'run/libvirtd.pid'}",
            ]
        )
        log = open(self.root / "daemon.out", "ab")  # noqa: SIM115 - handed to the child
        self.proc = subprocess.Popen(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
        log.close()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            with contextlib.suppress(lv.libvirtError):
                lv.open(self.uri).close()
                return self.proc.pid
            time.sleep(0.1)
        tail = (self.root / "daemon.out").read_text(errors="replace").splitlines()[-3:]
        self.stop()
        raise AssertionError(f"private libvirtd did not answer at {self.sock}: {tail}")

    def kill(self) -> None:
        """SIGKILL, as the lab's fault test and an OOM kill do: no goodbye to clients."""
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)
        self.proc = None

    def stop(self) -> None:
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
        self.proc = None


@pytest.fixture
def libvirtd(lv: Any) -> Iterator[PrivateLibvirtd]:
    if os.geteuid() != 0:
        pytest.skip("a private libvirtd needs root (its own mount namespace)")
    for tool in ("libvirtd", "unshare"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} not installed (scripts/ci-setup.sh installs libvirt)")
    modules = _module_dir()
    if modules is None:
        pytest.skip(
            "libvirt's connection-driver directory not found: the private libvirtd "
            "could not be kept from loading the machine's hypervisor drivers"
        )
    if (
        subprocess.run(["unshare", "--mount", "true"], capture_output=True, timeout=10).returncode
        != 0
    ):
        pytest.skip("cannot create a mount namespace here (unshare --mount failed)")
    # short: a unix socket path must fit in 108 bytes
    root = Path(tempfile.mkdtemp(prefix="sova-lvd-", dir="/tmp"))
    d = PrivateLibvirtd(root, modules)
    try:
        d.start(lv)
        yield d
    finally:
        d.stop()
        shutil.rmtree(root, ignore_errors=True)


def _driver(uri: str) -> Any:
    from sova.driver.libvirt_driver import LibvirtDriver, LibvirtDriverConfig

    return LibvirtDriver(
        LibvirtDriverConfig(
            uri=uri,
            fast_path="lab-nic",
            failover="guest-bond",
            lab_nic_bridge="fastbr",
            lab_nic_taps=("fast0",),
            keepalive=(1, 3),
            reconnect_attempts=3,
            reconnect_backoff_s=0.2,
            connect_timeout_s=5.0,
        )
    )


def _suspend_resume(lv: Any, uri: str) -> None:
    """A lifecycle change made by another client, as an operator's virsh would."""
    other = lv.open(uri)
    try:
        dom = other.lookupByName("test")
        dom.suspend()
        dom.resume()
    finally:
        other.close()


def _suspended(lv: Any, drv: Any, since: int) -> bool:
    return any(
        e.seq > since
        and e.kind == "lifecycle"
        and e.vm == "test"
        and e.event == lv.VIR_DOMAIN_EVENT_SUSPENDED
        for e in drv.events()
    )


def test_driver_reconnects_after_libvirtd_is_killed_and_restarted(lv, libvirtd):
    """After SIGKILL and a restart, the driver's next read works on a new connection, the
    fast-path source reads through it, and domain events arrive again.

    Failed before the fix: ``inventory()`` raised ``cannot list domains: internal error:
    client socket is closed`` after the restart, and did so for ever.

    Repeated on 2 cores under ``nice -n 19`` in a low-priority autogroup with a busy loop
    on one core and other sessions' work (load average 6.8-12.7, 2026-11-27/28; the
    private daemon inherits the niceness): 18 of 18 passed, 0.3-11.7 s each (median about
    2 s; the slow ones are the daemon's restart, starved of CPU).
    """
    drv = _driver(libvirtd.uri)
    try:
        assert "test" in drv.inventory().vms
        mark = drv._ctx.hub.mark()
        _suspend_resume(lv, libvirtd.uri)
        assert eventually(lambda: _suspended(lv, drv, mark), 15.0), "no event before the kill"
        old = drv._conn

        libvirtd.kill()
        libvirtd.start(lv)

        inv = drv.inventory()  # was: DriverError "client socket is closed", every period
        assert "test" in inv.vms and inv.vms["test"].running
        assert drv.reconnects == 1
        assert drv._conn is not old
        # the fast-path source holds no connection of its own: it reads through the new one
        assert drv._fast.holders(drv.pf_view()) == {}
        # events registered again, on the new connection, from the restarted daemon
        mark = drv._ctx.hub.mark()
        _suspend_resume(lv, libvirtd.uri)
        assert eventually(lambda: _suspended(lv, drv, mark), 15.0), (
            f"no lifecycle event after the restart: {drv.events()[-3:]}"
        )
        assert drv.sample().vms.keys() == {"test"}
    finally:
        drv.close()


def test_no_host_read_while_libvirtd_is_down_then_recovery(lv, libvirtd):
    """While the daemon is down every read fails within the reconnect budget, saying the
    connection was lost and how many attempts failed, so the agent decides nothing; the
    first read after the daemon is back reconnects.

    Same loaded repetition: 17 of 18 passed, 1.6-25.8 s; the failure was a read made before
    libvirt had seen the EOF (now waited for, see below); the 8 runs since passed."""
    from sova.driver.base import DriverError

    drv = _driver(libvirtd.uri)
    try:
        drv.inventory()
        libvirtd.kill()
        # A call made before libvirt's event loop has read the EOF fails on the dead socket
        # itself ("Cannot write data: Broken pipe", seen once in 10 loaded runs): also no
        # decision, but not this test's point, which is every read once the loss is known.
        assert eventually(lambda: not drv._link.alive(), 15.0), "libvirt did not see the EOF"
        budget = drv._link.policy.budget_s()
        for read in (drv.inventory, drv.sample):
            t0 = time.monotonic()
            with pytest.raises(DriverError, match=r"lost .*3 reconnect attempts failed"):
                read()
            assert time.monotonic() - t0 < budget + 10.0
        assert drv.reconnects == 0
        libvirtd.start(lv)
        assert "test" in drv.inventory().vms
        assert drv.reconnects == 1
    finally:
        drv.close()


def test_agent_decides_nothing_while_libvirtd_is_down_and_reconciles_after(lv, libvirtd, caplog):
    """The agent daemon's loop on the real driver: while the daemon is down no control step
    completes (each is skipped, counted and logged); once it is back the agent adopts the
    host as found and its steps resume. Before the fix the steps never resumed.

    Same loaded repetition: 18 of 18 passed, 5.2-99 s (median about 9 s; every wait here
    allows 30 s, the longest single wait was not recorded)."""
    import logging
    import threading

    from sova.manager.daemons.agent.daemon import AgentDaemon
    from sova.manager.daemons.agent.tickers import WallTicker
    from sova.manager.daemons.config import AgentSettings

    caplog.set_level(logging.INFO, logger="sova")
    settings = AgentSettings.model_validate(
        {
            "driver": "mock",
            "host": "hv1",
            "dry_run": True,
            "controller": {"period": 1, "vf_policy": "sova", "bandwidth_policy": "sova"},
        }
    )
    drv = _driver(libvirtd.uri)
    d = AgentDaemon(settings, drv)
    stop = threading.Event()
    loop = threading.Thread(
        target=d.run, args=(WallTicker(drv, 1.0, None, 0.5, stop), stop), daemon=True
    )

    def skipped(loop: str) -> float:
        v = d.metrics.registry.get_sample_value("sova_agent_phases_skipped_total", {"loop": loop})
        return v or 0.0

    loop.start()
    try:
        assert eventually(lambda: d.last_report is not None, 30.0), "no step before the kill"
        libvirtd.kill()
        assert eventually(lambda: skipped("control") >= 1, 30.0), "no control phase skipped"
        held = d.last_report
        # then every period is held until the host can be adopted as found again
        assert eventually(lambda: skipped("reconcile") >= 2, 30.0), "periods not held"
        assert d.last_report is held, "a step completed while libvirtd was down"
        assert "control phase skipped, nothing decided" in caplog.text
        caplog.clear()
        libvirtd.start(lv)
        assert eventually(lambda: d.last_report is not held, 30.0), "steps did not resume"
        assert "reconciled hv1" in caplog.text
        assert drv.reconnects == 1
    finally:
        stop.set()
        loop.join(30)
        drv.close()
    assert not loop.is_alive()


class _Conn:
    """A connection as the link sees it: alive until its daemon goes."""

    def __init__(self) -> None:
        self.alive, self.closed = True, False

    def isAlive(self) -> int:
        return int(self.alive)

    def close(self) -> None:
        self.closed = True


def test_link_gives_up_after_its_attempts_with_doubling_backoff() -> None:
    """The retry bound without a daemon (runs everywhere): 3 failed opens sleep 1 s then
    2 s between them and raise, naming the loss and the last error; the next ensure tries
    again and replaces the dead connection once an open succeeds."""
    from sova.driver.base import DriverError
    from sova.driver.libvirt_driver.connection import LibvirtLink, ReconnectPolicy

    first = _Conn()
    opens: list[Any] = [first]
    sleeps: list[float] = []

    def opener() -> Any:
        nxt = opens.pop(0)
        if isinstance(nxt, Exception):
            raise nxt
        return nxt

    link = LibvirtLink("test+unix:///x", opener, ReconnectPolicy(3, 1.0, 5.0), sleep=sleeps.append)
    assert link.conn is first and not link.ensure()  # alive: nothing opened
    first.alive = False
    opens += [DriverError(f"refused {n}") for n in (1, 2, 3)]
    with pytest.raises(DriverError, match=r"lost .*3 reconnect attempts failed, last: refused 3"):
        link.ensure()
    assert sleeps == [1.0, 2.0]  # none after the last attempt
    assert link.conn is first and link.generation == 0
    second = _Conn()
    opens.append(second)
    assert link.ensure() is True
    assert link.conn is second and first.closed and link.generation == 1
    # (1 s + 2 s of back-off, 3 opens of at most 5 s)
    assert link.policy.budget_s() == 18.0


def test_link_never_replaces_a_connection_it_was_given() -> None:
    from sova.driver.libvirt_driver.connection import LibvirtLink, ReconnectPolicy

    given = _Conn()
    given.alive = False

    def opener() -> Any:
        raise AssertionError("a caller's connection was replaced")

    link = LibvirtLink("test:///default", opener, ReconnectPolicy(), conn=given)
    assert link.ensure() is False and link.conn is given
