"""The ``openstack`` orchestrator: Sova's decisions performed through Nova, Neutron and Placement.

On an OpenStack cloud Nova owns where a server runs (its database, the scheduler, Placement
allocations, the PCI tracker) and Neutron owns the ports and their bindings. A migration
done with ``migrateToURI3`` or a VF hot-plugged through libvirt behind their backs leaves
all of them wrong, so in this mode:

* **migration** is ``POST /servers/{id}/action {"os-migrateLive": {"host": dst}}`` at
  microversion >= 2.30, where Nova's scheduler still *validates* the host Sova chose (never
  ``force``: that would skip Placement and the PCI filter). It is followed through Nova's
  migration records (``GET /os-migrations?instance_uuid=``) until ``completed`` or
  ``failed``/``error``/``cancelled``; past ``migration_timeout_s`` the migration is aborted
  and followed until Nova's record ends (``cancelled``: reported failed; ``completed``:
  the migration won the race, reported done; still running ``abort_timeout_s`` later:
  reported failed as an unconfirmed abort). Nova rolls a failed live migration back to the source itself, so
  "failed" always means "still running on the source on virtio", as with libvirt.
* **the fast path** is a Neutron port with ``binding:vnic_type=direct`` created in the
  server's project on the VF network and attached with Nova's interface API; Nova claims
  the VF in its PCI tracker and Neutron binds it (``hw_veb``). Revoking detaches the
  interface, waits until Nova has released it, and deletes the port. When the host has no
  VF left, Nova refuses the claim: that is reported as a failed operation whose detail
  starts with ``no VF left`` and the port Sova created for it is deleted again.
* **ownership**: Sova's ports carry the Neutron tag ``sova-vf`` (:data:`SOVA_TAG`); only a
  tagged ``direct`` port is ever detached or deleted, or counted as a VM's Sova VF. Tenants'
  own VF ports on the host are left alone and shrink Sova's pool instead
  (docs/openstack.md#who-owns-a-port).
* **inventory**: which servers Nova runs on this host, which of them hold a Sova port,
  how many VFs tenants' own ports hold, whether Nova says a server is migrating, and
  the VF total Placement holds for this host, reconciled with what the host senses.
* **Nova's own operations** (resize, cold and live migration by anyone else, evacuate,
  shelve/unshelve, rebuild, reboot, ...): while Nova says a server is not ``ACTIVE`` or has a
  task state, Sova stands back (the VM is withheld from the agent, every operation on it is
  refused) unless the task is Sova's own; a Sova port the server holds after such an
  operation is given back (bond on virtio first), and the agent grants a VF again when the VM
  earns it (docs/openstack.md#novas-own-operations).
* **rates** (VF max rate, guest limits) stay host-local: they go to the host driver passed
  as ``fallback``, because neither Nova nor Neutron sets a VF rate per period.

Credentials come from a ``clouds.yaml`` entry (:func:`connect`); nothing is ever written to
Nova's or Neutron's database: every change is an API call their policies authorise.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from sova.driver.base import Driver, DriverError, OpState, OpStatus
from sova.model import (
    Action,
    AttachVF,
    DetachVF,
    Inventory,
    Migrate,
    NicKind,
    SetGuestRateLimit,
    SetVFRate,
    VMState,
)
from sova.orchestrator.base import CloudConfigError, FailoverHooks
from sova.orchestrator.openstack_view import CloudView

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
# Nova's messages when the VF pool of the host is exhausted (InterfaceAttachPciClaimFailed,
# PciDeviceRequestFailed): a normal outcome of the VF scheduler racing Nova's tracker.
_PCI_EXHAUSTED = ("claim pci device", "pci device request", "pcidevicerequestfailed")


def connect(cloud: str, api_timeout_s: float = 30.0) -> Any:
    """An openstacksdk connection for the clouds.yaml entry ``cloud``."""
    try:
        import openstack
        from openstack import exceptions as sdk_exc
    except ImportError as exc:
        raise CloudConfigError(
            f"orchestrator = 'openstack' needs openstacksdk ({exc}); pip install 'sova-sriov[openstack]'"
        ) from None
    try:
        return openstack.connect(cloud=cloud, api_timeout=api_timeout_s)
    except sdk_exc.ConfigException as exc:
        raise CloudConfigError(f"cloud = {cloud!r}: {exc}") from None


def _sdk_errors() -> tuple[type[Exception], ...]:
    """What the client libraries raise when a cloud refuses or cannot be reached: the SDK's
    own errors and keystoneauth's (``DiscoveryFailure``, ``ConnectFailure``, timeouts), which
    are not the SDK's subclasses."""
    try:
        from keystoneauth1 import exceptions as ksa_exc

        from openstack import exceptions as sdk_exc
    except ImportError:
        return ()
    return (sdk_exc.SDKException, ksa_exc.ClientException)


