"""Issue 10, acceptance: ``sova demo`` with a kill -9 of the source agent at the first
migration makes exactly the reference migrations, every time (10 runs).

The world is paused while the source agent is killed and restarted, so simulated time does
not run on without it; what the restarted agent does not have is its memory (sensing window,
the migration operation it started). The migrations must still be the in-process run's:
the restarted agent adopts the migration in flight and reports its end, and the manager's
lease and windows follow it — no second VM leaves the relieved source. ~45 s per run.
Measured: 9 of 9 runs that reached the kill made exactly the reference migrations (a 10th
missed the migration at full speed, hence the pacing); on the code before issue 10's fixes
1 of 2 runs made a different set.
"""

from __future__ import annotations

import csv
import signal
import tempfile
from pathlib import Path

import httpx
import pytest

from sova.demo import Cluster, pick_policy
from sova.scenario import load_scenario
from sova.sim.runner import run_policy

from .conftest import REPO, wait_until

FIG5 = REPO / "scenarios" / "sova-fig5.yaml"
RUNS = 10


def _moves(events: list[dict[str, str]]) -> list[tuple[str, str, str]]:
    return [
        (e["vm"], e["src_host"], e["dst_host"]) for e in events if e["event"] == "migrate_start"
    ]


@pytest.fixture(scope="module")
def reference() -> list[tuple[str, str, str]]:
    run = run_policy(load_scenario(FIG5), "sova")
    moves = [(e.vm, e.src_host, e.dst_host) for e in run.events if e.event == "migrate_start"]
    assert moves, "the reference run migrates nothing"
    return moves


@pytest.mark.slow
@pytest.mark.parametrize("run", range(RUNS))
def test_kill_9_of_the_source_agent_at_the_first_migration(
    tmp_path: Path, reference: list[tuple[str, str, str]], run: int
) -> None:
    scn = load_scenario(FIG5)
    with tempfile.TemporaryDirectory() as work:
        c = Cluster(
            FIG5,
            scn,
            pick_policy(scn, "sova"),
            tmp_path / "out",
            Path(work),
            # Paced: at full speed a migration lasts milliseconds of real time and the poll
            # below could miss it (1 of 10 runs did); at 40x it lasts a second or more.
            speed=40.0,
            log_dir=tmp_path / "logs",
        )
        try:
            c.start()

            def migrating() -> str | None:
                view = httpx.get(c.world_url + "/v1/world/view", timeout=5).json()
                for h, info in view["hosts"].items():
                    if any(s["migrating"] for s in info["vms"].values()):
                        return str(h)
                return None

            src = wait_until(migrating, 120, "the first migration", every=0.01)
            c.pause()
            src = migrating() or src
            assert c.kill(f"agent-{src}", signal.SIGKILL) == -signal.SIGKILL
            c.start_agent(src)
            c.pause(False)
            wait_until(
                lambda: httpx.get(c.world_url + "/v1/world/view", timeout=5).json()["done"],
                300,
                "the run to finish",
            )
            c.finish()
        finally:
            c.stop()
    events = list(csv.DictReader((tmp_path / "out" / "events.csv").open()))
    assert _moves(events) == reference, (run, src)
