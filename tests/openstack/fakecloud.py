"""A small in-memory cloud with openstacksdk's proxy surface, for the main venv's unit tests.

It has the mechanisms the actuator depends on, not canned answers: live migrations are
records that advance one state per look (queued -> running -> completed, or -> error when
the target refuses), a server moves only when its migration completes, attaching a direct
port claims one of the host's VFs and fails with Nova's message when none is left, and a
detach completes only after a few looks. The real-code tests (tests/openstack/<stack>/) run
the same actuator against Nova, Neutron and Watcher themselves.
"""

from __future__ import annotations

import copy
import itertools
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

_ENDED = frozenset({"completed", "done", "error", "failed", "cancelled", "aborted"})


class FakeCloudError(Exception):
    pass


class FakeCloudTimeout(FakeCloudError):
    """No answer within the client's timeout (keystoneauth's ConnectTimeout)."""


_EPOCH = datetime(2026, 12, 1, tzinfo=UTC)
_ticks = itertools.count(1)


def nova_now() -> str:
    """Nova's clock for ``updated``: one second later at each change, so that changes-since
    (``updated_at >= since``) orders them as Nova's database would."""
    return (_EPOCH + timedelta(seconds=next(_ticks))).isoformat()


@dataclass
class Server:
    id: str
    name: str
    compute_host: str
    project_id: str = "proj"
    instance_name: str | None = None
    task_state: str | None = None
    status: str = "ACTIVE"
    launched_at: str | None = "2026-12-01T00:00:00.000000"
    updated_at: str = ""

    def __post_init__(self) -> None:
        if not self.updated_at:
            super().__setattr__("updated_at", nova_now())

    def __setattr__(self, name: str, value: Any) -> None:
        # Every save of an instance moves Nova's updated_at (SQLAlchemy's onupdate).
        super().__setattr__(name, value)
        if name != "updated_at":
            super().__setattr__("updated_at", nova_now())


@dataclass(frozen=True)
class NovaOp:
    """What one of Nova's own server operations does, as far as ports and guests go: the task
    state and status while it runs, whether the server changes host (Nova rebinds its ports
    to the new host, claiming a VF there for each direct one), whether the guest is spawned
    anew (a new ``launched_at``: the guest's runtime bond is gone) and the status it ends in."""

    task: str
    status: str
    moves: bool
    respawns: bool
    ends: str = "ACTIVE"
    offloads: bool = False  # shelve-offload: no host, ports unbound but kept by the server


# Nova 34's task states and statuses (nova/compute/task_states.py, the API's status map).
NOVA_OPS = {
    "resize": NovaOp("resize_migrating", "RESIZE", True, True, "VERIFY_RESIZE"),
    "migrate": NovaOp("resize_migrating", "RESIZE", True, True, "VERIFY_RESIZE"),
    "confirm_resize": NovaOp("resize_confirming", "VERIFY_RESIZE", False, False),
    "live_migrate": NovaOp("migrating", "MIGRATING", True, False),
    "evacuate": NovaOp("rebuilding", "REBUILD", True, True),
    "rebuild": NovaOp("rebuild_spawning", "REBUILD", False, True),
    "shelve": NovaOp("shelving_offloading", "SHELVED", False, False, "SHELVED_OFFLOADED", True),
    "unshelve": NovaOp("spawning", "SHELVED_OFFLOADED", True, True),
    "reboot": NovaOp("reboot_started_hard", "HARD_REBOOT", False, False),
}


@dataclass
class Port:
    id: str
    name: str
    network_id: str
    project_id: str | None = None
    device_id: str = ""
    binding_vnic_type: str = "normal"
    binding_host_id: str = ""
    description: str = ""
    fixed_ips: list[dict[str, str]] = field(default_factory=list)
    tags: list[str] = field(default_factory=list)
    # ML2 records the mechanism driver that bound the port, per binding level.
    binding_vif_details: dict[str, Any] = field(default_factory=dict)


