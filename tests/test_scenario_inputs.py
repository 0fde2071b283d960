"""Scenario input findings of issue 21: traces stay in the scenario's folder whatever YAML
type names them, a folder or an existing file is a one-line error, and a run too short to
record anything is refused at validate (not an empty timeline from simulate)."""

from __future__ import annotations

import base64
import shutil
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from sova.cli import app

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    shutil.copytree(ROOT / "scenarios" / "profiles", tmp_path / "profiles")
    shutil.copytree(ROOT / "scenarios" / "traces", tmp_path / "traces")
    return tmp_path


def _one_error_line(out: str) -> str:
    assert out.startswith("error:"), out
    assert "Traceback" not in out, out
    return out


def _binary_trace_scenario(folder: Path, target: Path) -> Path:
    text = (ROOT / "scenarios" / "trace-replay.yaml").read_text()
    b64 = base64.b64encode(str(target).encode()).decode()
    text = text.replace(
        "trace: traces/mixed-demand.csv, column: web", f"trace: !!binary {b64}, column: web"
    )
    assert "!!binary" in text
    path = folder / "evil.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("command", ["validate", "simulate"])
def test_a_binary_tagged_trace_cannot_leave_the_folder(
    folder: Path, tmp_path_factory: pytest.TempPathFactory, command: str
) -> None:
    """Before the fix: ``!!binary`` bytes skipped the folder check, were coerced to a str
    path, and an outside CSV validated and was replayed (and /etc/passwd's first line was
    printed by validate)."""
    outside = tmp_path_factory.mktemp("outside") / "secret.csv"
    outside.write_text("time_s,web\n0,1\n1,2\n")
    path = _binary_trace_scenario(folder, outside)
    args = [command, str(path)] + (["-o", str(folder / "out")] if command == "simulate" else [])
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    out = _one_error_line(result.output)
    assert "trace" in out and "relative path" in out
    assert not (folder / "out").exists()


def test_binary_etc_passwd_is_not_printed(folder: Path) -> None:
    path = _binary_trace_scenario(folder, Path("/etc/passwd"))
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == 2
    assert "root:" not in result.output


def test_validate_a_folder_is_one_line(folder: Path) -> None:
    result = CliRunner().invoke(app, ["validate", str(folder)])
    assert result.exit_code == 2, result.output
    assert "not a regular file" in _one_error_line(result.output)


def test_simulate_into_an_existing_file_is_refused_before_running(folder: Path) -> None:
    existing = folder / "existing"
    existing.write_text("keep me")
    scn = folder / "s.yaml"
    shutil.copy(ROOT / "scenarios" / "trace-replay.yaml", scn)
    result = CliRunner().invoke(app, ["simulate", str(scn), "-o", str(existing)])
    assert result.exit_code == 2, result.output
    assert "--out" in _one_error_line(result.output)
    assert existing.read_text() == "keep me"


@pytest.mark.parametrize("name", ["dba-vm", "trace-replay"])
def test_a_run_shorter_than_one_control_period_is_refused_at_validate(
    folder: Path, name: str
) -> None:
    """The full_fuzz tier's finding: ``duration: 1`` validated, then every policy
    simulated an empty timeline (the agents step once per controller.period, 10 s)."""
    data = yaml.safe_load((ROOT / "scenarios" / f"{name}.yaml").read_text())
    data["duration"] = 1
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == 2, result.output
    out = _one_error_line(result.output)
    assert "duration" in out and "controller.period" in out


