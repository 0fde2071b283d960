"""The packaging tier. Each role's extra, installed from a locally built wheel into a fresh venv, runs its role.

What a fresh host gets: the agent's install stays small and starts without the simulator;
the manager serves /healthz; the simulator and the demo run from a directory that is not
the repository (scenarios come from the wheel). Versions come from constraints.txt, as in CI.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import venv
from pathlib import Path

import pytest

pytestmark = pytest.mark.packaging


@pytest.fixture(autouse=True, scope="module")
def _only_when_selected(request: pytest.FixtureRequest) -> None:
    # A few minutes and PyPI access: only when asked for (no conftest.py here, whose module
    # name would shadow tests/libvirt_driver's `from conftest import ...`).
    if "packaging" not in (request.config.getoption("-m") or ""):
        pytest.skip("packaging tier: run with -m packaging (scripts/ci-ops.sh)")


ROOT = Path(__file__).resolve().parents[2]
AGENT_BUDGET_MB = 60


def _run(
    cmd: list[str | Path], cwd: Path, timeout: float = 900, extra_env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(extra_env or {})
    return subprocess.run(
        [str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


def _site_mb(env_dir: Path) -> float:
    site = next(env_dir.glob("lib/python3*/site-packages"))
    return sum(f.stat().st_size for f in site.rglob("*") if f.is_file()) / 1e6


@pytest.fixture(scope="module")
def wheel(_only_when_selected: None, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    r = _run(["bash", ROOT / "scripts/build-wheel.sh", out, sys.executable], ROOT)
    assert r.returncode == 0, r.stderr
    (whl,) = out.glob("sova_sriov-*.whl")
    return whl


def _fresh(tmp: Path, wheel: Path, extras: str) -> tuple[Path, float]:
    """A venv with ``wheel[extras]``; returns its bin/ and the MB the install added."""
    env_dir = tmp / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    before = _site_mb(env_dir)
    r = _run(
        [
            env_dir / "bin/python",
            "-m",
            "pip",
            "install",
            "-q",
            "--disable-pip-version-check",
            "-c",
            ROOT / "constraints.txt",
            f"{wheel}[{extras}]",
        ],
        tmp,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    return env_dir / "bin", _site_mb(env_dir) - before


def _documented_mb(extra: str) -> float:
    """What docs/deployment.md's extras table says ``extra`` adds."""
    import re

    doc = (ROOT / "docs/deployment.md").read_text()
    m = re.search(rf"^\| `{extra}` \|.*\| ~?([0-9.]+) MB \|$", doc, re.M)
    assert m, f"no row for `{extra}` in docs/deployment.md's extras table"
    return float(m.group(1))


def _check_documented(extra: str, added: float) -> None:
    # The docs' figure is this measurement (within 10 %, pip's caches and wheels vary).
    documented = _documented_mb(extra)
    assert abs(added - documented) <= max(3.0, 0.1 * documented), (
        f"[{extra}] adds {added:.1f} MB; docs/deployment.md says {documented:g} MB"
    )


def _libvirt_buildable() -> bool:
    return (
        shutil.which("pkg-config") is not None
        and subprocess.run(["pkg-config", "--exists", "libvirt"], check=False).returncode == 0
    )


