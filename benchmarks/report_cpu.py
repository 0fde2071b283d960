"""CPU per host report through the manager's own ASGI app, in process, each report durable.

    .venv/bin/python benchmarks/report_cpu.py --hosts 2000 --rounds 3 [--profile]

What ``benchmarks/manager_load.py`` cannot say on a shared machine: the manager's CPU cost
of one report, apart from the HTTP parsing and the load generator. Each report goes through
the app as uvicorn hands it over (guard, authentication, FastAPI's validation, intake, the
group commit to SQLite, the answer), ``--batch`` at a time (they share a commit, as under
load), and the process's CPU time is divided by the reports answered 200. Garbage
collection is tuned as ``run_manager`` tunes it. ``--profile`` prints where the time goes
(cProfile, which itself costs about as much again).

So 1,000 reports/s costs ``1,000 x`` this figure of one core, before uvicorn's parsing.
Measured (issue 37), 2,000 hosts x 3 reports, SQLite, on 2 cores shared with other work
(load average 11-16): **0.43 ms per report** (wall 2.3 ms: the process got a fifth of a
core), so 1,000 reports/s needs 0.43 of a core for the app alone. Profiled (cProfile
doubles it): of the time inside the manager's guard, the report route's own code (intake,
the wait for the commit, the answer) is 29 %, FastAPI's dependency solving with the
body's validation 30 %, and routing, middleware and the response the rest: the report
route is mostly framework, which a plain ASGI route for reports would save.

With that route (``ReportFastPath``, docs/design.md "The report intake"), same command,
3 runs each back to back with the code before: **0.449 ms before (0.402 / 0.517 /
0.449), 0.219 ms after (0.219 / 0.194 / 0.219)**, medians, load average 10-16 throughout.
What remains is the intake itself (freshness, the detector's windows, the row), the
body's one decoding and validation, and each report's metrics.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import pstats
import secrets
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from manager_load import make_bodies

from sova.manager.daemons.config import ManagerSettings
from sova.manager.daemons.service.app import create_app
from sova.manager.daemons.service.store import Store


async def post(app: Any, host: str, token: str, body: bytes) -> int:
    """One POST of a report through the ASGI app; returns its status."""
    path = f"/v1/hosts/{host}/reports"
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "client": ("127.0.0.1", 40000),
        "server": ("127.0.0.1", 8700),
        "headers": [
            (b"host", b"manager"),
            (b"authorization", f"Bearer {token}".encode()),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
        ],
    }
    sent = False

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.sleep(3600)  # a client that stays connected
        return {"type": "http.disconnect"}

    status: list[int] = []

    async def send(msg: dict[str, Any]) -> None:
        if msg["type"] == "http.response.start":
            status.append(int(msg["status"]))

    await app(scope, receive, send)
    return status[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=3, help="reports per host measured")
    ap.add_argument("--batch", type=int, default=50, help="reports in flight together")
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()
    if args.hosts > 100_000 or args.rounds > 100:
        raise SystemExit("bounded on purpose: --hosts <= 100000, --rounds <= 100")
    hosts = [f"hv{i:05d}" for i in range(args.hosts)]
    tokens = {h: secrets.token_urlsafe(24) for h in hosts}
    bodies = make_bodies(hosts, args.rounds + 1, 1, 10.0)
    with tempfile.TemporaryDirectory(prefix="sova-report-cpu-") as tmp:
        settings = ManagerSettings.model_validate(
            {
                "hosts": {h: {"token": t} for h, t in tokens.items()},
                "plan_period_s": 0,  # no rounds: the intake alone
                "insecure": True,
            }
        )
        store = Store(f"sqlite:///{Path(tmp) / 'manager.db'}")
        app = create_app(settings, store)

        async def send_round(k: int) -> dict[int, int]:
            codes: dict[int, int] = {}
            for i in range(0, len(hosts), args.batch):
                part = hosts[i : i + args.batch]
                for code in await asyncio.gather(
                    *(post(app, h, tokens[h], bodies[h][k]) for h in part)
                ):
                    codes[code] = codes.get(code, 0) + 1
            return codes

        async def run(ks: list[int]) -> dict[int, int]:
            total: dict[int, int] = {}
            for k in ks:
                for code, n in (await send_round(k)).items():
                    total[code] = total.get(code, 0) + n
            return total

        asyncio.run(run([0]))  # every host known, its window started
        gc.collect()
        gc.freeze()
        gc.set_threshold(50_000, 50, 1000)  # as run_manager
        prof = cProfile.Profile() if args.profile else None
        cpu0, wall0 = time.process_time(), time.perf_counter()
        if prof is not None:
            prof.enable()
        codes = asyncio.run(run(list(range(1, args.rounds + 1))))
        if prof is not None:
            prof.disable()
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
        rows = store.count("host_reports")
        store.close()
    ok = codes.get(200, 0)
    print(f"hosts                 {args.hosts}, {args.rounds} reports each, {args.batch} in flight")
    print(f"answers               {codes}; {rows} rows in the store")
    print(
        f"CPU per report        {cpu / ok * 1e3:.3f} ms (wall {wall / ok * 1e3:.3f} ms): "
        f"{cpu / ok * 1000:.2f} of a core at 1,000 reports/s"
    )
    if prof is not None:
        pstats.Stats(prof).sort_stats("cumulative").print_stats(30)


if __name__ == "__main__":
    main()
