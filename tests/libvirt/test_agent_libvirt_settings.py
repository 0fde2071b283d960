"""The agent's ``[libvirt]`` settings reach the driver the agent opens (docs/deployment.md §7).

``sova agent`` opens its host through :func:`sova.daemon.wiring.build`; these tests run that
path against libvirt's test driver and read back the driver's configuration and what it
reports (the VF pool), so a setting that is parsed but not passed on fails here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip(
    "libvirt", reason="libvirt-python not installed (scripts/ci-setup-libvirt.sh installs it)"
)

from sova.daemon import wiring  # noqa: E402
from sova.daemon.config import load_agent_settings  # noqa: E402


def _agent(tmp_path: Path, node_uri: str, body: str, environ: dict[str, str] | None = None) -> Any:
    cfg = tmp_path / "agent.toml"
    cfg.write_text(f'driver = "libvirt"\nconnect = "{node_uri}"\n{body}')
    settings = load_agent_settings(cfg, environ=environ or {})
    w = wiring.build(settings)
    return w.driver


def test_libvirt_section_reaches_the_driver(tmp_path, node_uri, monkeypatch, closing):
    monkeypatch.delenv("SOVA_LIBVIRT_DRIVER", raising=False)
    drv = _agent(
        tmp_path,
        node_uri,
        """
[controller]
migration_timeout = "15min"
[libvirt]
pf = "enp3s0f0"
vf_pool = 2
migration_uri_template = "qemu+tls://{host}/system"
hotplug_timeout_s = "5s"
hotplug_attempts = 2
retry_backoff_s = "500ms"
sysfs_root = "/nonexistent"
""",
    )
    closing.append(drv)
    c = drv.config
    assert (c.pf, c.vf_pool, c.migration_uri_template) == (
        "enp3s0f0",
        2,
        "qemu+tls://{host}/system",
    )
    assert (c.hotplug_timeout_s, c.hotplug_attempts, c.retry_backoff_s) == (5.0, 2, 0.5)
    assert c.migration_timeout_s == 900.0  # one deadline: controller.migration_timeout
    # the test node's PF has 4 VFs; the operator gave Sova 2 of them
    assert drv.capabilities().vf_pool == 2
    assert drv.inventory().host.nic.vf_pool == 2


def test_environment_sets_a_libvirt_key(tmp_path, node_uri, monkeypatch, closing):
    monkeypatch.delenv("SOVA_LIBVIRT_DRIVER", raising=False)
    drv = _agent(
        tmp_path,
        node_uri,
        '[libvirt]\nsysfs_root = "/nonexistent"\n',
        {"SOVA_LIBVIRT__VF_POOL": "3"},
    )
    closing.append(drv)
    assert drv.config.vf_pool == 3 and drv.capabilities().vf_pool == 3


def test_driver_file_still_applies_under_the_section(tmp_path, node_uri, monkeypatch, closing):
    """$SOVA_LIBVIRT_DRIVER (the lab's per-agent file) keeps working; [libvirt] wins."""
    f = tmp_path / "driver.toml"
    f.write_text('failover = "guest-bond"\nvf_pool = 1\nsysfs_root = "/nonexistent"\n')
    monkeypatch.setenv("SOVA_LIBVIRT_DRIVER", str(f))
    drv = _agent(tmp_path, node_uri, "[libvirt]\nvf_pool = 3\n")
    closing.append(drv)
    assert drv.config.failover == "guest-bond"  # from the file
    assert drv.config.vf_pool == 3  # the agent's own setting over the file's


def test_a_bad_driver_file_is_a_config_error(tmp_path, node_uri, monkeypatch):
    f = tmp_path / "driver.toml"
    f.write_text("vf_pol = 1\n")
    monkeypatch.setenv("SOVA_LIBVIRT_DRIVER", str(f))
    with pytest.raises(wiring.ConfigError, match="unknown driver setting 'vf_pol'"):
        _agent(tmp_path, node_uri, "")
