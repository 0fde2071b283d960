"""TOML + environment configuration: overrides, and errors that name field, value, source."""

from __future__ import annotations

from pathlib import Path

import pytest

from sova.manager.daemons.config import ConfigError, load_agent_settings, load_manager_settings

REPO = Path(__file__).resolve().parents[2]


def test_example_configs_are_valid() -> None:
    a = load_agent_settings(REPO / "deploy" / "agent.toml", environ={})
    assert a.driver == "libvirt" and a.controller.period == 10.0
    m = load_manager_settings(REPO / "deploy" / "manager.toml", environ={})
    assert m.port == 8700 and m.planner.k == 3


def test_environment_overrides_the_file(tmp_path: Path) -> None:
    f = tmp_path / "agent.toml"
    f.write_text(
        'manager_url = "http://a:1"\n[controller]\nperiod = "10s"\n[controller.sensing]\nwindow = 6\n'
    )
    s = load_agent_settings(
        f,
        environ={
            "SOVA_MANAGER_URL": "https://manager.example:8700",
            "SOVA_TOKEN": "s3cret-token-value",
            "SOVA_CONTROLLER__PERIOD": "5s",
            "SOVA_MANAGER_DATABASE_URL": "belongs to the manager: ignored here",
            "PATH": "/bin",
        },
    )
    assert s.manager_url == "https://manager.example:8700"
    assert s.resolved_token() == "s3cret-token-value"
    assert s.controller.period == 5.0 and s.controller.sensing.window == 6


def test_errors_name_the_field_the_value_and_the_source(tmp_path: Path) -> None:
    f = tmp_path / "agent.toml"
    f.write_text('driver = "xen"\n[controller]\nbogus = 1\n[controller.sensing]\nwindow = 0\n')
    with pytest.raises(ConfigError) as e:
        load_agent_settings(f, environ={"SOVA_CONTROLLER__SENSING__EPSILON": "1.5"})
    msg = str(e.value)
    assert str(f) in msg
    assert "driver = 'xen'" in msg
    assert "controller.sensing.window = 0" in msg
    assert "controller.bogus = 1: unknown setting" in msg
    assert "controller.sensing.epsilon = '1.5' (from SOVA_CONTROLLER__SENSING__EPSILON)" in msg


def test_secrets_are_not_echoed_in_errors() -> None:
    with pytest.raises(ConfigError) as e:
        load_manager_settings(None, environ={}, overrides={"hosts": {"h1": {"token": "short"}}})
    assert "short" not in str(e.value) and "hosts.h1.token = ***" in str(e.value)


def test_bad_toml_and_missing_file_are_clear(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("port = = 1\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_manager_settings(bad, environ={})
    with pytest.raises(ConfigError, match="cannot read"):
        load_manager_settings(tmp_path / "missing.toml", environ={})


def test_tls_needs_both_files() -> None:
    with pytest.raises(ConfigError, match="tls_certfile and tls_keyfile go together"):
        load_manager_settings(None, environ={}, overrides={"tls_certfile": "/x.pem"})
