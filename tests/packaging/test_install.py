"""The packaging tier. Each role's extra, installed from a locally built wheel into a fresh venv, runs its role.

What a fresh host gets: the agent's install stays small, carries no typer or rich, and
starts without the simulator; the manager serves /healthz; the simulator and the demo run
from a directory that is not the repository (scenarios come from the wheel). Versions come
from constraints.txt, as in CI.

Offline: pip installs with ``--no-index`` from the wheelhouse ``$SOVA_WHEELHOUSE``, which
scripts/ci-ops.sh fills before the tier (the tests themselves reach no index). What each
install adds to site-packages is compared with docs/extras-sizes.json (the doc's table is
generated from it, scripts/extras-table.py) and written to ``$SOVA_SIZES_OUT``.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import venv
from collections.abc import Iterator
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
# numpy is about 72 MB of it: the policy's bandwidth sensing and allocation are array
# kernels, one implementation for the agent's one host and the simulator's all hosts.
# Issue 36: with the compiled core in the wheel, [agent] installs no larger than on the day
# the issue was filed (99.56 MB at 4b98a3b, this tier's method and wheelhouse; 99.0 MB in
# docs/extras-sizes.json before the core; 102.4 MB unstripped and with PyYAML; 98.8 MB
# stripped, LTO, without PyYAML). Python source installs about 2.7x its size with bytecode.
AGENT_BUDGET_MB = 99.5
# The full CLI's dependencies, which a hypervisor's install must not carry (issue 24), and
# PyYAML, the scenario files' parser (3.1 MB; the agent reads TOML; issue 36's size budget).
NOT_ON_AGENTS = ("typer", "rich", "click", "pygments", "markdown-it-py", "shellingham", "pyyaml")
MEASURED: dict[str, float] = {}


@pytest.fixture(autouse=True, scope="module")
def _write_measurements(_only_when_selected: None) -> Iterator[None]:
    yield
    out = os.environ.get("SOVA_SIZES_OUT")
    if out and MEASURED:
        import json
        import platform

        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(
            json.dumps(
                {
                    "added_mb": MEASURED,
                    "python": platform.python_version(),
                    "platform": platform.platform(terse=True),
                },
                indent=2,
                sort_keys=True,
            )
        )


def _wheelhouse() -> Path:
    wh = os.environ.get("SOVA_WHEELHOUSE")
    if not wh or not any(Path(wh).glob("*.whl")):
        pytest.skip(
            "no wheelhouse: the packaging tier installs offline from $SOVA_WHEELHOUSE, "
            "which scripts/ci-ops.sh fills"
        )
    return Path(wh)


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
    # offline too: the build's isolated environment takes setuptools from the wheelhouse
    offline = {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(_wheelhouse())}
    r = _run(
        ["bash", ROOT / "scripts/build-wheel.sh", out, sys.executable], ROOT, extra_env=offline
    )
    assert r.returncode == 0, r.stderr
    (whl,) = out.glob("sova_sriov-*.whl")
    return whl


def test_the_wheel_builds_with_the_venv_run_sh_makes(
    _only_when_selected: None, tmp_path: Path
) -> None:
    """Issue 38, defect 8: ./run.sh's venv has no setuptools-scm, and the script asked it for
    the version (``No module named setuptools_scm``). A venv with pip alone builds the wheel;
    the version tool goes into a build-only venv, not into the runtime's."""
    env_dir = tmp_path / "runvenv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    py = env_dir / "bin/python"
    assert _run([py, "-c", "import setuptools_scm"], tmp_path).returncode != 0
    offline = {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(_wheelhouse())}
    out = tmp_path / "wheel"
    r = _run(["bash", ROOT / "scripts/build-wheel.sh", out, py], ROOT, extra_env=offline)
    assert r.returncode == 0, r.stderr
    (whl,) = out.glob("sova_sriov-*.whl")
    assert _run([py, "-c", "import setuptools_scm"], tmp_path).returncode != 0  # untouched


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
            "--no-index",
            "--find-links",
            _wheelhouse(),
            "-c",
            ROOT / "constraints.txt",
            f"{wheel}[{extras}]",
        ],
        tmp,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    added = _site_mb(env_dir) - before
    MEASURED[extras] = round(added, 1)
    print(f"[{extras}] adds {added:.1f} MB to site-packages")
    return env_dir / "bin", added


def _check_documented(extra: str, added: float) -> None:
    """The measurement is the committed one (docs/extras-sizes.json, from which the doc's
    table is generated) within max(3 MB, 10 %): wheels differ a little between platforms
    and patch releases, a new dependency does not."""
    import json

    committed = json.loads((ROOT / "docs/extras-sizes.json").read_text())["added_mb"]
    assert extra in committed, (
        f"no [{extra}] in docs/extras-sizes.json: commit a measurement with "
        "scripts/extras-table.py $SOVA_SIZES_OUT"
    )
    documented = committed[extra]
    assert abs(added - documented) <= max(3.0, 0.1 * documented), (
        f"[{extra}] adds {added:.1f} MB; docs/extras-sizes.json says {documented:g} MB: "
        "commit the new measurement with scripts/extras-table.py $SOVA_SIZES_OUT"
    )


