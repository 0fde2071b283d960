#!/usr/bin/env python3
"""Record or check the outputs of every shipped scenario and of `sova demo`, by hash.

A refactor that adds no behaviour must leave timeline.csv, events.csv and summary.json
byte-identical. `record` runs every scenario in scenarios/ (not the testbed's or the
lab's, which carry real traffic and are never byte-stable) at its own seed, and the demo,
and writes their SHA-256 to scripts/golden-hashes.json; `check` runs them again and names
every file whose hash moved. Usage:

    .venv/bin/python scripts/golden.py record
    .venv/bin/python scripts/golden.py check [--only NAME ...]

Runs two at a time (this project's machines have two cores); the whole set takes a few
minutes.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HASHES = ROOT / "scripts" / "golden-hashes.json"
FILES = ("timeline.csv", "events.csv", "summary.json")
SOVA = [sys.executable, "-m", "sova"]


def jobs() -> dict[str, list[str]]:
    """Name → the command that writes that run's outputs into the directory it is given."""
    out: dict[str, list[str]] = {}
    for path in sorted((ROOT / "scenarios").glob("*.yaml")):
        out[f"simulate/{path.stem}"] = [*SOVA, "simulate", str(path), "--no-progress", "--out"]
    out["demo/sova-tour"] = [*SOVA, "demo", "--no-live", "--out"]
    return out


def run_one(name: str, cmd: list[str]) -> tuple[str, dict[str, str] | str]:
    with tempfile.TemporaryDirectory(prefix="sova-golden-") as tmp:
        res = subprocess.run(
            [*cmd, tmp], cwd=ROOT, capture_output=True, text=True, timeout=1800, check=False
        )
        if res.returncode != 0:
            return name, f"exit {res.returncode}: {res.stderr.strip().splitlines()[-1:]}"
        hashes = {}
        for f in FILES:
            p = Path(tmp) / f
            if p.exists():
                hashes[f] = hashlib.sha256(p.read_bytes()).hexdigest()
        return name, hashes


def run_all(only: list[str]) -> dict[str, dict[str, str] | str]:
    todo = {n: c for n, c in jobs().items() if not only or any(o in n for o in only)}
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = dict(pool.map(lambda kv: run_one(*kv), todo.items()))
    return dict(sorted(results.items()))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("mode", choices=["record", "check"])
    ap.add_argument("--only", nargs="*", default=[], help="substrings of run names to include")
    args = ap.parse_args()
    results = run_all(args.only)
    failed = {n: r for n, r in results.items() if isinstance(r, str)}
    for n, r in failed.items():
        print(f"FAILED {n}: {r}")
    if args.mode == "record":
        if failed:
            return 1
        old = json.loads(HASHES.read_text()) if HASHES.exists() and args.only else {}
        old.update(results)
        HASHES.write_text(json.dumps(old, indent=1, sort_keys=True) + "\n")
        print(f"recorded {len(results)} runs in {HASHES.relative_to(ROOT)}")
        return 0
    want = json.loads(HASHES.read_text())
    moved = 0
    for name, got in results.items():
        if isinstance(got, str):
            moved += 1
            continue
        exp = want.get(name)
        if exp is None:
            print(f"NEW    {name} (no recorded hash)")
            moved += 1
            continue
        for f in sorted(set(exp) | set(got)):
            if exp.get(f) != got.get(f):
                print(f"MOVED  {name}/{f}")
                moved += 1
    print(f"{len(results)} runs checked, {moved} differences")
    return 1 if moved else 0


if __name__ == "__main__":
    sys.exit(main())