@dataclass
class Migration:
    id: int
    server_id: str
    source: str
    dest: str
    steps: list[str]
    status: str = "accepted"
    migration_type: str = "live-migration"

    @property
    def source_compute(self) -> str:
        return self.source


@dataclass
class Interface:
    port_id: str


@dataclass
class Net:
    id: str
    name: str
    provider_network_type: str = "vlan"


@dataclass
class RP:
    id: str
    name: str
    parent: str | None = None


@dataclass
class Inv:
    resource_class: str
    total: int
    reserved: int = 0


@dataclass
class FakeCloud:
    vfs_per_host: dict[str, int] = field(default_factory=dict)
    refusing: set[str] = field(default_factory=set)  # targets whose pre-check fails
    migration_steps: int = 2  # looks before a migration finishes
    abort_looks: int | None = 2  # looks before an abort ends in `cancelled`; None: it never takes
    detach_looks: int = 2
    # os-migrateLive answered only after the pre-checks (microversion < 2.34), later than the
    # client waits: the migration starts, the client gets a timeout.
    migrate_answer_late: bool = False
    unanswered_polls: int = 0  # migration-record polls that time out once a migration runs
    # target -> where the server ends up when its migration record says completed (a record
    # and the instance's host that disagree, as after a failed post-live-migration step)
    lands_on: dict[str, str] = field(default_factory=dict)
    # target -> the status Nova's record ends in, where not completed/error (Nova's
    # statuses for a finished migration vary with the kind and release)
    ends: dict[str, str] = field(default_factory=dict)
    servers: dict[str, Server] = field(default_factory=dict)
    # Deleted servers as Nova's changes-since shows them (status DELETED, soft-deleted rows).
    deleted: dict[str, Server] = field(default_factory=dict)
    ports: dict[str, Port] = field(default_factory=dict)
    migrations: list[Migration] = field(default_factory=list)
    networks: dict[str, Net] = field(default_factory=dict)
    rps: list[RP] = field(default_factory=list)
    inventories: dict[str, list[Inv]] = field(default_factory=dict)
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    _detaching: dict[str, int] = field(default_factory=dict)
    _ids: Any = field(default_factory=lambda: itertools.count(1))

    def __post_init__(self) -> None:
        self.compute = _Compute(self)
        self.network = _Network(self)
        self.placement = _Placement(self)

    def add_server(
        self,
        name: str,
        host: str,
        net: str = "net-data",
        net_type: str = "vlan",
        bound_by: str = "openvswitch",
    ) -> Server:
        s = Server(id=f"uuid-{name}", name=name, compute_host=host)
        self.servers[s.id] = s
        self.networks.setdefault(net, Net(net, net, net_type))
        pid = f"port-{next(self._ids)}"
        ip = f"192.0.2.{len(self.servers)}"
        self.ports[pid] = Port(
            pid,
            f"{name}-eth0",
            net,
            s.project_id,
            s.id,
            "normal",
            host,
            fixed_ips=[{"ip_address": ip}],
            binding_vif_details={"bound_drivers": {"0": bound_by}},
        )
        return s

    def add_network(self, net_id: str, name: str, net_type: str = "vlan") -> Net:
        self.networks[net_id] = Net(net_id, name, net_type)
        return self.networks[net_id]

    def add_port(self, server: Server, net_id: str, ip: str) -> Port:
        """Another virtio port of the server (Nova boots a server with one per network)."""
        pid = f"port-{next(self._ids)}"
        self.ports[pid] = Port(
            pid,
            f"{server.name}-{net_id}",
            net_id,
            server.project_id,
            server.id,
            "normal",
            server.compute_host,
            fixed_ips=[{"ip_address": ip}],
        )
        return self.ports[pid]

    def add_tenant_vf(self, server: Server, name: str = "", vnic_type: str = "direct") -> Port:
        """A VF port the server's owner made and attached itself: it takes one of the host's
        VFs from Nova's PCI tracker like Sova's do."""
        takes = vnic_type in ("direct", "macvtap", "virtio-forwarder", "remote-managed", "vdpa")
        if takes and self.bound_vfs(server.compute_host) >= self.vfs_per_host.get(
            server.compute_host, 0
        ):
            raise FakeCloudError("Failed to claim PCI device for the tenant's port")
        pid = f"port-{next(self._ids)}"
        self.ports[pid] = Port(
            pid,
            name or f"{server.name}-sriov",
            "net-data",
            server.project_id,
            server.id,
            vnic_type,
            server.compute_host,
        )
        return self.ports[pid]

    def delete_server(self, sid: str) -> None:
        """Nova's delete: the server goes; the ports it did not create itself (given at boot
        or attached by id, as Sova's are) are unbound and kept, with their addresses."""
        gone = copy.copy(self.servers.pop(sid))
        gone.status, gone.task_state = "DELETED", None
        self.deleted[sid] = gone
        for p in self.ports.values():
            if p.device_id == sid:
                p.device_id, p.binding_host_id = "", ""

    def begin(self, sid: str, op: str) -> None:
        """One of Nova's own operations starts on the server (someone else's: an operator,
        Watcher's applier): Nova takes the task state, as its API does, or refuses (409)."""
        s = self.servers[sid]
        if s.task_state is not None:
            raise FakeCloudError(f"Conflict: server {sid} is in task_state {s.task_state}")
        s.task_state, s.status = NOVA_OPS[op].task, NOVA_OPS[op].status

    def end(self, sid: str, op: str, dest: str | None = None) -> None:
        """The operation ends: the server lands on ``dest`` (a move; the scheduler's pick),
        its ports are bound there, each direct port claiming one of that host's VFs, else
        the operation fails and the server stays (Nova's PCI filter: no valid host)."""
        s, what = self.servers[sid], NOVA_OPS[op]
        ports = [p for p in self.ports.values() if p.device_id == sid]
        if what.moves:
            assert dest is not None
            direct = [p for p in ports if p.binding_vnic_type in ("direct", "macvtap")]
            if direct and self.bound_vfs(dest) + len(direct) > self.vfs_per_host.get(dest, 0):
                s.task_state = None
                s.status = "SHELVED_OFFLOADED" if op == "unshelve" else "ACTIVE"
                raise FakeCloudError(f"No valid host was found: no free VF on {dest}")
            if op == "evacuate":
                # Nova's record stays "done" until the source's compute service is back
                # (:meth:`restart_compute`); until then the source keeps its VF claim.
                self.migrations.append(
                    Migration(next(self._ids), sid, s.compute_host, dest, [], "done", "evacuation")
                )
            s.compute_host = dest
        host = "" if what.offloads else s.compute_host
        for p in ports:
            p.binding_host_id = host
        if what.offloads:
            s.compute_host = ""
        if what.respawns:
            s.launched_at = f"{s.launched_at}+{op}"
        s.task_state, s.status = None, what.ends

    def restart_compute(self, host: str) -> None:
        """``host``'s compute service starts again: it destroys the guests evacuated from it
        and completes their evacuation records (Nova's _destroy_evacuated_instances)."""
        for m in self.migrations:
            if m.migration_type == "evacuation" and m.source == host and m.status == "done":
                m.status = "completed"

    def bound_vfs(self, host: str) -> int:
        return sum(
            1
            for p in self.ports.values()
            if p.binding_vnic_type in ("direct", "macvtap")
            and p.device_id
            and p.binding_host_id == host
        )


