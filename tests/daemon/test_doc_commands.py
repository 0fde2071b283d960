"""Every curl and sova command in docs/operations.md, run verbatim against a live ``sova manager``.

The operator copies these; a command that silently does nothing (issue 24: the writes sent a
form body, got 422, and curl exited 0) leaves a host out of maintenance while the operator
believes it is in. The cluster is the real processes of ``sova demo`` (simulated hosts, the
manager in recommend mode with an admin token, one agent per host); H1 is hot, so a real
plan is proposed for the approve command.

What the test changes in a command, and only that: the docs' example manager
(``https://manager:8700``, ``localhost:8700``, ``--cacert ca.pem``) becomes the loopback
manager, and the docs' example names (hosts, VM, plan id) become this cluster's. A command
must get a 2xx, or exactly the status the docs show under it (the 401 of a retired token).
A block preceded by ``<!-- illustrative: REASON -->`` is not run. ~20 s.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from sova.demo import Cluster, pick_policy
from sova.scenario import load_scenario

from .conftest import DATA, REPO, wait_until

DOC = REPO / "docs" / "operations.md"
SCENARIO = DATA / "two-hosts.yaml"
ADMIN = "doc-admin-" + "q" * 24
WRITE = re.compile(r"-X\s+(PUT|POST|DELETE)\b|(^|\s)(-d|--data|--json)\s")


def doc_blocks(text: str) -> list[tuple[str, list[tuple[str, str]]]]:
    """(the comment before the block, [(command, the output shown under it)]) per fenced block."""
    blocks: list[tuple[str, list[tuple[str, str]]]] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        if not lines[i].startswith("```"):
            i += 1
            continue
        before = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        i += 1
        body: list[str] = []
        while i < len(lines) and not lines[i].startswith("```"):
            body.append(lines[i])
            i += 1
        i += 1
        cmds: list[tuple[str, str]] = []
        k = 0
        while k < len(body):
            if not body[k].startswith("$ "):
                k += 1
                continue
            cmd = body[k][2:]
            while cmd.endswith("\\") and k + 1 < len(body):
                k += 1
                cmd = cmd[:-1] + " " + body[k].strip()
            k += 1
            out: list[str] = []
            while k < len(body) and not body[k].startswith("$ "):
                out.append(body[k])
                k += 1
            cmds.append((cmd.strip(), "\n".join(out)))
        if cmds:
            blocks.append((before, cmds))
    return blocks


def doc_commands(program: str) -> list[tuple[str, str]]:
    return [
        (cmd, out)
        for before, cmds in doc_blocks(DOC.read_text())
        if "illustrative:" not in before
        for cmd, out in cmds
        if cmd.startswith(program + " ")
    ]


def doc_curls() -> list[tuple[str, str]]:
    return doc_commands("curl")


def test_every_documented_write_fails_loudly_and_sends_json() -> None:
    writes = [cmd for cmd, _ in doc_curls() if WRITE.search(cmd)]
    assert len(writes) >= 4, writes  # approve, mode, fence set, fence clear
    for cmd in writes:
        assert "--fail-with-body" in cmd, f"a refused write would exit 0: {cmd}"
        if re.search(r"(^|\s)(-d|--data)\s", cmd):
            assert "Content-Type: application/json" in cmd, f"sent as a form (422): {cmd}"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    scn = load_scenario(SCENARIO)
    env = {"SOVA_MANAGER_MODE": "recommend", "SOVA_MANAGER_ADMIN_TOKEN": ADMIN}
    with tempfile.TemporaryDirectory() as work:
        c = Cluster(
            SCENARIO,
            scn,
            pick_policy(scn, "sova"),
            tmp_path / "out",
            Path(work),
            speed=20.0,
            log_dir=tmp_path / "logs",
            manager_env=env,
        )
        try:
            c.start()
            yield c
        finally:
            c.stop()


def _get(c: Cluster, path: str) -> httpx.Response:
    r = httpx.get(c.manager_url + path, headers={"authorization": f"Bearer {ADMIN}"}, timeout=10)
    r.raise_for_status()
    return r


def _doc_names(plan: dict[str, Any]) -> dict[str, str]:
    # The docs' example names -> this cluster's (two-hosts.yaml: H1 runs A, B, C; H2 D, E).
    return {
        "7301880420357": str(plan["id"]),
        "hv001": "H1",
        "hv007": "H1",
        "hv012": "H2",
        "HM1": "H1",
        "web-42": plan["actions"][0]["vm"],
        "db-primary": "D",
        "trading-gw": "E",
    }


def _localise(cmd: str, names: dict[str, str]) -> str:
    for doc_name, ours in names.items():
        cmd = re.sub(rf"\b{re.escape(doc_name)}\b", ours, cmd)
    return cmd


@pytest.mark.slow
def test_documented_sova_commands_work_against_a_live_manager(cluster: Cluster) -> None:
    """The operator CLI lines of the same page, each must exit 0 (its exit codes: 1 refused,
    2 bad input, 3 unreachable or token refused)."""
    c = cluster
    plan = wait_until(
        lambda: _get(c, "/v1/plans?state=proposed").json()["plans"], 60, "a proposed plan"
    )[0]
    c.pause()
    names = _doc_names(plan)
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}",
        "SOVA_MANAGER_URL": c.manager_url,
        "SOVA_ADMIN_TOKEN": ADMIN,
        "SOVA_OPERATOR": "alice",
    }
    cmds = doc_commands("sova")
    assert len(cmds) >= 10, cmds
    for cmd, _shown in cmds:
        live = _localise(cmd, names)
        p = subprocess.run(["bash", "-c", live], env=env, capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, (cmd, live, p.returncode, p.stdout, p.stderr)
    actions = [(e["who"], e["action"]) for e in _get(c, "/v1/audit?limit=50").json()["entries"]]
    # who: the token's credential name, annotated by --by (SOVA_OPERATOR)
    assert ("admin (alice)", "approve") in actions, actions
    fences = {(f["kind"], f["name"]) for f in _get(c, "/v1/fences").json()}
    assert fences == {("pin", "D"), ("vf-freeze-vm", "E")}, fences  # maintenance was cleared
    assert _get(c, "/v1/mode").json()["hosts"].get("H1") == "autonomic"


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("curl") is None, reason="needs curl")
def test_documented_curl_commands_work_against_a_live_manager(
    cluster: Cluster, tmp_path: Path
) -> None:
    c = cluster
    plan = wait_until(
        lambda: _get(c, "/v1/plans?state=proposed").json()["plans"], 60, "a proposed plan"
    )[0]
    c.pause()
    names = _doc_names(plan)
    env = {
        **os.environ,
        "ADMIN": ADMIN,
        "OLD": "retired-" + "x" * 24,
        "NEW": c.tokens["H1"],
    }
    if shutil.which("jq") is None:
        pytest.skip("needs jq (the docs pipe through it)")
    ran = 0
    for n, (cmd, shown) in enumerate(doc_curls()):
        live = cmd.replace("https://manager:8700", c.manager_url)
        live = live.replace("localhost:8700", c.manager_url).replace(" --cacert ca.pem", "")
        live = _localise(live, names)
        headers = tmp_path / f"h{n}"
        # The dumped response headers say the status even where the command discards it.
        script = f'curl() {{ command curl -D {headers} "$@"; }}\nset -o pipefail\n{live}\n'
        p = subprocess.run(
            ["bash", "-c", script], env=env, capture_output=True, text=True, timeout=30
        )
        status_lines = re.findall(r"^HTTP/\S+ (\d{3})", headers.read_text(), re.M)
        assert status_lines, (cmd, p.stdout, p.stderr)
        status = int(status_lines[-1])
        documented = {int(s) for s in re.findall(r"\b([45]\d\d)\b", shown)}
        if status in documented:
            continue
        assert 200 <= status < 300 and p.returncode == 0, (cmd, status, p.stdout, p.stderr)
        ran += 1
    assert ran >= 8
    # The writes took effect: each is in the audit log under the name the docs give.
    audit = _get(c, "/v1/audit?limit=50").json()["entries"]
    actions = [(e["who"], e["action"]) for e in audit]
    # who: the token's credential name, annotated by --by (SOVA_OPERATOR)
    assert ("admin (alice)", "approve") in actions, actions
    assert _get(c, "/v1/plans/" + str(plan["id"])).json()["state"] != "proposed"
    assert _get(c, "/v1/mode").json()["cluster_set_by"] == "admin (alice)"
    assert not [f for f in _get(c, "/v1/fences").json() if f["name"] == "H2"]
    assert sum(1 for who, a in actions if who == "admin (alice)" and "fence" in a) >= 2, actions
