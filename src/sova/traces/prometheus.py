"""Per-VM network and CPU series from an operator's Prometheus (``sova scenario capture``).

The default names are the libvirt exporter's: interface byte counters per domain and
interface, the domain's CPU time and its vCPU count. Every name and label is an option, so
the node exporter's tap-device counters (``device=~"vnet.*"``) serve too. Rates are taken
by PromQL ``rate()`` over a window of one step, evaluated at the end of each step: the
value Prometheus returns for time ``t`` is the mean over ``(t - step, t]`` and goes into
the CSV row of the step that starts at ``t - step``.

Prometheus answers at most 11,000 points per series per query, so a long window is asked
for in pieces of :data:`MAX_POINTS` steps.
"""

from __future__ import annotations

import math
import ssl
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sova.traces.replay import TraceError, VMSeries

MAX_POINTS = 10_000


class CaptureError(TraceError):
    """Prometheus could not be reached, refused, or did not answer as its API does."""


@dataclass(frozen=True)
class Metrics:
    """Which series hold what; the defaults are the libvirt exporter's."""

    tx: str = "libvirt_domain_interface_stats_transmit_bytes_total"
    rx: str = "libvirt_domain_interface_stats_receive_bytes_total"
    cpu: str | None = "libvirt_domain_info_cpu_time_seconds_total"
    vcpus: str | None = "libvirt_domain_info_virtual_cpus"
    memory: str | None = "libvirt_domain_info_maximum_memory_bytes"
    vm_label: str = "domain"
    host_label: str = "instance"
    selector: str = ""  # extra label matchers, e.g. 'job="libvirt"'


@dataclass(frozen=True)
class Connection:
    """How to reach the Prometheus HTTP API."""

    url: str
    token: str | None = None  # bearer token
    ca_file: Path | None = None
    client_cert: Path | None = None
    client_key: Path | None = None
    timeout: float = 30.0


@dataclass
class Captured:
    """The per-VM series and the hosts they were seen on (as the host label reads)."""

    series: list[VMSeries]
    hosts: list[str]  # in order of first appearance
    start: float
    end: float
    step: float
    queries: int = 0
    notes: list[str] = field(default_factory=list)


def host_name(instance: str) -> str:
    """A scrape target's host: ``hv1:9177`` -> ``hv1``; ``[fe80::1]:9177`` -> ``fe80::1``."""
    if instance.startswith("["):
        return instance[1:].split("]", 1)[0]
    head, sep, tail = instance.rpartition(":")
    return head if sep and tail.isdigit() and ":" not in head else instance


class Prometheus:
    """A small client of the HTTP API's ``query_range`` and ``query`` endpoints."""

    def __init__(self, conn: Connection) -> None:
        import httpx

        headers = {"Accept": "application/json"}
        if conn.token:
            headers["Authorization"] = f"Bearer {conn.token}"
        try:
            tls = ssl.create_default_context(
                cafile=None if conn.ca_file is None else str(conn.ca_file)
            )
            if conn.client_cert is not None:
                tls.load_cert_chain(
                    str(conn.client_cert), None if conn.client_key is None else str(conn.client_key)
                )
        except (OSError, ssl.SSLError) as exc:
            raise CaptureError(f"cannot set up TLS for {conn.url}: {exc}") from None
        self.url = conn.url.rstrip("/")
        self.queries = 0
        self._client = httpx.Client(headers=headers, verify=tls, timeout=conn.timeout)

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> Prometheus:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _get(self, path: str, params: Mapping[str, str]) -> Any:
        import httpx

        self.queries += 1
        try:
            r = self._client.get(self.url + path, params=params)
        except httpx.HTTPError as exc:
            raise CaptureError(f"Prometheus {self.url}: {type(exc).__name__}: {exc}") from None
        try:
            body = r.json()
        except ValueError:
            raise CaptureError(
                f"Prometheus {self.url}{path}: HTTP {r.status_code}, not a Prometheus API answer"
            ) from None
        if r.status_code != 200 or not isinstance(body, dict) or body.get("status") != "success":
            what = body.get("error", r.reason_phrase) if isinstance(body, dict) else r.reason_phrase
            raise CaptureError(
                f"Prometheus {self.url}{path}: HTTP {r.status_code}: {what} "
                f"(query {params.get('query')!r})"
            )
        return body.get("data", {})

    def query_range(
        self, query: str, start: float, end: float, step: float
    ) -> list[tuple[dict[str, str], list[tuple[float, float]]]]:
        """Every series of ``query`` from ``start`` to ``end`` (inclusive) every ``step``."""
        merged: dict[tuple[tuple[str, str], ...], list[tuple[float, float]]] = {}
        k = 0
        total = int(math.floor((end - start) / step + 1e-9)) + 1
        while k < total:
            n = min(MAX_POINTS, total - k)
            a, b = start + k * step, start + (k + n - 1) * step
            data = self._get(
                "/api/v1/query_range",
                {"query": query, "start": _ts(a), "end": _ts(b), "step": f"{step:g}"},
            )
            if data.get("resultType") != "matrix":
                raise CaptureError(f"Prometheus {self.url}: {query!r} is not a range vector")
            for s in data.get("result", []):
                key = tuple(sorted(s.get("metric", {}).items()))
                merged.setdefault(key, []).extend(
                    (float(t), float(v)) for t, v in s.get("values", [])
                )
            k += n
        return [(dict(key), values) for key, values in merged.items()]

    def query(self, query: str, at: float) -> list[tuple[dict[str, str], float]]:
        data = self._get("/api/v1/query", {"query": query, "time": _ts(at)})
        if data.get("resultType") != "vector":
            raise CaptureError(f"Prometheus {self.url}: {query!r} is not an instant vector")
        return [(s.get("metric", {}), float(s["value"][1])) for s in data.get("result", [])]


