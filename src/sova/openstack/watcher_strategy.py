"""Sova's hotspot detection and VM choice as a Watcher strategy (goal ``workload_balancing``).

Clouds that already run Watcher get Sova's decisions inside their audits and action plans:
this strategy reads Watcher's compute model and datasource, builds the same
:class:`~sova.policy.hotspot.HostReport` per compute node that Sova's manager builds from its
agents' reports, runs one round of the manager's planning pipeline over them
(:func:`~sova.manager.decisions.oneshot.plan_reports`: k-of-n + AR(1) hotspot test, largest-MF VM, cold
spot that stays below the ceiling, with the nodes a VM does not fit as its barred hosts;
docs/design.md#the-planning-pipeline) and emits one Watcher
``migrate`` action (``live``) per hot host that has a cold spot, none otherwise.

Where the inputs come from: a node's utilisation history is the datasource's
``host_cpu_usage`` and ``host_ram_usage`` over the last ``n`` granularity periods — the
series (``statistic_series``, Gnocchi) where the datasource has one, else derived from ``n``
nested means (``statistic_aggregation`` over 1..n periods, Prometheus, Aetos, Grafana, which
have no series); a VM's share is its ``instance_cpu_usage`` scaled by vCPUs, and its flavor
memory. Only ``active`` instances not tagged ``watcher_exclude`` (nor excluded by the audit's
``optimize`` metadata rule) may be moved, and only to a node whose free vCPUs, RAM and disk
(Watcher's model: capacity after allocation ratios, minus what its instances use) hold it.
The solution carries the ``workload_balancing`` goal's efficacy indicators: migrations, the
instances audited, and the spread (standard deviation) of node CPU use before and after.

Network: Watcher's datasources have no host or instance network meter, so with
``sova_url`` set (the ``[watcher_strategies.sova_hotspot]`` section of watcher.conf, with a
``viewer`` token of Sova's manager in ``sova_token_file``) each node's link use per report
and each VM's share of it come from Sova's manager (:mod:`sova.openstack.sova_loads`), and
the hotness (:mod:`sova.policy.hotness`) that judges a node hot and ranks its movers is over
CPU, memory and network, as in Sova's manager. A node the manager has no fresh view of is
then neither source nor target; an unreadable manager fails the audit. Without ``sova_url``
network load counts as 0 (CPU and memory only). VMs operators pinned in Sova never move.

VF holders: a server with a VF port bound on its node (Sova's fast path or a tenant's own
``direct``/``macvtap``/... port, read from Neutron as Sova's agent reads them:
:func:`~sova.orchestrator.openstack_cloud.split_vf_ports`) is never moved by this strategy.
Watcher's applier asks Nova for a plain live migration, which carries the VF port along:
Nova unplugs the VF before the guest's bond has moved its traffic to the virtio slave (Sova
moves it first), and needs a free VF on the target, which no one outside the target knows
(Nova reports no Neutron VFs in Placement; Sova's reports carry no pool): docs/openstack.md.

Installed through the ``watcher_strategies`` entry point ``sova_hotspot``; imports Watcher,
so it is only importable where Watcher is installed.
"""

from __future__ import annotations

import datetime
import math
import pathlib
from collections.abc import Iterable
from typing import Any

from oslo_config import cfg
from watcher.common import clients
from watcher.decision_engine.model import element
from watcher.decision_engine.strategy.strategies import base

from sova.manager.decisions.oneshot import plan_reports
from sova.openstack import sova_loads
from sova.openstack.sova_loads import HostNet, NetLoads
from sova.orchestrator.openstack_cloud import match_server, split_vf_ports
from sova.policy.hotspot import (
    HostReport,
    HotspotDetector,
    MigrationSignal,
    Utilisation,
    VMLoad,
)


def _unit(x: float) -> float:
    return min(1.0, max(0.0, float(x)))


