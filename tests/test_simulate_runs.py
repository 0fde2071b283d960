"""How `sova simulate` runs: progress on a terminal, Ctrl-C, and sweeps in parallel.

Every check runs the real command in a child process (a pseudo-terminal where the test
needs a terminal) and reads the files it wrote.
"""

from __future__ import annotations

import os
import pty
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

SOVA = [sys.executable, "-m", "sova", "simulate"]


def cluster(path: Path, *, duration: int, sweep: bool = False) -> Path:
    names = [f"vm{i}" for i in range(8)]
    rate = "${rate}" if sweep else "400Mbit"
    data: dict[str, Any] = {
        "name": "runs",
        "seed": 5,
        "duration": duration,
        "hosts": [
            {
                "name": f"h{h}",
                "cores": 8,
                "memory": "32GiB",
                "nic": {"capacity": "10Gbit", "vf_pool": 1},
                "vms": names[2 * h : 2 * h + 2],
            }
            for h in range(4)
        ],
        "vms": [{"name": n, "vcpus": 2, "memory": "1GiB"} for n in names],
        "controller": {"vf_policy": "sova"},
        "compare": [
            {"name": "do-nothing", "vf": "default", "bandwidth": "none"},
            {"name": "sova", "vf": "sova", "bandwidth": "sova"},
        ],
        "workload": [
            {
                "at": 0,
                "vms": {n: {"net": 0.2 + 0.1 * i, "rate": rate} for i, n in enumerate(names)},
            }
        ],
    }
    text = yaml.safe_dump(data)
    if sweep:
        text = text.replace("'${rate}'", "${rate}Mbit")
        text += "sweep:\n  variable: rate\n  values: [200, 500, 900]\n"
    path.write_text(text)
    return path


def read_until(fd: int, needle: bytes, timeout: float) -> bytes:
    seen = b""
    end = time.monotonic() + timeout
    while needle not in seen:
        left = end - time.monotonic()
        if left <= 0:
            raise AssertionError(f"{needle!r} never shown; the terminal got {seen[-600:]!r}")
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            try:
                seen += os.read(fd, 65536)
            except OSError:  # the child closed the terminal
                break
    return seen


def test_ctrl_c_keeps_the_completed_policies_and_the_bar_shows_time_rate_eta(
    tmp_path: Path,
) -> None:
    """On a terminal the bar names the running policy, the simulated time and its rate;
    Ctrl-C once the second policy is running leaves the first one's outputs, exit 130.

    Ten simulated hours: at one hour the faster simulator finished the sova policy before
    the Ctrl-C reached it (exit 0, fresh-clone CI, 2026-11-27); the whole command of one
    hour took 5.4 s at load, of ten hours 28.5 s, so the second policy now runs for
    seconds after its bar shows."""
    scn = cluster(tmp_path / "runs.yaml", duration=36000)
    out = tmp_path / "out"
    master, slave = pty.openpty()
    env = {**os.environ, "TERM": "xterm", "COLUMNS": "160"}
    proc = subprocess.Popen(
        [*SOVA, str(scn), "--out", str(out)], stdout=slave, stderr=slave, env=env
    )
    os.close(slave)
    try:
        shown = read_until(master, b"[sova]", timeout=120)
        # the second policy runs: the first one is complete
        shown += read_until(master, b"sim-s/s", timeout=60)
        proc.send_signal(signal.SIGINT)
        # read on while it stops, as a terminal does: a test that stops reading can fill the
        # terminal's buffer and block the child's last writes
        shown += read_until(master, b"interrupted", timeout=60)
        assert proc.wait(timeout=30) == 130
    finally:
        proc.kill()
        os.close(master)
    text = shown.decode(errors="replace")
    assert "runs [do-nothing]" in text and "/36,000 s" in text
    assert "wrote the outputs of completed policies do-nothing" in text
    summary = yaml.safe_load((out / "summary.json").read_text())
    assert list(summary["policies"]) == ["do-nothing"]
    rows = (out / "timeline.csv").read_text().splitlines()[1:]
    assert rows and all(r.startswith("do-nothing,") for r in rows)
    assert (out / "report.md").exists()