def _ts(t: float) -> str:
    return f"{t:.3f}"


def capture(
    conn: Connection,
    start: float,
    end: float,
    step: float,
    metrics: Metrics = Metrics(),
    direction: str = "sum",
    rate_window: float | None = None,
) -> Captured:
    """Network demand (Mbit/s) and CPU share per VM, one value per step of the window.

    A VM is keyed by its host and name labels; a VM seen on several hosts one after the
    other (a live migration) is one VM, its demand summed over them and placed where it was
    seen most; one name on several hosts at once is a VM per host, ``name@host``.
    ``rate_window`` (default: the step) is the range ``rate()`` averages over.
    """
    if not (math.isfinite(start) and math.isfinite(end) and end > start):
        raise TraceError(f"the window must end after it starts (start {start}, end {end})")
    if not math.isfinite(step) or step <= 0:
        raise TraceError(f"step must be > 0 s, got {step!r}")
    if (end - start) / step < 1:
        raise TraceError(f"the window ({end - start:g} s) is shorter than one step ({step:g} s)")
    m = metrics
    notes: list[str] = []
    with Prometheus(conn) as prom:
        q = _Queries(prom, m, start, end, step, rate_window)
        wanted = {"rx": [m.rx], "tx": [m.tx], "sum": [m.rx, m.tx]}[direction]
        net, filled = q.network(wanted)
        if not net:
            raise TraceError(
                f"Prometheus {conn.url}: no series of {' or '.join(wanted)}{q.sel} with labels "
                f"{m.vm_label!r} and {m.host_label!r} from {_ts(start)} to {_ts(end)}"
            )
        vcpus, memory = q.peaks(m.vcpus), q.peaks(m.memory)
        cpu = q.cpu(net, vcpus, notes)
        queries = prom.queries
    rows = q.rows
    missing = sum(rows - len(filled[k]) for k in net)
    if missing:
        notes.append(f"{missing} step(s) without a sample were taken as 0 Mbit/s")
    times = [start + i * step for i in range(rows)]
    series = _merge_migrated(list(q.order), net, cpu, vcpus, memory, filled, times)
    hosts = list(dict.fromkeys(s.host for s in series if s.host))
    return Captured(series, hosts, start, start + rows * step, step, queries, notes)