class SovaHotspot(base.WorkloadStabilizationBaseStrategy):  # type: ignore[misc]
    """Sova Alg. 2 on Watcher's cluster model."""

    DATASOURCE_METRICS = [
        "host_cpu_usage",
        "host_ram_usage",
        "instance_cpu_usage",
    ]

    def __init__(self, config: Any, osc: Any = None) -> None:
        super().__init__(config, osc)
        self.signals: dict[str, MigrationSignal] = {}
        self.migrations = 0
        self.sd_before = 0.0
        self.sd_after = 0.0

    @classmethod
    def get_name(cls) -> str:
        return "sova_hotspot"

    @classmethod
    def get_display_name(cls) -> str:
        return "Sova hotspot migration"

    @classmethod
    def get_translatable_display_name(cls) -> str:
        return "Sova hotspot migration"

    @classmethod
    def get_config_opts(cls) -> list[Any]:
        return [
            *super().get_config_opts(),
            cfg.StrOpt("sova_url", help="Sova's manager (network loads); unset: network is 0"),
            cfg.StrOpt("sova_token_file", help="a file holding a viewer token of the manager"),
            cfg.StrOpt("sova_ca_file", help="CA bundle for an https sova_url"),
            cfg.FloatOpt("sova_timeout", default=5.0, min=0.1, help="seconds per request"),
        ]

    @classmethod
    def get_schema(cls) -> dict[str, Any]:
        return {
            "properties": {
                "alpha": {"type": "number", "default": 0.75, "minimum": 0, "maximum": 1},
                "k": {"type": "integer", "default": 3, "minimum": 1},
                "n": {"type": "integer", "default": 5, "minimum": 1},
                "metric": {"type": "string", "enum": ["volume", "skewness"], "default": "volume"},
                "ceiling": {"type": ["number", "null"], "default": None},
                "granularity": {"type": "integer", "default": 300, "minimum": 1},
            }
        }

    def _param(self, name: str) -> Any:
        params = self.input_parameters
        default = self.get_schema()["properties"][name]["default"]
        value = params.get(name, default) if hasattr(params, "get") else default
        return default if value is None and name != "ceiling" else value

    def pre_execute(self) -> None:
        self._pre_execute()

    def post_execute(self) -> None:
        self.solution.model = self.compute_model
        self.solution.set_efficacy_indicators(
            instance_migrations_count=self.migrations,
            instances_count=len(self.compute_model.get_all_instances()),
            standard_deviation_before_audit=self.sd_before,
            standard_deviation_after_audit=self.sd_after,
        )

    def do_execute(self, audit: Any = None) -> None:
        model = self.compute_model
        detector = HotspotDetector(
            int(self._param("k")), int(self._param("n")), float(self._param("alpha"))
        )
        nodes = {
            n.hostname: n
            for n in model.get_all_compute_nodes().values()
            if n.status == element.ServiceState.ENABLED.value
            and n.state == element.ServiceState.ONLINE.value
        }
        net = self._net_loads()
        cloud = clients.get_sdk_connection("watcher_clients_auth")
        reports: dict[str, HostReport] = {}
        movable: dict[str, Any] = {}
        for name, node in nodes.items():
            report = self._report(model, node, detector.n, movable, net, cloud)
            if report is not None:
                reports[name] = report
        # A VM may only go where Watcher's model says it fits (vCPU, RAM, disk).
        barred = {
            uuid: {name for name, node in nodes.items() if not _fits(model, inst, node)}
            for uuid, inst in movable.items()
        }
        self.signals = plan_reports(
            reports,
            detector,
            metric=str(self._param("metric")),
            ceiling=self._param("ceiling"),
            barred=barred,
        )
        cpu = {name: rep.history[-1].cpu for name, rep in reports.items() if rep.history}
        self.sd_before = _stdev(cpu.values())
        self.migrations = 0
        for src, sig in sorted(self.signals.items()):
            if sig.flag and sig.target and sig.vm:
                instance = model.get_instance_by_uuid(sig.vm)
                self.add_action_migrate(instance, "live", nodes[src], nodes[sig.target])
                self.migrations += 1
                share = reports[src].vms[sig.vm].util.cpu
                cpu[src] -= share
                cpu[sig.target] += share * nodes[src].vcpus / nodes[sig.target].vcpus
        self.sd_after = _stdev(cpu.values())

    # ------------------------------------------------------------------ inputs

    def _series(self, node: Any, meter: str, n: int) -> list[float]:
        gran = int(self._param("granularity"))
        ds = self.datasource_backend
        end = datetime.datetime.now(datetime.UTC)
        try:
            data = ds.statistic_series(
                resource=node,
                resource_type="compute_node",
                meter_name=meter,
                start_time=end - datetime.timedelta(seconds=gran * n),
                end_time=end,
                granularity=gran,
            )
        except NotImplementedError:
            return self._series_from_means(node, meter, n, gran)
        return [float(v) for _, v in sorted((data or {}).items())][-n:]

    def _series_from_means(self, node: Any, meter: str, n: int, gran: int) -> list[float]:
        """Per-period values from the means over the last 1, 2, …, n periods: the mean over
        i periods is the average of the i newest values, so the i-th newest value is
        ``i·M(i) − (i−1)·M(i−1)``. Oldest first; stops at the first period without data."""
        means: list[float] = []
        for i in range(1, n + 1):
            m = self.datasource_backend.statistic_aggregation(
                resource=node,
                resource_type="compute_node",
                meter_name=meter,
                period=gran * i,
                aggregate="mean",
                granularity=gran,
            )
            if m is None or (isinstance(m, float) and math.isnan(m)):
                break
            means.append(float(m))
        values = [(i + 1) * m - (i * means[i - 1] if i else 0.0) for i, m in enumerate(means)]
        return [max(0.0, v) for v in reversed(values)]

    def _net_loads(self) -> NetLoads | None:
        """Sova's manager's view of the network, or None where none is configured."""
        url = getattr(self.config, "sova_url", None)
        if not isinstance(url, str) or not url:
            return None
        token_file = getattr(self.config, "sova_token_file", None)
        if not isinstance(token_file, str) or not token_file:
            raise ValueError("sova_token_file: required with sova_url (a viewer token)")
        token = pathlib.Path(token_file).read_text(encoding="utf-8").strip()
        ca = getattr(self.config, "sova_ca_file", None)
        return sova_loads.read(
            url,
            token,
            timeout_s=float(getattr(self.config, "sova_timeout", 5.0)),
            ca_file=ca if isinstance(ca, str) and ca else None,
        )

    def _report(
        self,
        model: Any,
        node: Any,
        n: int,
        movable: dict[str, Any],
        net: NetLoads | None,
        cloud: Any,
    ) -> HostReport | None:
        cpu = self._series(node, "host_cpu_usage", n)
        ram_kib = self._series(node, "host_ram_usage", n)
        seen = None if net is None else net.of(node.hostname)
        link = [0.0] * n if net is None else list(seen.series if seen else ())
        if not cpu or not ram_kib or not link or not node.memory or not node.vcpus:
            return None  # no observations: neither source nor target (as in Sova's manager)
        m = min(len(cpu), len(ram_kib), len(link))
        history = tuple(
            Utilisation(_unit(c / 100.0), _unit(r / (node.memory * 1024.0)), _unit(x))
            for c, r, x in zip(cpu[-m:], ram_kib[-m:], link[-m:], strict=True)
        )
        gran = int(self._param("granularity"))
        instances = model.get_node_instances(node)
        if getattr(self.config, "check_optimize_metadata", False):
            instances = self.filter_instances_by_audit_tag(instances)
        ours, theirs = split_vf_ports(cloud.network.ports(**{"binding:host_id": node.hostname}))
        candidates = [
            inst
            for inst in instances
            if inst.state == element.InstanceState.ACTIVE.value
            and not inst.watcher_exclude
            and inst.uuid not in ours
            and inst.uuid not in theirs
        ]
        vm_net, pinned = _vm_net(seen, instances, cloud, node.hostname)
        vms: dict[str, VMLoad] = {}
        for inst in candidates:
            if not inst.memory or inst.uuid in pinned:
                continue
            movable[inst.uuid] = inst
            usage = self.datasource_backend.get_instance_cpu_usage(inst, gran, "mean", gran)
            vms[inst.uuid] = VMLoad(
                Utilisation(
                    _unit((usage or 0.0) / 100.0 * inst.vcpus / node.vcpus),
                    _unit(inst.memory / node.memory),
                    _unit(vm_net.get(inst.uuid, 0.0)),
                ),
                int(inst.memory) * 1024 * 1024,
            )
        return HostReport(history, vms)


