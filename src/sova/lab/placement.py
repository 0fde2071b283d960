"""Where the lab's guests start: every run begins with them on HV1 holding no fast NIC.

Setup, not experiment: a guest an earlier run (or test) left on HV2 is migrated back, and
fast NICs left plugged are unplugged, through the production driver.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from sova.driver.libvirt_driver import LibvirtDriver
from sova.lab.lab import connect
from sova.lab.scenario import LabScenario
from sova.lab.settings import LabSettings
from sova.lab.sova_procs import libvirt_section
from sova.model import DetachVF, Migrate, NicKind

SOURCE = "HV1"
TARGET = "HV2"


class PlacementError(RuntimeError):
    pass


def unplug_all(s: LabSettings, scn: LabScenario, say: Callable[[str], None]) -> None:
    """Start clean: no fast NIC held on either host (a previous run may have left some)."""
    for host in s.hosts:
        opts = libvirt_section(s, scn, host)
        opts["lab_nic_taps"] = tuple(opts["lab_nic_taps"])
        drv = LibvirtDriver.open(s.uri(host), **opts)
        try:
            for g, vm in drv.inventory().vms.items():
                if vm.nic is NicKind.VF:
                    op = drv.submit(DetachVF(g))
                    deadline = time.monotonic() + 60
                    while not drv.poll(op).done and time.monotonic() < deadline:
                        time.sleep(0.2)
                    say(f"{host}: unplugged {g}'s fast NIC left by an earlier run")
        finally:
            drv.close()


def gather_on_source(
    s: LabSettings, scn: LabScenario, need: set[str], say: Callable[[str], None]
) -> None:
    """Setup, not the experiment: a guest an earlier run (or test) left on HV2 is migrated
    back to HV1 first, so every run starts from the same placement."""
    conn = connect(s, TARGET)
    try:
        away = sorted(need & {d.name() for d in conn.listAllDomains(1)})
    finally:
        conn.close()
    if not away:
        return
    opts = libvirt_section(s, scn, TARGET)
    opts["lab_nic_taps"] = tuple(opts["lab_nic_taps"])
    drv = LibvirtDriver.open(s.uri(TARGET), **opts)
    try:
        for g in away:
            op = drv.submit(Migrate(g, SOURCE))
            deadline = time.monotonic() + 300
            while not (st := drv.poll(op)).done:
                if time.monotonic() > deadline:
                    raise PlacementError(
                        f"setup: {g} did not migrate back to {SOURCE}: {st.detail}"
                    )
                time.sleep(0.5)
            if st.state.value != "succeeded":
                raise PlacementError(f"setup: {g} could not migrate back to {SOURCE}: {st.detail}")
            say(f"setup: {g} migrated back from {TARGET} to {SOURCE}")
    finally:
        drv.close()
