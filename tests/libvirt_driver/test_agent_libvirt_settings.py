"""The agent's ``[libvirt]`` settings reach the driver the agent opens (docs/deployment.md §7).

``sova agent`` opens its host through :func:`sova.manager.daemons.agent.wiring.build`; these tests run that
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

from sova.manager.daemons.agent import wiring
from sova.manager.daemons.config import load_agent_settings


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


def test_host_totals_from_this_daemons_domains_over_a_declared_capacity(
    tmp_path, node_uri, monkeypatch, closing
):
    """Two hypervisors sharing one machine (the lab) report their own load: the sum of
    their domains over the capacity the operator declared, not the machine's /proc."""
    monkeypatch.delenv("SOVA_LIBVIRT_DRIVER", raising=False)
    drv = _agent(
        tmp_path,
        node_uri,
        '[libvirt]\nsysfs_root = "/nonexistent"\nhost_totals = "domains"\n'
        "host_cpus = 2\nhost_memory_mib = 2048\n",
    )
    closing.append(drv)
    host = drv.inventory().host
    assert (host.cores, host.memory_bytes) == (2, 2048 * 2**20)  # not the node's 8 / 32 GiB
    s1 = drv.sample()
    s2 = drv.sample()
    # memory is a level: what this daemon's running domains use now
    assert s2.totals.memory_used_bytes == sum(c.memory_used_bytes for c in s2.vms.values()) > 0
    # the busy counter counts only work done by domains seen in both samples
    grown = sum(c.cpu_time_ns - s1.vms[v].cpu_time_ns for v, c in s2.vms.items() if v in s1.vms)
    assert s2.totals.cpu_busy_ns - s1.totals.cpu_busy_ns == grown


def test_a_domain_arriving_adds_no_past_work_to_the_host(tmp_path):
    """A migrated-in VM brings its whole cumulative CPU time; counting it would make the
    target look saturated for one period (and a leaving one would reset the counter)."""
    from sova.driver.libvirt_driver.sampling import DomainTotals
    from sova.model import VMCounters

    def vm(name: str, cpu: int, rx: int) -> VMCounters:
        return VMCounters(name, 1, cpu, 0, rx, 0, 0, 0, memory_used_bytes=100)

    t = DomainTotals()
    a = t.update({"a": vm("a", 10**12, 10**9)})
    b = t.update({"a": vm("a", 10**12 + 5, 10**9 + 7), "b": vm("b", 9 * 10**12, 10**10)})
    c = t.update({"b": vm("b", 9 * 10**12 + 3, 10**10 + 1)})  # a left
    assert (a.cpu_busy_ns, b.cpu_busy_ns, c.cpu_busy_ns) == (0, 5, 8)
    assert (a.nic_rx_bytes, b.nic_rx_bytes, c.nic_rx_bytes) == (0, 7, 8)
    assert (a.memory_used_bytes, b.memory_used_bytes, c.memory_used_bytes) == (100, 200, 100)


def test_driver_worst_case_hotplug_over_op_timeout_is_refused_naming_the_fields(
    tmp_path, node_uri, monkeypatch
):
    """The driver file's (or the driver's default) hot-plug budget counts too, not only
    the [libvirt] keys: 20 s x 3 attempts + back-off outlives a 30 s op_timeout."""
    f = tmp_path / "driver.toml"
    f.write_text('hotplug_timeout_s = 20.0\nsysfs_root = "/nonexistent"\n')
    monkeypatch.setenv("SOVA_LIBVIRT_DRIVER", str(f))
    with pytest.raises(wiring.ConfigError) as exc:
        _agent(tmp_path, node_uri, "")
    msg = str(exc.value)
    assert "hotplug_timeout_s" in msg and "hotplug_attempts" in msg, msg
    assert "controller.op_timeout = 30s" in msg and "63s" in msg, msg


def test_the_driver_defaults_fit_the_default_op_timeout(tmp_path, node_uri, monkeypatch, closing):
    monkeypatch.delenv("SOVA_LIBVIRT_DRIVER", raising=False)
    drv = _agent(tmp_path, node_uri, '[libvirt]\nsysfs_root = "/nonexistent"\n')
    closing.append(drv)
    assert drv.config.hotplug_budget_s() <= 30.0