class _Compute:
    def __init__(self, c: FakeCloud) -> None:
        self.c = c

    def servers(
        self,
        details: bool = True,
        all_projects: bool = False,
        compute_host: str | None = None,
        changes_since: str | None = None,
    ):
        if not details:  # GET /servers: ids, names and links only
            bare = self.servers(True, all_projects, compute_host, changes_since)
            return [SimpleNamespace(id=s.id, name=s.name, links=[]) for s in bare]
        self.c.calls.append(("servers", {"compute_host": compute_host, "since": changes_since}))
        # Nova lists the caller's own project's servers unless all_projects (an admin's);
        # with changes-since, those updated since then, deleted ones included.
        rows = list(self.c.servers.values())
        if changes_since is not None:
            since = datetime.fromisoformat(changes_since)
            rows = [
                s
                for s in [*rows, *self.c.deleted.values()]
                if datetime.fromisoformat(s.updated_at) >= since
            ]
        # Copies, as off the wire: a later change in the cloud is not seen through them.
        return [
            copy.copy(s)
            for s in rows
            if compute_host in (None, s.compute_host) and (all_projects or s.project_id == "proj")
        ]

    def find_server(self, name_or_id: str, ignore_missing: bool = True, all_projects: bool = False):
        for s in self.c.servers.values():
            if name_or_id in (s.id, s.name) and (all_projects or s.project_id == "proj"):
                return s
        if ignore_missing:
            return None
        raise FakeCloudError(f"no server {name_or_id}")

    def get_server(self, sid: str) -> Server:
        return self.c.servers[sid]

    def live_migrate_server(
        self,
        server: Server,
        host: str | None = None,
        force: bool = False,
        block_migration: Any = None,
    ) -> None:
        self.c.calls.append(("live_migrate_server", {"host": host, "force": force}))
        if block_migration not in (None, True, False, "auto"):  # os-migrateLive's schema
            raise FakeCloudError(f"Invalid input for field block_migration: {block_migration!r}")
        s = self.c.servers[server.id]
        if s.task_state is not None:
            raise FakeCloudError(f"Conflict: server {s.id} is in task_state {s.task_state}")
        end = self.c.ends.get(str(host), "error" if host in self.c.refusing else "completed")
        steps = ["queued"] + ["running"] * (self.c.migration_steps - 1) + [end]
        self.c.migrations.append(
            Migration(next(self.c._ids), s.id, s.compute_host, str(host), steps)
        )
        s.task_state, s.status = "migrating", "MIGRATING"
        if self.c.migrate_answer_late:
            raise FakeCloudTimeout("Request to /servers/action timed out")

    def migrations(self, server_id: str | None = None, migration_type: str | None = None):
        running = any(m.status not in _ENDED for m in self.c.migrations)
        if running and self.c.unanswered_polls > 0:
            self.c.unanswered_polls -= 1
            raise FakeCloudTimeout("Request to /os-migrations timed out")
        for m in self.c.migrations:
            if m.status in _ENDED or not m.steps:
                continue
            m.status = m.steps.pop(0)
            s = self.c.servers[m.server_id]
            if m.status in ("completed", "done"):
                s.compute_host, s.task_state = self.c.lands_on.get(m.dest, m.dest), None
                s.status = "ACTIVE"
            elif m.status in _ENDED:
                s.task_state, s.status = None, "ACTIVE"  # Nova rolls back: on the source
        return [
            m
            for m in self.c.migrations
            if (server_id is None or m.server_id == server_id)
            and (migration_type is None or m.migration_type == migration_type)
        ]

    def abort_server_migration(self, mid: int, server: str) -> None:
        self.c.calls.append(("abort_server_migration", {"id": mid}))
        # As in Nova, the abort is asynchronous: the record runs on, then ends `cancelled`
        # (the migration rolled back) unless it ended first.
        for m in self.c.migrations:
            if m.id == mid and self.c.abort_looks is not None and m.steps:
                keep = m.steps[: self.c.abort_looks - 1]
                m.steps = keep + ["cancelled"] if "completed" not in keep else keep

    def _check_state(self, s: Server, what: str) -> None:
        # Nova's check_instance_state on attach_interface/detach_interface.
        if s.task_state is not None or s.status not in ("ACTIVE", "PAUSED", "SHUTOFF"):
            raise FakeCloudError(
                f"Conflict: cannot '{what}' instance {s.id} while it is in task_state "
                f"{s.task_state}, status {s.status}"
            )

    def create_server_interface(self, server: Server, port_id: str) -> Interface:
        s = self.c.servers[server.id]
        self._check_state(s, "attach_interface")
        p = self.c.ports[port_id]
        if p.binding_vnic_type in ("direct", "macvtap") and self.c.bound_vfs(
            s.compute_host
        ) >= self.c.vfs_per_host.get(s.compute_host, 0):
            raise FakeCloudError(f"Failed to claim PCI device for {s.id} during interface attach")
        p.device_id, p.binding_host_id = s.id, s.compute_host
        self.c.calls.append(("create_server_interface", {"port": port_id}))
        return Interface(port_id)

    def delete_server_interface(self, port_id: str, server: str) -> None:
        self._check_state(self.c.servers[server], "detach_interface")
        self.c.calls.append(("delete_server_interface", {"port": port_id}))
        self.c._detaching[port_id] = self.c.detach_looks

    def server_interfaces(self, sid: str) -> list[Interface]:
        for pid in list(self.c._detaching):
            self.c._detaching[pid] -= 1
            if self.c._detaching[pid] <= 0:
                del self.c._detaching[pid]
                p = self.c.ports[pid]
                p.device_id, p.binding_host_id = "", ""
        return [Interface(p.id) for p in self.c.ports.values() if p.device_id == sid]


