"""Build and tear down the namespace testbed: one host, one sink, one namespace per VM.

Why this shape (see docs/testbed.md for the picture):

* The **host** namespace owns everything an operator's hypervisor and NIC would: the
  uplink (a veth to the sink whose egress HTB is the NIC port at its line rate), a Linux
  bridge, the *virtio backend* and one *VF path* per VM.
* The **port** is an HTB class at the link rate with one drop-tail FIFO for all traffic,
  so TCP flows share it per flow, the way a multi-queue NIC's round-robin over its queues
  does: a VM with five streams takes about five sixths from a VM with one stream. That is
  the premise of DAQS Fig. 3, and a per-VM fair port would hide the whole problem. Where
  the profile says the NIC supports ``min_tx_rate``, a VF with a minimum gets its own HTB
  class on the port whose *rate* is that minimum.
* A **VF path** is a veth pair straight into the host namespace. The VF's own transmit
  limiter (``max_tx_rate``) sits in series *before* the port, as in a NIC: the VM's
  packets are redirected at the host-side veth's ingress into an IFB whose HTB class has
  ``ceil = max_tx_rate`` (this kernel has no clsact, skbedit or fq, but ingress + u32 +
  mirred + IFB + HTB are there).
* The **virtio path** goes VM veth -> bridge -> TAP -> a userspace relay process -> TAP ->
  host routing -> port. The relay (``sova.testbed.relay``) copies every frame through
  user space, so virtio traffic really costs host CPU per packet and adds latency, and it
  is shared by all VMs on virtio like a hypervisor's backend.
* **Failover** keeps the VM's address: it lives on the VM's loopback, and both paths are
  routes to the same gateway role. Attaching a VF adds a lower-metric default route via
  the VF (and the host a lower-metric return route), detaching deletes them, so traffic
  falls back to the virtio routes that are always present. No bonding driver exists here;
  route metric switching is the honest equivalent of active-backup, and TCP connections
  survive it because neither end's address changes.
* The **sink** namespace stands for the remote clients: iperf3 servers and a per-VM IFB
  that counts what each VM really delivered over the port (kernel counters, read with
  pyroute2 by the runner).

Every object carries the prefix (default ``sv-``): namespaces are named with it and all
links, qdiscs and processes live inside those namespaces, so :func:`teardown` finds and
removes everything by name, also after a crash, a Ctrl-C or ``kill -9`` of a run. The
naming, commands, discovery, teardown and shapers are in :mod:`sova.testbed.plumbing`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from sova.testbed.plumbing import (
    CMD_TIMEOUT_S,
    DEFAULT_PREFIX,
    MTU_FRAME,
    NETNS_DIR,
    PREFIX_RE,
    SINK_IP,
    STATE_DIR,
    UPLINK_HOST_IP,
    VF_METRIC,
    VIRTIO_GW,
    VIRTIO_METRIC,
    Names,
    TestbedError,
    VMPlumbing,
    bits,
    exclusive,
    htb_change_lines,
    htb_lines,
    ip_batch,
    list_namespaces,
    netns_inodes,
    netns_pids,
    pids_in,
    rtnl,
    run_cmd,
    sysctl,
    tc_batch,
    teardown,
)
from sova.testbed.scenario import TestbedScenario

# Importers of the testbed's names find them here as before; the plumbing is its own module.
__all__ = [
    "CMD_TIMEOUT_S",
    "DEFAULT_PREFIX",
    "MTU_FRAME",
    "NETNS_DIR",
    "Names",
    "PREFIX_RE",
    "SINK_IP",
    "STATE_DIR",
    "TestbedError",
    "Topology",
    "UPLINK_HOST_IP",
    "VF_METRIC",
    "VIRTIO_GW",
    "VIRTIO_METRIC",
    "VMPlumbing",
    "bits",
    "exclusive",
    "htb_change_lines",
    "htb_lines",
    "ip_batch",
    "list_namespaces",
    "netns_inodes",
    "netns_pids",
    "pids_in",
    "require_root",
    "rtnl",
    "run_cmd",
    "sysctl",
    "tc_batch",
    "teardown",
]


# --------------------------------------------------------------------------- topology


class Topology:
    """The namespaces of one scenario; :meth:`up` builds, :func:`teardown` removes."""

    def __init__(self, scn: TestbedScenario, prefix: str = DEFAULT_PREFIX) -> None:
        self.scn = scn
        self.names = Names(prefix)
        self.vms = {v.name: self.names.vm(v.name, i) for i, v in enumerate(scn.vms)}
        self.capacity_bps = scn.link.capacity
        self.queue = scn.link.queue
        self._guest_htb: set[str] = set()  # VMs with an HTB inside (DAQS-style limits)

    # ----------------------------------------------------------------- build

    def up(self) -> None:
        """Build everything from nothing; anything half-built is removed on failure."""
        teardown(self.names.prefix)
        STATE_DIR.mkdir(parents=True, exist_ok=True)
        try:
            self._namespaces()
            self._uplink()
            self._sink()
            self._backend()
            for vm in self.vms.values():
                self._vm(vm)
            self._check_backend()
            self._write_state()
        except BaseException:
            teardown(self.names.prefix)
            raise

    def _namespaces(self) -> None:
        n = self.names
        for ns in [n.host_ns, n.sink_ns, *(v.ns for v in self.vms.values())]:
            run_cmd(["ip", "netns", "add", ns])
            # IPv6 off before any link exists: no router solicitations or DAD in counters.
            # rp_filter off: during a path switch a VM's packets briefly arrive on one path
            # while the route back still points at the other.
            sysctl(
                ns,
                {
                    "net.ipv6.conf.all.disable_ipv6": "1",
                    "net.ipv6.conf.default.disable_ipv6": "1",
                    "net.ipv4.conf.all.rp_filter": "0",
                    "net.ipv4.conf.default.rp_filter": "0",
                    "net.ipv4.ip_forward": "1" if ns == n.host_ns else "0",
                },
            )
            ip_batch(ns, ["link set lo up"])

    def _uplink(self) -> None:
        n, c = self.names, self.capacity_bps
        ip_batch(
            n.host_ns,
            [
                f"link add {n.uplink} type veth peer name up0 netns {n.sink_ns}",
                f"addr add {UPLINK_HOST_IP}/30 dev {n.uplink}",
                f"link set {n.uplink} up",
            ],
        )
        # The NIC port: link rate, one FIFO shared per flow (class 1:2), and room for
        # per-VF min-rate classes (1:1xx) where the NIC supports min_tx_rate.
        tc_batch(
            n.host_ns,
            [
                f"qdisc add dev {n.uplink} root handle 1: htb default 2",
                f"class add dev {n.uplink} parent 1: classid 1:1 htb rate {bits(c)} "
                f"ceil {bits(c)} quantum 60000",
                f"class add dev {n.uplink} parent 1:1 classid 1:2 htb rate {bits(c)} "
                f"ceil {bits(c)} quantum 60000",
                f"qdisc add dev {n.uplink} parent 1:2 handle 2: pfifo limit {self.queue}",
            ],
        )

    def _sink(self) -> None:
        n = self.names
        ip_batch(
            n.sink_ns,
            [
                f"addr add {SINK_IP}/30 dev up0",
                "link set up0 up",
                f"route add 10.99.0.0/16 via {UPLINK_HOST_IP}",
            ]
            + [f"link add {v.sink_ifb} type ifb" for v in self.vms.values()]
            + [f"link set {v.sink_ifb} up" for v in self.vms.values()],
        )
        # Per-VM delivered bytes: each VM's packets take a detour through its own IFB
        # (which returns them to up0's ingress untouched) so that IFB's counters are it.
        # The IFB's own qdisc counts what passes in segments (GSO-aware), which is what
        # the port's HTB counts too; a roomy FIFO so the counter never drops anything.
        tc_batch(
            n.sink_ns,
            ["qdisc add dev up0 handle ffff: ingress"]
            + [f"qdisc add dev {v.sink_ifb} root pfifo limit 10000" for v in self.vms.values()]
            + [
                f"filter add dev up0 parent ffff: protocol ip prio {10 + v.index} u32 "
                f"match ip src {v.ip}/32 action mirred egress redirect dev {v.sink_ifb}"
                for v in self.vms.values()
            ],
        )

    def _backend(self) -> None:
        n = self.names
        ip_batch(n.host_ns, [f"link add {n.bridge} type bridge", f"link set {n.bridge} up"])
        STATE_DIR.mkdir(parents=True, exist_ok=True)
        log = (STATE_DIR / f"{n.prefix}relay.log").open("ab")
        # Started through `ip netns exec` so the process lives in the host namespace and
        # `teardown` finds it there; its own session so a Ctrl-C of `sova testbed up`
        # does not take the backend with it.
        subprocess.Popen(
            [
                "ip",
                "netns",
                "exec",
                n.host_ns,
                sys.executable,
                "-m",
                "sova.testbed.relay",
                n.relay_port,
                n.relay_host,
            ],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
        log.close()
        deadline = time.monotonic() + 10.0
        while time.monotonic() < deadline:
            out = run_cmd(["ip", "-n", n.host_ns, "-o", "link", "show"]).stdout
            if f" {n.relay_port}:" in out and f" {n.relay_host}:" in out:
                break
            time.sleep(0.05)
        else:
            raise TestbedError("the virtio relay did not create its TAP devices in 10 s")
        ip_batch(
            n.host_ns,
            [
                f"link set {n.relay_port} master {n.bridge}",
                f"link set {n.relay_port} up",
                f"addr add {VIRTIO_GW}/24 dev {n.relay_host}",
                f"link set {n.relay_host} up",
            ],
        )

    def _vm(self, vm: VMPlumbing) -> None:
        n, c = self.names, self.capacity_bps
        ip_batch(
            n.host_ns,
            [
                f"link add {vm.vf_host_if} type veth peer name {vm.vf_dev} netns {vm.ns}",
                f"link add {vm.tap_if} type veth peer name {vm.virtio_dev} netns {vm.ns}",
                f"link add {vm.vf_ifb} type ifb",
                f"link add {vm.tap_ifb} type ifb",
                f"addr add {vm.vf_host_ip}/30 dev {vm.vf_host_if}",
                f"link set {vm.vf_host_if} up",
                f"link set {vm.vf_ifb} up",
                f"link set {vm.tap_ifb} up",
                f"link set {vm.tap_if} master {n.bridge}",
                f"link set {vm.tap_if} up",
                f"route add {vm.ip}/32 via {vm.virtio_ip} dev {n.relay_host} "
                f"metric {VIRTIO_METRIC}",
            ],
        )
        tc_batch(
            n.host_ns,
            htb_lines(vm.vf_ifb, c, None, self.queue)
            + htb_lines(vm.tap_ifb, c, None, self.queue)
            + [
                f"qdisc add dev {vm.vf_host_if} handle ffff: ingress",
                f"filter add dev {vm.vf_host_if} parent ffff: protocol all prio 1 u32 "
                f"match u32 0 0 action mirred egress redirect dev {vm.vf_ifb}",
                f"qdisc add dev {vm.tap_if} handle ffff: ingress",
                f"filter add dev {vm.tap_if} parent ffff: protocol all prio 1 u32 "
                f"match u32 0 0 action mirred egress redirect dev {vm.tap_ifb}",
            ],
        )
        # The VF stays down ("not plugged") until attached.
        ip_batch(
            vm.ns,
            [
                f"addr add {vm.ip}/32 dev lo",
                f"addr add {vm.vf_vm_ip}/30 dev {vm.vf_dev}",
                f"addr add {vm.virtio_ip}/24 dev {vm.virtio_dev}",
                f"link set {vm.virtio_dev} up",
                f"route add default via {VIRTIO_GW} dev {vm.virtio_dev} src {vm.ip} "
                f"metric {VIRTIO_METRIC}",
            ],
        )

    def _check_backend(self) -> None:
        for vm in self.vms.values():
            if not self.path_works(vm, "virtio"):
                raise TestbedError(f"VM {vm.name}: virtio path does not answer after build")

    def _write_state(self) -> None:
        state = {
            "prefix": self.names.prefix,
            "scenario": self.scn.name,
            "namespaces": list_namespaces(self.names.prefix),
            "built_at": time.time(),
        }
        tmp = self.names.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=2) + "\n")
        os.replace(tmp, self.names.state_file)

    # ----------------------------------------------------------------- paths

    def path_works(self, vm: VMPlumbing, path: str, tries: int = 3) -> bool:
        """Does the VM reach its gateway over ``path`` ("vf" or "virtio") right now?

        A ping bound to the path's device, so it answers for that path only whatever the
        routes prefer. On the virtio path the reply crosses the bridge and the relay: a
        dead backend fails this check, which is what keeps a VF from being detached.
        """
        dev, gw = (vm.vf_dev, vm.vf_host_ip) if path == "vf" else (vm.virtio_dev, VIRTIO_GW)
        for _ in range(tries):
            proc = run_cmd(
                ["ip", "netns", "exec", vm.ns, "ping", "-n", "-q", "-c", "1", "-W", "1"]
                + ["-I", dev, gw],
                check=False,
                timeout=5,
            )
            if proc.returncode == 0:
                return True
        return False

    def use_vf(self, vm: VMPlumbing) -> None:
        """Move the VM's traffic onto its VF path (the VF is plugged and answers)."""
        n = self.names
        # Return path first, then the VM's egress: both paths work during the switch, so
        # neither order loses packets; this one keeps ACKs and data on the same path sooner.
        ip_batch(
            n.host_ns,
            [f"route replace {vm.ip}/32 via {vm.vf_vm_ip} dev {vm.vf_host_if} metric {VF_METRIC}"],
        )
        ip_batch(
            vm.ns,
            [
                f"route replace default via {vm.vf_host_ip} dev {vm.vf_dev} src {vm.ip} "
                f"metric {VF_METRIC}"
            ],
        )

    def use_virtio(self, vm: VMPlumbing) -> None:
        """Move the VM's traffic back onto virtio (the backup routes are always there)."""
        n = self.names
        run_cmd(
            ["ip", "-n", vm.ns, "route", "del", "default", "via", vm.vf_host_ip]
            + ["dev", vm.vf_dev, "metric", str(VF_METRIC)],
            check=False,
        )
        run_cmd(
            ["ip", "-n", n.host_ns, "route", "del", f"{vm.ip}/32", "via", vm.vf_vm_ip]
            + ["dev", vm.vf_host_if, "metric", str(VF_METRIC)],
            check=False,
        )

    def plug_vf(self, vm: VMPlumbing, up: bool) -> None:
        ip_batch(vm.ns, [f"link set {vm.vf_dev} {'up' if up else 'down'}"])

    def set_vf_limit(self, vm: VMPlumbing, rate_bps: float, pps: float | None) -> None:
        """The VF's transmit limiter (``ip link set PF vf N max_tx_rate``)."""
        tc_batch(self.names.host_ns, htb_change_lines(vm.vf_ifb, rate_bps, pps))

    def set_virtio_limit(self, vm: VMPlumbing, rate_bps: float, pps: float | None) -> None:
        """Host-side shaping of the virtio path (libvirt ``<bandwidth>`` on the tap)."""
        tc_batch(self.names.host_ns, htb_change_lines(vm.tap_ifb, rate_bps, pps))

    def set_guest_limit(self, vm: VMPlumbing, rate_bps: float | None, pps: float | None) -> None:
        """HTB inside the VM on both its NICs, as DAQS's guest agent applies it."""
        if rate_bps is None:
            for dev in (vm.vf_dev, vm.virtio_dev):
                # Deleting a root qdisc that is not there is an error: one at a time.
                run_cmd(["tc", "-n", vm.ns, "qdisc", "del", "dev", dev, "root"], check=False)
            self._guest_htb.discard(vm.name)
            return
        lines: list[str] = []
        for dev in (vm.vf_dev, vm.virtio_dev):
            # HTB cannot be "replaced" by itself (the kernel has no change op for it):
            # build it once, then change its classes.
            if vm.name in self._guest_htb:
                lines += htb_change_lines(dev, rate_bps, pps)
            else:
                lines += htb_lines(dev, rate_bps, pps, self.queue)
        tc_batch(vm.ns, lines)
        self._guest_htb.add(vm.name)

    def set_min_rate(self, vm: VMPlumbing, vf_index: int, min_bps: float | None) -> None:
        """A VF's guaranteed rate as its own HTB class on the port (min_tx_rate)."""
        n, c = self.names, self.capacity_bps
        minor = f"{0x100 + vf_index:x}"
        prio = 100 + vf_index
        run_cmd(
            ["tc", "-n", n.host_ns, "filter", "del", "dev", n.uplink, "parent", "1:"]
            + ["protocol", "ip", "prio", str(prio)],
            check=False,
        )
        run_cmd(
            ["tc", "-n", n.host_ns, "class", "del", "dev", n.uplink, "classid", f"1:{minor}"],
            check=False,
        )
        if min_bps:
            tc_batch(
                n.host_ns,
                [
                    f"class add dev {n.uplink} parent 1:1 classid 1:{minor} htb "
                    f"rate {bits(min_bps)} ceil {bits(c)} quantum 60000",
                    f"qdisc add dev {n.uplink} parent 1:{minor} pfifo limit {self.queue}",
                    f"filter add dev {n.uplink} parent 1: protocol ip prio {prio} u32 "
                    f"match ip src {vm.ip}/32 flowid 1:{minor}",
                ],
            )

    def relay_pids(self) -> list[int]:
        out = []
        for pid in netns_pids(self.names.host_ns):
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if b"sova.testbed.relay" in cmdline:
                out.append(pid)
        return out


def require_root(tools: Sequence[str] = ("ip", "tc", "iperf3", "ping")) -> str | None:
    """Why the testbed cannot run here, or None."""
    if os.geteuid() != 0:
        return "needs root (network namespaces, tc)"
    for tool in tools:
        if run_cmd(["sh", "-c", f"command -v {tool}"], check=False, timeout=5).returncode != 0:
            return f"needs {tool} (apt-get install iproute2 iperf3 iputils-ping)"
    return None
