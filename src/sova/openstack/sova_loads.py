"""Network load of each compute node and of its VMs, read from Sova's manager for the Watcher
strategy (:mod:`sova.openstack.watcher_strategy`).

Watcher's datasources have no host or instance network meter, and Sova's agents measure
exactly that (each host's link use and each candidate VM's share of it, as shares of the
host's NIC capacity), so the strategy asks Sova's manager with a ``viewer`` credential
(read-only): ``GET /v1/cluster/history`` for each host's link use in the reports the
planner holds (the hot-spot window, oldest first) and ``GET /v1/cluster`` for each host's
freshness, its candidate VMs' loads and its operators' pins. A host the manager calls stale
is left out (no decision from stale input): to the strategy it has no network data.

Here rather than in the strategy's module so that it runs without Watcher installed (the
main suite parses the manager's own answers with it); the layers keep it from importing the
manager's schema, hence the checks by hand, each refusal one line naming the field.
"""

from __future__ import annotations

import json
import math
import ssl
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

# The wire schema's bound on a share (measurement noise may put a busy link a little over 1).
MAX_SHARE = 1.05
PAGE = 10_000  # the manager's largest page


@dataclass(frozen=True)
class HostNet:
    """One host as Sova's manager sees it: its link use per report held, oldest first, each
    candidate VM's share of that link (by the VM's host-side name), the VMs operators
    pinned (never moved)."""

    series: tuple[float, ...]
    vms: Mapping[str, float] = field(default_factory=dict)
    pinned: frozenset[str] = frozenset()


@dataclass(frozen=True)
class NetLoads:
    hosts: Mapping[str, HostNet]

    def of(self, host: str) -> HostNet | None:
        return self.hosts.get(host)


def _share(where: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{where}: not a number: {value!r}")
    x = float(value)
    if not (math.isfinite(x) and 0.0 <= x <= MAX_SHARE):
        raise ValueError(f"{where}: {value!r} is not a share in [0, {MAX_SHARE}]")
    return x


def _rows(answer: Any, where: str) -> list[dict[str, Any]]:
    rows = answer.get("hosts") if isinstance(answer, dict) else None
    if not isinstance(rows, list) or not all(
        isinstance(r, dict) and isinstance(r.get("host"), str) for r in rows
    ):
        raise ValueError(f"{where}.hosts: not a list of hosts: {str(rows)[:200]}")
    return rows


def parse(cluster: Any, history: Any) -> NetLoads:
    """The loads in the manager's answers to ``GET /v1/cluster`` and ``/v1/cluster/history``
    (their JSON, decoded); ValueError names the first field that is not what they promise."""
    fresh: dict[str, dict[str, Any]] = {}
    for row in _rows(cluster, "cluster"):
        if row.get("state") == "fresh":
            fresh[row["host"]] = row
    hosts: dict[str, HostNet] = {}
    for row in _rows(history, "cluster/history"):
        name = row["host"]
        view = fresh.get(name)
        if view is None:
            continue
        net = row.get("net")
        if not isinstance(net, list):
            raise ValueError(f"cluster/history.{name}.net: not a list: {net!r}")
        series = tuple(_share(f"cluster/history.{name}.net[{i}]", v) for i, v in enumerate(net))
        vms_raw = view.get("vms")
        if not isinstance(vms_raw, dict):
            raise ValueError(f"cluster.{name}.vms: not a mapping: {vms_raw!r}")
        vms = {}
        for vm, use in vms_raw.items():
            got = use.get("net") if isinstance(use, dict) else None
            vms[str(vm)] = _share(f"cluster.{name}.vms.{vm}.net", got)
        pinned = view.get("pinned_vms", [])
        if not isinstance(pinned, list):
            raise ValueError(f"cluster.{name}.pinned_vms: not a list: {pinned!r}")
        hosts[name] = HostNet(series, vms, frozenset(str(p) for p in pinned))
    return NetLoads(hosts)


def _get(url: str, headers: Mapping[str, str], timeout_s: float, ca_file: str | None) -> Any:
    """One GET, its JSON decoded. The standard library's client: an audit makes two requests
    (one per page), and Watcher's process then needs no other HTTP library."""
    ctx = ssl.create_default_context(cafile=ca_file) if url.startswith("https:") else None
    req = urllib.request.Request(url, headers=dict(headers))
    with urllib.request.urlopen(req, timeout=timeout_s, context=ctx) as r:
        return json.loads(r.read())


def read(
    url: str,
    token: str,
    *,
    timeout_s: float,
    ca_file: str | None = None,
    get: Callable[[str, Mapping[str, str], float, str | None], Any] = _get,
) -> NetLoads:
    """Both answers from the manager at ``url`` (every page), parsed. Raises OSError
    (``urllib.error.URLError``, a timeout) when the manager cannot be read: the audit fails
    rather than decide without the network side; ValueError on an answer out of its schema."""
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"sova_url: not an http(s) URL: {url!r}")
    headers = {"Authorization": f"Bearer {token}"}

    def pages(path: str) -> dict[str, Any]:
        rows: list[Any] = []
        offset = 0
        while True:
            query = urllib.parse.urlencode({"offset": offset, "limit": PAGE})
            answer = get(f"{url.rstrip('/')}{path}?{query}", headers, timeout_s, ca_file)
            got = _rows(answer, path.removeprefix("/v1/"))
            rows += got
            if len(got) < PAGE:
                return {**answer, "hosts": rows}
            offset += PAGE

    return parse(pages("/v1/cluster"), pages("/v1/cluster/history"))
