"""API requests per second that Sova's agents cost an OpenStack cloud, at 1,000 hypervisors.

    .venv/bin/python benchmarks/openstack_calls.py --agents 50 --hours 2

Runs ``--agents`` real ``OpenStackActuator``s (the agent's path: ``OrchestratedDriver``'s
inventory each control period, plus each bandwidth period when ``--bandwidth-period`` is
set, and the actuator's own operations) against the in-memory cloud of the unit tests
(tests/openstack/fakecloud.py: Nova's servers with ``updated`` stamps and changes-since,
Neutron's ports, the PCI claim), for ``--hours`` of simulated time, and counts every call
each agent makes on the SDK's proxies. One proxy call is one HTTP request here: every
listing is of one host's servers or ports, far below Nova's and Neutron's page size
(1,000), and tier_nova's ``test_change_based_view_sees_nova_at_one_request_per_look`` checks, at the transport
of a real openstacksdk connection to Nova, that a full look, a changes-since look and a
cached period cost 1, 1 and 0 requests to Nova.

The cloud moves under the agents: ``--nova-ops`` operations of Nova's per host per hour
(a boot, a delete, a stop and start, a resize to another host or a rebuild, drawn at
random, seeded) and ``--vf-changes`` attaches or detaches of a Sova VF per host per hour,
which the agents perform through Nova and Neutron (their calls are counted too).

1,000 hypervisors are not run: requests/s at 1,000 is the measured per-agent rate times
1,000. That holds because every agent's requests are about its own host (servers and
ports by host, its own operations); the one cloud-wide request, the sweep's
``ports?tags=sova-vf`` once per agent per ``resync_s``, is counted once per agent like the
others (its *answer* grows with the fleet's Sova ports). Keystone is not in the count:
each agent's session asks for a token once per token lifetime (1 h by default), 0.28
requests/s at 1,000 agents, printed apart.

Prints, for the listing at every inventory (``refresh_s = 0``, what agents did before the
change-based view) and for the view with the shipped defaults, requests per agent per hour,
split into listings, sweep and operations, and the extrapolation to 1,000 hypervisors.
"""

from __future__ import annotations

import argparse
import random
import sys
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "openstack"))

from fakecloud import NOVA_OPS, FakeCloud, FakeCloudError, FakeCloudTimeout

from sova.driver.base import OpState
from sova.model import NIC, VM, AttachVF, DetachVF, Host, Inventory, NicKind, VMState
from sova.orchestrator.openstack import OpenStackActuator
from sova.orchestrator.openstack_cloud import SOVA_TAG
from sova.orchestrator.openstack_view import CloudView
from sova.orchestrator.settings import OpenStackOptions


class Counted:
    """One SDK proxy whose every call is counted under the agent's host."""

    def __init__(self, proxy: Any, tally: Counter[str], kind: str) -> None:
        self._proxy, self._tally, self._kind = proxy, tally, kind

    def __getattr__(self, name: str) -> Any:
        fn = getattr(self._proxy, name)

        def call(*args: Any, **kw: Any) -> Any:
            what = "sweep" if name == "ports" and "tags" in kw else self._tally_kind(name, kw)
            self._tally[what] += 1
            return fn(*args, **kw)

        return call

    def _tally_kind(self, name: str, kw: dict[str, Any]) -> str:
        by_host = name == "servers" and "compute_host" in kw or "binding:host_id" in kw
        return "listing" if by_host else "other"


class Conn:
    def __init__(self, cloud: FakeCloud, tally: Counter[str]) -> None:
        self.compute = Counted(cloud.compute, tally, "compute")
        self.network = Counted(cloud.network, tally, "network")
        self.placement = Counted(cloud.placement, tally, "placement")


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s


def sensed(cloud: FakeCloud, host: str, pool: int) -> Inventory:
    """What libvirt shows on ``host``: a domain per server Nova placed there, running unless
    stopped, with a VF where a direct port is bound."""
    vf = {p.device_id for p in cloud.ports.values() if p.binding_vnic_type == "direct"}
    vms = {
        s.name: VMState(
            VM(s.name, 2, 1 << 30),
            nic=NicKind.VF if s.id in vf else NicKind.VIRTIO,
            running=s.status != "SHUTOFF",
        )
        for s in cloud.servers.values()
        if s.compute_host == host
    }
    return Inventory(Host(host, 64, 256 << 30, NIC("pf0", 25e9, pool)), vms)


def nova_op(cloud: FakeCloud, rng: random.Random, host: str, hosts: list[str], n: int) -> None:
    """One of Nova's own operations on ``host``, as an operator or a tenant would start it;
    it runs to its end between two periods, as most do."""
    mine = [s for s in cloud.servers.values() if s.compute_host == host]
    kind = rng.choice(["boot", "delete", "stop_start", "resize", "rebuild"])
    if kind == "boot" or not mine:
        cloud.add_server(f"{host}-vm{n}", host)
        return
    s = rng.choice(mine)
    if kind == "delete":
        cloud.delete_server(s.id)
    elif kind == "stop_start":
        s.status = "SHUTOFF" if s.status == "ACTIVE" else "ACTIVE"
    else:
        op = "resize" if kind == "resize" else "rebuild"
        cloud.begin(s.id, op)
        try:
            cloud.end(
                s.id,
                op,
                rng.choice([h for h in hosts if h != host]) if NOVA_OPS[op].moves else None,
            )
        except FakeCloudError:
            return  # no VF on the target: Nova's scheduler refused, the server stays
        if op == "resize":
            cloud.servers[s.id].status = "ACTIVE"  # confirmed


