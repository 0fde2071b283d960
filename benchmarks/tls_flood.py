"""Issue 21's attack redone: TLS connections that never send a ClientHello, against a TLS
``sova manager`` with its default connection limits, while agents report.

    .venv/bin/python benchmarks/tls_flood.py --silent 9000 --rate 141 --duration 30

Starts a real manager (its own process, TLS with a self-signed certificate made by the
``openssl`` command, SQLite store in a temporary directory, planning every 2 s) and:

* an attacker thread opening ``--silent`` connections from 127.0.0.2 that never send a
  byte, re-opening each one the server closes at up to ``--rate`` per second (the issue:
  ~141/s sustained the outage);
* ``--agents`` agents from 127.0.0.1, each reporting every second on a **new** connection
  (the case that failed 30 of 30 in the issue), for ``--duration`` seconds.

Prints the reports' latency (p50, p99, max), how many failed, and the planning rounds
the manager completed meanwhile (from its /metrics). Before the fix: the silent
connections were held for asyncio's 60-s handshake timeout and none of the guard's
limits applied, so the manager ran out of descriptors.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import resource
import secrets
import selectors
import shutil
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

from sova.manager.daemons.schema import build_report, encode
from sova.policy.hotspot import Utilisation, VMLoad


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def attacker(port: int, total: int, rate: float, stop: threading.Event, opened: list[int]) -> None:
    sel = selectors.DefaultSelector()
    pending: list[int] = []

    def open_one() -> None:
        s = socket.socket()
        s.setblocking(False)
        s.bind(("127.0.0.2", 0))
        with contextlib.suppress(BlockingIOError, OSError):
            s.connect(("127.0.0.1", port))
        sel.register(s, selectors.EVENT_READ)
        opened[0] += 1

    for _ in range(total):  # the first wave at once
        open_one()
    budget, last = 0.0, time.monotonic()
    while not stop.is_set():
        now = time.monotonic()
        budget = min(budget + (now - last) * rate, max(rate, 1.0))
        last = now
        while pending and budget >= 1:
            pending.pop()
            open_one()
            budget -= 1
        for key, _ in sel.select(0.01):
            s = key.fileobj
            assert isinstance(s, socket.socket)
            try:
                gone = s.recv(4096) == b""
            except OSError:
                gone = True
            if gone:
                sel.unregister(s)
                s.close()
                pending.append(0)
    for key in list(sel.get_map().values()):
        with contextlib.suppress(OSError):
            key.fileobj.close()  # type: ignore[union-attr]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--silent", type=int, default=9000)
    ap.add_argument("--rate", type=float, default=141.0)
    ap.add_argument("--agents", type=int, default=30)
    ap.add_argument("--duration", type=float, default=30.0)
    args = ap.parse_args()
    if shutil.which("openssl") is None:
        print("needs the openssl command", file=sys.stderr)
        return 2
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, args.silent + 1000), hard))
    work = Path(tempfile.mkdtemp(prefix="sova-tls-flood-"))
    cert, key = work / "cert.pem", work / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
         "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    tokens = {f"a{i}": secrets.token_urlsafe(24) for i in range(args.agents)}
    admin = secrets.token_urlsafe(24)
    port = free_port()
    cfg = work / "m.toml"
    cfg.write_text(
        f'port = {port}\ndatabase_url = "sqlite:///{work / "m.db"}"\nplan_period_s = 2\n'
        f'log_level = "warning"\nadmin_token = "{admin}"\n'
        f'tls_certfile = "{cert}"\ntls_keyfile = "{key}"\n'
        + "".join(f'[hosts."{h}"]\ntoken = "{t}"\n' for h, t in tokens.items())
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "sova.cli_daemons", "manager", "--config", str(cfg)],
        stdout=(work / "manager.log").open("wb"),
        stderr=subprocess.STDOUT,
        env={k: v for k, v in os.environ.items() if not k.startswith("SOVA_")},
    )
    url = f"https://127.0.0.1:{port}"
    ctx = ssl.create_default_context(cafile=str(cert))
    try:
        for _ in range(300):
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url + "/healthz", verify=ctx, timeout=1).status_code == 200:
                    break
            time.sleep(0.2)
        stop, opened = threading.Event(), [0]
        th = threading.Thread(target=attacker, args=(port, args.silent, args.rate, stop, opened))
        th.start()
        time.sleep(3.0)

        def rounds() -> float:
            text = httpx.get(
                url + "/metrics", verify=ctx, timeout=10,
                headers={"authorization": f"Bearer {admin}"},
            ).text  # fmt: skip
            m = re.search(r"^sova_manager_plan_rounds_total (\S+)", text, re.MULTILINE)
            return float(m.group(1)) if m else 0.0

        rounds_before = rounds()
        lat: list[float] = []
        failed = 0
        seq = 0
        end = time.monotonic() + args.duration
        while time.monotonic() < end:
            seq += 1
            tick = time.monotonic()
            for h, tok in tokens.items():
                body = encode(
                    build_report(
                        seq, float(seq), Utilisation(0.3, 0.3, 0.3),
                        {f"{h}-vm": VMLoad(Utilisation(0.1, 0.1, 0.1), 2**30)},
                    )
                )  # fmt: skip
                t0 = time.perf_counter()
                try:
                    with httpx.Client(verify=ctx, timeout=5) as c:
                        r = c.post(
                            f"{url}/v1/hosts/{h}/reports", content=body,
                            headers={"authorization": f"Bearer {tok}",
                                     "content-type": "application/json"},
                        )  # fmt: skip
                    ok = r.status_code == 200
                except httpx.HTTPError:
                    ok = False
                lat.append(time.perf_counter() - t0)
                failed += not ok
            time.sleep(max(0.0, 1.0 - (time.monotonic() - tick)))
        rounds_after = rounds()
        stop.set()
        th.join(30)
    finally:
        proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(20)
        if proc.poll() is None:
            proc.kill()
    lat.sort()
    p99 = lat[min(len(lat) - 1, int(0.99 * len(lat)))]
    print(
        f"silent TLS connections: {args.silent} from one address, re-opened at "
        f"{args.rate:g}/s ({opened[0]} opened in all)"
    )
    print(
        f"reports on new connections: {len(lat)}, failed {failed}; latency p50 "
        f"{statistics.median(lat) * 1e3:.0f} ms, p99 {p99 * 1e3:.0f} ms, "
        f"max {lat[-1] * 1e3:.0f} ms"
    )
    print(f"planning rounds meanwhile: {rounds_after - rounds_before:.0f} (period 2 s)")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
