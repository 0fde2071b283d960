"""What ``sova agent --driver libvirt --connect URI --dry-run`` prints.

The dry run is the operator's first contact with a real host, so it must be safe by
construction, not by care: the connection is opened read-only (libvirt itself refuses any
change), capability probing that would write to the NIC is skipped, and the planner is given
a driver whose ``submit`` raises. What it shows is what the agent would act on: the PF and
its VFs, each VM with its failover readiness and the VF it holds, the probed capabilities
with their reasons, and the planned actions.

Plain text, no rich: the agent's install carries no terminal-formatting library (a
hypervisor's ``sova-sriov[agent]``), and these few aligned columns need none.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import IO, Any

from sova.driver.base import Capabilities, Driver, DriverError, OpStatus
from sova.model import Action, HostSample, Inventory


class _NoSubmitDriver:
    """The driver as the planner sees it in a dry run: reads pass through, writes raise."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.attempted: list[Action] = []

    def now(self) -> float:
        return float(self._inner.now())

    def capabilities(self) -> Capabilities:
        caps: Capabilities = self._inner.capabilities()
        return caps

    def inventory(self) -> Inventory:
        inv: Inventory = self._inner.inventory()
        return inv

    def sample(self) -> HostSample:
        s: HostSample = self._inner.sample()
        return s

    def submit(self, action: Action) -> str:
        self.attempted.append(action)
        raise DriverError(f"dry run: refusing to submit {action!r}")

    def poll(self, op_id: str) -> OpStatus:
        raise DriverError("dry run: no operations exist")


def _fmt_bps(bps: float | None) -> str:
    if not bps:
        return "-"
    if bps >= 1e9:
        return f"{bps / 1e9:.2f} Gbit/s"
    return f"{bps / 1e6:.0f} Mbit/s"


def _action_text(a: Action) -> str:
    fields = {k: v for k, v in vars(a).items() if k != "vm" and v is not None}
    args = ", ".join(
        f"{k}={_fmt_bps(v) if k.endswith('bps') and isinstance(v, float | int) else v}"
        for k, v in fields.items()
    )
    return f"{a.kind:<12} {a.vm}" + (f"  ({args})" if args else "")


def _table(title: str, header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """``rows`` under ``header`` in columns padded to the widest cell, with a title line."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()

    return "\n".join(
        [title, line(header), line(["-" * w for w in widths])] + [line(r) for r in rows]
    )


def render(
    out: IO[str],
    caps: Capabilities,
    inv: Inventory,
    reports: list[Any],
    pf: Any,
    actions: Sequence[Action | tuple[Action, str]],
) -> None:
    def say(text: str = "") -> None:
        print(text, file=out)

    host = inv.host
    say(f"Host {host.name}: {host.cores} cores, {host.memory_bytes / 2**30:.1f} GiB memory")
    say(
        f"PF {pf.name or '(none)'} {pf.pci}  link {_fmt_bps(host.nic.capacity_bps)}  "
        f"VFs enabled {caps.vf_total} (max {pf.total_vfs}), Sova pool {caps.vf_pool}"
    )
    holders = {r.vf_index: r for r in reports if r.vf_index is not None}
    vf_rows = []
    for idx, pci in sorted(pf.vfs.items()):
        r = holders.get(idx)
        vf_rows.append([str(idx), pci, f"{r.name} ({r.vf_kind})" if r else "free"])
    say()
    say(_table("VFs", ["index", "PCI", "held by"], vf_rows))

    by_name = {r.name: r for r in reports}
    vm_rows = []
    for name, st in sorted(inv.vms.items()):
        r = by_name.get(name)
        nic = f"vf {st.vf_index}" if st.vf_index is not None else "virtio"
        vm_rows.append(
            [
                name,
                "running" if st.running else "shut off",
                str(st.vm.vcpus),
                f"{st.vm.memory_bytes / 2**20:.0f} MiB",
                nic,
                "ready" if st.failover_ready else "NOT READY",
                r.reason if r else "",
            ]
        )
    say()
    say(_table("VMs", ["VM", "state", "vCPUs", "memory", "NIC", "failover", "notes"], vm_rows))

    say()
    say("Capabilities")
    nc = caps.nic
    say(
        f"  max_tx_rate: {'yes' if nc.max_rate else 'no'}   "
        f"min_tx_rate: {'yes' if nc.min_rate else 'no'}   "
        f"VF counters: {'yes' if nc.vf_stats else 'no'}   "
        f"migration: {'yes' if caps.can_migrate else 'no'}   "
        f"guest agent: {'yes' if caps.guest_agent else 'no'}"
    )
    for n in caps.notes:
        say(f"  - {n}")

    say(f"Planned actions ({len(actions)}, none submitted: dry run)")
    for item in actions:
        # A planner may attach a note, e.g. the executor's refusal of an unsafe action.
        a, note = item if isinstance(item, tuple) else (item, "")
        say(f"  {_action_text(a)}" + (f"  ({note})" if note else ""))
    if not actions:
        say("  (none)")


def dry_run(
    connect_uri: str,
    plan: Callable[[Driver], Sequence[Action | tuple[Action, str]]] | None,
    out: IO[str],
    **driver_options: Any,
) -> int:
    """Print what the agent sees on ``connect_uri`` and what it would do; change nothing.

    Returns 0 on success, 2 when the host cannot be read, 3 when the planner failed or
    tried to submit an action itself.
    """
    from sova.driver.libvirt_driver import LibvirtDriver

    try:
        drv = LibvirtDriver.open(connect_uri, read_only=True, **driver_options)
    except DriverError as e:
        print(f"error: {e}", file=out)
        return 2
    try:
        try:
            caps = drv.capabilities()
            inv = drv.inventory()
            reports = drv.vm_reports()
            pf = drv.pf_view()
        except Exception as e:
            print(f"error reading {connect_uri}: {e}", file=out)
            return 2
        actions: list[Action | tuple[Action, str]] = []
        code = 0
        if plan is not None:
            guard = _NoSubmitDriver(drv)
            try:
                actions = list(plan(guard))
            except Exception as e:
                print(f"planner failed: {e}", file=out)
                code = 3
            if guard.attempted:
                print(
                    f"planner tried to submit {len(guard.attempted)} action(s) itself; refused",
                    file=out,
                )
                actions.extend(guard.attempted)
                code = 3
        render(out, caps, inv, reports, pf, actions)
        return code
    finally:
        drv.close()
