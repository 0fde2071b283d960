"""What Nova and Neutron say about one hypervisor, asked for only when it may have changed.

The actuator's inventory needs, every control period, the servers Nova places on the host
and the ports Neutron binds there. Listing both each period costs two API requests per agent
per period: about 200 requests/s at 1,000 hypervisors and a 10 s period, and more with a
bandwidth controller (the agent reads its inventory every bandwidth period too). Most
periods nothing changed, and most changes that matter are ones the host senses itself, so
:class:`CloudView` keeps the last answers and asks again only when:

* **the host senses a change** (a domain appears or goes, starts or stops, gains or loses a
  VF, starts migrating): a boot, a delete, a move in or out, a stop or start, an attach or
  detach, an evacuation, an unshelve all show there first. Then both listings are made
  again in full (a server that left the host is in no by-host changes-since answer).
* **an operation of the actuator ended** (:meth:`CloudView.invalidate`): Sova's own attach,
  detach or migration changed ports and servers.
* **Nova is operating on a server of the host** (a task state in the cached answer): Nova's
  side is followed every ``busy_s`` until the task ends, so the agent's standing back ends
  with Nova's operation.
* **``refresh_s`` passed**: one ``GET /servers/detail?host=…&changes-since=…`` (Nova's own
  ``updated_at``, which every task-state and status change moves) for what the host cannot
  sense: a task state just taken, a rebuild that kept the domain's name, a status change.
  An empty answer costs nothing more; a non-empty one is merged (a ``DELETED`` server
  dropped) and the host's ports are listed again.
* **``resync_s`` passed**: both listings in full, whatever the cache says. That heals what
  the change-based looks cannot see: a change stamped with a compute node's clock behind
  the marker's (the marker is moved back by ``overlap_s`` for that, but a clock may be
  further off), a port a tenant attached to a server without the server changing, a
  Neutron-side change nobody sensed.

A stale answer never lets Sova act against Nova: every attach, detach and migration reads
its server afresh first and refuses while Nova operates on it (``OpenStackActuator``'s
``_settled``); a stale pool is corrected by Nova's PCI claim (``no VF left``), after which the
view is invalidated like after any operation. The cost per agent and the defaults' reasons
are in docs/openstack.md#api-calls-per-hypervisor (benchmarks/openstack_calls.py).
"""

from __future__ import annotations

import threading
from collections.abc import Hashable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from sova.model import Inventory

DELETED = "DELETED"


def sensed_key(sensed: Inventory) -> Hashable:
    """What of the host's own view, changed, means Nova's and Neutron's may have changed."""
    return (
        sensed.host.nic.vf_pool,
        tuple(
            sorted(
                (name, s.running, s.nic.value, s.migrating, s.vf_index)
                for name, s in sensed.vms.items()
            )
        ),
    )


def _stamp(server: Any) -> datetime | None:
    """Nova's ``updated`` of a server, as an aware datetime (None when absent or unreadable)."""
    raw = getattr(server, "updated_at", None)
    if not raw:
        return None
    try:
        at = datetime.fromisoformat(str(raw).replace("Z", "+00:00"))
    except ValueError:
        return None
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


