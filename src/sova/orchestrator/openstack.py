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
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from sova.driver.base import Driver, DriverError, OpState, OpStatus
from sova.model import (
    Action,
    AttachVF,
    DetachVF,
    Host,
    Inventory,
    Migrate,
    NicKind,
    SetGuestRateLimit,
    SetVFRate,
    VMState,
)
from sova.orchestrator.base import CloudConfigError
from sova.orchestrator.openstack_cloud import (
    EVACUATION_UNSETTLED,
    SOVA_TAG,
    VF_VNIC_TYPES,
    Op,
    OpFailed,
    is_sova_port,
    launched_at,
    match_server,
    nova_busy,
    port_made_for,
    split_vf_ports,
    task_state,
)
from sova.orchestrator.openstack_ops import NovaOperations
from sova.orchestrator.openstack_view import CloudView


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


def _spawn_thread(fn: Callable[[], None]) -> None:
    threading.Thread(target=fn, daemon=True, name="sova-openstack-op").start()


@dataclass
class OpenStackActuator(NovaOperations):
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
    _ops: dict[str, Op] = field(default_factory=dict)
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
    _sheltered: set[str] = field(default_factory=set)  # see NovaOperations._shelter
    # Give-backs of such ports, one at a time per VM, and the failures of each VM's.
    _retiring: dict[str, Op] = field(default_factory=dict)
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
        op = Op(f"os:{action.kind}:{action.vm}:{next(self._seq)}", action)
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
            server = match_server(servers, name)
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
            migrating = state.migrating or task_state(server) in ("migrating",)
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
        # A migration that ended (elsewhere, or back here) shelters its server anew next time.
        self._sheltered.intersection_update(str(s.id) for s in servers if nova_busy(s))
        host = self._pool_left(sensed.host, pool, withheld, theirs, notes)
        if self._sweep_due():
            try:
                for swept in self.sweep_leaked_ports():
                    notes.append(f"leaked Sova port {swept} deleted")
            except self._errors as exc:  # the inventory stands; the sweep is retried later
                notes.append(f"leaked-port sweep unavailable: {exc}")
        self._periods += 1
        self.discrepancies = notes
        return Inventory(host, vms)

    def _pool_left(
        self,
        host: Host,
        pool: int | None,
        withheld: int,
        theirs: dict[str, list[Any]],
        notes: list[str],
    ) -> Host:
        """The host with the VF pool Sova may grant from: the host's, capped by Placement,
        less the VFs of VMs Sova stands back from and the tenants' own (each noted)."""
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
        return host

    def _sweep_due(self) -> bool:
        """Whether this inventory sweeps leaked ports: every ``sweep_every`` periods, or at
        the change-based view's resync."""
        if self.view is None:
            return self._periods % self.sweep_every == 0
        return self.view.sweep_due(self.clock())

    def _stand_back(self, name: str, server: Any, held: list[Any]) -> str | None:
        """Why the agent must leave ``name`` alone this period (it is withheld from the
        inventory), or None. Nova operating on the server (any task state or status but
        ``ACTIVE``, unless the task is this actuator's own) is one reason; a Sova port the
        server holds after such an operation, given back now, is the other."""
        busy = nova_busy(server)
        if name in self._retiring:
            return f"{name}: its Sova VF port is being given back: Sova stands back"
        if busy is not None and name not in self._acting:
            moved = ""
            if held:
                self._disturbed.add(str(server.id))
                self._retire_failures.pop(name, None)  # a new operation: a new give-back
                moved = self._shelter(name, server)
            return f"{name}: Nova is operating on it ({busy}): Sova stands back{moved}"
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
        waiting = self._evacuation_unsettled(server)
        if waiting is not None:
            return f"{name}: {waiting}: its Sova VF port is kept, Sova stands back"
        op = Op(f"os:retire:{name}:{next(self._seq)}", DetachVF(name))
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
            made_for = port_made_for(p)
            if made_for is not None and made_for != self.host:
                return f"made for {made_for}, brought here by Nova"
        launched = launched_at(server)
        seen = self._launched.setdefault(sid, launched)
        if seen != launched:
            return f"outlived Nova re-spawning the server (launched {seen} then {launched})"
        return None

    def _evacuation_unsettled(self, server: Any) -> str | None:
        """Why a carried port of ``server`` cannot be given back yet, or None: an evacuation
        of it that the source host has not cleaned up. Until its compute service is back,
        Nova keeps the source's VF claimed under the same PCI request as the target's, and
        an interface detach releases the source's, leaving this host's VF taken for good
        (docs/openstack.md#novas-own-operations). Read only for a port about to be given
        back, so it costs nothing in a period with none."""
        try:
            records = list(
                self.conn.compute.migrations(server_id=server.id, migration_type="evacuation")
            )
        except self._errors as exc:
            return f"Nova's evacuation records unreadable ({exc})"
        for m in records:
            status = str(getattr(m, "status", "") or "").lower()
            if status in EVACUATION_UNSETTLED:
                src = getattr(m, "source_compute", None)
                return (
                    f"evacuated by Nova migration {m.id} (status {status}) from {src}, whose "
                    "compute service has not cleaned up: a detach now would free that host's VF, "
                    "not this one's"
                )
        return None

    def _retired(self) -> list[str]:
        """The ends of the give-backs since the last period, as notes."""
        notes: list[str] = []
        with self._lock:
            ended = [
                (vm, op) for vm, op in self._retiring.items() if op.state is not OpState.PENDING
            ]
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
            raise OpFailed(f"Nova is operating on {vm} ({busy}): Sova stands back")
        return server

    def _server(self, vm: str) -> Any:
        sid = self._servers.get(vm)
        server = None
        if sid is not None:
            server = self.conn.compute.find_server(sid, ignore_missing=True, all_projects=True)
        if server is None:
            server = match_server(self._servers_here(), vm)
        if server is None:
            raise OpFailed(f"Nova knows no server {vm!r} on {self.host}")
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

    def _run(self, op: Op) -> None:
        a = op.action
        try:
            if isinstance(a, Migrate):
                detail = self._migrate(op, a)
            elif isinstance(a, AttachVF):
                detail = self._attach(a)
            elif isinstance(a, DetachVF):
                detail = self._detach(a.vm)
            else:  # pragma: no cover - rates go to the fallback in submit()
                raise OpFailed(f"unsupported action {a!r}")
            self._finish(op, OpState.SUCCEEDED, detail)
        except OpFailed as exc:
            self._finish(op, OpState.FAILED, str(exc))
        except Exception as exc:  # reported through the op, never lost with the thread
            self._finish(op, OpState.FAILED, f"{type(exc).__name__}: {exc}")

    def _finish(self, op: Op, state: OpState, detail: str) -> None:
        with self._lock:
            op.state, op.detail = state, detail
            self._acting.discard(op.action.vm)
        if self.view is not None:
            self.view.invalidate()  # the operation changed ports or servers

    def _progress(self, op: Op, detail: str) -> None:
        with self._lock:
            op.detail = detail
