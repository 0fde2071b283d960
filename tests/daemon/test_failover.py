"""Issue 20, acceptance: two managers on PostgreSQL, 50 agents reporting; kill -9 of the
leader at the first migration; the standby plans within 2 periods; no directive is issued
twice or lost; the old leader, restarted, follows.

Real processes as ``sova demo`` runs them (the simulated-cluster world server, ``sova
agent --driver remote`` per host), except that the manager is two ``sova manager``
processes on one PostgreSQL schema and every agent is given both URLs. 50 hosts of two VMs
each; five hosts are hot from the start and five more from t = 80 s, so directives are
issued both before and after the takeover. The world pauses itself at the first tick with
a VM migrating (its breakpoint): the leader is killed there, mid-migration, every run.

Counted at the end, from the store and the world: every migration the world started has
exactly one migration row (lease) in the store with the same VM, source and target, and
every row whose migration ran has exactly one start in the world (none issued twice, none
lost); decision ids are unique; the new leader issued directives of its own.

"Within 2 periods" is simulated time (the manager's clock is the agents', as in the demo):
from the kill (the world's time at the breakpoint) to the new leader's first round.

On 2 cores shared with other work, agents whose first call to the world timed out while
50 interpreters started are restarted (as their unit's ``Restart=on-failure`` would) and
counted; ``SOVA_FAILOVER_HOSTS`` / ``SOVA_FAILOVER_RUNS`` set the size and the runs.

Measured: 50 agents (the 300 s scenario of the first version; load average 30-60 from
other work on the machine): kill at t = 50 s, the standby led 6.3 s (wall) later, its first
round at t = 60 s (1 period), 10 migrations, each once in the world and once in the store,
19 agent restarts at start-up; 16.5 min for the run, so the repeated runs are at 20 agents.

20 agents, one core kept busy by ``yes``, load average 16-24 from other work: 5 of 5 runs
passed (stopped there for time: 3.5-9 min per run on this machine, so 10 runs did not fit
the session): kill at t = 50 s every run (the breakpoint); the standby led 3.4-8.1 s (wall)
after the kill (5.5, 5.1, 8.1, 3.4, 3.8); its first round at t = 60 s in every run (1
period; the bound is 2); 10 migrations every run, each once in the world and once in the
store, all succeeded; 0-5 agent restarts per run.

The acceptance series, ``SOVA_FAILOVER_RUNS=10 SOVA_FAILOVER_HOSTS=50`` with one core kept
busy (``python -c 'while True: pass'``) and load average 14-58 from other work (five
helpers, the failover benchmark at up to 10,000 hosts): on the code with durable answers
and the agents' report patience (before the warm standby), 5 of 5 runs passed, stopped
there by the session's deadline (11-16 min a run, 64 min for the 5): kill at t = 50 s
every run (the breakpoint); the standby led 2.7-5.5 s (wall) after the kill (2.7, 3.9,
5.2, 2.9, 5.5); its first round at t = 60 s every run (1 period); 10 migrations every
run, 50 in all: each started once in the world and has one row in the store — issued
twice 0, lost 0 — all succeeded; 0-15 agent restarts per run (start-up timeouts). One
more run of the same size on the final code (warm standby): passed in 6 min, the standby
led 1.3 s after the kill, first round at t = 60 s, 10 migrations, none twice or lost.
Four more on the merged main (``SOVA_FAILOVER_RUNS=4``; no extra busy process, but the
fresh-clone ``.ci/run`` and a nested lab ran beside it, load average 10-19): 4 of 4 passed
in 18 min 20 s; the standby led 0.6, 1.7, 0.6 and 0.6 s after the kill; first round at
t = 60 s every run; 10 migrations each, none twice or lost; 4-11 agent restarts. So ten
50-agent runs, all passed: 5 on the code before the warm standby, 5 on the final code.
"""

from __future__ import annotations

import collections
import contextlib
import csv
import os
import shutil
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa

from sova.demo import Cluster, manager_toml, pick_policy
from sova.manager.daemons.service.store import Store
from sova.scenario import load_scenario

from .conftest import REPO, free_port, wait_until, world_view
from .test_leadership import needs_pg, pg_schema

# The suite (and CI) runs one 20-agent run; the acceptance series is
# ``SOVA_FAILOVER_RUNS=10 SOVA_FAILOVER_HOSTS=50`` (minutes per run, see above).
RUNS = int(os.environ.get("SOVA_FAILOVER_RUNS", "1"))
HOSTS = int(os.environ.get("SOVA_FAILOVER_HOSTS", "20"))
PERIOD_S = 10.0


