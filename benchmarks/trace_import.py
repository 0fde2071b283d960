"""Importing and checking a trace-replay scenario of a real fleet's size: ``--vms`` VMs in
the GWA-T-12 Bitbrains layout (one file per VM, 5-minute samples, ``--days`` of them;
written here from a seeded log-AR(1) walk, no third-party trace), imported as one day on 8
hosts, then checked as ``sova validate`` does.

    .venv/bin/python benchmarks/trace_import.py --vms 200 --days 30

Prints the wall time of the import (reading every file, writing the scenario and its CSV,
the check included) and of a second check of the written scenario.

Measured on 2 cores shared with seven other sessions' work (load average 8-15, so the
figures spread by 2x), 200 VMs x 30 days (214 MB of files, 1.7 million samples): import
63.5-121.6 s (reading the files dominates); the check of the written 200-VM day
(`sova validate`) 30.8 s when every VM's trace workload parsed the whole shared CSV again,
1.9-5.2 s with one summary per CSV (scenario._trace_summary).
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import tempfile
import time
from pathlib import Path

HEADER = (
    "Timestamp [ms];\tCPU cores;\tCPU capacity provisioned [MHZ];\tCPU usage [MHZ];\t"
    "CPU usage [%];\tMemory capacity provisioned [KB];\tMemory usage [KB];\t"
    "Disk read throughput [KB/s];\tDisk write throughput [KB/s];\t"
    "Network received throughput [KB/s];\tNetwork transmitted throughput [KB/s]"
)


def write_fleet(folder: Path, vms: int, days: int, seed: int) -> None:
    rng = random.Random(seed)
    for vm in range(1, vms + 1):
        # log-AR(1) around a heavy-tailed per-VM mean (KB/s): bursty, no drift
        mu = rng.gauss(2.0, 2.0)
        x, lines = mu, [HEADER]
        for i in range(days * 288):
            x = mu + 0.9 * (x - mu) + rng.gauss(0.0, 0.5)
            level = math.exp(x)
            pct = rng.random() * 100
            cells = (1376314846 + 300 * i, 4, 11704.0, pct * 117.04, pct, 8388608, 4194304)
            lines.append(";\t".join(map(str, (*cells, 0.0, 1.0, level, level / 2))))
        (folder / f"{vm}.csv").write_text("\n".join(lines) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vms", type=int, default=200)
    ap.add_argument("--days", type=int, default=30)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    from typer.testing import CliRunner

    from sova.cli import app
    from sova.scenario import _SUMMARIES, load_scenario

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "fastStorage"
        folder.mkdir()
        write_fleet(folder, args.vms, args.days, args.seed)
        out = Path(tmp) / "day.yaml"
        t0 = time.perf_counter()
        r = CliRunner().invoke(
            app,
            ["scenario", "import", str(folder), "--format", "bitbrains", "--hosts", "8",
             "--skip", f"{min(48, 24 * (args.days - 1))}h", "--duration", "24h",
             "--out", str(out)],
        )  # fmt: skip
        t_import = time.perf_counter() - t0
        if r.exit_code:
            sys.exit(r.output)
        _SUMMARIES.clear()
        t0 = time.perf_counter()
        load_scenario(out)
        t_check = time.perf_counter() - t0
    print(r.output.strip())
    print(f"import {t_import:.1f} s, check {t_check:.2f} s ({args.vms} VMs x {args.days} days)")


if __name__ == "__main__":
    main()
