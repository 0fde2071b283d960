"""Issue 24 acceptance: ``sova host drain`` empties a host through the real daemons.

A world of four simulated hosts, ``sova manager`` with placement rules and one ``sova
agent`` per host (the processes ``sova demo`` runs); the operator drains H1 (six VMs) with
the ``sova`` CLI as a subprocess. The planner sends one VM a round to the cold spots it
picks; the test watches the world itself (not the manager) and checks at every look that
the rules hold: P and Q (anti-affinity) never share a host once one has moved, R (must: rack-b = H3, H4) is
never anywhere else. ~20-40 s.
"""

from __future__ import annotations

import csv
import time
from pathlib import Path

import pytest

from .conftest import DATA, running_cluster, world_view
from .test_operator_cli import sova

SCENARIO = DATA / "drain-six.yaml"
PLACEMENT = """
[placement]
[placement.host_groups]
rack-b = ["H3", "H4"]

[[placement.rules]]
name = "pq-apart"
kind = "anti-affinity"
vms = ["P", "Q"]

[[placement.rules]]
name = "r-on-rack-b"
kind = "vm-host-must"
vms = ["R"]
group = "rack-b"
"""


@pytest.mark.slow
def test_a_host_with_six_vms_drains_through_the_daemons(tmp_path: Path) -> None:
    with running_cluster(
        SCENARIO,
        tmp_path,
        speed=20.0,
        manager_extra_toml=PLACEMENT,
        show_logs="manager.log",
        start={"paused": True},
    ) as c:
        out = sova(c, "host", "drain", "H1", "-m", "firmware")
        assert "H1: draining" in out, out
        c.pause(False)
        deadline = time.monotonic() + 150
        looks = 0
        while True:
            view = world_view(c)
            where = {vm: h for h, hv in view["hosts"].items() for vm in hv["vms"]}
            looks += 1
            # They start together on H1 (the rule governs moves): never together elsewhere.
            assert where["P"] != where["Q"] or where["P"] == "H1", f"anti-affinity: {where}"
            assert where["R"] in ("H1", "H3", "H4"), f"vm-host-must broken: {where}"
            if not view["hosts"]["H1"]["vms"]:
                break
            assert not view["done"], f"the run ended with H1 still holding {where}"
            assert time.monotonic() < deadline, f"H1 not drained in 150 s: {where}"
            time.sleep(0.1)
        status = sova(c, "host", "drain", "H1", "--status")
        c.finish()
    assert looks > 10, "the placement was looked at during the drain, not only at its end"
    assert "H1: drained" in status and "moves done: 6, failed: 0" in status, status
    with (c.out / "events.csv").open() as f:
        moves = [
            (e["vm"], e["src_host"], e["dst_host"])
            for e in csv.DictReader(f)
            if e["event"] == "migrate_start"
        ]
    assert sorted(vm for vm, _, _ in moves) == ["P", "Q", "R", "S", "T", "U"], moves
    assert all(src == "H1" and dst != "H1" for _, src, dst in moves), moves