def _vm_net(
    seen: HostNet | None, instances: Iterable[Any], cloud: Any, host: str
) -> tuple[dict[str, float], set[str]]:
    """Each instance's share of its node's link and the instances pinned, by UUID, from
    Sova's view of the node. Sova names a VM as its host does (the libvirt domain name, or
    the UUID): a name that is no instance's UUID is looked up in Nova's servers of the node
    (one listing, only then) as Sova's agent matches them, libvirt's name first. Never by
    display name here: a tenant may name a server ``instance-00000003``."""
    if seen is None:
        return {}, set()
    uuids = {str(inst.uuid) for inst in instances}
    servers: list[Any] | None = None

    def uuid_of(vm: str) -> str | None:
        nonlocal servers
        if vm in uuids:
            return vm
        if servers is None:
            servers = list(
                cloud.compute.servers(details=True, all_projects=True, compute_host=host)
            )
        server = match_server(servers, vm)
        return None if server is None else str(server.id)

    shares: dict[str, float] = {}
    for vm, share in seen.vms.items():
        uuid = uuid_of(vm)
        if uuid is not None:
            shares[uuid] = share
    pinned = {u for u in map(uuid_of, seen.pinned) if u is not None}
    return shares, pinned


def _fits(model: Any, instance: Any, node: Any) -> bool:
    free = model.get_node_free_resources(node)
    return bool(
        free["vcpu"] >= instance.vcpus
        and free["memory"] >= instance.memory
        and free["disk"] >= instance.disk
    )


def _stdev(values: Any) -> float:
    xs = [float(v) for v in values]
    if not xs:
        return 0.0
    mean = sum(xs) / len(xs)
    return math.sqrt(sum((x - mean) ** 2 for x in xs) / len(xs))