def test_agent_extra_is_small_and_starts_without_the_simulator(tmp_path: Path, wheel: Path) -> None:
    if not _libvirt_buildable():
        pytest.skip(
            "libvirt-python needs libvirt-dev and pkg-config to build (ci-setup-libvirt.sh)"
        )
    bin_, added = _fresh(tmp_path, wheel, "agent")
    print(f"[agent] adds {added:.1f} MB to site-packages")
    assert added < AGENT_BUDGET_MB, f"[agent] adds {added:.1f} MB"
    _check_documented("agent", added)
    r = _run([bin_ / "sova", "agent", "--help"], tmp_path)
    assert r.returncode == 0 and "--manager-url" in r.stdout, r.stderr
    r = _run(
        [bin_ / "python", "-c", "import sova.daemon.agent_daemon, sova.driver.libvirt_driver"],
        tmp_path,
    )
    assert r.returncode == 0, r.stderr
    # The agent's install carries no simulator: asking for one says what to install.
    r = _run([bin_ / "sova", "simulate", "sova-fig5"], tmp_path)
    assert r.returncode == 2
    assert "pip install 'sova-sriov[sim]'" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_manager_extra_serves(tmp_path: Path, wheel: Path) -> None:
    import httpx

    bin_, added = _fresh(tmp_path, wheel, "manager")
    print(f"[manager] adds {added:.1f} MB to site-packages")
    _check_documented("manager", added)
    port = _free_port()
    proc = subprocess.Popen(
        [
            bin_ / "sova",
            "manager",
            "--listen",
            "127.0.0.1",
            "--port",
            str(port),
            "--database-url",
            f"sqlite:///{tmp_path / 'm.db'}",
        ],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        status = None
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                status = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code
                break
            except httpx.TransportError:
                time.sleep(0.3)
        assert status == 200, (
            proc.stdout.read() if proc.poll() is not None and proc.stdout else status
        )
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_sim_extra_runs_shipped_scenarios_and_the_demo_outside_the_repository(
    tmp_path: Path, wheel: Path
) -> None:
    bin_, added = _fresh(tmp_path, wheel, "sim,manager")
    print(f"[sim,manager] adds {added:.1f} MB to site-packages")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    r = _run([bin_ / "sova", "scenarios"], elsewhere)
    assert r.returncode == 0, r.stderr
    names = {line.split()[0] for line in r.stdout.splitlines() if line and not line.startswith("(")}
    shipped = {
        p.relative_to(ROOT / "scenarios").with_suffix("").as_posix()
        for p in (ROOT / "scenarios").rglob("*.yaml")
        if p.relative_to(ROOT / "scenarios").parts[0] not in ("profiles", "traces")
    }
    assert names == shipped
    r = _run([bin_ / "sova", "simulate", "trace-replay", "--no-progress", "-o", "tr"], elsewhere)
    assert r.returncode == 0, r.stderr
    assert (elsewhere / "tr" / "summary.json").is_file()
    r = _run([bin_ / "sova", "demo", "--no-live", "-o", "demo"], elsewhere)
    assert r.returncode == 0, r.stderr[-3000:]
    assert (elsewhere / "demo" / "events.csv").is_file()


def test_testbed_extra_imports_its_entry_point(tmp_path: Path, wheel: Path) -> None:
    bin_, added = _fresh(tmp_path, wheel, "testbed")
    print(f"[testbed] adds {added:.1f} MB to site-packages")
    r = _run([bin_ / "python", "-c", "import sova.testbed.runner, pyroute2"], tmp_path)
    assert r.returncode == 0, r.stderr
    r = _run([bin_ / "sova", "testbed", "--help"], tmp_path)
    assert r.returncode == 0, r.stderr


def test_sdist_carries_deploy_and_constraints(
    _only_when_selected: None, tmp_path: Path
) -> None:
    """The sdist is what distributions and the Ansible role's users rebuild from: it carries
    the units, the role, the alert rules and the tested versions (issue 24)."""
    import tarfile

    src = tmp_path / "src"
    shutil.copytree(
        ROOT,
        src,
        ignore=shutil.ignore_patterns(
            ".git", ".venv*", "build", "dist", "out", "*.egg-info", "__pycache__", ".*_cache"
        ),
    )
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    r = _run([env_dir / "bin/python", "-m", "pip", "install", "-q", "build"], tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    # The copy has no .git: give it the checkout's version, as scripts/build-wheel.sh does.
    import sova

    version = {"SETUPTOOLS_SCM_PRETEND_VERSION_FOR_SOVA_SRIOV": sova.__version__}
    r = _run(
        [env_dir / "bin/python", "-m", "build", "--sdist", "-o", tmp_path / "dist", src],
        src,
        extra_env=version,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    (sdist,) = (tmp_path / "dist").glob("sova_sriov-*.tar.gz")
    with tarfile.open(sdist) as tf:
        names = {n.split("/", 1)[1] for n in tf.getnames() if "/" in n}
    for wanted in (
        "constraints.txt",
        "deploy/sova-agent.service",
        "deploy/sova-manager.service",
        "deploy/prometheus-rules.yaml",
        "deploy/alertmanager.yml",
        "deploy/ansible/site.yml",
        "deploy/ansible/roles/sova/tasks/main.yml",
        "docs/runbooks.md",
    ):
        assert wanted in names, f"{wanted} missing from {sdist.name}"