class _Queries:
    """The queries of one capture: its window's steps, and each VM's key (host, name) in
    the order the answers first named it."""

    def __init__(
        self,
        prom: Prometheus,
        m: Metrics,
        start: float,
        end: float,
        step: float,
        rate_window: float | None,
    ) -> None:
        self.prom, self.m, self.start, self.end, self.step = prom, m, start, end, step
        self.by = f"{m.host_label}, {m.vm_label}"
        self.sel = "{" + m.selector + "}" if m.selector else ""
        # rate() over one step makes each row that step's mean; a wider window (for a scrape
        # interval longer than half the step) smooths over it instead of leaving gaps
        self.window = f"{max(int(round(rate_window or step)), 1)}s"
        # values at the ends of the steps: the first step starts at ``start``
        self.first = start + step
        self.last = start + math.floor((end - start) / step + 1e-9) * step
        self.rows = int(round((self.last - self.first) / step)) + 1
        self.order: dict[tuple[str, str], None] = {}  # keys in order of first appearance

    def key_of(self, labels: dict[str, str]) -> tuple[str, str] | None:
        vm = labels.get(self.m.vm_label)
        if not vm:
            return None
        host = labels.get(self.m.host_label) or "host"
        k = (host, vm)
        self.order.setdefault(k)
        return k

    def network(
        self, wanted: list[str]
    ) -> tuple[dict[tuple[str, str], list[float]], dict[tuple[str, str], set[int]]]:
        """Each VM's Mbit/s per step, summed over the ``wanted`` byte counters, and the
        steps that had a sample."""
        rows, first, step = self.rows, self.first, self.step
        net: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0] * rows)
        filled: dict[tuple[str, str], set[int]] = defaultdict(set)
        for metric in wanted:
            q = f"sum by ({self.by}) (rate({metric}{self.sel}[{self.window}]))"
            found = self.prom.query_range(q, first, self.last, step)
            for labels, values in found:
                k = self.key_of(labels)
                if k is None:
                    continue
                col = net[k]
                for t, v in values:
                    i = int(round((t - first) / step))
                    if 0 <= i < rows and math.isfinite(v):
                        col[i] += max(v, 0.0) * 8 / 1e6
                        filled[k].add(i)
        return net, filled

    def peaks(self, gauge: str | None) -> dict[tuple[str, str], int]:
        """Each VM's largest value of ``gauge`` over the window (none: not read)."""
        out: dict[tuple[str, str], int] = {}
        if gauge:
            span = int(self.end - self.start) + 1
            q = f"max by ({self.by}) (max_over_time({gauge}{self.sel}[{span}s]))"
            for labels, v in self.prom.query(q, self.end):
                k = self.key_of(labels)
                if k is not None and math.isfinite(v) and v >= 1:
                    out[k] = int(v)
        return out

    def cpu(
        self,
        net: dict[tuple[str, str], list[float]],
        vcpus: dict[tuple[str, str], int],
        notes: list[str],
    ) -> dict[tuple[str, str], list[float]]:
        """Each VM's CPU per step as a share of its vCPUs (of 1 where their count is not
        known, with a note), for the VMs that have network series."""
        m, rows, first, step = self.m, self.rows, self.first, self.step
        cpu: dict[tuple[str, str], list[float]] = {}
        if not m.cpu:
            return cpu
        q = f"sum by ({self.by}) (rate({m.cpu}{self.sel}[{self.window}]))"
        for labels, values in self.prom.query_range(q, first, self.last, step):
            k = self.key_of(labels)
            if k is None or k not in net:
                continue
            n_cpu = vcpus.get(k)
            if n_cpu is None:
                notes.append(f"{k[1]} on {k[0]}: no {m.vcpus}; CPU taken as a share of 1 vCPU")
                n_cpu = 1
            col = cpu.setdefault(k, [0.0] * rows)
            for t, v in values:
                i = int(round((t - first) / step))
                if 0 <= i < rows and math.isfinite(v):
                    col[i] = min(max(v / n_cpu, 0.0), 1.0)
        return cpu


# A live migration shows the VM on both hosts for a step or two; longer than this, two
# hosts' series of one name are two VMs (the node exporter's vnet0 on every host).
MIGRATION_OVERLAP = 2


def _merge_migrated(
    order: Sequence[tuple[str, str]],
    net: Mapping[tuple[str, str], list[float]],
    cpu: Mapping[tuple[str, str], list[float]],
    vcpus: Mapping[tuple[str, str], int],
    memory: Mapping[tuple[str, str], int],
    filled: Mapping[tuple[str, str], set[int]],
    times: list[float],
) -> list[VMSeries]:
    by_vm: dict[str, list[tuple[str, str]]] = {}
    for k in order:
        if k in net:
            by_vm.setdefault(k[1], []).append(k)
    groups: list[tuple[str, list[tuple[str, str]]]] = []
    for vm, keys in by_vm.items():
        apart = any(
            len(filled.get(a, set()) & filled.get(b, set())) > MIGRATION_OVERLAP
            for i, a in enumerate(keys)
            for b in keys[i + 1 :]
        )
        if apart:
            groups.extend((f"{vm}@{host_name(k[0])}", [k]) for k in keys)
        else:
            groups.append((vm, keys))
    out = []
    for vm, keys in groups:
        home = max(keys, key=lambda k: len(filled.get(k, ())))
        demand = [sum(net[k][i] for k in keys) for i in range(len(times))]
        share = None
        if any(k in cpu for k in keys):
            share = [min(sum(cpu[k][i] for k in keys if k in cpu), 1.0) for i in range(len(times))]
        out.append(
            VMSeries(
                vm,
                list(times),
                demand,
                share,
                vcpus=max((vcpus[k] for k in keys if k in vcpus), default=None),
                memory=max((memory[k] for k in keys if k in memory), default=None),
                host=home[0],
            )
        )
    return out
