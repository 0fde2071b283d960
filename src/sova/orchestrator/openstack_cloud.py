"""What Nova and Neutron say, as the ``openstack`` orchestrator reads it
(:mod:`sova.orchestrator.openstack`): the marks of Sova's ports, Nova's migration and task
states, the port Sova asks for, and an operation's record while it runs.

Apart from the actuator and its operations (``openstack_ops.py``) because both read
these, and the OpenStack tiers' tests build ports and servers from them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sova.driver.base import OpState
from sova.model import Action

PORT_PREFIX = "sova-vf-"  # for people reading port lists; the mark is SOVA_TAG
# The mark of a port Sova made. A Neutron tag, not the name (anyone may name a port so), not
# device_owner (Nova rewrites it to compute:<zone> on attach) and not binding:profile (Nova
# owns that dict, and writing it needs Neutron's service role): docs/openstack.md#who-owns-a-port.
SOVA_TAG = "sova-vf"
# vnic types whose port takes one VF of the host from Nova's PCI tracker (direct-physical
# takes a whole PF, which then has no VFs to count).
VF_VNIC_TYPES = frozenset({"direct", "macvtap", "virtio-forwarder", "remote-managed", "vdpa"})
PORT_DESCRIPTION = "Sova fast path (SR-IOV VF); created and deleted by sova"
MIGRATION_DONE = frozenset({"completed", "done"})
MIGRATION_FAILED = frozenset({"failed", "error", "cancelled", "aborted"})
# An evacuation the source host has not cleaned up yet (Nova's own filter for the evacuated
# guests its compute service destroys at start-up): "done" waits for the source to come back.
EVACUATION_UNSETTLED = frozenset({"accepted", "pre-migrating", "done"})
# Nova's messages when the VF pool of the host is exhausted (InterfaceAttachPciClaimFailed,
# PciDeviceRequestFailed): a normal outcome of the VF scheduler racing Nova's tracker.
PCI_EXHAUSTED = ("claim pci device", "pci device request", "pcidevicerequestfailed")


def is_vf_exhausted(message: str) -> bool:
    low = message.lower()
    return any(s in low for s in PCI_EXHAUSTED)


class OpFailed(Exception):
    """An operation refused or failed: its message is the operation's reported detail."""


@dataclass
class Op:
    """One operation of the actuator, from its submission until its end is polled."""

    op_id: str
    action: Action
    state: OpState = OpState.PENDING
    detail: str = "queued"


def vf_port_attrs(
    vm: str,
    network_id: str,
    project_id: str | None,
    addresses: Iterable[str] = (),
    host: str | None = None,
) -> dict[str, Any]:
    """The Neutron port Sova asks for as a VM's fast path (openstacksdk attribute names).

    ``addresses`` are the backup port's IPs: the guest's bond carries them over whichever
    slave is active (``fail_over_mac=active``: the VF sends with its own MAC), so the port
    says it may carry them. Port security stays on: the VF's MAC anti-spoofing holds. The
    port gets no fixed IP of its own (``fixed_ips=[]``): the guest never uses one, and a spare
    address per VF would be taken from the tenant's subnet and quota for nothing.
    """
    attrs: dict[str, Any] = {
        "network_id": network_id,
        "binding_vnic_type": "direct",
        "name": PORT_PREFIX + vm,
        # The host says which agent sweeps the port if it is ever left unbound.
        "description": PORT_DESCRIPTION if host is None else f"{PORT_DESCRIPTION} on {host}",
        "fixed_ips": [],
    }
    pairs = [{"ip_address": ip} for ip in addresses]
    if pairs:
        attrs["allowed_address_pairs"] = pairs
    if project_id:
        attrs["project_id"] = project_id
    return attrs


def port_addresses(port: Any) -> list[str]:
    return [str(ip["ip_address"]) for ip in (getattr(port, "fixed_ips", None) or [])]


def is_sova_port(port: Any) -> bool:
    """A port Sova made: ``direct`` and tagged :data:`SOVA_TAG` (its name alone proves nothing)."""
    return SOVA_TAG in (getattr(port, "tags", None) or ()) and port.binding_vnic_type == "direct"


def bound_by(port: Any) -> frozenset[str]:
    """The ML2 mechanism drivers that bound ``port``: Neutron's ``binding:vif_details``
    ``bound_drivers``, one per binding level (empty where the reply has none)."""
    details = getattr(port, "binding_vif_details", None)
    drivers = details.get("bound_drivers") if isinstance(details, dict) else None
    return frozenset(str(d) for d in drivers.values()) if isinstance(drivers, dict) else frozenset()


def split_vf_ports(
    bound: Iterable[Any],
) -> tuple[dict[str, list[Any]], dict[str, list[Any]]]:
    """The VF ports among ``bound`` (a host's), by server: Sova's, and everyone else's."""
    ours: dict[str, list[Any]] = {}
    theirs: dict[str, list[Any]] = {}
    for p in bound:
        if not p.device_id or p.binding_vnic_type not in VF_VNIC_TYPES:
            continue
        (ours if is_sova_port(p) else theirs).setdefault(p.device_id, []).append(p)
    return ours, theirs


def host_of(server: Any) -> str | None:
    host = getattr(server, "compute_host", None)
    return None if host is None else str(host)


def nova_busy(server: Any) -> str | None:
    """What Nova is doing with ``server`` when it is not settled (a task state, or a status
    other than ``ACTIVE``), or None. Nova sets the task state with a compare-and-swap in every
    API that changes a server (resize, migrations, evacuate, shelve, rebuild, reboot,
    interface attach/detach, ...), so it is the one lock Nova, Watcher's applier (which checks
    the status) and Sova all honour."""
    task = task_state(server)
    if task is not None:
        return f"task_state {task}"
    status = getattr(server, "status", None)
    if status is not None and str(status).upper() != "ACTIVE":
        return f"status {status}"
    return None


def launched_at(server: Any) -> str | None:
    at = getattr(server, "launched_at", None)
    return None if at is None else str(at)


def port_made_for(port: Any) -> str | None:
    """The host a Sova port was made for (the end of its description), if it says."""
    desc = str(getattr(port, "description", "") or "")
    head, sep, host = desc.rpartition(" on ")
    return host if sep and head == PORT_DESCRIPTION and host else None


def task_state(server: Any) -> str | None:
    task = getattr(server, "task_state", None)
    return None if task is None else str(task)


def match_server(servers: Iterable[Any], vm: str) -> Any:
    """The server a host-side VM name means: its libvirt domain name, its UUID or its name."""
    servers = list(servers)
    for attr in ("instance_name", "id", "name"):
        hits = [s for s in servers if getattr(s, attr, None) == vm]
        if len(hits) == 1:
            return hits[0]
    return None
