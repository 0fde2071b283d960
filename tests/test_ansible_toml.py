"""Issue 38, defect 6: the Ansible role writes /etc/sova/{agent,manager}.toml through a
TOML library (roles/sova/filter_plugins/sova_toml.py, tomli-w), so every documented setting
arrives: ``[placement]`` with ``host_groups`` and ``[[placement.rules]]``, nested
``controller.*`` keys. Before, its template rendered two levels: ``host_groups`` was
dropped, ``rules = [{...}]`` was not TOML (``Expected '=' after a key``), and nested
controller settings vanished.

The role's own templates are rendered here with Jinja (the engine Ansible runs them with)
and its filter, then parsed with tomllib and loaded by Sova's own settings. The role is
applied for real by scripts/ci-ansible.sh (ops tier).
"""

from __future__ import annotations

import importlib.util
import json
import tomllib
from pathlib import Path
from typing import Any

import jinja2
import pytest
import yaml

from sova.manager.daemons.config import load_agent_settings, load_manager_settings

ROLE = Path(__file__).resolve().parents[1] / "deploy/ansible/roles/sova"
PLACEMENT = tomllib.loads(
    """
[placement]
migration_domains = ["skylake", "icelake"]
[placement.host_groups]
skylake = ["hv001", "hv002"]
icelake = ["hv004"]
"rack-a" = ["hv001", "hv004"]
[[placement.rules]]
name = "db-apart"
kind = "anti-affinity"
vms = ["db-primary", "db-replica"]
[[placement.rules]]
name = "trading-on-rack-a"
kind = "vm-host-must"
vms = ["trading-gw"]
group = "rack-a"
"""
)


def _render(template: str, **variables: Any) -> str:
    pytest.importorskip("tomli_w", reason="the role's TOML writer (pip install tomli-w)")
    spec = importlib.util.spec_from_file_location("sova_toml", ROLE / "filter_plugins/sova_toml.py")
    assert spec is not None and spec.loader is not None
    plugin = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(plugin)
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    env.filters["to_json"] = json.dumps  # Ansible's own, as the role's templates may use it
    env.filters.update(plugin.FilterModule().filters())
    text = (ROLE / "templates" / template).read_text()
    return env.from_string(text).render(ansible_managed="Ansible managed", **variables)


def test_manager_settings_with_placement_and_nested_controller_survive_the_role(
    tmp_path: Path,
) -> None:
    defaults = yaml.safe_load((ROLE / "defaults/main.yml").read_text())
    settings = {
        **defaults["sova_manager_settings"],
        **PLACEMENT,
        "planner": {"alpha": 0.7, "k": 3, "n": 5},
    }
    text = _render("settings.toml.j2", sova_settings=settings)
    assert tomllib.loads(text) == settings  # every key, at every depth
    path = tmp_path / "manager.toml"
    path.write_text(text)
    loaded = load_manager_settings(path)
    groups = loaded.placement.host_groups
    assert groups["rack-a"] == ["hv001", "hv004"], groups
    assert [r.name for r in loaded.placement.rules] == ["db-apart", "trading-on-rack-a"]


def test_agent_settings_keep_nested_controller_keys(tmp_path: Path) -> None:
    settings = {
        "host": "hv-ci",
        "driver": "libvirt",
        "manager_url": "https://sova-manager.example:8700",
        "token": "a" * 24,
        "controller": {"period": "10s", "vf_policy": "sova"},
    }
    text = _render("settings.toml.j2", sova_settings=settings)
    assert tomllib.loads(text) == settings
    path = tmp_path / "agent.toml"
    path.write_text(text)
    assert load_agent_settings(path).controller.period == 10.0


def test_host_tokens_with_dotted_names_stay_one_key() -> None:
    """``hv01.example = "..."`` unquoted is a dotted key (a table hv01 with a key example)."""
    tokens = {"hv01.example": "t" * 24, "hv-02": "u" * 24}
    assert tomllib.loads(_render("hosts.tokens.j2", sova_manager_host_tokens=tokens)) == tokens


def test_a_null_setting_is_refused_naming_its_key() -> None:
    with pytest.raises(ValueError, match=r"controller\.period is null"):
        _render("settings.toml.j2", sova_settings={"controller": {"period": None}})