def _installed(bin_: Path) -> set[str]:
    r = _run([bin_ / "python", "-m", "pip", "list", "--format=freeze"], bin_)
    assert r.returncode == 0, r.stderr
    return {line.split("==")[0].lower() for line in r.stdout.splitlines() if "==" in line}


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
    assert added <= AGENT_BUDGET_MB, f"[agent] adds {added:.1f} MB (budget {AGENT_BUDGET_MB} MB)"
    # The wheel carries the compiled policy core, and the agent's install imports it.
    r = _run([bin_ / "python", "-c", "import sova.policy._core as c; print(c.__file__)"], tmp_path)
    assert r.returncode == 0 and r.stdout.strip().endswith("_core.abi3.so"), r.stderr
    carried = _installed(bin_) & set(NOT_ON_AGENTS)
    assert not carried, f"[agent] installs the full CLI's {sorted(carried)}"
    for cmd in ([bin_ / "sova", "agent", "--help"], [bin_ / "sova-agent", "--help"]):
        r = _run(cmd, tmp_path)
        assert r.returncode == 0 and "--manager-url" in r.stdout, r.stderr
    # A bad option value: the one-line error, without typer's or rich's help.
    r = _run([bin_ / "sova", "agent", "--log-format", "loud"], tmp_path)
    assert r.returncode == 2 and r.stderr.strip().startswith("error: --log-format:"), r.stderr
    # The dry run's report and the agent's daemon import without the full CLI.
    r = _run(
        [
            bin_ / "python",
            "-c",
            "import sova.manager.daemons.agent.daemon, sova.driver.libvirt_driver, "
            "sova.driver.inventory_report",
        ],
        tmp_path,
    )
    assert r.returncode == 0, r.stderr
    # The agent's install carries no simulator: asking for one says what to install.
    r = _run([bin_ / "sova", "simulate", "sova-fig5"], tmp_path)
    assert r.returncode == 2
    assert "pip install 'sova-sriov[sim]'" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    # The operator commands are the `cli` extra's; the simulator's code says its extra.
    r = _run([bin_ / "sova", "plans", "list"], tmp_path)
    assert r.returncode == 2 and "pip install 'sova-sriov[cli]'" in r.stderr, r.stderr
    r = _run([bin_ / "python", "-c", "import sova.sim"], tmp_path)
    # (numpy is the agent's too: only what is missing is named)
    assert "MissingExtra: sova.sim needs matplotlib: pip install 'sova-sriov[sim]'" in (r.stderr), (
        r.stderr
    )
    _check_documented("agent", added)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_manager_extra_serves(tmp_path: Path, wheel: Path) -> None:
    import httpx

    bin_, added = _fresh(tmp_path, wheel, "manager")
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
        # The web console's files are package data: the installed manager serves them.
        page = httpx.get(f"http://127.0.0.1:{port}/console/", timeout=5)
        assert page.status_code == 200 and "<title>Sova console</title>" in page.text
        assert httpx.get(f"http://127.0.0.1:{port}/console/console.js", timeout=5).is_success
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    _check_documented("manager", added)


def test_sim_extra_runs_shipped_scenarios_and_the_demo_outside_the_repository(
    tmp_path: Path, wheel: Path
) -> None:
    bin_, _ = _fresh(tmp_path, wheel, "sim,manager")
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
    r = _run([bin_ / "python", "-c", "import sova.testbed.runner, pyroute2"], tmp_path)
    assert r.returncode == 0, r.stderr
    r = _run([bin_ / "sova", "testbed", "--help"], tmp_path)
    assert r.returncode == 0, r.stderr
    _check_documented("testbed", added)


@pytest.mark.parametrize("extra", ["cli", "sim"])
def test_extra_size_is_the_documented_one(extra: str, tmp_path: Path, wheel: Path) -> None:
    """The extras not installed above on their own, measured for the doc's table."""
    bin_, added = _fresh(tmp_path, wheel, extra)
    r = _run([bin_ / "sova", "--help"], tmp_path)
    assert r.returncode == 0 and "simulate" in r.stdout, r.stderr
    _check_documented(extra, added)


def test_sdist_carries_deploy_and_constraints(_only_when_selected: None, tmp_path: Path) -> None:
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
    offline = {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(_wheelhouse())}
    r = _run(
        [env_dir / "bin/python", "-m", "pip", "install", "-q", "build"], tmp_path, extra_env=offline
    )
    assert r.returncode == 0, r.stderr[-3000:]
    # The copy has no .git: give it the checkout's version, as scripts/build-wheel.sh does.
    import sova

    # (pip in build's isolated environment reads the same offline settings)
    version = {"SETUPTOOLS_SCM_PRETEND_VERSION_FOR_SOVA_SRIOV": sova.__version__, **offline}
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
