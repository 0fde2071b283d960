"""Every shell block of README.md and docs/*.md is run here, or marked illustrative with a reason.

The operator copies these; a command that silently does nothing (issue 24: the writes sent a
form body, got 422, and curl exited 0) leaves a host out of maintenance while the operator
believes it is in. Every fenced block names its language; a shell block (``sh``,
``console``) is preceded by one of

- ``<!-- doc-test: manager -->``: its curl and sova lines run verbatim against a live
  ``sova manager`` (the real processes of ``sova demo``: simulated hosts, the manager in
  recommend mode with an admin token, one agent per host; H1 is hot, so a real plan is
  proposed for the approve command);
- ``<!-- doc-test: checkout -->``: its lines run from a scratch directory laid out like a
  checkout (``.venv``, ``scenarios``, ``deploy``), each must exit 0;
- ``<!-- doc-test: libvirt -->``: the same, where ``qemu:///system`` answers (else skipped,
  saying so);
- ``<!-- illustrative: REASON -->``: not run, for the reason given (root, hardware, systemd,
  PyPI).

What the test changes in a command, and only that: the docs' example manager
(``https://manager:8700``, ``localhost:8700``, ``--cacert ca.pem``) becomes the loopback
manager, and the docs' example names (hosts, VM, plan id) become this cluster's. A curl must
get a 2xx, or exactly the status the docs show under it (the 401 of a retired token).
~20 s for the manager's blocks, ~1 min for the checkout's (a demo run).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from sova.demo import Cluster, pick_policy
from sova.scenario import load_scenario

from .conftest import DATA, REPO, wait_until

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
SCENARIO = DATA / "two-hosts.yaml"
ADMIN = "doc-admin-" + "q" * 24
WRITE = re.compile(r"-X\s+(PUT|POST|DELETE)\b|(^|\s)(-d|--data|--json)\s")
SHELL = {"sh", "console"}
RUNNERS = {"manager", "checkout", "libvirt"}
MARK = re.compile(r"^<!-- (doc-test|illustrative): (.*?) -->$")


@dataclass
class Block:
    """One fenced block of a doc: where, its language, the marker before it, its commands."""

    where: str  # README.md:53
    lang: str
    marker: tuple[str, str] | None  # ("doc-test", runner) | ("illustrative", reason)
    body: list[str]
    commands: list[tuple[str, str]] = field(default_factory=list)  # (command, output shown)


def _commands(lang: str, body: list[str]) -> list[tuple[str, str]]:
    """``console``: the ``$ `` lines (with their continuations) and the output under each;
    ``sh``: every line that is not a comment."""
    cmds: list[tuple[str, str]] = []
    k = 0
    while k < len(body):
        line = body[k]
        if lang == "console" and not line.startswith("$ "):
            k += 1
            continue
        if lang == "sh" and (not line.strip() or line.lstrip().startswith("#")):
            k += 1
            continue
        cmd = line[2:] if lang == "console" else line
        while cmd.rstrip().endswith("\\") and k + 1 < len(body):
            k += 1
            cmd = cmd.rstrip()[:-1] + " " + body[k].strip()
        k += 1
        out: list[str] = []
        while lang == "console" and k < len(body) and not body[k].startswith("$ "):
            out.append(body[k])
            k += 1
        cmds.append((cmd.strip(), "\n".join(out)))
    return cmds


def doc_blocks(path: Path) -> list[Block]:
    blocks: list[Block] = []
    lines = path.read_text().splitlines()
    i = 0
    while i < len(lines):
        if not lines[i].startswith("```"):
            i += 1
            continue
        start = i
        lang = lines[i][3:].strip()
        before = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        m = MARK.match(before.strip())
        i += 1
        body: list[str] = []
        while i < len(lines) and not lines[i].startswith("```"):
            body.append(lines[i])
            i += 1
        i += 1
        blocks.append(
            Block(
                f"{path.relative_to(REPO)}:{start + 1}",
                lang,
                (m.group(1), m.group(2).strip()) if m else None,
                body,
                _commands(lang, body) if lang in SHELL else [],
            )
        )
    return blocks


def all_blocks() -> list[Block]:
    return [b for doc in DOCS for b in doc_blocks(doc)]


def run_by(runner: str) -> list[Block]:
    return [b for b in all_blocks() if b.marker == ("doc-test", runner)]


def doc_commands(program: str) -> list[tuple[str, str]]:
    """The ``program`` lines of the blocks run against the live manager."""
    return [
        (cmd, out)
        for b in run_by("manager")
        for cmd, out in b.commands
        if cmd.startswith(program + " ")
    ]


def doc_curls() -> list[tuple[str, str]]:
    return doc_commands("curl")


def test_every_fenced_block_names_its_language() -> None:
    """An untagged block could hide commands from the checks below: ``text`` says it holds
    none."""
    untagged = [b.where for b in all_blocks() if not b.lang]
    assert not untagged, (
        f"fenced blocks without a language (sh, console, toml, text, ...): {untagged}"
    )


def test_every_shell_block_is_run_or_marked_illustrative_with_a_reason() -> None:
    shell = [b for b in all_blocks() if b.lang in SHELL]
    assert len(shell) >= 15, [b.where for b in shell]
    for b in shell:
        assert b.marker is not None, (
            f"{b.where}: a {b.lang} block with neither <!-- doc-test: RUNNER --> "
            f"({', '.join(sorted(RUNNERS))}) nor <!-- illustrative: REASON --> before it"
        )
        kind, value = b.marker
        if kind == "doc-test":
            assert value in RUNNERS, f"{b.where}: unknown runner {value!r}"
            assert b.commands, f"{b.where}: a block to run holds no command"
        else:
            assert len(value.split()) >= 3, f"{b.where}: illustrative needs a reason: {value!r}"


def test_no_other_block_holds_a_command_prompt() -> None:
    """A ``$ `` prompt in a toml or text block is a command nobody runs."""
    hidden = [
        b.where
        for b in all_blocks()
        if b.lang not in SHELL and any(line.startswith("$ ") for line in b.body)
    ]
    assert not hidden, hidden


def test_the_managers_blocks_hold_only_commands_it_runs() -> None:
    """The live-manager tests below run the curl and sova lines; anything else there would
    be skipped silently."""
    for b in run_by("manager"):
        for cmd, _ in b.commands:
            assert cmd.startswith(("curl ", "sova ")), (b.where, cmd)


def test_every_documented_write_fails_loudly_and_sends_json() -> None:
    writes = [cmd for cmd, _ in doc_curls() if WRITE.search(cmd)]
    assert len(writes) >= 4, writes  # approve, mode, fence set, fence clear
    for cmd in writes:
        assert "--fail-with-body" in cmd, f"a refused write would exit 0: {cmd}"
        if re.search(r"(^|\s)(-d|--data)\s", cmd):
            assert "Content-Type: application/json" in cmd, f"sent as a form (422): {cmd}"


def _section(doc: Path, title: str) -> list[str]:
    lines = doc.read_text().splitlines()
    start = lines.index(title)
    end = next(
        (i for i in range(start + 1, len(lines)) if lines[i].startswith(("## ", "### "))),
        len(lines),
    )
    return lines[start:end]


def test_token_rotation_retires_the_old_token_before_checking_it_is_refused(
    tmp_path: Path,
) -> None:
    """Issue 38: followed in order, the steps of "Token rotation" must leave only the new
    token before the check that shows the old one refused (401). The section's edits of
    the tokens file are run, in order, on a copy; the check's position is where the
    operator runs it."""
    lines = _section(REPO / "docs" / "operations.md", "### Token rotation (no restart)")
    check = next(i for i, line in enumerate(lines) if "Bearer $OLD" in line)
    tokens = tmp_path / "hosts.tokens"
    tokens.write_text('"hv001" = "sha256:old"\n"hv002" = "sha256:other"\n')
    edits = [
        line[2:].replace("/etc/sova/hosts.tokens", str(tokens))
        for line in lines[:check]
        if line.startswith("$ sed -i") and "/etc/sova/hosts.tokens" in line
    ]
    assert edits, "the section edits /etc/sova/hosts.tokens with sed"
    for cmd in edits:
        cmd = cmd.replace("<digest of the new token>", "new")
        subprocess.run(["bash", "-c", cmd], check=True, timeout=10)
    import tomllib

    held = tomllib.loads(tokens.read_text())
    assert held == {"hv001": "sha256:new", "hv002": "sha256:other"}, (
        f"before the 401 check the tokens file holds {held}: the old token is still accepted"
    )
    last_edit = max(i for i, line in enumerate(lines[:check]) if "/etc/sova/hosts.tokens" in line)
    assert any("systemctl reload sova-manager" in line for line in lines[last_edit:check])


CURL_OF_MANAGER = re.compile(r"curl [^`]*?(\S*:8700\S*)")


def test_documented_curls_of_the_manager_speak_tls() -> None:
    """Issue 38: a production manager serves TLS, so ``curl localhost:8700`` gets an empty
    reply (curl exit 52). Every curl of a manager in the docs, in a block or inline, says
    https://."""
    plain = [
        f"{doc.relative_to(REPO)}:{n}: {m.group(1)}"
        for doc in DOCS
        for n, line in enumerate(doc.read_text().splitlines(), 1)
        for m in CURL_OF_MANAGER.finditer(line)
        if not m.group(1).strip("'\"").startswith("https://")
    ]
    assert not plain, plain


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
        # The demo's manager serves plain HTTP (SOVA_MANAGER_URL above): no CA to give.
        live = _localise(cmd.replace(" --cacert ca.pem", ""), names)
        p = subprocess.run(
            ["bash", "-c", live], env=env, capture_output=True, text=True, timeout=60
        )
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