def test_ctrl_c_inside_the_bars_update_is_taken_when_the_update_returns(
    tmp_path: Path,
) -> None:
    """A Ctrl-C that lands while rich updates the bar must not raise inside rich's update:
    there a KeyboardInterrupt can leave the bar's lock held, the refresh thread waits for
    it, and the bar's exit joins that thread for ever (a fresh-clone CI run, 2026-11-28:
    the command still running 60 s after its Ctrl-C). The update here is the real bar's,
    with the signal sent from inside it; it must run to its end, and the interrupt must
    come right after it."""
    from sova.cli import _SimProgress
    from sova.scenario import load_sweep

    points = load_sweep(cluster(tmp_path / "runs.yaml", duration=60))
    progress = _SimProgress(points, ["do-nothing", "sova"], show=True)
    real_update = progress.bar.update
    finished: list[bool] = []

    def update_hit_by_ctrl_c(*args: Any, **kwargs: Any) -> None:
        os.kill(os.getpid(), signal.SIGINT)
        # give the interpreter bytecode boundaries at which a pending handler runs
        for _ in range(1000):
            time.sleep(0)
        real_update(*args, **kwargs)
        finished.append(True)

    before = signal.getsignal(signal.SIGINT)
    with pytest.raises(KeyboardInterrupt), progress:
        progress.bar.update = update_hit_by_ctrl_c  # type: ignore[method-assign]
        progress.advance(1)
    assert finished == [True], "the Ctrl-C was raised inside the bar's update"
    assert signal.getsignal(signal.SIGINT) is before, "the previous SIGINT handler is back"


def test_quiet_when_not_a_terminal(tmp_path: Path) -> None:
    scn = cluster(tmp_path / "runs.yaml", duration=60)
    res = subprocess.run(
        [*SOVA, str(scn), "--out", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr
    assert res.stderr == ""
    assert "report:" in res.stdout


def test_simulate_does_not_load_the_daemons_http_client(tmp_path: Path) -> None:
    """`sova simulate` talks to no daemon: httpx (and ssl with it, ~6 MiB of the command's
    peak memory) stays unloaded, though `sova` registers every command on each run."""
    scn = cluster(tmp_path / "runs.yaml", duration=20)
    probe = (
        "import atexit, sys\n"
        "atexit.register(lambda: print('loaded:', [m for m in ('httpx', 'ssl') "
        "if m in sys.modules], file=sys.stderr))\n"
        "from sova.console import main\n"
        "main()\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", probe, "simulate", str(scn), "--out", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr
    assert "report:" in res.stdout
    assert "loaded: []" in res.stderr, res.stderr


def _files(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.iterdir())}


@pytest.mark.parametrize("engine", ["processes", "dask"])
def test_parallel_sweep_gives_the_serial_outputs(tmp_path: Path, engine: str) -> None:
    """Local processes and a Dask LocalCluster of 2 processes: every file (CSV, summary,
    report and PNGs) byte-identical to the serial run's, rows in the serial order."""
    if engine == "dask":
        pytest.importorskip("dask.distributed", reason="the 'distributed' extra is not installed")
    scn = cluster(tmp_path / "sweep.yaml", duration=60, sweep=True)
    serial, parallel = tmp_path / "serial", tmp_path / "parallel"
    run = [*SOVA, str(scn), "--no-progress"]
    res = subprocess.run(
        [*run, "--out", str(serial), "--workers", "1"], capture_output=True, timeout=600
    )
    assert res.returncode == 0, res.stderr
    extra = ["--workers", "2"] + (["--dask", "local"] if engine == "dask" else [])
    res = subprocess.run([*run, "--out", str(parallel), *extra], capture_output=True, timeout=600)
    assert res.returncode == 0, res.stderr
    a, b = _files(serial), _files(parallel)
    assert list(a) == list(b) and "timeline.csv" in a
    assert [k for k in a if a[k] != b[k]] == []
    values = [line.split(",")[0] for line in a["timeline.csv"].decode().splitlines()[1:]]
    assert values == sorted(values, key=lambda v: ["200", "500", "900"].index(v))
