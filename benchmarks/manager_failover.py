"""Takeover under load: two ``sova manager`` processes on one PostgreSQL store, the leader
killed (SIGKILL) mid-run while simulated hosts report.

    SOVA_TEST_PG_URL=postgresql+psycopg://... \\
    .venv/bin/python benchmarks/manager_failover.py --hosts 10000 --period 10 --duration 60

Each simulated host sends one report per period at its own phase (open loop, the driver
of benchmarks/manager_load.py: 10,000 hosts at 10 s = 1,000 reports/s) to the manager it
last reached; a report that is refused (503 from a standby) or gets no answer goes to the
other manager after 0.25 s, again and again, as the agent's ``report_patience_s`` does
(``--patience``, default half the period, the agent's default); one no manager took by
then counts as **lost**. The leader is killed ``--kill-at`` seconds into the measured
window. Printed: report latency p50/p99 from each report's due time *before* the kill,
*during* the takeover (due within 2 periods after the kill) and *after*; how long until the
standby took a report; when the new leader completed its first planning round (its own
clock, from /readyz); reports lost; reports the killed leader answered that are not in
the store (a manager answers a report once its row is committed, so this must be 0).

The store lives in a schema of its own (dropped at the end). Bounded: ``--duration`` <= 600 s,
every request with a timeout.

Measured on 2 cores shared with other work (load average 17-55: five helpers, and the
failover test's 50 agents with one core kept busy ran throughout), PostgreSQL 15 on the
same machine. Before = main at 8af3cf9 with this driver; after = this code.

* 2,000 hosts (200 reports/s, 10 s period, patience 4 s), killed 10 s into 30 s:
  before: the standby took a report 4.5 s after the kill (restore 2.2 s), 40 reports lost,
  149 answered by the killed leader and never stored; p99 before/during the takeover
  458 ms / 4.3 s. After: 1.5 s (restore 0.5 s, windows read ahead), 0 lost, 0 unstored;
  p99 63 ms / 1.5 s; again after the rebase on the standby's reads (load 10-14): 0.7 s
  (restore 0.2 s), first round 11.1 s after the kill, 0 lost, 0 unstored, p99 142 / 535 ms.
* 5,000 hosts (500 reports/s, 10 s): the leader could not keep up on this machine (p50
  21 s before the kill: reports queued); the takeover itself took 3.5 s (lock + epoch
  0.7 s, restore 1.4 s, 1.2 s to serve), 0 lost, 0 unstored.
* 10,000 hosts: 1,000 reports/s cannot be generated and served here — the manager, the
  database and this generator share what the other work leaves of 2 cores, and 500/s
  already queued. The largest rate that held was 200 reports/s, i.e. 10,000 hosts at a
  50 s period (``--hosts 10000 --period 50 --warmup 50 --duration 200 --kill-at 50``):
  p50/p99 before 48 / 724 ms, during the takeover (2 periods) 145 ms / 4.1 s, after
  183 ms / 1.2 s; the standby took a report 4.4 s after the kill (lock +0.3 s, epoch
  +0.6 s, restore 3.2 s from windows read ahead — 8.1 s before, plus 18 s until the
  standby led under the old driver); 50,000 reports, **0 lost, 0 answered and unstored**.
  With the agents' old fixed 4 s patience the same run lost 64 (the outage was 7.2 s
  then: the full collection before freezing, now skipped after a warm restore, cost 1 s).
  Preparing the bodies takes 2.6 s (one encoding per host; was 5 minutes). The first
  planning round of the new leader completed 107 s after the kill at this size (> 2
  periods): not explained yet — tests/daemon/test_failover.py, which
  counts rounds from the store, sees the first within 1 period.

On the quiet machine at the end of that session (load average ~2 before each run, nothing
else running; ``--hosts 10000 --period 10 --warmup 20 --duration 60 --kill-at 20``),
**10,000 hosts at 1,000 reports/s**, three runs:

    run   p50 / p99 before   during (2 periods)   after            standby led   lost  unstored
    1     -                  -                    -                1.2 s         0     0
    2     19.9 / 187 ms      10.3 / 1,095 ms      23.8 / 232 ms    1.2 s         0     0
    3     26.3 / 254 ms      11.3 / 985 ms        12.9 / 157 ms    1.2 s         0     0

(run 1's latency lines were not kept; 80,000 reports a run, all answered 200 in the end;
239-299 attempts got no answer and 21-63 a 503 during the takeover, each sent again.) The
standby took a report 1.1 s after the kill; its restore took 0.7 s (windows read ahead).
The new leader's first completed round came 38.4, 31.4 and 31.7 s after the kill (3 periods
or more) although that round itself took 0.75 s and no round failed before it (run 3
prints both): what delays the first round after a takeover under 1,000 reports/s is not
found yet. With 50 real agents (tests/daemon/test_failover.py) it is 1 period every run.

Found (issue 37): those "first round" figures were this driver's. Its /readyz probe comes
from the generator's address, and the manager's per-client limit (64) refused it while the
generator's 64 connections held the new leader; the first answer that got through showed
the round completed last, not the first. The managers now get room for the probe
(``[http] max_connections_per_client``), and a new leader's first round is due within a
period of the takeover (it waited for the period boundary after the restore). 2,000 hosts,
200 reports/s, load average 13 from other work: the standby led 3.5 s after the kill
(restore 1.3 s), its first round completed 9.4 s after the kill, 5.9 s after it led (the
round itself 1.2 s); 0 lost, 0 unstored.

With the young garbage collections paced (issue 37, manager_load.py's docstring), 10,000
hosts at 1,000 reports/s (``--warmup 20 --duration 45 --kill-at 15``), load average 15-16
from other sessions, the managers' session raised (``setsid sh -c 'echo -10 >
/proc/self/autogroup; exec ...'``): the standby took a report 1.3 s after the kill and led
at 1.4 s (restore 0.8 s from windows read ahead); its **first round completed 6.2 s after
the kill, 4.8 s after it led**, within the 10 s period (the round itself 0.23 s). p50 / p99
before the kill 11.2 / 102 ms, during the takeover 28.7 ms / 1.27 s, after 12.4 / 52.8 ms;
0 lost, 0 answered and unstored (65,000 reports 200; 302 attempts unanswered and 18 503s
during the takeover, each sent again).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).parent))
from manager_load import (
    Item,
    RawConnection,
    free_port,
    load_average,
    make_bodies,
    open_loop,
    pct,
)

SCRAPE_TOKEN = secrets.token_urlsafe(24)


def manager_cfg(
    work: Path, name: str, url: str, port: int, period: float, connections: int
) -> Path:
    cfg = work / f"{name}.toml"
    cfg.write_text(
        "\n".join(
            [
                'listen = "127.0.0.1"',
                f"port = {port}",
                f'database_url = "{url}"',
                f'tokens_file = "{work / "hosts.tokens"}"',
                f"plan_period_s = {period}",
                'log_level = "info"',
                f'admin_token = "{SCRAPE_TOKEN}"',
                # Every simulated host reports from this one address: room for all of its
                # connections and the /readyz probe (at the default 64 the probe was
                # refused while the generator's 64 held the new leader, and the first
                # answer that got through showed a later round as the first).
                "[http]",
                f"max_connections_per_client = {connections + 16}",
            ]
        )
        + "\n"
    )
    return cfg


def spawn(cfg: Path, log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "sova.cli_daemons", "manager", "--config", str(cfg)],
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
    )


def readyz(port: int) -> dict[str, object]:
    try:
        body: dict[str, object] = httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=10).json()
    except (httpx.HTTPError, ValueError):
        return {}
    return body


def wait_role(port: int, role: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if readyz(port).get("role") == role:
            return
        time.sleep(0.2)
    raise SystemExit(f"the manager on port {port} is not {role} after {timeout_s:.0f} s")


@dataclass
class Run:
    ports: list[int]
    current: int = 0  # the manager the hosts report to now
    lat: list[tuple[float, float]] = field(default_factory=list)  # (due, latency)
    lost: int = 0
    accepted: dict[str, set[int]] = field(default_factory=dict)  # by the killed leader
    first_ok_after_kill: float | None = None
    statuses: collections.Counter[int] = field(default_factory=collections.Counter)
    refused: int = 0  # answered 4xx: counted, not retried


async def drive(
    run: Run,
    hosts: list[str],
    tokens: dict[str, str],
    bodies: dict[str, list[bytes]],
    period: float,
    span: float,
    connections: int,
    patience: float,
    kill: asyncio.Future[float],
) -> float:
    """Reports as the agents send them (open loop, benchmarks/manager_load.py), each to
    the manager the hosts reached last; one that is refused (503) or not answered goes
    to the other manager after a pause, as the agent's ``report_patience_s`` does, until
    one takes it or the patience is spent (lost). Returns the start time."""

    async def worker(items: AsyncIterator[Item]) -> None:
        conns = [RawConnection("127.0.0.1", p, 2.0) for p in run.ports]
        try:
            async for due, h, k in items:
                body = bodies[h][k % len(bodies[h])]
                sent = time.perf_counter()
                while True:
                    i = run.current
                    try:
                        status = await conns[i].post(f"/v1/hosts/{h}/reports", tokens[h], body)
                    except (OSError, TimeoutError):  # connect refused: the killed leader
                        conns[i].close()
                        status = 0
                    now = time.perf_counter()
                    run.statuses[status] += 1
                    if status == 200:
                        run.lat.append((due, now - due))
                        if i == 0:
                            run.accepted.setdefault(h, set()).add(k + 1)
                        elif kill.done() and run.first_ok_after_kill is None:
                            run.first_ok_after_kill = now
                        break
                    if status not in (0, 503):
                        # 422 "drifted": the generator fell a minute behind its schedule
                        run.refused += 1
                        break
                    if now >= sent + patience:
                        run.lost += 1
                        break
                    if run.current == i:
                        run.current = 1 - i  # the other manager
                    await asyncio.sleep(0.25)  # the agent's pause while patient
        finally:
            for c in conns:
                c.close()

    return await open_loop(hosts, period, span, connections, worker)


async def killer(
    proc: subprocess.Popen[bytes], at: float, kill: asyncio.Future[float], new_port: int
) -> tuple[float | None, float | None]:
    """SIGKILL the leader at ``at`` (perf_counter); then when the standby leads and when
    it completed its first planning round (its own wall time of it, on this clock)."""
    await asyncio.sleep(max(0.0, at - time.perf_counter()))
    proc.send_signal(signal.SIGKILL)
    kill.set_result(time.perf_counter())
    wall_offset = time.time() - time.perf_counter()
    led = planned = None
    failures = 0
    loop = asyncio.get_running_loop()
    while planned is None:
        body = await loop.run_in_executor(None, readyz, new_port)
        now = time.perf_counter()
        if body.get("role") == "leader" and led is None:
            led = now
        done = body.get("last_round_s")
        failures = max(failures, int(body.get("round_failures") or 0))
        if body.get("role") == "leader" and isinstance(done, float):
            planned = done - wall_offset
            # what the wait for the new leader's first round was made of
            print(
                f"first round's own duration {body.get('last_round_duration_s')} s; "
                f"rounds failed before it: {failures}",
                flush=True,
            )
        await asyncio.sleep(0.2)
    return led, planned


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=10_000)
    ap.add_argument("--period", type=float, default=10.0)
    ap.add_argument("--warmup", type=float, default=10.0)
    ap.add_argument("--duration", type=float, default=60.0)
    ap.add_argument("--kill-at", type=float, default=20.0, help="s into the measured window")
    ap.add_argument("--connections", type=int, default=64)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument(
        "--patience", type=float, help="the agents' report_patience_s (default: period / 2)"
    )
    ap.add_argument("--keep-logs", type=Path, help="copy the managers' logs to this folder")
    args = ap.parse_args()
    if args.patience is None:
        args.patience = args.period / 2  # the agent's default
    if args.duration > 600 or args.hosts > 100_000:
        raise SystemExit("bounded on purpose: --duration <= 600, --hosts <= 100000")
    pg = os.environ.get("SOVA_TEST_PG_URL")
    if not pg:
        raise SystemExit("set SOVA_TEST_PG_URL to a PostgreSQL server (scripts/ci-postgres.sh)")
    schema = f"sova_failover_bench_{os.getpid()}"
    admin = sa.create_engine(pg)
    with admin.begin() as conn:
        conn.exec_driver_sql(f"CREATE SCHEMA {schema}")
    url = f"{pg}{'&' if '?' in pg else '?'}options=-csearch_path%3D{schema}"

    hosts = [f"hv{i:05d}" for i in range(args.hosts)]
    tokens = {h: secrets.token_urlsafe(24) for h in hosts}
    rounds = int((args.warmup + args.duration) / args.period) + 2
    print(f"preparing {args.hosts} hosts x {rounds} reports ...", file=sys.stderr)
    bodies = make_bodies(hosts, rounds, args.seed, args.period)
    load_before = load_average()
    procs: list[subprocess.Popen[bytes]] = []
    try:
        with tempfile.TemporaryDirectory(prefix="sova-failover-") as tmp:
            work = Path(tmp)
            (work / "hosts.tokens").write_text("".join(f'"{h}" = "{tokens[h]}"\n' for h in hosts))
            ports = [free_port(), free_port()]
            cfgs = [
                manager_cfg(work, f"m{i}", url, p, args.period, args.connections)
                for i, p in enumerate(ports)
            ]
            procs.append(spawn(cfgs[0], work / "m0.log"))
            wait_role(ports[0], "leader", 120)
            procs.append(spawn(cfgs[1], work / "m1.log"))
            wait_role(ports[1], "standby", 120)
            run = Run(ports)

            async def both() -> tuple[float, float | None, float | None, float]:
                kill: asyncio.Future[float] = asyncio.get_running_loop().create_future()
                t0 = time.perf_counter()
                k = asyncio.create_task(
                    killer(procs[0], t0 + args.warmup + args.kill_at, kill, ports[1])
                )
                start = await drive(
                    run,
                    hosts,
                    tokens,
                    bodies,
                    args.period,
                    args.warmup + args.duration,
                    args.connections,
                    args.patience,
                    kill,
                )
                led, planned = await asyncio.wait_for(k, 120)
                return start, led, planned, kill.result()

            start, led, planned, killed = asyncio.run(both())
            with sa.create_engine(url).connect() as conn:
                stored = {
                    (h, s) for h, s in conn.execute(sa.text("SELECT host, seq FROM host_reports"))
                }
            unstored = sum(
                1 for h, seqs in run.accepted.items() for s in seqs if (h, s) not in stored
            )
            log_tail = (work / "m1.log").read_text()[-3000:]
            if args.keep_logs is not None:
                args.keep_logs.mkdir(parents=True, exist_ok=True)
                for name in ("m0.log", "m1.log"):
                    (args.keep_logs / name).write_bytes((work / name).read_bytes())
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(20)
                except subprocess.TimeoutExpired:
                    p.kill()
        with admin.begin() as conn:
            conn.exec_driver_sql(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        admin.dispose()

    measured = [(d, latency) for d, latency in run.lat if d >= start + args.warmup]
    span = 2 * args.period
    # In flight at the kill (due up to 2 s before it) counts as during the takeover.
    phases = {
        "before": [x for d, x in measured if d < killed - 2.0],
        "during": [x for d, x in measured if killed - 2.0 <= d < killed + span],
        "after": [x for d, x in measured if d >= killed + span],
    }
    print(
        f"hosts                 {args.hosts} reporting every {args.period:g} s "
        f"({args.hosts / args.period:.0f} reports/s), two managers on PostgreSQL"
    )
    print(f"leader killed         {args.kill_at:g} s into the {args.duration:g} s window")
    for name, xs in phases.items():
        print(
            f"p50 / p99 {name:<11} {pct(xs, 0.5) * 1e3:.1f} ms / {pct(xs, 0.99) * 1e3:.1f} ms "
            f"(max {max(xs, default=0) * 1e3:.0f} ms, {len(xs)} reports)"
        )
    took = (run.first_ok_after_kill - killed) if run.first_ok_after_kill else float("nan")
    print(f"standby took a report {took:.1f} s after the kill")
    print(f"standby led           {(led - killed) if led else float('nan'):.1f} s after the kill")
    print(
        f"first round           {(planned - killed) if planned else float('nan'):.1f} s after "
        f"the kill, {(planned - led) if planned and led else float('nan'):.1f} s after it led "
        f"({args.period:g} s periods)"
    )
    print(f"answers               {dict(run.statuses)} (0: no answer)")
    print(f"refused (4xx)         {run.refused}")
    print(
        f"reports lost          {run.lost} (no manager took them within the agents' "
        f"{args.patience:g} s patience)"
    )
    print(f"acknowledged, unstored {unstored} (the killed leader's unflushed buffer)")
    print(
        f"machine               {os.cpu_count()} cpus, load {load_before} before, {load_average()} after"
    )
    print(log_tail, file=sys.stderr)


if __name__ == "__main__":
    main()
