"""What scripts/ci-ansible-upgrade.sh checks after each phase on the split hosts
(tests/ansible/split-hosts.yml): which version each daemon runs, that both agents report,
the store's schema revision, the fences, and the order in which the playbook restarted the
daemons and waited for them (the stand-in systemctl's action logs and ansible's output).

    python tests/ansible/upgrade_check.py PHASE --work DIR --port PORT --version V [...]

PHASE: installed | upgraded | rolled-back. Exits 1 with one line per failed check.
"""

from __future__ import annotations

import argparse
import re
import sqlite3
import sys
import time
from pathlib import Path

import httpx

AGENTS = ("hv-ci-1", "hv-ci-2")
TOKEN = "ci-admin-token-0123456789abcdef"  # tests/ansible/split-hosts.yml
REPO = Path(__file__).resolve().parents[2]


def _head(versions: Path) -> str:
    """The newest schema revision among a release's migrations (by their revision ids)."""
    revs = [
        m.group(1)
        for f in versions.glob("*.py")
        if (m := re.search(r'^revision = "([^"]+)"', f.read_text(), re.M))
    ]
    return max(revs)


def _revision(db: Path) -> str:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as c:
        return str(c.execute("SELECT version_num FROM alembic_version").fetchone()[0])


def _metrics(url: str, token: str | None = None) -> str:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.get(url + "/metrics", headers=headers, timeout=5).text


def _wait(what: str, probe: object, seconds: float = 60) -> None:
    assert callable(probe)
    deadline = time.monotonic() + seconds
    last = ""
    while time.monotonic() < deadline:
        try:
            ok, last = probe()
        except httpx.HTTPError as exc:
            ok, last = False, str(exc)
        if ok:
            return
        time.sleep(0.5)
    raise SystemExit(f"error: {what} within {seconds:.0f} s (last: {last[:300]})")


def _versions_and_reports(a: argparse.Namespace) -> None:
    mgr = f"https://127.0.0.1:{a.port}"
    want = f'version="{a.version}"'

    def manager() -> tuple[bool, str]:
        text = _metrics(mgr, TOKEN)
        return want in text, re.findall(r"^sova_build_info.*$", text, re.M)[0]

    _wait(f"the manager runs {a.version}", manager)
    for i, host in enumerate(AGENTS, start=1):

        def agent(port: int = a.port + i) -> tuple[bool, str]:
            text = _metrics(f"http://127.0.0.1:{port}")
            up = re.search(r"^sova_agent_manager_up 1", text, re.M) is not None
            return want in text and up, re.findall(r"^sova_build_info.*$", text, re.M)[0]

        _wait(f"{host}'s agent runs {a.version} and reaches the manager", agent)

    def cluster() -> tuple[bool, str]:
        view = httpx.get(
            mgr + "/v1/cluster", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=5
        ).json()
        fresh = {h["host"] for h in view["hosts"] if h["age_s"] < 5}
        return fresh >= set(AGENTS), f"fresh hosts {sorted(fresh)}"

    _wait("both agents' reports reach the manager", cluster)
    print(f"check: manager and both agents run {a.version}; both agents report")


def _actions(work: Path, since: float) -> list[tuple[float, str, str, str]]:
    """Every start/stop the stand-in systemctl did on the three hosts since ``since``."""
    out = []
    for host in ("mgr-ci", *AGENTS):
        log = work / host / "root/run/fake-systemd/actions.log"
        for line in log.read_text().splitlines() if log.exists() else []:
            t, action, unit = line.split()
            if float(t) >= since:
                out.append((float(t), host, action, unit))
    return sorted(out)