@dataclass
class CloudView:
    """The servers Nova places on ``host`` and the ports Neutron binds there, refreshed only
    when they may have changed (module docstring). ``calls`` counts the listings made."""

    conn: Any
    host: str
    refresh_s: float = 180.0
    resync_s: float = 900.0
    busy_s: float = 10.0
    overlap_s: float = 60.0  # changes-since is moved back by this: compute nodes' clocks
    calls: int = 0
    last_look: str = "none"  # "full", "changes", "cached": what the last look did
    _servers: dict[str, Any] | None = None
    _ports: list[Any] = field(default_factory=list)
    _key: Hashable = None
    _full_at: float = float("-inf")
    _changes_at: float = float("-inf")
    _marker: datetime | None = None
    _stale: bool = False
    _swept_at: float = float("-inf")
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def invalidate(self) -> None:
        """The next look lists everything again (an operation of the actuator ended)."""
        with self._lock:
            self._stale = True

    def sweep_due(self, now: float) -> bool:
        """Whether the actuator's leaked-port sweep should run now: once per ``resync_s``
        (the first look included), whatever the inventory rate (a bandwidth controller
        reads the inventory every second)."""
        if now - self._swept_at < self.resync_s:
            return False
        self._swept_at = now
        return True

    def has_server(self, server_id: str) -> bool:
        """Whether the last answer has ``server_id`` on this host."""
        return self._servers is not None and server_id in self._servers

    def look(self, sensed: Inventory, now: float) -> tuple[list[Any], list[Any]]:
        """The host's servers and the ports bound to it, from the cache or from Nova and
        Neutron, as the rules of the module docstring say."""
        key = sensed_key(sensed)
        with self._lock:
            stale, self._stale = self._stale, False
        if (
            stale
            or self._servers is None
            or key != self._key
            or now - self._full_at >= self.resync_s
        ):
            self._full(now)
        elif (self._busy() and now - self._changes_at >= self.busy_s) or (
            now - self._changes_at >= self.refresh_s
        ):
            self._changes(now)
        else:
            self.last_look = "cached"
        self._key = key
        assert self._servers is not None
        return list(self._servers.values()), list(self._ports)

    def _busy(self) -> bool:
        assert self._servers is not None
        return any(getattr(s, "task_state", None) is not None for s in self._servers.values())

    def _list_servers(self, **query: Any) -> list[Any]:
        self.calls += 1
        return list(
            self.conn.compute.servers(
                details=True, all_projects=True, compute_host=self.host, **query
            )
        )

    def _list_ports(self) -> None:
        self.calls += 1
        self._ports = list(self.conn.network.ports(**{"binding:host_id": self.host}))

    def _full(self, now: float) -> None:
        servers = self._list_servers()
        self._servers = {str(s.id): s for s in servers if _status(s) != DELETED}
        self._list_ports()
        self._marker = self._newest(servers, None)
        self._full_at = self._changes_at = now
        self.last_look = "full"

    def _changes(self, now: float) -> None:
        assert self._servers is not None
        self._changes_at = now
        if self._marker is None:
            # No server of the host carries a stamp to ask from: list them all (one
            # request, as the changes-since one would be).
            servers = self._list_servers()
            changed = {str(s.id) for s in servers} != set(self._servers) or any(
                _differs(s, self._servers.get(str(s.id))) for s in servers
            )
            self._servers = {str(s.id): s for s in servers if _status(s) != DELETED}
        else:
            since = (self._marker - timedelta(seconds=self.overlap_s)).isoformat()
            servers = self._list_servers(changes_since=since)
            changed = any(_differs(s, self._servers.get(str(s.id))) for s in servers)
            for s in servers:
                if _status(s) == DELETED or getattr(s, "compute_host", self.host) != self.host:
                    self._servers.pop(str(s.id), None)
                else:
                    self._servers[str(s.id)] = s
        self._marker = self._newest(servers, self._marker)
        if changed:
            self._list_ports()
        self.last_look = "changes"

    @staticmethod
    def _newest(servers: list[Any], marker: datetime | None) -> datetime | None:
        stamps = [t for t in (_stamp(s) for s in servers) if t is not None]
        if marker is not None:
            stamps.append(marker)
        return max(stamps) if stamps else None


def _status(server: Any) -> str:
    return str(getattr(server, "status", "") or "").upper()


def _differs(new: Any, old: Any) -> bool:
    """Whether ``new`` says something of the server ``old`` (None: unknown) did not."""
    if old is None:
        return True
    return any(
        getattr(new, a, None) != getattr(old, a, None)
        for a in ("updated_at", "status", "task_state", "compute_host", "launched_at")
    )