def _checkout_like(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A scratch directory where the docs' ``.venv/bin/sova`` and relative paths resolve to
    this checkout's, and whatever a command writes (out/...) lands in the scratch."""
    work = tmp_path / "checkout"
    work.mkdir()
    (work / ".venv").symlink_to(Path(sys.executable).parent.parent)
    for name in ("scenarios", "deploy", "constraints.txt"):
        (work / name).symlink_to(REPO / name)
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}",
        "MPLBACKEND": "Agg",
    }
    return work, env


def _run_blocks(blocks: list[Block], tmp_path: Path, timeout: float) -> int:
    work, env = _checkout_like(tmp_path)
    ran = 0
    for b in blocks:
        for cmd, _ in b.commands:
            p = subprocess.run(
                ["bash", "-c", "set -o pipefail\n" + cmd],
                cwd=work,
                env=env,
                capture_output=True,
                text=True,
                timeout=timeout,
                stdin=subprocess.DEVNULL,
            )
            assert p.returncode == 0, (
                b.where,
                cmd,
                p.returncode,
                p.stdout[-2000:],
                p.stderr[-2000:],
            )
            ran += 1
    return ran


@pytest.mark.slow
def test_documented_checkout_commands_run(tmp_path: Path) -> None:
    """README's ``sova`` lines (help, scenarios, validate, simulate, demo), each exit 0."""
    blocks = run_by("checkout")
    assert blocks, "no <!-- doc-test: checkout --> block"
    assert _run_blocks(blocks, tmp_path, timeout=600) >= 5