def _in_order(log: str, marks: list[str]) -> list[int]:
    """Where each mark first appears in ``log``, each after the one before it."""
    at, where = -1, []
    for mark in marks:
        at = log.find(mark, at + 1)
        if at < 0:
            raise SystemExit(f"error: ansible's output lacks, in this order: {marks} (no {mark!r})")
        where.append(at)
    return where


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("phase", choices=["installed", "upgraded", "rolled-back"])
    p.add_argument("--work", type=Path, required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--version", required=True)
    p.add_argument("--old-version")
    p.add_argument("--backup", type=Path)
    p.add_argument("--log", type=Path)
    p.add_argument("--since", type=float, default=0.0)
    a = p.parse_args()
    db = a.work / "mgr-ci/root/var/lib/sova-manager/manager.db"
    old_head = _head(a.work / "old-src/src/sova/daemon/migrations/versions")
    new_head = _head(REPO / "src/sova/manager/daemons/service/migrations/versions")
    _versions_and_reports(a)
    mgr = f"https://127.0.0.1:{a.port}"
    fences = {
        f["name"]: f.get("reason") or ""
        for f in httpx.get(
            mgr + "/v1/fences", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=5
        ).json()
    }
    actions = _actions(a.work, a.since)
    starts = [(h, u) for _, h, act, u in actions if act == "start"]
    log = a.log.read_text() if a.log else ""
    if a.phase == "installed":
        assert _revision(db) == old_head, (_revision(db), old_head)
        print(f"check: store at the old release's schema {old_head}")
        return
    if a.phase == "upgraded":
        assert a.backup is not None
        assert _revision(a.backup) == old_head, (a.backup, _revision(a.backup), old_head)
        assert _revision(db) == new_head, (_revision(db), new_head)
        assert old_head < new_head, (old_head, new_head)
        print(f"check: backup {a.backup.name} at schema {old_head}; store migrated to {new_head}")
        # the manager first, then hv-ci-1, then hv-ci-2 (batches of one), each restarted once
        assert starts == [
            ("mgr-ci", "sova-manager.service"),
            ("hv-ci-1", "sova-agent.service"),
            ("hv-ci-2", "sova-agent.service"),
        ], actions
        _in_order(
            log,
            [
                "TASK [sova : Back up the store]",
                "RUNNING HANDLER [sova : Restart sova-manager]",
                "TASK [sova : Wait until the manager is ready",
                "RUNNING HANDLER [sova : Restart sova-agent]",
                "TASK [sova : Wait until the agent runs the installed version",
                "RUNNING HANDLER [sova : Restart sova-agent]",
                "TASK [sova : Wait until the agent runs the installed version",
            ],
        )
        print("check: restarts in order manager, hv-ci-1, hv-ci-2, each ready before the next")
        assert fences.get("hv-ci-2") == "before-upgrade", fences
        print("check: the fence set before the upgrade is kept")
        return
    # rolled back: agents one at a time first, then the manager stopped, restored, started
    assert _revision(db) == old_head, (_revision(db), old_head)
    print(f"check: store back at the old release's schema {old_head}")
    seq = [(h, act) for _, h, act, _u in actions]
    assert seq.index(("hv-ci-1", "start")) < seq.index(("hv-ci-2", "start")), seq
    assert seq.index(("hv-ci-2", "start")) < seq.index(("mgr-ci", "stop")), seq
    assert seq.index(("mgr-ci", "stop")) < seq.index(("mgr-ci", "start")), seq
    _in_order(
        log,
        [
            "RUNNING HANDLER [sova : Restart sova-agent]",
            "TASK [sova : Wait until the agent runs the installed version",
            "RUNNING HANDLER [sova : Restart sova-agent]",
            "TASK [sova : Wait until the agent runs the installed version",
            "TASK [Stop the manager]",
            "TASK [sova : Restore the pre-upgrade backup with the older release]",
            "TASK [Start the manager on the restored store]",
            "TASK [sova : Wait until the manager is ready",
        ],
    )
    print("check: agents rolled back one at a time, then the manager restored and started")
    # the pre-upgrade backup's state: the fence set before it, not the one set after it
    assert fences.get("hv-ci-2") == "before-upgrade", fences
    assert "hv-ci-1" not in fences, fences
    print("check: the store is the backup's (fence before the upgrade kept, the later one gone)")


if __name__ == "__main__":
    try:
        main()
    except AssertionError as exc:
        sys.exit(f"error: check failed: {exc}")
