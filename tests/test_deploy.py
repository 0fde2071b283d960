"""What ships in deploy/: systemd units hardened and documented as shipped, sova(1) current."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
UNITS = ["sova-agent.service", "sova-manager.service"]
MAX_EXPOSURE = 2.5


def _unit(name: str) -> dict[str, list[str]]:
    keys: dict[str, list[str]] = {}
    for line in (ROOT / "deploy" / name).read_text().splitlines():
        if "=" in line and not line.startswith("#"):
            k, v = line.split("=", 1)
            keys.setdefault(k, []).append(v)
    return keys


@pytest.mark.parametrize("unit", UNITS)
def test_unit_exposure_is_at_most_2_5(unit: str) -> None:
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not installed (scripts/ci-setup-ops.sh installs it)")
    r = subprocess.run(
        ["systemd-analyze", "security", "--offline=yes", "--no-pager", str(ROOT / "deploy" / unit)],
        capture_output=True,
        text=True,
        check=False,
    )
    m = re.search(r"Overall exposure level for \S+: ([0-9.]+)", r.stdout)
    assert m, r.stdout + r.stderr
    assert float(m.group(1)) <= MAX_EXPOSURE, r.stdout


def test_agent_unit_runs_unprivileged_with_only_net_admin() -> None:
    u = _unit("sova-agent.service")
    assert u["User"] != ["root"]
    assert u["SupplementaryGroups"] == ["libvirt"]
    assert u["AmbientCapabilities"] == ["CAP_NET_ADMIN"]
    assert u["CapabilityBoundingSet"] == ["CAP_NET_ADMIN"]
    # Fits monolithic (libvirtd) and modular (virtqemud) hosts: ordered, never required.
    assert "Requires" not in u
    assert {"libvirtd.service", "virtqemud.socket"} <= set(u["After"][0].split())


@pytest.mark.parametrize("unit", UNITS)
def test_units_are_notify_with_watchdog_and_documented_by_the_shipped_man_page(unit: str) -> None:
    u = _unit(unit)
    assert u["Type"] == ["notify"] and u["WatchdogSec"]
    assert u["Documentation"] == ["man:sova(1)"]
    assert (ROOT / "deploy/man/sova.1").is_file()


def test_deployment_guide_shows_the_shipped_agent_unit() -> None:
    doc = (ROOT / "docs/deployment.md").read_text()
    section = doc[doc.index("## 9. systemd unit") :]
    shown = re.search(r"```ini\n(.*?)```", section, re.S)
    assert shown, "no ini block in section 9"
    assert shown.group(1) == (ROOT / "deploy/sova-agent.service").read_text()


def test_man_page_matches_the_cli() -> None:
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import manpages
    finally:
        sys.path.pop(0)
    assert (ROOT / "deploy/man/sova.1").read_text() == manpages.render(), (
        "deploy/man/sova.1 is stale: run python scripts/manpages.py"
    )


@pytest.mark.parametrize("unit", UNITS)
def test_a_bad_config_is_not_restarted_forever(unit: str) -> None:
    # Exit status 2 is the daemons' "bad configuration" (a one-line error naming the
    # field): restarting every RestartSec cannot fix it, only floods the journal.
    u = _unit(unit)
    assert u["Restart"] == ["on-failure"]
    assert "2" in " ".join(u.get("RestartPreventExitStatus", [])).split()


@pytest.mark.parametrize("unit", UNITS)
def test_no_unit_setting_is_written_twice(unit: str) -> None:
    # A merge once left RestartPreventExitStatus=2 and its comment twice in both units;
    # systemd accepts that silently, so a later edit to one copy would not take effect.
    lines = [
        ln.strip()
        for ln in (ROOT / "deploy" / unit).read_text().splitlines()
        if ln.strip() and not ln.lstrip().startswith("#")
    ]
    repeated = sorted({ln for ln in lines if lines.count(ln) > 1 and not ln.startswith("[")})
    assert not repeated, repeated


def test_agent_and_manager_keep_their_state_apart() -> None:
    # Different users (sova-agent, the manager's DynamicUser) must not share one
    # StateDirectory: systemd would chown it back and forth on a combined host.
    agent = _unit("sova-agent.service")["StateDirectory"]
    manager = _unit("sova-manager.service")["StateDirectory"]
    assert agent == ["sova-agent"] and manager == ["sova-manager"]
    # The shipped manager config keeps its SQLite store in the manager's own directory.
    for cfg in ("deploy/manager.toml", "deploy/ansible/roles/sova/defaults/main.yml"):
        urls = re.findall(r"sqlite:///(/\S+?)[\"\s]", (ROOT / cfg).read_text())
        assert urls and all(u.startswith("/var/lib/sova-manager/") for u in urls), (cfg, urls)
    home = (ROOT / "deploy/sova.sysusers.conf").read_text()
    assert re.search(r"^u sova-agent .* /var/lib/sova-agent$", home, re.M), home


def _alerts() -> dict[str, dict[str, Any]]:
    rules = yaml.safe_load((ROOT / "deploy/prometheus-rules.yaml").read_text())
    return {r["alert"]: r for g in rules["groups"] for r in g["rules"] if "alert" in r}


def test_every_alert_links_a_runbook_section() -> None:
    doc = (ROOT / "docs/runbooks.md").read_text()
    sections = set(re.findall(r"^## (Sova\w+)$", doc, re.M))
    alerts = _alerts()
    for name, rule in alerts.items():
        assert rule["annotations"].get("runbook_url") == f"docs/runbooks.md#{name.lower()}", name
        assert name in sections, f"docs/runbooks.md has no section '## {name}'"
    assert sections <= alerts.keys(), (
        f"runbooks for alerts that do not exist: {sections - alerts.keys()}"
    )


def test_every_alert_fires_in_a_promtool_test_case() -> None:
    cases = yaml.safe_load((ROOT / "deploy/prometheus-rules.test.yaml").read_text())["tests"]
    fired = {
        t["alertname"] for c in cases for t in c.get("alert_rule_test", []) if t.get("exp_alerts")
    }
    assert set(_alerts()) <= fired, sorted(set(_alerts()) - fired)


def test_operations_alerts_cover_the_planner_plans_and_agent_restarts() -> None:
    rules = yaml.safe_load((ROOT / "deploy/prometheus-rules.yaml").read_text())
    ops = next(g for g in rules["groups"] if g["name"] == "sova-operations")
    assert {r["alert"] for r in ops["rules"]} >= {
        "SovaPlannerStalled",
        "SovaPlansWaiting",
        "SovaPlansExpiring",
        "SovaAgentRestarting",
    }
    store = _alerts()["SovaStoreWriteErrors"]["annotations"]["description"]
    # Readiness says the store cannot be written; liveness (/healthz) stays 200.
    assert "/readyz returns 503" in store and "/healthz returns 503" not in store


def test_a_manager_outage_inhibits_the_per_agent_alerts() -> None:
    am = yaml.safe_load((ROOT / "deploy/alertmanager.yml").read_text())
    (rule,) = [
        r for r in am["inhibit_rules"] if 'alertname="SovaManagerDown"' in r["source_matchers"]
    ]
    target = next(m for m in rule["target_matchers"] if m.startswith("alertname=~"))
    pattern = re.compile(target.split("=~", 1)[1].strip('"'))
    consequences = {"SovaManagerUnreachableFromAgents", "SovaHostStale", "SovaHostsStale"}
    assert {a for a in _alerts() if pattern.fullmatch(a)} == consequences
    if shutil.which("amtool"):
        r = subprocess.run(
            ["amtool", "check-config", str(ROOT / "deploy/alertmanager.yml")],
            capture_output=True,
            text=True,
            check=False,
        )
        assert r.returncode == 0, r.stdout + r.stderr


ROLE = ROOT / "deploy/ansible/roles/sova"
# The Python each distribution release ships (the role's venv is made from it).
DISTRO_PYTHON = {
    ("Debian", "bookworm"): (3, 11),
    ("Debian", "trixie"): (3, 13),
    ("Ubuntu", "jammy"): (3, 10),
    ("Ubuntu", "noble"): (3, 12),
}


def test_role_claims_only_distributions_with_python_3_11() -> None:
    meta = yaml.safe_load((ROLE / "meta/main.yml").read_text())["galaxy_info"]["platforms"]
    claimed = [(p["name"], v) for p in meta for v in p["versions"]]
    assert claimed
    for release in claimed:
        assert DISTRO_PYTHON[release] >= (3, 11), f"{release} ships Python {DISTRO_PYTHON[release]}"


def test_a_daemon_is_restarted_only_on_hosts_that_run_it() -> None:
    # The pip task notifies both handlers; on an agent-only host the manager's handler
    # restarted a unit that does not exist and the run failed (issue 24).
    handlers = yaml.safe_load((ROLE / "handlers/main.yml").read_text())
    for h in handlers:
        daemon = "agent" if "sova-agent" in h["name"] else "manager"
        assert f"sova_{daemon}_enabled" in h["when"], h


def test_role_ships_the_admin_token_outside_the_world_readable_config() -> None:
    tasks = yaml.safe_load((ROLE / "tasks/manager.yml").read_text())
    env = next(
        t for t in tasks if "manager.env" in t.get("ansible.builtin.copy", {}).get("dest", "")
    )
    copy = env["ansible.builtin.copy"]
    assert copy["mode"] == "0600" and "SOVA_MANAGER_ADMIN_TOKEN=" in copy["content"]
    assert env["no_log"] is True
    unit = _unit("sova-manager.service")
    assert "-/etc/sova/manager.env" in unit["EnvironmentFile"]


# The files the manager reads again on SIGHUP (ManagerService.reload_tokens ->
# TokenBook.load): rotation works only if the unit hands the daemon the live file.
SIGHUP_FILES = {"tokens_file": "hosts.tokens", "operators_file": "operators.toml"}
SECRETS_GROUP = "sova-secrets"


def test_files_reloaded_on_sighup_are_not_frozen_systemd_credentials() -> None:
    # systemd copies a LoadCredential= file once at start; SIGHUP then re-read that stale
    # copy and token rotation silently did nothing until a restart.
    unit = _unit("sova-manager.service")
    creds = {c.split(":", 1)[1] for c in unit.get("LoadCredential", [])}
    env = dict(e.split("=", 1) for e in unit.get("Environment", []))
    for name in SIGHUP_FILES.values():
        assert f"/etc/sova/{name}" not in creds, name
    tokens = env.get("SOVA_MANAGER_TOKENS_FILE", "/etc/sova/hosts.tokens")
    assert "%d" not in tokens and tokens == "/etc/sova/hosts.tokens", tokens
    assert not any("%d" in v for k, v in env.items() if "OPERATORS" in k), env
    # The dynamic user reads them through a static group, and `systemctl reload` is SIGHUP.
    assert unit["SupplementaryGroups"] == [SECRETS_GROUP]
    assert unit["ExecReload"] == ["/bin/kill -HUP $MAINPID"]
    # The TLS key is read once at start: it may stay a credential.
    assert "manager.key:/etc/sova/tls/manager.key" in unit["LoadCredential"]


def test_role_makes_the_reloaded_secrets_readable_by_the_secrets_group_only() -> None:
    sysusers = (ROOT / "deploy/sova-manager.sysusers.conf").read_text()
    assert re.search(rf"^g {SECRETS_GROUP} -$", sysusers, re.M), sysusers
    tasks = yaml.safe_load((ROLE / "tasks/manager.yml").read_text())
    sysusers_runs = [t for t in tasks if "ansible.builtin.command" in t]
    assert any(
        "sova-manager.conf" in t["ansible.builtin.command"]["argv"] for t in sysusers_runs
    ), sysusers_runs
    written = next(
        t["ansible.builtin.template"]
        for t in tasks
        if t.get("ansible.builtin.template", {}).get("dest", "").endswith("/etc/sova/hosts.tokens")
    )
    assert written["mode"] == "0640" and written["owner"] == "root", written
    assert written["group"] == "{{ sova_secrets_gid }}", written
    defaults = yaml.safe_load((ROLE / "defaults/main.yml").read_text())
    assert defaults["sova_manager_settings"]["tokens_file"] == "/etc/sova/hosts.tokens"
    assert defaults["sova_secrets_group"] == SECRETS_GROUP


def test_deployment_guide_shows_the_shipped_manager_unit() -> None:
    doc = (ROOT / "docs/deployment.md").read_text()
    section = doc[doc.index("## 9. systemd unit") :]
    shown = re.findall(r"```ini\n(.*?)```", section, re.S)
    assert (ROOT / "deploy/sova-manager.service").read_text() in shown
