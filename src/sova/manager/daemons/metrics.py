"""Prometheus metrics of both daemons, named by Prometheus conventions.

``sova_`` prefix, ``sova_agent_*`` / ``sova_manager_*`` per daemon, base units in the
name (``_seconds``, ``_bytes_per_second``, ``_ratio``), ``_total`` on counters. Each daemon
uses its own :class:`CollectorRegistry` so tests can build many of them in one process and
the dashboard in ``deploy/grafana-sova.json`` can rely on exactly these names.

Per-VM series (IF/NF, VF rate) are removed when a VM leaves the host, so a host with VM
churn does not accumulate dead series.
"""

from __future__ import annotations

import contextlib
import math
import platform
from collections.abc import Mapping
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    Info,
)
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

from sova import __version__
from sova.manager.daemons.planner_health import PlannerHealth
from sova.model import Inventory, NicKind

LOOP_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
REQUEST_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


def add_process_and_build_info(registry: CollectorRegistry, role: str) -> None:
    """``process_*`` (CPU, memory, fds, start time), ``python_*`` and ``sova_build_info``.

    The default registry gets these from prometheus_client; each daemon has its own
    registry (see the module docstring), so they are added here.
    """
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    Info("sova_build", "version of the running Sova daemon", registry=registry).info(
        {"version": __version__, "role": role, "python": platform.python_version()}
    )


class _BitsAsBytes:
    """The agent works in bit/s (as ``ip link`` and the papers do); Prometheus's base unit
    is bytes, so the gauge is ``…_bytes_per_second`` and values are divided by 8 here."""

    def __init__(self, gauge: Gauge) -> None:
        self.gauge = gauge

    def labels(self, *values: str) -> Any:
        child = self.gauge.labels(*values)

        class _Child:
            @staticmethod
            def set(bits: float) -> None:
                child.set(bits / 8)

        return _Child()

    def remove(self, *values: str) -> None:
        self.gauge.remove(*values)