class _Network:
    def __init__(self, c: FakeCloud) -> None:
        self.c = c

    def ports(self, **filters: Any) -> list[Port]:
        key = {"binding:host_id": "binding_host_id"}
        self.c.calls.append(("ports", dict(filters)))

        def match(p: Port, k: str, v: Any) -> bool:
            return v in p.tags if k == "tags" else bool(getattr(p, key.get(k, k)) == v)

        return [p for p in self.c.ports.values() if all(match(p, k, v) for k, v in filters.items())]

    def create_port(self, **attrs: Any) -> Port:
        self.c.calls.append(("create_port", attrs))
        pid = f"port-{next(self.c._ids)}"
        p = Port(
            pid,
            attrs["name"],
            attrs["network_id"],
            attrs.get("project_id"),
            binding_vnic_type=attrs.get("binding_vnic_type", "normal"),
            description=attrs.get("description", ""),
            tags=list(attrs.get("tags", [])),
        )
        self.c.ports[pid] = p
        return p

    def delete_port(self, port: Port | str, ignore_missing: bool = True) -> None:
        pid = port if isinstance(port, str) else port.id
        self.c.calls.append(("delete_port", {"id": pid}))
        if self.c.ports.pop(pid, None) is None and not ignore_missing:
            raise FakeCloudError(f"No Port found for {pid}")  # the SDK's ResourceNotFound

    def add_tag(self, port: Port, tag: str) -> Port:
        self.c.calls.append(("add_tag", {"id": port.id, "tag": tag}))
        p = self.c.ports[port.id]
        p.tags = [*p.tags, tag] if tag not in p.tags else p.tags
        return p

    def find_network(self, name_or_id: str, ignore_missing: bool = True) -> Net | None:
        return self.c.networks.get(name_or_id)

    def get_network(self, network_id: str) -> Net:
        return self.c.networks[network_id]


class _Placement:
    def __init__(self, c: FakeCloud) -> None:
        self.c = c

    def resource_providers(self, name: str | None = None, in_tree: str | None = None):
        if name is not None:
            return [r for r in self.c.rps if r.name == name]
        return [r for r in self.c.rps if r.id == in_tree or r.parent == in_tree]

    def resource_provider_inventories(self, rp: RP) -> list[Inv]:
        return self.c.inventories.get(rp.id, [])
