"""Issue 21, "who may act": agents served their metrics — every VM's name and load, without
authentication — on ``0.0.0.0:9707`` as shipped. They bind loopback unless an operator
names another address: the settings' default, the shipped ``deploy/agent.toml`` and the
Ansible role's defaults, and the socket a running agent actually listens on.

Before (commit 956a480^): ``deploy/agent.toml`` and the role said ``0.0.0.0``.
"""

from __future__ import annotations

import ipaddress
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from sova.manager.daemons.config import AgentSettings, load_agent_settings

from .conftest import REPO, free_port


def _loopback(addr: str) -> bool:
    return ipaddress.ip_address(addr).is_loopback


def test_the_shipped_configs_bind_agent_metrics_to_loopback() -> None:
    assert _loopback(AgentSettings().metrics_addr)
    shipped = load_agent_settings(REPO / "deploy" / "agent.toml", environ={})
    assert shipped.metrics_port is not None and _loopback(shipped.metrics_addr)
    role = yaml.safe_load((REPO / "deploy/ansible/roles/sova/defaults/main.yml").read_text())
    assert _loopback(role["sova_agent_settings"]["metrics_addr"])


def _listening(port: int) -> set[str]:
    """The local addresses listening on TCP ``port``, as the kernel has them."""
    out = set()
    for table in (Path("/proc/net/tcp"), Path("/proc/net/tcp6")):
        if not table.exists():
            continue
        for line in table.read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            addr, p = local.split(":")
            if int(p, 16) != port or state != "0A":  # 0A = LISTEN
                continue
            raw = bytes.fromhex(addr)
            # /proc prints each 32-bit word in host (little-endian) order
            raw = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
            out.add(str(ipaddress.ip_address(raw)))
    return out


@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="needs Linux /proc/net/tcp")
def test_a_running_agent_listens_on_loopback_only(tmp_path: Path) -> None:
    port = free_port()
    cfg = tmp_path / "agent.toml"
    cfg.write_text(f'driver = "mock"\nhost = "hv1"\nmetrics_port = {port}\n')
    proc = subprocess.Popen(
        [sys.executable, "-m", "sova.cli", "agent", "--config", str(cfg)],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while not (bound := _listening(port)) and time.monotonic() < deadline:
            assert proc.poll() is None, f"agent exited with {proc.returncode}"
            time.sleep(0.2)
        assert bound, "the agent never listened"
        assert all(_loopback(a) for a in bound), bound
    finally:
        proc.terminate()
        proc.wait(timeout=30)