def _timeout_errors() -> tuple[type[Exception], ...]:
    """keystoneauth's error for a request that got no answer within ``api_timeout_s`` (it
    maps every ``requests`` timeout, connect or read, to ``ConnectTimeout``)."""
    try:
        from keystoneauth1 import exceptions as ksa_exc
    except ImportError:
        return ()
    return (ksa_exc.ConnectTimeout,)


def is_vf_exhausted(message: str) -> bool:
    low = message.lower()
    return any(s in low for s in _PCI_EXHAUSTED)


class _OpFailed(Exception):
    pass


@dataclass
class _Op:
    op_id: str
    action: Action
    state: OpState = OpState.PENDING
    detail: str = "queued"


def _spawn_thread(fn: Callable[[], None]) -> None:
    threading.Thread(target=fn, daemon=True, name="sova-openstack-op").start()


@dataclass
class OpenStackActuator:
    """Acts for one hypervisor (``host``, as Nova's compute service names it).

    ``conn`` is an openstacksdk ``Connection`` (or anything with the same ``compute``,
    ``network`` and ``placement`` proxies). ``spawn`` runs one operation to its end; the
    default is a daemon thread, so :meth:`submit` returns at once. ``clock``/``sleep`` are
    injectable so that tests control time.
    """

    conn: Any
    host: str
    network: str | None = None
    vf_resource_class: str | None = None
    migration_timeout_s: float = 600.0
    detach_timeout_s: float = 60.0
    abort_timeout_s: float = 60.0
    poll_s: float = 1.0
    fallback: Driver | None = None
    errors: tuple[type[Exception], ...] = field(default_factory=_sdk_errors)
    timeouts: tuple[type[Exception], ...] = field(default_factory=_timeout_errors)
    spawn: Callable[[Callable[[], None]], None] = _spawn_thread
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    name: str = "openstack"
    discrepancies: list[str] = field(default_factory=list)
    _ops: dict[str, _Op] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _seq: Iterator[int] = field(default_factory=itertools.count)
    _servers: dict[str, str] = field(default_factory=dict)  # sova VM name -> server id
    # Sova ports this actuator created and has not yet attached: unbound, but not leaked.
    _creating: set[str] = field(default_factory=set)
    sweep_every: int = 30  # inventory periods between two looks for leaked ports (1: each)
    _periods: int = 0
    # VMs with an operation of this actuator in flight: Nova's task state on them is Sova's.
    _acting: set[str] = field(default_factory=set)
    # Servers Nova operated on (someone else's task) while they held a Sova port, and the
    # launch time Nova gave each server when it was seen with one: either, changed, means
    # the guest's bond may no longer hold the VF, so the port is given back.
    _disturbed: set[str] = field(default_factory=set)
    _launched: dict[str, str | None] = field(default_factory=dict)
    # Give-backs of such ports, one at a time per VM, and the failures of each VM's.
    _retiring: dict[str, _Op] = field(default_factory=dict)
    _retire_failures: dict[str, int] = field(default_factory=dict)
    retire_tries: int = 3  # then the port is left to the agent (a holder like any other)
    # Change-based listings (docs/openstack.md#api-calls-per-hypervisor); None: both
    # listings made at every inventory.
    view: CloudView | None = None

    def __post_init__(self) -> None:
        # Anything the SDK or the transport raises is a reported failure, never a crash.
        self._errors: tuple[type[Exception], ...] = (*self.errors, OSError, ValueError)

    # ------------------------------------------------------------------ Actuator

    def submit(self, action: Action) -> str:
        if isinstance(action, SetVFRate | SetGuestRateLimit):
            if self.fallback is None:
                raise DriverError(
                    f"{action.kind} has no OpenStack API; it needs the host driver as fallback"
                )
            return "host:" + self.fallback.submit(action)
        op = _Op(f"os:{action.kind}:{action.vm}:{next(self._seq)}", action)
        with self._lock:
            self._ops[op.op_id] = op
            self._acting.add(action.vm)
        self.spawn(lambda: self._run(op))
        return op.op_id

    def poll(self, op_id: str) -> OpStatus:
        if op_id.startswith("host:"):
            assert self.fallback is not None
            st = self.fallback.poll(op_id.removeprefix("host:"))
            return OpStatus(op_id, st.state, st.detail)
        with self._lock:
            op = self._ops.get(op_id)
            if op is None:
                return OpStatus(op_id, OpState.FAILED, "unknown operation id")
            if op.state is not OpState.PENDING:
                del self._ops[op_id]  # reported once; the executor forgets it too
            return OpStatus(op_id, op.state, op.detail)

    def reconcile(self, sensed: Inventory) -> Inventory:
        """The host's sensed inventory, corrected by Nova, Neutron and Placement.

        Nova decides which sensed VMs are servers of this host (a VM Nova does not place
        here is kept but not ``running``, so no VF is ever granted through a server Nova
        cannot act on); Neutron decides which hold a Sova VF port; Placement caps the pool.
        """
        try:
            if self.view is None:
                servers = self._servers_here()
                ports, theirs = self._vf_ports_by_server()
            else:
                servers, bound = self.view.look(sensed, self.clock())
                ports, theirs = split_vf_ports(bound)
            pool = self._placement_vf_pool()
        except self._errors as exc:
            raise DriverError(f"OpenStack inventory unavailable: {exc}") from exc
        notes: list[str] = self._retired()
        vms: dict[str, VMState] = {}
        withheld = 0  # Sova VFs held by VMs withheld from the agent this period
        for name, state in sensed.vms.items():
            server = _match(servers, name)
            if server is None:
                notes.append(f"{name}: sensed on {self.host} but Nova places no such server here")
                vms[name] = replace(state, running=False)
                continue
            self._servers[name] = server.id
            held = ports.get(server.id, [])
            stand_back = self._stand_back(name, server, held)
            if stand_back is not None:
                notes.append(stand_back)
                withheld += len(held)
                continue
            has_port = bool(held)
            migrating = state.migrating or _task(server) in ("migrating",)
            if theirs.get(server.id) and not has_port:
                # The tenant's own VF: not Sova's to revoke (a revoke would find nothing of
                # Sova's to take back), and not a VM to give a second VF to.
                ids = ", ".join(str(p.id) for p in theirs[server.id])
                notes.append(f"{name}: holds its own VF port(s) {ids}, not Sova's: left alone")
                vms[name] = replace(
                    state, nic=NicKind.VIRTIO, failover_ready=False, migrating=migrating
                )
                continue
            if has_port and state.nic is not NicKind.VF:
                notes.append(f"{name}: Neutron has a direct port bound, the host senses none")
            if state.nic is NicKind.VF and not has_port:
                notes.append(f"{name}: the host senses a VF that no Sova port accounts for")
            vms[name] = replace(
                state,
                nic=NicKind.VF if has_port or state.nic is NicKind.VF else NicKind.VIRTIO,
                migrating=migrating,
            )
        host = sensed.host
        total = host.nic.vf_pool
        if pool is not None and pool < total:
            notes.append(f"Placement holds {pool} VFs for {self.host}, the host offers {total}")
            total = pool
        if withheld:
            # The VFs of VMs Sova stands back from are still taken: not free to grant.
            notes.append(f"{withheld} Sova VF(s) held by VMs Sova stands back from")
            total = max(0, total - withheld)
        taken = sum(len(ps) for ps in theirs.values())
        if taken:
            # Nova's PCI tracker hands tenants' VFs out of the same PF: counting them as
            # Sova's would make every grant beyond what is left fail with "no VF left".
            notes.append(
                f"tenants' own ports hold {taken} of {total} VFs on {self.host}: "
                f"Sova's pool is {max(0, total - taken)}"
            )
            total = max(0, total - taken)
        if total != host.nic.vf_pool:
            host = replace(host, nic=replace(host.nic, vf_pool=total))
        if (
            self._periods % self.sweep_every == 0
            if self.view is None
            else self.view.sweep_due(self.clock())
        ):
            try:
                for swept in self.sweep_leaked_ports():
                    notes.append(f"leaked Sova port {swept} deleted")
            except self._errors as exc:  # the inventory stands; the sweep is retried later
                notes.append(f"leaked-port sweep unavailable: {exc}")
        self._periods += 1
        self.discrepancies = notes
        return Inventory(host, vms)

    def _stand_back(self, name: str, server: Any, held: list[Any]) -> str | None:
        """Why the agent must leave ``name`` alone this period (it is withheld from the
        inventory), or None. Nova operating on the server (any task state or status but
        ``ACTIVE``, unless the task is this actuator's own) is one reason; a Sova port the
        server holds after such an operation, given back now, is the other."""
        busy = nova_busy(server)
        if name in self._retiring:
            return f"{name}: its Sova VF port is being given back: Sova stands back"
        if busy is not None and name not in self._acting:
            if held:
                self._disturbed.add(str(server.id))
                self._retire_failures.pop(name, None)  # a new operation: a new give-back
            return f"{name}: Nova is operating on it ({busy}): Sova stands back"
        if not held:
            self._disturbed.discard(str(server.id))
            self._launched.pop(str(server.id), None)
            self._retire_failures.pop(name, None)
            return None
        if name in self._acting or self._retire_failures.get(name, 0) >= self.retire_tries:
            return None
        why = self._carried(server, held)
        if why is None:
            return None
        op = _Op(f"os:retire:{name}:{next(self._seq)}", DetachVF(name))
        with self._lock:
            self._retiring[name] = op
            self._acting.add(name)
        self.spawn(lambda: self._run(op))
        ids = ", ".join(str(p.id) for p in held)
        return f"{name}: Sova VF port(s) {ids} {why}: given back, the bond on virtio first"

    def _carried(self, server: Any, held: list[Any]) -> str | None:
        """Why the Sova ports ``held`` by ``server`` (settled, on this host) can no longer be
        trusted as its fast path, or None: the guest's bond enslaved the VF when Sova
        attached it, and a Nova operation since then (a move, a re-spawn) re-plugged it
        without the bond, or left it on a host whose pool it was never granted from."""
        sid = str(server.id)
        if sid in self._disturbed:
            return "outlived an operation of Nova's on the server"
        for p in held:
            made_for = _made_for(p)
            if made_for is not None and made_for != self.host:
                return f"made for {made_for}, brought here by Nova"
        launched = _launched_at(server)
        seen = self._launched.setdefault(sid, launched)
        if seen != launched:
            return f"outlived Nova re-spawning the server (launched {seen} then {launched})"
        return None

    def _retired(self) -> list[str]:
        """The ends of the give-backs since the last period, as notes."""
        notes: list[str] = []
        with self._lock:
            ended = [(vm, op) for vm, op in self._retiring.items() if op.state is not OpState.PENDING]
            for vm, _ in ended:
                del self._retiring[vm]
        for vm, op in ended:
            if op.state is OpState.SUCCEEDED:
                self._retire_failures.pop(vm, None)
                notes.append(f"{vm}: given back: {op.detail}")
                continue
            # Bounded: a guest whose bond never confirms keeps its VF, as any holder would.
            tries = self._retire_failures[vm] = self._retire_failures.get(vm, 0) + 1
            left = self.retire_tries - tries
            then = f"{left} more tries" if left > 0 else "left to the agent as a VF holder"
            notes.append(f"{vm}: give-back failed ({op.detail}); {then}")
        return notes

    def sweep_leaked_ports(self) -> list[str]:
        """Delete the Sova ports of this host nothing uses, and return their ids.

        Leaked is a port with Sova's tag that is bound here to a server Nova no longer has,
        or unbound (Nova unbinds, and keeps, the ports it did not create when it deletes a
        server, shelves it or the attach failed half-way) and made for this host (its
        description) and not one this actuator is attaching right now.
        """
        swept: list[str] = []
        for p in self.conn.network.ports(tags=SOVA_TAG):
            if not is_sova_port(p) or p.id in self._creating:
                continue
            if p.device_id:
                if getattr(p, "binding_host_id", None) != self.host:
                    continue
                if self.view is not None and self.view.has_server(str(p.device_id)):
                    continue  # Nova listed it on this host since the last resync
                server = self.conn.compute.find_server(
                    p.device_id, ignore_missing=True, all_projects=True
                )
                if server is not None:
                    continue
            elif not str(getattr(p, "description", "") or "").endswith(f" on {self.host}"):
                continue
            self.conn.network.delete_port(p, ignore_missing=True)
            swept.append(str(p.id))
        return swept

    # ------------------------------------------------------------------ cloud views

    def _servers_here(self) -> list[Any]:
        return list(
            self.conn.compute.servers(details=True, all_projects=True, compute_host=self.host)
        )

    def _vf_ports_by_server(self) -> tuple[dict[str, list[Any]], dict[str, list[Any]]]:
        """The VF ports bound to this host, by server: Sova's, and everyone else's."""
        return split_vf_ports(self.conn.network.ports(**{"binding:host_id": self.host}))

    def _placement_vf_pool(self) -> int | None:
        if self.vf_resource_class is None:
            return None
        total = 0
        roots = list(self.conn.placement.resource_providers(name=self.host))
        for root in roots:
            for rp in self.conn.placement.resource_providers(in_tree=root.id):
                for inv in self.conn.placement.resource_provider_inventories(rp):
                    if inv.resource_class == self.vf_resource_class:
                        total += int(inv.total) - int(inv.reserved or 0)
        return total if roots else None

    def _settled(self, vm: str) -> Any:
        """The server ``vm``, refused while Nova operates on it: an attach, a detach or a
        migration would race Nova's own (which would refuse it anyway, or carry it along)."""
        server = self._server(vm)
        busy = nova_busy(server)
        if busy is not None:
            raise _OpFailed(f"Nova is operating on {vm} ({busy}): Sova stands back")
        return server

    def _server(self, vm: str) -> Any:
        sid = self._servers.get(vm)
        server = None
        if sid is not None:
            server = self.conn.compute.find_server(sid, ignore_missing=True, all_projects=True)
        if server is None:
            server = _match(self._servers_here(), vm)
        if server is None:
            raise _OpFailed(f"Nova knows no server {vm!r} on {self.host}")
        self._servers[vm] = server.id
        return server

    def _sova_ports(self, server: Any) -> list[Any]:
        return self._vf_ports(server)[0]

    def _vf_ports(self, server: Any) -> tuple[list[Any], list[Any]]:
        """The server's VF ports: Sova's, and its own (a tenant's)."""
        ours: list[Any] = []
        theirs: list[Any] = []
        for p in self.conn.network.ports(device_id=server.id):
            if p.binding_vnic_type in VF_VNIC_TYPES:
                (ours if is_sova_port(p) else theirs).append(p)
        return ours, theirs

    # ------------------------------------------------------------------ operations

    def _run(self, op: _Op) -> None:
        a = op.action
        try:
            if isinstance(a, Migrate):
                detail = self._migrate(op, a)
            elif isinstance(a, AttachVF):
                detail = self._attach(a)
            elif isinstance(a, DetachVF):
                detail = self._detach(a.vm)
            else:  # pragma: no cover - rates go to the fallback in submit()
                raise _OpFailed(f"unsupported action {a!r}")
            self._finish(op, OpState.SUCCEEDED, detail)
        except _OpFailed as exc:
            self._finish(op, OpState.FAILED, str(exc))
        except Exception as exc:  # reported through the op, never lost with the thread
            self._finish(op, OpState.FAILED, f"{type(exc).__name__}: {exc}")

    def _finish(self, op: _Op, state: OpState, detail: str) -> None:
        with self._lock:
            op.state, op.detail = state, detail
            self._acting.discard(op.action.vm)
        if self.view is not None:
            self.view.invalidate()  # the operation changed ports or servers

    def _progress(self, op: _Op, detail: str) -> None:
        with self._lock:
            op.detail = detail

    def _migrate(self, op: _Op, a: Migrate) -> str:
        # Someone else's live migration of it (Watcher's applier, an operator) holds Nova's
        # task state: never a second one.
        server = self._settled(a.vm)
        if _host_of(server) == a.dst_host:
            return f"{a.vm} already on {a.dst_host} (Nova)"
        if _host_of(server) != self.host:
            raise _OpFailed(f"Nova places {a.vm} on {_host_of(server)!r}, not {self.host!r}")
        if self._sova_ports(server):
            raise _OpFailed(f"not migrating {a.vm}: it still holds a Sova VF port")
        before = {m.id for m in self._migrations(server)}
        unanswered = ""  # why Nova's answer to the request is unknown, if it is
        try:
            # host + force=False: Nova's scheduler checks Sova's choice (Placement, PCI,
            # filters); the SDK refuses a host below microversion 2.30 without force.
            self.conn.compute.live_migrate_server(
                server, host=a.dst_host, force=False, block_migration="auto"
            )
        except ValueError as exc:
            raise _OpFailed(f"not migrating {a.vm}: {exc}") from exc
        except self.timeouts as exc:
            # Below microversion 2.34 Nova answers os-migrateLive only after the target's
            # pre-checks, which may outlast api_timeout_s while Nova carries on: the
            # migration record says what happened, the client's timeout alone says nothing.
            unanswered = f"; Nova's answer timed out ({exc}), followed by its records"
        except self._errors as exc:
            on = _host_of(self.conn.compute.get_server(server.id))
            raise _OpFailed(
                f"Nova refused to live-migrate {a.vm} to {a.dst_host}: {exc}; server on {on!r}"
            ) from exc
        start = self.clock()
        record: Any = None
        aborted_at: float | None = None  # when Nova accepted Sova's abort
        timed_out = f"timed out after {self.migration_timeout_s:g}s"
        while True:
            try:
                new = [m for m in self._migrations(server) if m.id not in before]
            except self._errors as exc:
                # A busy API that does not answer one poll has not failed the migration;
                # the timeouts below still bound how long it is followed.
                self._progress(op, f"migrating {a.vm} to {a.dst_host}: Nova unanswered: {exc}")
                new = []
            record = max(new, key=lambda m: m.id) if new else record
            status = (record.status or "").lower() if record is not None else "requested"
            self._progress(op, f"migrating {a.vm} to {a.dst_host}: Nova migration {status}")
            if status in MIGRATION_DONE:
                now_on = _host_of(self.conn.compute.get_server(server.id))
                if now_on != a.dst_host:
                    raise _OpFailed(
                        f"Nova migration {record.id} of {a.vm} completed but the server is on "
                        f"{now_on!r}, not {a.dst_host!r}"
                    )
                late = "" if aborted_at is None else f", {timed_out} but ended before the abort"
                return (
                    f"{a.vm} migrated to {a.dst_host} (Nova migration {record.id} "
                    f"{status}{late}){unanswered}"
                )
            if status in MIGRATION_FAILED:
                now_on = _host_of(self.conn.compute.get_server(server.id))
                why = "" if aborted_at is None else f" ({timed_out}, abort confirmed)"
                raise _OpFailed(
                    f"Nova migration {record.id} of {a.vm} to {a.dst_host} {status}{why}; "
                    f"server on {now_on!r} on virtio"
                )
            if record is None and self.clock() - start > self.poll_s * 30:
                # Nova's API accepted but conductor never created a record (e.g. the
                # scheduler refused before it): the server status says what happened.
                try:
                    now = self.conn.compute.get_server(server.id)
                except self._errors:
                    now = None  # unanswered: asked again at the next poll, within the timeouts
                if now is not None and _task(now) is None:
                    said = "did not answer" if unanswered else "accepted"
                    raise _OpFailed(
                        f"Nova {said} the live migration of {a.vm} and started none; "
                        f"server on {_host_of(now)!r} (check the instance action log)"
                    )
            if aborted_at is None and self.clock() - start > self.migration_timeout_s:
                if record is None:
                    raise _OpFailed(
                        f"migration of {a.vm} to {a.dst_host} {timed_out} (no migration "
                        "record); Nova keeps it on the source"
                    )
                try:
                    self.conn.compute.abort_server_migration(record.id, server.id)
                except self._errors as exc:
                    raise _OpFailed(
                        f"migration of {a.vm} to {a.dst_host} {timed_out} (abort refused: "
                        f"{exc}); Nova migration {record.id} {status}"
                    ) from exc
                # An abort is asynchronous in Nova: its outcome is the record's end
                # (cancelled, or completed when the migration won the race), followed above.
                aborted_at = self.clock()
            if aborted_at is not None and self.clock() - aborted_at > self.abort_timeout_s:
                raise _OpFailed(
                    f"migration of {a.vm} to {a.dst_host} {timed_out}; abort not confirmed: "
                    f"Nova migration {record.id} still {status} {self.abort_timeout_s:g}s later"
                )
            self.sleep(self.poll_s)

    def _migrations(self, server: Any) -> list[Any]:
        return list(
            self.conn.compute.migrations(server_id=server.id, migration_type="live-migration")
        )

    def _hooks(self) -> FailoverHooks | None:
        return self.fallback if isinstance(self.fallback, FailoverHooks) else None

    def _attach(self, a: AttachVF) -> str:
        server = self._settled(a.vm)
        if _host_of(server) != self.host:
            raise _OpFailed(f"Nova places {a.vm} on {_host_of(server)!r}, not {self.host!r}")
        held = self._sova_ports(server)
        if held:
            return f"{a.vm} already holds VF port {held[0].id}"
        network, backup = self._network_for(server)
        # The guest Sova's bond is set up in: a re-spawn after this shows as a new launch time.
        self._launched[str(server.id)] = _launched_at(server)
        self._disturbed.discard(str(server.id))
        port = self.conn.network.create_port(
            **vf_port_attrs(a.vm, network, server.project_id, _addresses(backup), self.host)
        )
        self._creating.add(port.id)
        try:
            return self._attach_port(a, server, port, network)
        finally:
            self._creating.discard(port.id)

    def _attach_port(self, a: AttachVF, server: Any, port: Any, network: str) -> str:
        # The mark goes on by its own call (PUT .../tags/sova-vf), before the attach, so an untagged
        # port of Sova's never reaches a server. Not in the create request: Neutron keeps a
        # create's tags only with ML2's extension driver tag_ports_during_bulk_creation (off
        # by default), and refuses the attribute where no tag plugin is loaded.
        if SOVA_TAG not in (getattr(port, "tags", None) or ()):
            try:
                port = self.conn.network.add_tag(port, SOVA_TAG) or port
            except self._errors as exc:
                self.conn.network.delete_port(port, ignore_missing=True)
                raise _OpFailed(
                    f"Neutron refused the {SOVA_TAG!r} tag on {a.vm}'s VF port: {exc}; port deleted"
                ) from exc
        try:
            self.conn.compute.create_server_interface(server, port_id=port.id)
        except self._errors as exc:
            # The port was ours and is useless now: never leave it behind.
            self.conn.network.delete_port(port, ignore_missing=True)
            if is_vf_exhausted(str(exc)):
                raise _OpFailed(f"no VF left on {self.host} for {a.vm}: {exc}") from exc
            raise _OpFailed(f"Nova refused to attach a VF port to {a.vm}: {exc}") from exc
        detail = f"{a.vm}: direct port {port.id} on network {network} attached"
        hooks = self._hooks()
        if hooks is None:
            return detail
        try:
            return f"{detail}; {hooks.to_fast(a.vm)}"
        except DriverError as exc:
            # A VF that carries nothing would be counted as the VM's fast path: give it back
            # (the backup is confirmed active first, as for any detach).
            give_back_errors: tuple[type[Exception], ...] = (_OpFailed, *self._errors)
            try:
                undone = f"given back ({self._detach(a.vm)})"
            except give_back_errors as exc2:
                undone = f"left attached, detach failed: {exc2}"
            raise _OpFailed(f"{detail} but not made active: {exc}; VF {undone}") from exc

    def _network_for(self, server: Any) -> tuple[str, Any]:
        """The VF network and the server's port on it (the bond's backup: same L2 segment).

        The VF must land where the VM's backup interface is, or the guest's bond would fail
        over between two networks; and it must be a VLAN or flat network, the only types
        Neutron's sriovnicswitch binds.
        """
        ports = [
            p
            for p in self.conn.network.ports(device_id=server.id)
            # The bond's backup is a virtio port; a VF port (Sova's or the tenant's) is not.
            if (p.binding_vnic_type or "normal") == "normal"
        ]
        backup, net = self._backup_port(server, ports)
        if backup is None:
            where = f"network {self.network!r}" if self.network else "any network"
            raise _OpFailed(
                f"{server.name} has no port on {where} to back the VF up (the guest's bond "
                "needs its virtio port on the VF's network)"
            )
        network_id = str(backup.network_id)
        net = net if net is not None else self.conn.network.get_network(network_id)
        kind = getattr(net, "provider_network_type", None)
        if kind is not None and kind not in ("vlan", "flat"):
            raise _OpFailed(
                f"network {network_id} of {server.name} is {kind!r}: sriovnicswitch binds only "
                "vlan and flat networks (set [openstack] network to a provider network)"
            )
        return network_id, backup

    def _backup_port(self, server: Any, ports: list[Any]) -> tuple[Any, Any]:
        """The server's virtio port on the configured network (its id, or its name among the
        networks of the server's own ports: a name looked up cloud-wide is ambiguous for an
        admin, who sees every project's networks), or its first one; and that network if it
        was read."""
        if self.network is None:
            return (ports[0] if ports else None), None
        by_id = [p for p in ports if str(p.network_id) == self.network]
        if by_id:
            return by_id[0], None
        named: dict[str, tuple[Any, Any]] = {}
        for p in ports:
            net = self.conn.network.get_network(str(p.network_id))
            if getattr(net, "name", None) == self.network:
                named.setdefault(str(net.id), (p, net))
        if len(named) > 1:
            raise _OpFailed(
                f"openstack.network = {self.network!r}: {server.name} has ports on "
                f"{len(named)} networks of that name ({', '.join(sorted(named))}); "
                "set it to the network's id"
            )
        return next(iter(named.values()), (None, None))

    def _detach(self, vm: str) -> str:
        server = self._settled(vm)
        ports, theirs = self._vf_ports(server)
        if not ports:
            if theirs:
                # Saying "done" here would let the agent count a VF free that is not, and
                # fail every grant of it with "no VF left".
                ids = ", ".join(str(p.id) for p in theirs)
                raise _OpFailed(
                    f"{vm} holds no Sova VF port: its VF port(s) {ids} have no "
                    f"{SOVA_TAG!r} tag, so they are not Sova's and are not touched"
                )
            return f"{vm} holds no Sova VF port"
        hooks = self._hooks()
        if hooks is not None:
            # Never pull the VF before the guest's bond is confirmed on its backup.
            try:
                moved = hooks.to_backup(vm)
            except DriverError as exc:
                raise _OpFailed(f"not detaching the VF of {vm}: {exc}; VF kept") from exc
        for port in ports:
            self.conn.compute.delete_server_interface(port.id, server=server.id)
        start = self.clock()
        while True:
            attached = {i.port_id for i in self.conn.compute.server_interfaces(server.id)}
            left = [p for p in ports if p.id in attached]
            if not left:
                break
            if self.clock() - start > self.detach_timeout_s:
                raise _OpFailed(
                    f"Nova did not confirm detaching port(s) "
                    f"{', '.join(p.id for p in left)} from {vm} within {self.detach_timeout_s:g}s; "
                    "ports kept"
                )
            self.sleep(self.poll_s)
        for port in ports:
            self.conn.network.delete_port(port, ignore_missing=True)
        done = f"{vm}: VF port(s) {', '.join(p.id for p in ports)} detached and deleted"
        return done if hooks is None else f"{done} ({moved})"


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


