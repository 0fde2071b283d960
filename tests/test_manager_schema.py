"""One manager schema: a scenario's ``controller.manager`` and the daemon's ``[planner]`` are
the same model (the daemon adds only its own fields), read under either documented name,
with one bound per setting, and built into the decision core one way."""

from __future__ import annotations

import dataclasses
import tomllib
from pathlib import Path

import pytest

from sova.agent.config import ManagerSpec
from sova.manager.daemons.config import ConfigError, PlannerSettings, load_manager_settings
from sova.manager.decisions.core import ManagerCore
from sova.policy.hotspot import MoveCost

ROOT = Path(__file__).resolve().parents[1]


def _core_settings(core: ManagerCore) -> dict[str, object]:
    skip = {"detector"}  # compared by its parameters below
    out = {
        f.name: getattr(core, f.name)
        for f in dataclasses.fields(core)
        if f.init
        and f.name not in skip
        and not isinstance(getattr(core, f.name), dict | set | list)
    }
    d = core.detector
    out["detector"] = (d.k, d.n, d.alpha)
    return out


def test_the_schema_defaults_are_the_cores() -> None:
    """Nothing configured means the same core, whichever way it is built."""
    assert _core_settings(ManagerCore.from_spec(ManagerSpec())) == _core_settings(ManagerCore())
    assert _core_settings(ManagerCore.from_spec(PlannerSettings())) == _core_settings(ManagerCore())


def test_every_setting_reaches_the_core() -> None:
    spec = ManagerSpec(
        alpha=0.6,
        k=2,
        n=4,
        metric="skewness",
        ceiling=0.9,
        lease_timeout=120.0,
        restart_window_after_migration=False,
        return_tabu=60.0,
        max_concurrent_migrations=2,
        max_migrations_per_hour=7,
        vm_cooldown=30.0,
        min_relief=0.5,
        relief_horizon=300.0,
        move_copy_rate=2e9,
        move_downtime=1.0,
    )
    core = ManagerCore.from_spec(spec)
    assert (core.detector.k, core.detector.n, core.detector.alpha) == (2, 4, 0.6)
    assert (core.metric, core.ceiling, core.lease_timeout_s) == ("skewness", 0.9, 120.0)
    assert core.restart_window_after_migration is False
    assert (core.return_tabu_s, core.vm_cooldown_s) == (60.0, 30.0)
    assert (core.max_concurrent_migrations, core.max_migrations_per_hour) == (2, 7)
    assert core.move_cost == MoveCost(0.5, 300.0, 2e9, 1.0)


@pytest.mark.parametrize("name", ["lease_timeout", "return_tabu", "vm_cooldown"])
def test_both_documented_names_are_one_setting(name: str) -> None:
    assert getattr(PlannerSettings.model_validate({name: "2min"}), name) == 120.0
    assert getattr(PlannerSettings.model_validate({f"{name}_s": 120}), name) == 120.0
    assert getattr(ManagerSpec.model_validate({f"{name}_s": "2min"}), name) == 120.0
    with pytest.raises(ValueError, match=f"give {name} or {name}_s"):
        PlannerSettings.model_validate({name: 1, f"{name}_s": 2})


@pytest.mark.parametrize("model", [ManagerSpec, PlannerSettings])
def test_one_bound_for_the_ceiling(model: type[ManagerSpec]) -> None:
    # A target above 1 after receiving the VM would be over its capacity (before: the
    # daemon accepted up to 1.5, the scenario up to 1).
    assert model.model_validate({"ceiling": 1.0}).ceiling == 1.0
    with pytest.raises(ValueError, match="ceiling"):
        model.model_validate({"ceiling": 1.2})


def test_the_environment_wins_over_the_file_whatever_the_spelling(tmp_path: Path) -> None:
    cfg = tmp_path / "manager.toml"
    cfg.write_text('[planner]\nreturn_tabu = "15min"\nvm_cooldown_s = 300\n')
    env = {
        "SOVA_MANAGER_PLANNER__RETURN_TABU_S": "60",
        "SOVA_MANAGER_PLANNER__VM_COOLDOWN": "30",
    }
    p = load_manager_settings(cfg, environ=env).planner
    assert (p.return_tabu, p.vm_cooldown) == (60.0, 30.0)


def test_the_agents_setting_is_refused_in_the_managers_planner(tmp_path: Path) -> None:
    cfg = tmp_path / "manager.toml"
    cfg.write_text('[planner]\nmigration_bandwidth = "1Gbit"\n')
    with pytest.raises(ConfigError, match="migration_bandwidth is read by the agents"):
        load_manager_settings(cfg, environ={})


def test_the_demos_manager_runs_the_scenarios_manager(tmp_path: Path) -> None:
    """``sova demo`` hands the scenario's manager section to the daemon unchanged (before,
    a hand-written TOML left out ``lease_timeout``)."""
    from sova.demo import manager_toml
    from sova.scenario import load_scenario

    scn = load_scenario(ROOT / "scenarios" / "sova-fig5.yaml")
    m = scn.controller.manager.model_copy(update={"lease_timeout": 123.0})
    scn = scn.model_copy(update={"controller": scn.controller.model_copy(update={"manager": m})})
    text = manager_toml(scn, {"HM1": "t" * 20}, tmp_path / "db", 8700)
    tomllib.loads(text)  # valid TOML
    cfg = tmp_path / "manager.toml"
    cfg.write_text(text)
    planner = load_manager_settings(cfg, environ={}).planner
    shared = set(ManagerSpec.model_fields) - {"migration_bandwidth"}  # the agents' setting
    assert planner.model_dump(include=shared) == m.model_dump(include=shared)
    assert planner.lease_timeout == 123.0