def scenario_yaml(n: int) -> str:
    """``n`` hosts of two VMs; hosts 0-4 hot from the start, 5-9 from t = 80 s (a host's
    link use is half the sum of its VMs' shares, sova-fig5's arithmetic: 0.5 x (0.7 + 0.5)
    = 0.6 > ceiling 0.5; cold hosts 0.5 x 0.2 = 0.1, so a 0.35 VM fits on any of them)."""
    hosts = [f"H{i:02d}" for i in range(n)]
    lines = [
        "name: failover",
        "seed: 20",
        "duration: 170s",
        "tick: 1s",
        "profile: sova",
        "hosts:",
    ]
    for h in hosts:
        lines.append(
            f"  - {{name: {h}, cores: 16, memory: 64GiB, "
            f"nic: {{name: eth0, capacity: 10Gbit, vf_pool: 0}}, vms: [{h}a, {h}b]}}"
        )
    lines.append("vms:")
    lines += [f"  - {{name: {h}{s}, memory: 512MiB}}" for h in hosts for s in "ab"]

    def stage(at: str, hot: list[str]) -> list[str]:
        out = [f"  - at: {at}", "    vms:"]
        for h in hosts:
            a, b = (0.7, 0.5) if h in hot else (0.1, 0.1)
            out.append(f"      {h}a: {{net: {a}, rate: 5Gbit}}")
            out.append(f"      {h}b: {{net: {b}, rate: 5Gbit}}")
        return out

    lines += ["workload:", *stage("0", hosts[:5]), *stage("80s", hosts[:10])]
    lines += [
        "controller:",
        f"  period: {PERIOD_S:g}s",
        "  vf_policy: sova",
        "  manager:",
        "    alpha: 0.375",
        "    ceiling: 0.5",
    ]
    return "\n".join(lines) + "\n"


class TwoManagerCluster(Cluster):
    """``sova demo``'s processes with two managers on one PostgreSQL store."""

    db_url: str = ""
    ports: list[int]
    leader: int = 0
    restarts: int = 0  # agents restarted after they exited (see supervise)

    @property
    def manager_url(self) -> str:
        return f"http://127.0.0.1:{self.ports[self.leader]}"

    def start_manager(self) -> None:
        for i in range(2):
            self.start_one(i)
            if i == 0:
                wait_until(lambda: role(self.ports[0])[0] == "leader", 120, "m0 to lead")

    def start_one(self, i: int) -> None:
        cfg = self.workdir / f"m{i}.toml"
        text = manager_toml(self.scn, self.tokens, Path("x"), self.ports[i], self.admin_token)
        text = text.replace('database_url = "sqlite:///x"', f'database_url = "{self.db_url}"')
        cfg.write_text(text)
        self._spawn(f"m{i}", ["-m", "sova.cli_daemons", "manager", "--config", str(cfg)])

    def start_agent(self, host: str) -> None:
        env = {
            "SOVA_TOKEN": self.tokens[host],
            "SOVA_RECORD_TO_WORLD": "true",
            "SOVA_REPORT_DECIMALS": "17",
            "SOVA_MANAGER_URL": ",".join(f"http://127.0.0.1:{p}" for p in self.ports),
        }
        args = ["-m", "sova.cli_daemons", "agent", "--driver", "remote"]
        args += ["--connect", self.world_url, "--host", host]
        self._spawn(f"agent-{host}", args, env)


def role(port: int) -> tuple[str | None, int | None]:
    try:
        body = httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).json()
    except (httpx.HTTPError, ValueError):
        return None, None
    return body.get("role"), body.get("epoch")


@contextlib.contextmanager
def cluster(tmp: Path, url: str) -> Iterator[TwoManagerCluster]:
    scn_path = tmp / "failover.yaml"
    scn_path.write_text(scenario_yaml(HOSTS))
    (tmp / "profiles").mkdir()
    shutil.copy(REPO / "scenarios" / "profiles" / "sova.yaml", tmp / "profiles")
    scn = load_scenario(scn_path)
    import tempfile

    with tempfile.TemporaryDirectory() as work:
        c = TwoManagerCluster(
            scn_path, scn, pick_policy(scn, "sova"), tmp / "out", Path(work), log_dir=tmp / "logs"
        )
        c.db_url, c.ports = url, [free_port(), free_port()]
        # 50 agents starting on 2 busy cores take minutes to join; the world waits for them.
        c.agent_timeout_s = 20.0
        try:
            yield c
        finally:
            c.stop()
            for name in ("m0", "m1", "world"):
                log = tmp / "logs" / f"{name}.log"
                if log.exists():
                    print(f"----- {name}.log\n{log.read_text()[-4000:]}")