class AgentMetrics:
    # One declaration per metric: a declarative schema, long by nature and capped in
    # tests/test_function_sizes.py rather than split.
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = self.registry = registry or CollectorRegistry()
        add_process_and_build_info(r, "agent")
        self.vf_holders = Gauge("sova_agent_vf_holders", "VMs holding a VF now", registry=r)
        self.vf_pool = Gauge("sova_agent_vf_pool", "VFs Sova may hand out", registry=r)
        self.vf_held = Gauge(
            "sova_agent_vf_held",
            "1 if the VM holds a VF (PQ), 0 if on virtio (GQ)",
            ["vm"],
            registry=r,
        )
        self.vf_rate = _BitsAsBytes(
            Gauge(
                "sova_agent_vf_max_rate_bytes_per_second",
                "VF tier: max_tx_rate of the VM's VF (0 = untiered)",
                ["vm"],
                registry=r,
            )
        )
        self.io_factor = Gauge(
            "sova_agent_io_factor", "Sova IF of the VM (eq. 1)", ["vm"], registry=r
        )
        self.net_factor = Gauge(
            "sova_agent_net_factor",
            "Sova NF of the VM (eq. 2-4), host-normalised",
            ["vm"],
            registry=r,
        )
        self.io_degree = Gauge(
            "sova_agent_io_degree", "DSR-IOV io_degree of the VM (eq. 3)", ["vm"], registry=r
        )
        self.net_degree = Gauge(
            "sova_agent_net_degree", "DSR-IOV net_degree of the VM (eq. 4-6)", ["vm"], registry=r
        )
        self.utilisation = Gauge(
            "sova_agent_host_utilisation_ratio",
            "host utilisation per resource over the last period",
            ["resource"],
            registry=r,
        )
        self.operation = Gauge(
            "sova_agent_vm_operation",
            "Operation Table (Alg. 1): 1 for the VM's current operation (VF, VNIC, VLM)",
            ["vm", "operation"],
            registry=r,
        )
        self.migrating = Gauge(
            "sova_agent_migrating_vms", "VMs labelled VLM (leaving this host)", registry=r
        )
        self.actions = Counter(
            "sova_agent_actions_total",
            "finished actions by kind and result (succeeded, failed, timeout, blocked, dry-run)",
            ["kind", "result"],
            registry=r,
        )
        self.loop_duration = Histogram(
            "sova_agent_loop_duration_seconds",
            "duration of one control period (sense, decide, plan, apply)",
            ["loop"],
            buckets=LOOP_BUCKETS,
            registry=r,
        )
        self.reports = Counter(
            "sova_agent_reports_total",
            "host reports sent to the manager by result",
            ["result"],
            registry=r,
        )
        self.skipped = Counter(
            "sova_agent_phases_skipped_total",
            "phases that decided nothing because the host could not be read (the driver "
            "failed: libvirt down or unreachable after bounded reconnect attempts); loop = "
            "control, bandwidth, poll or reconcile (adopting the host as found)",
            ["loop"],
            registry=r,
        )
        self.manager_up = Gauge(
            "sova_agent_manager_up", "1 if the last report reached the manager", registry=r
        )
        self.signals = Counter(
            "sova_agent_migration_signals_total", "flagged migration signals applied", registry=r
        )
        self.refused = Counter(
            "sova_agent_directives_refused_total",
            "directives refused for a field no manager sends (a bad target or VM name)",
            registry=r,
        )
        self.guarantee = Gauge(
            "sova_agent_vm_guarantee_bytes_per_second",
            "the VM's guaranteed minimum bandwidth (SLA; 0 = best effort)",
            ["vm"],
            registry=r,
        )
        self.limit = Gauge(
            "sova_agent_vm_limit_bytes_per_second",
            "the cap Sova enforces on the VM now (VF max rate or guest limit; 0 = none)",
            ["vm"],
            registry=r,
        )
        self._vms: set[str] = set()

    def export_sla(self, inv: Inventory) -> None:
        """Guarantee and enforced cap per VM: a cap below the guarantee is a missed one."""
        for vm, st in inv.vms.items():
            self.guarantee.labels(vm).set(st.vm.sla.bandwidth.minimum / 8)
            caps = [
                c
                for c in (st.vf_max_bps if st.nic is NicKind.VF else None, st.guest_limit_bps)
                if c and math.isfinite(c)
            ]
            self.limit.labels(vm).set(min(caps) / 8 if caps else 0.0)

    def turns(self) -> float:
        """Control, poll and bandwidth phases finished so far (the watchdog's progress)."""
        return sum(
            s.value
            for metric in self.loop_duration.collect()
            for s in metric.samples
            if s.name.endswith("_count")
        )

    def forget_missing(self, present: set[str]) -> None:
        per_vm = (
            self.vf_held,
            self.vf_rate,
            self.io_factor,
            self.net_factor,
            self.io_degree,
            self.net_degree,
            self.guarantee,
            self.limit,
        )
        for vm in self._vms - present:
            for g in per_vm:
                with contextlib.suppress(KeyError):  # never set for this VM
                    g.remove(vm)
            for op in ("VF", "VNIC", "VLM"):
                with contextlib.suppress(KeyError):
                    self.operation.remove(vm, op)
        self._vms = set(present)


