"""The namespaces themselves: build, both paths answer, and teardown leaves nothing."""

from __future__ import annotations

import os
import subprocess
from typing import Any

import pytest

from sova.testbed.scenario import parse_testbed_scenario
from sova.testbed.topology import (
    SINK_IP,
    Names,
    Topology,
    list_namespaces,
    netns_inodes,
    pids_in,
    teardown,
)


def scenario(**extra: Any) -> Any:
    data = {
        "name": "topo",
        "duration": "5s",
        "link": {"capacity": "1Gbit", "vf_pool": 1},
        "vms": [{"name": "a"}, {"name": "b"}],
    }
    data.update(extra)
    return parse_testbed_scenario(data)


def ns_exec(ns: str, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["ip", "netns", "exec", ns, *argv], capture_output=True, text=True, timeout=20, check=False
    )


def test_prefix_must_be_short_and_plain() -> None:
    with pytest.raises(ValueError, match="prefix"):
        Names("toolong-")
    with pytest.raises(ValueError, match="prefix"):
        Names("sv")  # without its dash, "sv" would match "svc-..." of someone else


def test_up_builds_every_namespace_and_both_paths_answer(prefix: str) -> None:
    topo = Topology(scenario(), prefix)
    topo.up()
    try:
        n = topo.names
        assert set(list_namespaces(prefix)) == {
            n.host_ns,
            n.sink_ns,
            *(v.ns for v in topo.vms.values()),
        }
        a = topo.vms["a"]
        # On virtio from the start: the VM reaches the sink through the bridge and the relay.
        assert topo.path_works(a, "virtio")
        assert ns_exec(a.ns, "ping", "-c", "1", "-W", "2", SINK_IP).returncode == 0
        assert topo.relay_pids(), "the virtio backend runs as a process in the host namespace"
        # The VF is not plugged until attached.
        assert not topo.path_works(a, "vf", tries=1)
        topo.plug_vf(a, True)
        assert topo.path_works(a, "vf")
        # The port: HTB at the link rate on the uplink.
        out = subprocess.run(
            ["tc", "-n", n.host_ns, "class", "show", "dev", n.uplink],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout
        assert "rate 1Gbit" in out
    finally:
        teardown(prefix)
    assert list_namespaces(prefix) == []


def test_teardown_kills_what_runs_inside_and_frees_the_namespaces(prefix: str) -> None:
    topo = Topology(scenario(), prefix)
    topo.up()
    a = topo.vms["a"]
    # A process left behind in a VM (a stray iperf3 or ping after a crash).
    stray = subprocess.Popen(
        ["ip", "netns", "exec", a.ns, "ping", "-q", SINK_IP],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    inodes = set(netns_inodes(prefix).values())
    assert pids_in(inodes)
    removed = teardown(prefix)
    assert set(removed) >= {topo.names.host_ns, a.ns}
    assert stray.wait(timeout=10) is not None
    assert pids_in(inodes) == []
    assert list_namespaces(prefix) == []
    # Nothing of ours was ever in the root namespace.
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, timeout=10).stdout
    assert prefix not in links
    assert (
        not any(n.startswith(prefix) for n in os.listdir("/run/netns"))
        if os.path.isdir("/run/netns")
        else True
    )


def test_up_replaces_a_stale_testbed_instead_of_failing(prefix: str) -> None:
    Topology(scenario(), prefix).up()
    topo = Topology(scenario(), prefix)
    topo.up()  # the first one was never torn down (a crash)
    try:
        assert topo.path_works(topo.vms["b"], "virtio")
    finally:
        teardown(prefix)
