"""Helpers of the nested SR-IOV tests: the lab both modules share, a TCP sink on this
machine, who holds the VF, a shell command in an L2 guest through its guest agent."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def tier_settings() -> Any:
    """The tier's own lab (directory, name prefix): never an operator's `sova lab up
    --sriov` (prefix ``svn``), never the namespace testbed's (``svt-``)."""
    from sova.lab.nested import NestedSettings

    return NestedSettings(
        root=Path("/var/lib/sova-lab-sriov-test"), prefix="svs", l1s=2, boot_timeout_s=420.0
    )


def nested_lab_session() -> Iterator[Any]:
    """Two L1s booted once for the whole nested tier (the tests/lab conftest's
    ``nested_lab``): one boot of two L1s costs about what one L1 did alone, and each
    module ran its own before (docs/lab.md#nested). Opt-in, skipping with the reason."""
    if os.environ.get("SOVA_LAB_SRIOV") != "1":
        pytest.skip("nested SR-IOV lab is opt-in: SOVA_LAB_SRIOV=1 (minutes, both cores)")
    from sova.lab import nested as nested_mod

    why = nested_mod.unavailable()
    if why:
        pytest.skip(why)
    import libvirt  # type: ignore[import-untyped]

    # libvirt's default handler prints every error on stderr: a guest-agent wait filled the
    # tier's log with one "not connected" line a second; the errors still raise
    libvirt.registerErrorHandler(lambda _ctx, _err: None, None)
    ns = tier_settings()
    nested_mod.down(ns)
    try:
        state = nested_mod.up(ns, ROOT, say=print)
        print(f"nested lab up: {state}")
        yield ns
    finally:
        print(f"nested lab down: {nested_mod.down(ns)}")
        # a libvirt connection to an L1 still referenced here (an interrupted or failed
        # test's traceback keeps its domains) is closed at the interpreter's exit, and that
        # close waited on TCP retries to the removed L1: the tier hung for minutes after
        # its last test (runs 7 and 8, docs/lab.md#nested). The kernel drops those sockets
        subprocess.run(
            ["ss", "-K", "dst", f"{ns.subnet}.0/24"], capture_output=True, timeout=10, check=False
        )


def reset_l1s(ns: Any) -> list[str]:
    """Between modules: every L1's agent stopped, every L2 domain destroyed and undefined
    (its VF goes back to the host: libvirt's managed hostdev). What was removed."""
    import libvirt  # type: ignore[import-untyped]

    from sova.lab.nested import stop_agent

    done: list[str] = []
    for n in range(1, ns.l1s + 1):
        if stop_agent(ns, n):
            done.append(f"agent in l1-{n}")
        conn = libvirt.open(ns.l1_uri(n))
        try:
            for dom in conn.listAllDomains(0):
                with contextlib.suppress(libvirt.libvirtError):
                    dom.destroy()
                with contextlib.suppress(libvirt.libvirtError):
                    dom.undefine()
                done.append(f"{dom.name()} on l1-{n}")
        finally:
            conn.close()
    return done


@contextlib.contextmanager
def module_lab(ns: Any) -> Iterator[Any]:
    """A module's use of the shared lab: L1s clean before and after it."""
    print(f"nested lab reset: {reset_l1s(ns)}")
    try:
        yield ns
    finally:
        print(f"nested lab reset: {reset_l1s(ns)}")


class StreamSink:
    """TCP server on this machine (the L0 end of the lab's segment): per connection from
    a guest, the bytes, the longest stretch without data and whether it ended (EOF or reset)
    before the sink was closed — a long-lived stream is lost when it ends early."""

    def __init__(self, addr: str, port: int) -> None:
        self.srv = socket.create_server((addr, port))
        self.srv.settimeout(0.5)
        self.conns: dict[str, dict[str, Any]] = {}
        self.stop = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.stop.is_set():
            try:
                c, (peer, _) = self.srv.accept()
            except TimeoutError:
                continue
            except OSError:  # closed by close()
                return
            rec: dict[str, Any] = {"bytes": 0, "gaps": [], "last": time.time(), "ended": None}
            self.conns[peer] = rec
            threading.Thread(target=self._read, args=(c, rec), daemon=True).start()

    def _read(self, c: socket.socket, rec: dict[str, Any]) -> None:
        c.settimeout(1.0)
        while not self.stop.is_set():
            try:
                data = c.recv(65536)
            except TimeoutError:
                continue
            except OSError as e:
                rec["ended"] = f"{time.time():.1f}: {e}"
                return
            if not data:
                rec["ended"] = f"{time.time():.1f}: EOF"
                return
            now = time.time()
            rec["gaps"].append((now - rec["last"], now))
            rec["last"] = now
            rec["bytes"] += len(data)
        c.close()

    def max_gap(self, peer: str, start: float, end: float) -> float:
        gaps = [g for g, t in self.conns[peer]["gaps"] if start <= t <= end + 30]
        return max(gaps, default=float("inf"))

    def close(self) -> None:
        self.stop.set()
        self.srv.close()


def holder(conn: Any, names: list[str]) -> str | None:
    from sova.driver.libvirt_xml import parse_domain

    held = [n for n in names if parse_domain(conn.lookupByName(n).XMLDesc(0)).sova_vf()]
    assert len(held) <= 1, f"one VF in the pool, held by {held}"
    return held[0] if held else None


def guest_sh(ga: Any, dom: Any, script: str) -> str:
    return str(ga.exec(dom, "/bin/sh", ["-c", script]).stdout)


def wait_guest_agent(ga: Any, dom: Any, timeout_s: float = 600.0) -> float:
    """Seconds until the guest agent answers (the L2 kernel is up: hot-plug needs pciehp).

    Only the guest agent's silence is waited for: a domain that stopped running or an L1
    whose libvirt no longer answers fails at once, naming it (a run waited 600 s on a
    guest whose L1 had been killed under it: docs/lab.md#nested)."""
    import libvirt

    t0 = time.monotonic()
    while True:
        try:
            ga.command(dom, "guest-ping")
            return time.monotonic() - t0
        except Exception as e:
            try:
                running = dom.state()[0] == libvirt.VIR_DOMAIN_RUNNING
            except libvirt.libvirtError as lost:
                raise AssertionError(f"{dom.name()}: its L1's libvirt is gone: {lost}") from e
            assert running, f"{dom.name()} is not running (state {dom.state()}): {e}"
            assert time.monotonic() - t0 < timeout_s, f"no guest agent after {timeout_s:g} s"
            time.sleep(1)


def wait_guest_agents(ga: Any, doms: dict[str, Any], timeout_s: float = 600.0) -> dict[str, float]:
    """Every guest's guest agent up (they boot in parallel): seconds each, from now."""
    t0 = time.monotonic()
    up: dict[str, float] = {}
    for name, dom in doms.items():
        wait_guest_agent(ga, dom, max(1.0, timeout_s - (time.monotonic() - t0)))
        up[name] = round(time.monotonic() - t0, 1)
    return up


def wait_agent_started(log: Path, timeout_s: float = 600.0) -> float:
    """Seconds until the agent inside L1 logs its start (it unpacks its code and imports
    it under TCG: 3.5 min measured with two busy guests beside it)."""
    t0 = time.monotonic()
    while "sova agent for" not in (log.read_text(errors="replace") if log.exists() else ""):
        assert time.monotonic() - t0 < timeout_s, f"the agent in L1 not started: {log}"
        time.sleep(0.5)
    return time.monotonic() - t0
