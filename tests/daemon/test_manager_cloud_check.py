"""Issue 38, defect 7: a manager with ``orchestrator = "openstack"`` whose cloud cannot be
used — openstacksdk missing, or no clouds.yaml entry of that name — stops at start-up with
one line and exit 2 (docs/openstack.md, "Configuration"), not at the first approval."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from .conftest import REPO, free_port


def test_an_openstack_manager_without_its_cloud_exits_2_in_one_line(tmp_path: Path) -> None:
    cfg = tmp_path / "manager.toml"
    cfg.write_text(
        f'port = {free_port()}\ndatabase_url = "sqlite:///{tmp_path / "m.db"}"\n'
        'insecure = true\norchestrator = "openstack"\ncloud = "sova"\n'
    )
    # no clouds.yaml anywhere openstacksdk looks (if it is installed at all)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SOVA_", "OS_"))}
    env.update(HOME=str(tmp_path), OS_CLIENT_CONFIG_FILE=str(tmp_path / "none.yaml"))
    p = subprocess.run(
        [sys.executable, "-m", "sova.cli_daemons", "manager", "--config", str(cfg)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**env, "PYTHONPATH": str(REPO / "src")},
        timeout=60,
    )
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    assert len(lines) == 1, p.stderr
    assert "openstacksdk" in lines[0] or "cloud = 'sova'" in lines[0], lines