def world_start(c: TwoManagerCluster) -> None:
    """The world (paused at its first tick, breakpoint armed), both managers, the agents;
    unpaused once every agent has joined."""
    args = ["-m", "sova.sim.world_server", str(c.scn_path), "--port", str(c.world_port)]
    args += ["--policy", "sova", "--out", str(c.out), "--agent-timeout", "20"]
    args += ["--start-timeout", "900"]
    c._spawn("world", args)
    c.wait_ready(c.world_url + "/v1/world", "world", 120)
    c.pause_at_migration()
    c.pause()
    c.start_manager()
    wait_until(lambda: role(c.ports[1]) == ("standby", 1), 120, "m1 to stand by")
    for h in c.scn.hosts:
        c.start_agent(h.name)
        time.sleep(0.2)  # 50 interpreters starting at once starve the world's answers
    wait_until(
        lambda: supervise(c) or len(world_view(c)["live_agents"]) == HOSTS,
        900,
        "every agent to join",
        every=1,
    )
    c.pause(False)


def supervise(c: TwoManagerCluster) -> bool:
    """Restart agents that exited, as their unit's Restart=on-failure would (on 2 loaded
    cores an agent's first call to the world can time out); returns False."""
    for h in c.scn.hosts:
        p = c.procs[f"agent-{h.name}"]
        if p.poll() is not None:
            c.restarts += 1
            c.start_agent(h.name)
    return False


@pytest.mark.slow
@needs_pg
@pytest.mark.parametrize("run", range(RUNS))
def test_kill_9_of_the_leader_mid_migration(tmp_path: Path, run: int) -> None:
    with pg_schema("failover") as (url, _schema, _admin), cluster(tmp_path, url) as c:
        world_start(c)
        wait_until(
            lambda: supervise(c) or world_view(c)["paused"], 900, "the first migration", every=0.5
        )
        t_kill = float(world_view(c)["now"])
        assert c.kill("m0", signal.SIGKILL) == -signal.SIGKILL
        wall_kill = time.monotonic()
        c.pause(False)
        wait_until(lambda: role(c.ports[1]) == ("leader", 2), 120, "m1 to take over", every=0.1)
        takeover_wall_s = time.monotonic() - wall_kill
        c.leader = 1
        c.start_one(0)  # the old leader, restarted
        wait_until(lambda: role(c.ports[0]) == ("standby", 2), 120, "m0 to follow")
        wait_until(
            lambda: supervise(c) or world_view(c)["done"], 1800, "the run to finish", every=1
        )
        c.finish()

        store = Store(url)
        try:
            rows = store.migration_rows()
            with store.engine.connect() as conn:
                ids = [i for (i,) in conn.execute(sa.text("SELECT id FROM decisions"))]
                first_new = conn.execute(
                    sa.text("SELECT min(time_s) FROM decisions WHERE time_s > :t"),
                    {"t": t_kill},
                ).scalar()
        finally:
            store.close()
    events = list(csv.DictReader((tmp_path / "out" / "events.csv").open()))
    starts = collections.Counter(
        (e["vm"], e["src_host"], e["dst_host"]) for e in events if e["event"] == "migrate_start"
    )
    ran = collections.Counter(
        (r["vm"], r["src"], r["dst"])
        for r in rows
        if r["result"] in ("succeeded", "failed", "timeout", "signalled")
    )
    print(
        f"run {run}: kill at t={t_kill:.0f} s, takeover {takeover_wall_s:.1f} s wall, new "
        f"leader's first round at t={first_new}, {sum(starts.values())} migrations, rows "
        f"{collections.Counter(r['result'] for r in rows)}, {c.restarts} agent restart(s)"
    )
    assert len(ids) == len(set(ids))
    assert starts == ran, (starts, rows)  # none issued twice, none lost
    assert max(starts.values()) == 1, starts  # no VM moved twice along one path
    assert first_new is not None and first_new - t_kill <= 2 * PERIOD_S, (t_kill, first_new)
    after = [r for r in rows if r["started_s"] > t_kill]
    assert after, "the new leader issued no directive"