def _system_libvirt() -> str | None:
    """Why ``qemu:///system`` cannot be read here, or None when it can."""
    import libvirt

    try:
        libvirt.registerErrorHandler(lambda *_: None, None)
        conn = libvirt.openReadOnly("qemu:///system")
    except libvirt.libvirtError as exc:
        return f"qemu:///system does not answer: {str(exc).splitlines()[0]}"
    conn.close()
    return None


def test_documented_libvirt_dry_runs(tmp_path: Path) -> None:
    """The agent's read-only first look at this host's libvirt, as the docs give it.

    Where no system libvirtd answers (CI, a laptop), the same lines run against libvirt's
    built-in test driver, the rehearsal docs/deployment.md names (``--connect
    test:///default``): the command, its options and its report are the documented ones,
    only the host differs."""
    pytest.importorskip("libvirt", reason="libvirt-python is not installed (needs libvirt-dev)")
    blocks = run_by("libvirt")
    assert len(blocks) >= 2, "README and docs/deployment.md show the dry run"
    if _system_libvirt() is not None:
        blocks = [
            Block(
                b.where,
                b.lang,
                b.marker,
                b.body,
                [(c.replace("qemu:///system", "test:///default"), o) for c, o in b.commands],
            )
            for b in blocks
        ]
        assert all("test:///default" in c for b in blocks for c, _ in b.commands), blocks
    assert _run_blocks(blocks, tmp_path, timeout=120) >= 2
