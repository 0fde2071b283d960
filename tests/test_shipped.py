"""Shipped scenarios are found by name from any directory; hints survive rich markup."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from sova.cli import app
from sova.install import install_hint, missing_module_hint
from sova.shipped import list_shipped, resolve_scenario

ROOT = Path(__file__).resolve().parents[1]


def test_names_resolve_to_the_shipped_files_from_elsewhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    want = (ROOT / "scenarios/sova-fig5.yaml").resolve()
    for arg in ("sova-fig5", "sova-fig5.yaml", "scenarios/sova-fig5.yaml"):
        assert resolve_scenario(Path(arg)).resolve() == want
    assert (
        resolve_scenario(Path("testbed/dba-vm")).resolve()
        == (ROOT / "scenarios/testbed/dba-vm.yaml").resolve()
    )
    # Not shipped, and profiles are not scenarios: the path comes back for the loader to refuse.
    assert resolve_scenario(Path("no-such-scenario")) == Path("no-such-scenario")
    names = {name for name, _ in list_shipped()}
    assert {"sova-fig5", "testbed/dba-vm", "trace-replay"} <= names
    assert not any(n.startswith(("profiles/", "traces/")) for n in names)


def test_a_local_file_wins_over_a_shipped_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sova-fig5").write_text("name: mine\n")
    assert resolve_scenario(Path("sova-fig5")) == Path("sova-fig5")


def test_validate_by_name_outside_the_repository(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(app, ["validate", "sova-fig5"])
    assert r.exit_code == 0, r.output
    assert "ok (3 host(s), 5 VM(s)" in r.output
    r = CliRunner().invoke(app, ["scenarios"])
    assert r.exit_code == 0 and "sova-fig5" in r.output


def test_install_hints_name_the_distribution_and_keep_their_brackets(tmp_path: Path) -> None:
    assert install_hint("agent") == "pip install 'sova-sriov[agent]'"
    assert missing_module_hint("numpy.linalg") == "pip install 'sova-sriov[sim]'"
    assert missing_module_hint("not_ours") is None
    bad = tmp_path / "bad.toml"
    bad.write_text('driver = "libvirt[x]"\n')
    r = CliRunner().invoke(app, ["agent", "--config", str(bad)])
    assert r.exit_code == 2
    assert "libvirt[x]" in r.output, r.output  # rich would print 'libvirt' without escaping