@pytest.mark.parametrize(
    ("key", "value", "named"),
    [
        # The full fuzz tier (issue 21) found both: validate passed, simulate raised
        # ``ValueError: could not convert string to float`` in the world's set-up.
        ("guarantee_tolerance", "'é'", "metrics.guarantee_tolerance"),
        ("guarantee_tolerance", "''", "metrics.guarantee_tolerance"),
        # A tolerance is a share of the guarantee: 1.5 would count a VM sending nothing.
        ("guarantee_tolerance", "1.5", "metrics.guarantee_tolerance"),
        ("response_from_s", "'soon'", "metrics.response_from_s"),
        ("response_from_s", "-1", "metrics.response_from_s"),
    ],
)
def test_metrics_the_simulator_reads_as_numbers_are_checked_at_validate(
    folder: Path, key: str, value: str, named: str
) -> None:
    text = (ROOT / "scenarios" / "daqs-fig4.yaml").read_text()
    text = text.replace("metrics: {guarantee_tolerance: 0.05}", f"metrics: {{{key}: {value}}}")
    path = folder / "odd-metrics.yaml"
    path.write_text(text)
    for command in (["validate", str(path)], ["simulate", str(path), "-o", str(folder / "o")]):
        result = CliRunner().invoke(app, command)
        assert result.exit_code == 2, result.output
        assert named in _one_error_line(result.output)
    assert not (folder / "o").exists()


@pytest.mark.parametrize("command", ["validate", "simulate"])
def test_a_huge_or_multiline_scenario_name_is_refused_at_once(
    folder: Path, command: str, tmp_path: Path
) -> None:
    """Issue 37, Low: a 100,000-character name made ``sova simulate`` take 63 s instead of
    3.5 s (every figure's title carries it). Names are one line of at most 200 characters
    (the shipped ones are at most 23), refused before anything runs."""
    text = (ROOT / "scenarios" / "trace-replay.yaml").read_text()
    for bad in ("x" * 100_000, '"two\\nlines"'):  # YAML's "\n": a newline in the name
        scn = folder / "long.yaml"
        scn.write_text(text.replace("name: trace-replay", f"name: {bad}", 1))
        args = [command, str(scn)] + (["-o", str(tmp_path / "out")] if command == "simulate" else [])
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 2, result.output[:500]
        line = _one_error_line(result.output)
        assert "  name: " in line and len(line) < 400, line[:500]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        # The full fuzz tier's finding (issue 37's run): 6.6e301 ns of guest CPU per byte
        # validated, then the CPU cost overflowed to inf and every 60-s run of
        # native-vs-driver-domain ended in NaN throughput and response times.
        ("ns_per_byte", 6.6e301),
        ("ns_per_byte", 1.1e6),
    ],
)
def test_a_cpu_cost_per_byte_beyond_any_cipher_is_refused_at_validate(
    folder: Path, field: str, value: float
) -> None:
    data = yaml.safe_load((ROOT / "scenarios" / "native-vs-driver-domain.yaml").read_text())
    data["workload"][0]["vms"]["VM1"] = {**data["workload"][0]["vms"]["VM1"], field: value}
    path = folder / "odd-cost.yaml"
    path.write_text(yaml.safe_dump(data))
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == 2, result.output
    assert field in _one_error_line(result.output)


def test_the_dearest_cpu_cost_per_byte_allowed_simulates_without_nan(folder: Path) -> None:
    """At the bound (1 ms of CPU per byte, 15,000 times the paper's 66 ns) the costs stay
    finite: the run records numbers, not NaN (what 6.6e301 gave)."""
    import math

    from sova.scenario import load_sweep
    from sova.sim.runner import run_policy

    data = yaml.safe_load((ROOT / "scenarios" / "native-vs-driver-domain.yaml").read_text())
    data["workload"][0]["vms"] = {
        vm: {**spec, "ns_per_byte": 1e6} for vm, spec in data["workload"][0]["vms"].items()
    }
    path = folder / "dear.yaml"
    path.write_text(yaml.safe_dump(data))
    scn = load_sweep(path)[0]
    scn = scn.model_copy(update={"duration": 60.0})
    for policy in scn.policies:
        rows = run_policy(scn, policy).timeline[-10:]
        assert rows
        for row in rows:
            for value in vars(row).values():
                assert not (isinstance(value, float) and math.isnan(value)), (policy, row)