def run(args: argparse.Namespace, refresh_s: float) -> tuple[Counter[str], float]:
    rng = random.Random(args.seed)
    hosts = [f"cmp{i:04d}" for i in range(args.agents)]
    cloud = FakeCloud(vfs_per_host=dict.fromkeys(hosts, args.vfs))
    for h in hosts:
        for i in range(args.vms):
            cloud.add_server(f"{h}-vm{i}", h)
    tally: Counter[str] = Counter()
    conn = Conn(cloud, tally)
    clock = Clock()
    opts = OpenStackOptions()
    agents = {
        h: OpenStackActuator(
            conn,
            h,
            errors=(FakeCloudError,),
            timeouts=(FakeCloudTimeout,),
            spawn=lambda fn: fn(),
            clock=clock,
            sleep=lambda s: None,  # operations' polls take no simulated time here
            view=(
                None
                if refresh_s == 0
                else CloudView(conn, h, refresh_s=refresh_s, resync_s=opts.resync_s)
            ),
        )
        for h in hosts
    }
    step = args.bandwidth_period or args.period
    per_period = round(args.period / step)
    ticks = int(args.hours * 3600 / step)
    p_op = args.nova_ops * step / 3600.0
    p_vf = args.vf_changes * step / 3600.0
    n = args.vms
    for tick in range(ticks):
        clock.t = tick * step
        for h, act in agents.items():
            if rng.random() < p_op:
                n += 1
                nova_op(cloud, rng, h, hosts, n)
            act.reconcile(sensed(cloud, h, args.vfs))  # every inventory the agent reads
            if tick % per_period == 0 and rng.random() < p_vf * per_period:
                mine = [s for s in cloud.servers.values() if s.compute_host == h]
                holders = [
                    s.name
                    for s in mine
                    if any(p.device_id == s.id and SOVA_TAG in p.tags for p in cloud.ports.values())
                ]
                if holders and (len(holders) >= args.vfs or rng.random() < 0.5):
                    action: Any = DetachVF(rng.choice(holders))
                elif mine:
                    action = AttachVF(rng.choice([s.name for s in mine if s.name not in holders]))
                else:
                    continue
                st = act.poll(act.submit(action))
                tally["failed operations"] += st.state is not OpState.SUCCEEDED
    return tally, args.hours * 3600.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--agents", type=int, default=50)
    ap.add_argument("--hours", type=float, default=2.0)
    ap.add_argument("--vms", type=int, default=12, help="servers per host at the start")
    ap.add_argument("--vfs", type=int, default=4, help="VFs per host")
    ap.add_argument("--period", type=float, default=10.0, help="the agent's control period, s")
    ap.add_argument(
        "--bandwidth-period",
        type=float,
        default=0.0,
        help="the bandwidth controller's period, s (0: none, the default bandwidth_policy)",
    )
    ap.add_argument("--nova-ops", type=float, default=2.0, help="Nova operations/host/hour")
    ap.add_argument("--vf-changes", type=float, default=2.0, help="Sova VF ops/host/hour")
    ap.add_argument("--seed", type=int, default=39)
    ap.add_argument("--fleet", type=int, default=1000, help="hypervisors to extrapolate to")
    args = ap.parse_args()
    opts = OpenStackOptions()
    print(
        f"{args.agents} agents, {args.hours:g} h simulated, period {args.period:g} s"
        + (f", bandwidth period {args.bandwidth_period:g} s" if args.bandwidth_period else "")
        + f", {args.vms} servers and {args.vfs} VFs per host, {args.nova_ops:g} Nova operations"
        f" and {args.vf_changes:g} Sova VF changes per host per hour"
    )
    for label, refresh in (
        ("listing at every inventory (refresh_s = 0, before)", 0.0),
        (
            f"change-based view (refresh_s = {opts.refresh_s:g}, resync_s = {opts.resync_s:g})",
            opts.refresh_s,
        ),
    ):
        tally, seconds = run(args, refresh)
        per_agent_s = {
            k: v / args.agents / seconds for k, v in tally.items() if k != "failed operations"
        }
        total = sum(per_agent_s.values())
        parts = ", ".join(f"{k} {v * 3600:.1f}" for k, v in sorted(per_agent_s.items()))
        print(f"\n{label}")
        print(f"  per agent per hour: {total * 3600:.1f} requests ({parts})")
        print(f"  failed operations: {tally['failed operations']}")
        print(f"  at {args.fleet:,} hypervisors: {total * args.fleet:.1f} requests/s")
    print(
        f"\nplus Keystone tokens (1 h lifetime): {args.fleet / 3600:.2f} requests/s at {args.fleet:,}"
    )


if __name__ == "__main__":
    main()