class ManagerMetrics:
    # One declaration per metric: a declarative schema, long by nature and capped in
    # tests/test_function_sizes.py rather than split.
    def __init__(
        self, registry: CollectorRegistry | None = None, host_metrics: bool = True
    ) -> None:
        r = self.registry = registry or CollectorRegistry()
        add_process_and_build_info(r, "manager")
        self.host_metrics = host_metrics
        self.reports = Counter(
            "sova_manager_reports_total",
            "host reports by result (accepted, duplicate, rejected, unauthorized, too_large)",
            ["result"],
            registry=r,
        )
        self.request_duration = Histogram(
            "sova_manager_request_duration_seconds",
            "HTTP request duration by endpoint",
            ["endpoint"],
            buckets=REQUEST_BUCKETS,
            registry=r,
        )
        self.plan_duration = Histogram(
            "sova_manager_plan_duration_seconds",
            "one planning round (hotspot detection + Alg. 2) including persisting it",
            buckets=LOOP_BUCKETS,
            registry=r,
        )
        self.rounds = Counter("sova_manager_plan_rounds_total", "planning rounds run", registry=r)
        self.stalls = Counter(
            "sova_manager_stalls_total",
            "times this manager heard nothing for longer than an agent waits (its timers "
            "restarted after each)",
            registry=r,
        )
        self.report_protocols = Counter(
            "sova_manager_reports_by_protocol_total",
            "reports received by the agent's wire protocol version (0: unversioned, Sova 0.1); "
            "during a rolling upgrade, which agents are left to upgrade",
            ["protocol"],
            registry=r,
        )
        # The planner's health (issue 20): a manager whose rounds fail still serves
        # reports, so these (and /readyz) are how an operator learns it stopped planning.
        self.round_last_success = Gauge(
            "sova_manager_round_last_success_timestamp_seconds",
            "when the last planning round completed (manager wall clock)",
            registry=r,
        )
        self.round_last_duration = Gauge(
            "sova_manager_round_last_duration_seconds",
            "how long the last completed planning round took",
            registry=r,
        )
        self.round_failures = Gauge(
            "sova_manager_round_consecutive_failures",
            "planning rounds failed in a row (0 after a round completes)",
            registry=r,
        )
        self.round_failures_total = Counter(
            "sova_manager_round_failures_total", "planning rounds that failed", registry=r
        )
        self.hosts = Gauge(
            "sova_manager_hosts",
            "hosts that have reported, by state (fresh, or stale: silent beyond stale_after)",
            ["state"],
            registry=r,
        )
        self.last_report = Gauge(
            "sova_manager_host_last_report_timestamp_seconds",
            "when the host's last report was received (manager clock)",
            ["host"],
            registry=r,
        )
        self.hotspots = Gauge(
            "sova_manager_hotspots", "hosts found hot in the last round", registry=r
        )
        self.host_hot = Gauge(
            "sova_manager_host_hot", "1 if the host was hot in the last round", ["host"], registry=r
        )
        self.utilisation = Gauge(
            "sova_manager_host_utilisation_ratio",
            "host utilisation per resource, as last reported",
            ["host", "resource"],
            registry=r,
        )
        self.leases = Gauge("sova_manager_leases", "migrations in flight (leases held)", registry=r)
        self.migrations = Counter(
            "sova_manager_migrations_total",
            "migrations by result (signalled, succeeded, failed, timeout, declined, expired, withdrawn)",
            ["result"],
            registry=r,
        )
        self.open_plans = Gauge(
            "sova_manager_open_plans",
            "proposed plans awaiting an operator (recommend mode)",
            registry=r,
        )
        self.plans = Counter(
            "sova_manager_plans_total",
            "plans by what became of them (proposed, approved, rejected, expired, ...)",
            ["state"],
            registry=r,
        )
        self.fences = Gauge(
            "sova_manager_fences", "operator fences in force by kind", ["kind"], registry=r
        )
        self.decisions = Counter(
            "sova_manager_decisions_total",
            "logged decisions by verdict (migrate, no_migration)",
            ["verdict"],
            registry=r,
        )
        self.store_flush = Histogram(
            "sova_manager_store_write_duration_seconds",
            "one batched write to the knowledge store",
            buckets=LOOP_BUCKETS,
            registry=r,
        )
        self.store_errors = Counter(
            "sova_manager_store_errors_total", "failed writes to the knowledge store", registry=r
        )
        self.dropped_reports = Counter(
            "sova_manager_report_rows_dropped_total",
            "report rows dropped because the store fell behind",
            registry=r,
        )

    def round_completed(self, health: PlannerHealth) -> None:
        self.round_last_success.set(health.last_ok_wall or 0.0)
        self.round_last_duration.set(health.last_duration_s)
        self.round_failures.set(0)

    def round_failed(self) -> None:
        self.round_failures.inc()
        self.round_failures_total.inc()

    def new_host(self, host: str) -> None:
        """A host first heard of (its first report, or restored): not hot until a round
        finds it so."""
        if self.host_metrics:
            self.host_hot.labels(host).set(0.0)

    def set_utilisation(self, host: str, u: Mapping[str, float]) -> None:
        if self.host_metrics:
            for res, v in u.items():
                self.utilisation.labels(host, res).set(v)