def _addresses(port: Any) -> list[str]:
    return [str(ip["ip_address"]) for ip in (getattr(port, "fixed_ips", None) or [])]


def is_sova_port(port: Any) -> bool:
    """A port Sova made: ``direct`` and tagged :data:`SOVA_TAG` (its name alone proves nothing)."""
    return SOVA_TAG in (getattr(port, "tags", None) or ()) and port.binding_vnic_type == "direct"


def _host_of(server: Any) -> str | None:
    host = getattr(server, "compute_host", None)
    return None if host is None else str(host)


def nova_busy(server: Any) -> str | None:
    """What Nova is doing with ``server`` when it is not settled (a task state, or a status
    other than ``ACTIVE``), or None. Nova sets the task state with a compare-and-swap in every
    API that changes a server (resize, migrations, evacuate, shelve, rebuild, reboot,
    interface attach/detach, ...), so it is the one lock Nova, Watcher's applier (which checks
    the status) and Sova all honour."""
    task = _task(server)
    if task is not None:
        return f"task_state {task}"
    status = getattr(server, "status", None)
    if status is not None and str(status).upper() != "ACTIVE":
        return f"status {status}"
    return None


def _launched_at(server: Any) -> str | None:
    at = getattr(server, "launched_at", None)
    return None if at is None else str(at)


def _made_for(port: Any) -> str | None:
    """The host a Sova port was made for (the end of its description), if it says."""
    desc = str(getattr(port, "description", "") or "")
    head, sep, host = desc.rpartition(" on ")
    return host if sep and head == PORT_DESCRIPTION and host else None


def _task(server: Any) -> str | None:
    task = getattr(server, "task_state", None)
    return None if task is None else str(task)


def _match(servers: Iterable[Any], vm: str) -> Any:
    """The server a host-side VM name means: its libvirt domain name, its UUID or its name."""
    servers = list(servers)
    for attr in ("instance_name", "id", "name"):
        hits = [s for s in servers if getattr(s, attr, None) == vm]
        if len(hits) == 1:
            return hits[0]
    return None
