"""Prometheus: live scrapes of both daemons pass promtool's lint; the shipped alert rules
and scrape config load, and the rules fire (and stay quiet) as their unit tests say."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[1]
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool is not installed (scripts/ci-setup-ops.sh installs it)"
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


VIEWER = "scrape-viewer-token-0123456789"  # the manager's /metrics needs one (issue 21)


def _scrape(url: str, proc: subprocess.Popen[bytes], want: str) -> str:
    """The first scrape that contains ``want`` (the daemon has run a turn), within 60 s."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"daemon exited with {proc.returncode}"
        try:
            text = httpx.get(url, headers={"authorization": f"Bearer {VIEWER}"}, timeout=2).text
            if want in text:
                return text
        except httpx.TransportError:
            pass
        time.sleep(0.3)
    raise AssertionError(f"{url}: no {want} within 60 s")


def _promtool_metrics(text: str) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run(
        [PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True, check=False
    )


@pytest.fixture(scope="module")
def live_scrapes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Scrapes of a manager and of an agent reporting to it (mock driver)."""
    tmp_path = tmp_path_factory.mktemp("scrapes")
    mport, aport = _free_port(), _free_port()
    (tmp_path / "hosts.tokens").write_text('hv1 = "t0ken-hv1-0123456789abcdef"\n')
    (tmp_path / "agent.toml").write_text(
        f'driver = "mock"\nhost = "hv1"\nmanager_url = "http://127.0.0.1:{mport}"\n'
        f'token = "t0ken-hv1-0123456789abcdef"\nmetrics_port = {aport}\n'
        '[controller]\nperiod = "0.2s"\n'
    )
    env = {
        **os.environ,
        "SOVA_MANAGER_TOKENS_FILE": str(tmp_path / "hosts.tokens"),
        "SOVA_MANAGER_ADMIN_TOKEN": VIEWER,
    }
    sova = [sys.executable, "-m", "sova.cli"]
    procs = [
        subprocess.Popen(
            [
                *sova,
                "manager",
                "--port",
                str(mport),
                "--database-url",
                f"sqlite:///{tmp_path / 'm.db'}",
            ],
            cwd=tmp_path,
            env=env,
            stderr=subprocess.DEVNULL,
        )
    ]
    try:
        _scrape(f"http://127.0.0.1:{mport}/metrics", procs[0], "sova_build_info")
        procs.append(
            subprocess.Popen(
                [*sova, "agent", "--config", str(tmp_path / "agent.toml")],
                cwd=tmp_path,
                env=env,
                stderr=subprocess.DEVNULL,
            )
        )
        agent = _scrape(f"http://127.0.0.1:{aport}/metrics", procs[1], 'result="sent"')
        manager = _scrape(
            f"http://127.0.0.1:{mport}/metrics",
            procs[0],
            'sova_manager_reports_total{result="accepted"}',
        )
        return {"agent": agent, "manager": manager}
    finally:
        for p in procs:
            p.terminate()
            p.wait(timeout=30)


@needs_promtool
def test_live_scrapes_pass_promtool_lint(live_scrapes: dict[str, str]) -> None:
    for role, text in live_scrapes.items():
        r = _promtool_metrics(text)
        assert r.returncode == 0, f"{role}: {r.stdout}{r.stderr}"
        assert "sova_build_info{" in text and f'role="{role}"' in text
        assert "process_cpu_seconds_total" in text and "process_resident_memory_bytes" in text
    assert "sova_agent_vf_max_rate_bytes_per_second" in live_scrapes["agent"]
    assert "sova_agent_vm_guarantee_bytes_per_second" in live_scrapes["agent"]


def test_dashboard_and_rules_name_only_exported_metrics(live_scrapes: dict[str, str]) -> None:
    import re

    exported = set(re.findall(r"^# TYPE (\S+) ", "".join(live_scrapes.values()), re.M))
    texts = [
        (ROOT / "deploy" / f).read_text() for f in ("grafana-sova.json", "prometheus-rules.yaml")
    ]
    named = set(re.findall(r"\b(sova_[a-z_]+)", "".join(texts)))
    base = {re.sub(r"_(bucket|count|sum)$", "", n) for n in named}
    exported |= {n.removesuffix("_total") for n in exported} | {n + "_total" for n in exported}
    missing = sorted(base - exported - {"sova_manager", "sova_agent"})
    assert not missing, missing


@needs_promtool
def test_the_old_unit_name_fails_the_lint() -> None:
    # The check above can fail: promtool rejects what the agent exported before.
    bad = (
        "# HELP sova_agent_vf_max_rate_bits_per_second VF tier\n"
        "# TYPE sova_agent_vf_max_rate_bits_per_second gauge\n"
        'sova_agent_vf_max_rate_bits_per_second{vm="vm1"} 0\n'
    )
    assert _promtool_metrics(bad).returncode != 0


@needs_promtool
def test_alert_rules_load_and_pass_their_unit_tests() -> None:
    assert PROMTOOL is not None
    for args in (
        ["check", "rules", "deploy/prometheus-rules.yaml"],
        ["test", "rules", "deploy/prometheus-rules.test.yaml"],
    ):
        r = subprocess.run([PROMTOOL, *args], cwd=ROOT, capture_output=True, text=True, check=False)
        assert r.returncode == 0, r.stdout + r.stderr


@needs_promtool
def test_shipped_scrape_config_loads(tmp_path: Path) -> None:
    assert PROMTOOL is not None
    cfg = (ROOT / "deploy/prometheus.yml").read_text()
    # The config names installed paths; point them at the repository's files.
    shutil.copy(ROOT / "deploy/prometheus-rules.yaml", tmp_path / "sova-rules.yaml")
    (tmp_path / "sova-ca.pem").write_text("")
    (tmp_path / "sova-viewer.token").write_text("a-viewer-token-of-the-operators-file\n")
    cfg = cfg.replace("/etc/prometheus/", f"{tmp_path}/")
    (tmp_path / "prometheus.yml").write_text(cfg)
    r = subprocess.run(
        [PROMTOOL, "check", "config", str(tmp_path / "prometheus.yml")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert r.returncode == 0, r.stdout + r.stderr
