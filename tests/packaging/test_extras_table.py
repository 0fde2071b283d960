"""docs/deployment.md's extras table is generated from the last measurement, and names every extra.

The measurement itself is the packaging tier's (test_install.py, ``-m packaging``): it
installs each extra offline into a fresh venv and fails when a figure is off
docs/extras-sizes.json by more than max(3 MB, 10 %). Here, in the main tier: the table is
exactly ``scripts/extras-table.py``'s rendering of that file (so nobody edits a figure by
hand), and every extra in pyproject.toml is either in the table or named as not measured.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Extras with no row, and why: each is a sum of measured ones or not a role's install.
NOT_MEASURED = {
    "lab": "agent + manager + sim",
    "distributed": "sim + Dask, for sweeps on a Dask cluster",
    "openstack": "openstacksdk, measured by the OpenStack tier's own venvs",
    "test": "the test tools",
    "libvirt": "kept for test.sh and existing installs; its packages are agent's",
}


def test_the_docs_table_is_the_committed_measurement() -> None:
    r = subprocess.run(
        [sys.executable, ROOT / "scripts/extras-table.py", "--check"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr


def test_the_check_fails_on_a_figure_edited_by_hand(tmp_path: Path) -> None:
    """--check compares the doc with the rendering, so a hand-typed figure fails it."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("extras_table", ROOT / "scripts/extras-table.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    doc = (ROOT / "docs/deployment.md").read_text()
    edited = re.sub(r"(\| `agent` \|.*\| )([0-9.]+)( MB \|)", r"\g<1>1.0\g<3>", doc)
    assert edited != doc
    table = mod.render(mod.load(ROOT / "docs/extras-sizes.json"))
    assert mod.with_table(doc, table) == doc
    assert mod.with_table(edited, table) != edited


def test_every_extra_is_in_the_table_or_named_as_not_measured() -> None:
    extras = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    )
    doc = (ROOT / "docs/deployment.md").read_text()
    rows = set(re.findall(r"^\| `([a-z]+)` \|", doc, re.M))
    assert rows | set(NOT_MEASURED) == extras, (sorted(rows), sorted(extras))
    assert not rows & set(NOT_MEASURED)


def test_install_hints_name_the_distribution_not_the_unrelated_sova() -> None:
    """`sova` on PyPI is another project: `pip install 'sova[openstack]'` would install it
    (issue 24). Every install line names `sova-sriov`."""
    bad = []
    paths = [ROOT / "README.md", *ROOT.glob("docs/*.md"), *ROOT.glob("src/sova/**/*.py")]
    paths += [p for p in ROOT.glob("deploy/**/*") if p.is_file() and p.suffix != ".1"]
    for path in paths + list(ROOT.glob("scripts/*.sh")):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"""(pip|install).*['"\s]sova\[""", line):
                bad.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not bad, bad
