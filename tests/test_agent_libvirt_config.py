"""``[libvirt]`` in the agent's TOML: every key of the driver, each checked at start-up."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sova.manager.daemons.config import ConfigError, LibvirtSettings, load_agent_settings


def _load(tmp_path: Path, body: str) -> None:
    cfg = tmp_path / "agent.toml"
    cfg.write_text(body)
    load_agent_settings(cfg, environ={})


@pytest.mark.parametrize(
    ("body", "line"),
    [
        ("[libvirt]\nvf_pool = -1", "libvirt.vf_pool = -1: Input should be greater than or equal"),
        ('[libvirt]\npf = "enp3s0f0/x"', "libvirt.pf = 'enp3s0f0/x': String should match"),
        (
            '[libvirt]\nmigration_uri_template = "qemu+tls://hv2/system"',
            "libvirt.migration_uri_template = 'qemu+tls://hv2/system': String should match",
        ),
        ('[libvirt]\nhotplug_timeout_s = "0s"', "libvirt.hotplug_timeout_s = '0s': Input should"),
        ("[libvirt]\nhotplug_attempts = 0", "libvirt.hotplug_attempts = 0: Input should be"),
        ('[libvirt]\nfailover = "bond"', "libvirt.failover = 'bond': Input should be"),
        ("[libvirt]\nvf_pol = 3", "libvirt.vf_pol = 3: unknown setting"),
        (
            '[libvirt]\nhotplug_timeout_s = "20s"',
            "hotplug_attempts (+ back-off) = 63s exceeds controller.op_timeout = 30s",
        ),
    ],
)
def test_a_bad_value_is_one_line_naming_it(tmp_path, body, line):
    with pytest.raises(ConfigError) as exc:
        _load(tmp_path, body)
    lines = str(exc.value).splitlines()
    assert len(lines) == 2 and line in lines[1], str(exc.value)


def test_hotplug_that_fits_op_timeout_is_accepted(tmp_path):
    _load(tmp_path, '[controller]\nop_timeout = "90s"\n[libvirt]\nhotplug_timeout_s = "20s"')


def test_every_driver_setting_has_a_key():
    """A new LibvirtDriverConfig field needs a [libvirt] key, or operators cannot set it."""
    from sova.driver.libvirt_driver.driver import LibvirtDriverConfig

    driver = {f.name for f in dataclasses.fields(LibvirtDriverConfig)}
    # uri = `connect`, read_only = `dry_run`, migration_timeout_s = controller.migration_timeout
    assert set(LibvirtSettings.model_fields) == driver - {"uri", "read_only", "migration_timeout_s"}


def test_sova_agent_exits_2_on_a_bad_libvirt_value(tmp_path):
    from sova.cli import app

    cfg = tmp_path / "agent.toml"
    cfg.write_text('driver = "libvirt"\n[libvirt]\nvf_pool = -4\n')
    res = CliRunner().invoke(app, ["agent", "--config", str(cfg)])
    assert res.exit_code == 2
    assert "libvirt.vf_pool = -4" in res.output
