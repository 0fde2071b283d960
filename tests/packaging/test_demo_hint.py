"""`sova demo` on a host with one role's extra says what to install, in one line (issue 24).

The role's install is reproduced by making the other extras' modules unimportable
(``sys.modules[name] = None``, which is what ``import`` then reports as missing); the
packaging tier (``-m packaging``) does the same with real fresh venvs.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

# What an agent-only install lacks (its extra has numpy: the policy core's facades use it).
AGENT_ONLY = ["matplotlib", "fastapi", "uvicorn", "sqlalchemy", "alembic", "psycopg"]
MANAGER_ONLY = ["matplotlib"]

RUN = """
import sys
for name in sys.argv[1:]:
    sys.modules[name] = None
sys.argv = ["sova", "demo", "--no-live", "--no-baseline", "-o", "demo-out"]
from sova.cli import main
main()
"""


@pytest.mark.parametrize(
    ("missing", "hint"),
    [
        (AGENT_ONLY, "pip install 'sova-sriov[sim,manager]'"),
        (MANAGER_ONLY, "pip install 'sova-sriov[sim]'"),
    ],
    ids=["agent-only", "manager-only"],
)
def test_demo_without_the_simulator_prints_one_install_line(
    missing: list[str], hint: str, tmp_path: Path
) -> None:
    r = subprocess.run(
        [sys.executable, "-c", RUN, *missing],
        cwd=str(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and hint in lines[0], r.stderr[-2000:]
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "demo-out").exists()
