"""The operations the ``openstack`` orchestrator performs through Nova and Neutron: a live
migration followed through Nova's records, and a VF port created, tagged, attached and
made the guest's fast path, or detached and deleted once the bond is on its backup.

A mixin of :class:`sova.orchestrator.openstack.OpenStackActuator`, apart from what the
actuator reads of the cloud each period (its inventory, Nova's own operations, leaked
ports): these run on the operation's own thread, one per submitted action. The exception
is :meth:`NovaOperations._shelter`, which a period calls: the first step of a detach (the
bond moved to virtio), done ahead of a hot-unplug of Nova's own.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sova.driver.base import Driver, DriverError
from sova.model import AttachVF, Migrate
from sova.orchestrator.base import FailoverHooks
from sova.orchestrator.openstack_cloud import (
    MIGRATION_DONE,
    MIGRATION_FAILED,
    SOVA_TAG,
    Op,
    OpFailed,
    bound_by,
    host_of,
    is_vf_exhausted,
    launched_at,
    port_addresses,
    task_state,
    vf_port_attrs,
)


class NovaOperations:
    """Migrate, attach and detach for one host (the actuator's fields, set by it)."""

    conn: Any
    host: str
    network: str | None
    migration_timeout_s: float
    detach_timeout_s: float
    abort_timeout_s: float
    poll_s: float
    fallback: Driver | None
    timeouts: tuple[type[Exception], ...]
    clock: Callable[[], float]
    sleep: Callable[[float], None]
    _errors: tuple[type[Exception], ...]
    _creating: set[str]
    _disturbed: set[str]
    _launched: dict[str, str | None]
    _sheltered: set[str]  # servers someone else live-migrates, their bond moved to virtio

    if TYPE_CHECKING:  # the actuator's

        def _settled(self, vm: str) -> Any: ...
        def _sova_ports(self, server: Any) -> list[Any]: ...
        def _vf_ports(self, server: Any) -> tuple[list[Any], list[Any]]: ...
        def _progress(self, op: Op, detail: str) -> None: ...

    def _migrate(self, op: Op, a: Migrate) -> str:
        # Someone else's live migration of it (Watcher's applier, an operator) holds Nova's
        # task state: never a second one.
        server = self._settled(a.vm)
        if host_of(server) == a.dst_host:
            return f"{a.vm} already on {a.dst_host} (Nova)"
        if host_of(server) != self.host:
            raise OpFailed(f"Nova places {a.vm} on {host_of(server)!r}, not {self.host!r}")
        if self._sova_ports(server):
            raise OpFailed(f"not migrating {a.vm}: it still holds a Sova VF port")
        before = {m.id for m in self._migrations(server)}
        unanswered = self._request_migration(server, a)
        return self._follow_migration(op, a, server, before, unanswered)

    def _request_migration(self, server: Any, a: Migrate) -> str:
        """Ask Nova for the live migration; returns why its answer is unknown ("" when it
        answered), raises :class:`OpFailed` when it refused."""
        unanswered = ""
        try:
            # host + force=False: Nova's scheduler checks Sova's choice (Placement, PCI,
            # filters); the SDK refuses a host below microversion 2.30 without force.
            self.conn.compute.live_migrate_server(
                server, host=a.dst_host, force=False, block_migration="auto"
            )
        except ValueError as exc:
            raise OpFailed(f"not migrating {a.vm}: {exc}") from exc
        except self.timeouts as exc:
            # Below microversion 2.34 Nova answers os-migrateLive only after the target's
            # pre-checks, which may outlast api_timeout_s while Nova carries on: the
            # migration record says what happened, the client's timeout alone says nothing.
            unanswered = f"; Nova's answer timed out ({exc}), followed by its records"
        except self._errors as exc:
            on = host_of(self.conn.compute.get_server(server.id))
            raise OpFailed(
                f"Nova refused to live-migrate {a.vm} to {a.dst_host}: {exc}; server on {on!r}"
            ) from exc
        return unanswered

    def _follow_migration(
        self, op: Op, a: Migrate, server: Any, before: set[Any], unanswered: str
    ) -> str:
        """Nova's new migration record followed to its end, aborted past
        ``migration_timeout_s``; returns the detail of a completed one."""
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
                now_on = host_of(self.conn.compute.get_server(server.id))
                if now_on != a.dst_host:
                    raise OpFailed(
                        f"Nova migration {record.id} of {a.vm} completed but the server is on "
                        f"{now_on!r}, not {a.dst_host!r}"
                    )
                late = "" if aborted_at is None else f", {timed_out} but ended before the abort"
                return (
                    f"{a.vm} migrated to {a.dst_host} (Nova migration {record.id} "
                    f"{status}{late}){unanswered}"
                )
            if status in MIGRATION_FAILED:
                now_on = host_of(self.conn.compute.get_server(server.id))
                why = "" if aborted_at is None else f" ({timed_out}, abort confirmed)"
                raise OpFailed(
                    f"Nova migration {record.id} of {a.vm} to {a.dst_host} {status}{why}; "
                    f"server on {now_on!r} on virtio"
                )
            if record is None and self.clock() - start > self.poll_s * 30:
                self._check_started(server, a, unanswered)
            if aborted_at is None and self.clock() - start > self.migration_timeout_s:
                if record is None:
                    raise OpFailed(
                        f"migration of {a.vm} to {a.dst_host} {timed_out} (no migration "
                        "record); Nova keeps it on the source"
                    )
                try:
                    self.conn.compute.abort_server_migration(record.id, server.id)
                except self._errors as exc:
                    raise OpFailed(
                        f"migration of {a.vm} to {a.dst_host} {timed_out} (abort refused: "
                        f"{exc}); Nova migration {record.id} {status}"
                    ) from exc
                # An abort is asynchronous in Nova: its outcome is the record's end
                # (cancelled, or completed when the migration won the race), followed above.
                aborted_at = self.clock()
            if aborted_at is not None and self.clock() - aborted_at > self.abort_timeout_s:
                raise OpFailed(
                    f"migration of {a.vm} to {a.dst_host} {timed_out}; abort not confirmed: "
                    f"Nova migration {record.id} still {status} {self.abort_timeout_s:g}s later"
                )
            self.sleep(self.poll_s)

    def _check_started(self, server: Any, a: Migrate, unanswered: str) -> None:
        """Raise when Nova, long after the request, has no migration record and no task on
        the server: it will start none."""
        # Nova's API accepted but conductor never created a record (e.g. the
        # scheduler refused before it): the server status says what happened.
        try:
            now = self.conn.compute.get_server(server.id)
        except self._errors:
            now = None  # unanswered: asked again at the next poll, within the timeouts
        if now is not None and task_state(now) is None:
            said = "did not answer" if unanswered else "accepted"
            raise OpFailed(
                f"Nova {said} the live migration of {a.vm} and started none; "
                f"server on {host_of(now)!r} (check the instance action log)"
            )

    def _migrations(self, server: Any) -> list[Any]:
        return list(
            self.conn.compute.migrations(server_id=server.id, migration_type="live-migration")
        )

    def _hooks(self) -> FailoverHooks | None:
        return self.fallback if isinstance(self.fallback, FailoverHooks) else None

    def _shelter(self, name: str, server: Any) -> str:
        """The guest's bond moved to virtio, confirmed, when someone else live-migrates
        ``name`` with a Sova port: Nova hot-unplugs the VF from the running guest before the
        copy, with no regard for the bond (every other operation of Nova's that re-plugs a VF
        powers the guest off first). Once per migration; a failure is tried again the next
        period. Returns what it did, as the end of the stand-back note ("" when nothing)."""
        sid = str(server.id)
        hooks = self._hooks()
        if task_state(server) != "migrating" or sid in self._sheltered or hooks is None:
            return ""
        try:
            moved = hooks.to_backup(name)
        except DriverError as exc:
            return f"; the bond not moved off the VF Nova will unplug ({exc}): tried again"
        self._sheltered.add(sid)
        return f"; the bond moved to virtio before Nova unplugs the VF ({moved})"

    def _attach(self, a: AttachVF) -> str:
        server = self._settled(a.vm)
        if host_of(server) != self.host:
            raise OpFailed(f"Nova places {a.vm} on {host_of(server)!r}, not {self.host!r}")
        held = self._sova_ports(server)
        if held:
            return f"{a.vm} already holds VF port {held[0].id}"
        network, backup = self._network_for(server)
        # The guest Sova's bond is set up in: a re-spawn after this shows as a new launch time.
        self._launched[str(server.id)] = launched_at(server)
        self._disturbed.discard(str(server.id))
        port = self.conn.network.create_port(
            **vf_port_attrs(a.vm, network, server.project_id, port_addresses(backup), self.host)
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
                raise OpFailed(
                    f"Neutron refused the {SOVA_TAG!r} tag on {a.vm}'s VF port: {exc}; port deleted"
                ) from exc
        try:
            self.conn.compute.create_server_interface(server, port_id=port.id)
        except self._errors as exc:
            # The port was ours and is useless now: never leave it behind.
            self.conn.network.delete_port(port, ignore_missing=True)
            if is_vf_exhausted(str(exc)):
                raise OpFailed(f"no VF left on {self.host} for {a.vm}: {exc}") from exc
            raise OpFailed(f"Nova refused to attach a VF port to {a.vm}: {exc}") from exc
        detail = f"{a.vm}: direct port {port.id} on network {network} attached"
        hooks = self._hooks()
        if hooks is None:
            return detail
        try:
            return f"{detail}; {hooks.to_fast(a.vm)}"
        except DriverError as exc:
            # A VF that carries nothing would be counted as the VM's fast path: give it back
            # (the backup is confirmed active first, as for any detach).
            give_back_errors: tuple[type[Exception], ...] = (OpFailed, *self._errors)
            try:
                undone = f"given back ({self._detach(a.vm)})"
            except give_back_errors as exc2:
                undone = f"left attached, detach failed: {exc2}"
            raise OpFailed(f"{detail} but not made active: {exc}; VF {undone}") from exc

    def _network_for(self, server: Any) -> tuple[str, Any]:
        """The VF network and the server's port on it (the bond's backup: same L2 segment).

        The VF must land where the VM's backup interface is, or the guest's bond would fail
        over between two networks; and it must be a VLAN or flat network, the only types
        Neutron's sriovnicswitch binds; and not bound by ML2/OVN, whose ARP answers pin the
        guest's address to the virtio port's MAC.
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
            raise OpFailed(
                f"{server.name} has no port on {where} to back the VF up (the guest's bond "
                "needs its virtio port on the VF's network)"
            )
        if "ovn" in bound_by(backup):
            raise OpFailed(
                f"{server.name}'s virtio port {backup.id} is bound by ML2/OVN, which answers "
                "ARP for the guest's address with the virtio port's MAC: traffic would not "
                "follow the bond to a VF (docs/openstack.md#ml2ovn)"
            )
        network_id = str(backup.network_id)
        net = net if net is not None else self.conn.network.get_network(network_id)
        kind = getattr(net, "provider_network_type", None)
        if kind is not None and kind not in ("vlan", "flat"):
            raise OpFailed(
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
            raise OpFailed(
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
                raise OpFailed(
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
                raise OpFailed(f"not detaching the VF of {vm}: {exc}; VF kept") from exc
        for port in ports:
            self.conn.compute.delete_server_interface(port.id, server=server.id)
        start = self.clock()
        while True:
            attached = {i.port_id for i in self.conn.compute.server_interfaces(server.id)}
            left = [p for p in ports if p.id in attached]
            if not left:
                break
            if self.clock() - start > self.detach_timeout_s:
                raise OpFailed(
                    f"Nova did not confirm detaching port(s) "
                    f"{', '.join(p.id for p in left)} from {vm} within {self.detach_timeout_s:g}s; "
                    "ports kept"
                )
            self.sleep(self.poll_s)
        for port in ports:
            self.conn.network.delete_port(port, ignore_missing=True)
        done = f"{vm}: VF port(s) {', '.join(p.id for p in ports)} detached and deleted"
        return done if hooks is None else f"{done} ({moved})"
