"""`sova testbed …` as the lead will mount it: bad input is refused before anything runs."""

from __future__ import annotations

from pathlib import Path

import typer
from typer.testing import CliRunner

from sova.cli_testbed import register

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios" / "testbed"
runner = CliRunner()


def app() -> typer.Typer:
    root = typer.Typer()

    @root.callback()
    def _root() -> None:
        """sova"""

    register(root)
    return root


def test_register_adds_up_run_and_down() -> None:
    out = runner.invoke(app(), ["testbed", "--help"])
    assert out.exit_code == 0
    for cmd in ("up", "run", "down"):
        assert cmd in out.output


def test_a_bad_scenario_is_refused_with_the_field_and_value(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "name: x\nduration: 10s\nlink: {capacity: 1Gbit, vf_pool: 1}\n"
        "vms: [{name: a}]\ntraffic: [{vm: b}]\n"
    )
    out = runner.invoke(app(), ["testbed", "run", str(bad)])
    assert out.exit_code == 2
    assert "traffic[0].vm: unknown VM 'b'" in out.output


def test_an_unknown_policy_is_refused_before_anything_is_built() -> None:
    out = runner.invoke(app(), ["testbed", "run", str(SCENARIOS / "daqs-fig3.yaml"), "-p", "nope"])
    assert out.exit_code == 2
    assert "'nope' is not compared in this scenario" in out.output
