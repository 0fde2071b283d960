"""The versioned wire (issue 20): every report and response says its protocol version,
readers ignore fields they do not know in both directions, known fields stay strict, and
an unversioned (Sova 0.1) agent gets answers it can read."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from sova.manager.daemons.schema import PROTOCOL, PROTOCOL_WINDOW, Directive

from .conftest import REPO, Api, auth, report


def _post(api: Api, body: dict[str, object], host: str = "h1") -> tuple[int, dict[str, object]]:
    r = api.post(f"/v1/hosts/{host}/reports", content=json.dumps(body), headers=auth(host))
    return r.status_code, r.json()


def _body(seq: int, **extra: object) -> dict[str, object]:
    return {**json.loads(report(seq, 100.0 + seq, (0.2, 0.2, 0.2), boot="a1")), **extra}


def test_every_report_the_agent_builds_says_its_protocol() -> None:
    assert json.loads(report(1, 1.0, (0.1, 0.1, 0.1)))["p"] == PROTOCOL


def test_a_newer_agents_unknown_fields_are_ignored_and_the_answer_is_versioned(api: Api) -> None:
    """Before: 422 ``extra_forbidden`` on every report of a newer agent."""
    status, d = _post(api, _body(1, p=PROTOCOL + 1, zz={"new": "field"}))
    assert status == 200, d
    assert d["p"] == PROTOCOL
    r = api.get("/v1/hosts/h1/directive", params={"p": PROTOCOL}, headers=auth("h1"))
    assert r.json()["p"] == PROTOCOL


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("s", -1),  # known fields keep their checks
        ("u", [0.1, 0.1]),
        ("p", PROTOCOL + PROTOCOL_WINDOW + 1),  # outside the window: upgrade managers first
        ("p", "one"),
        # Issue 37, Lows: lax types were coerced — true read as protocol 1, "2" as 2.
        ("p", True),
        ("p", "2"),
        ("s", "7"),
        ("d", False),
        ("y", 1.5),
        ("g", 1),
    ],
)
def test_known_fields_stay_strict(api: Api, field: str, value: object) -> None:
    status, body = _post(api, _body(1, **{field: value}))
    assert status == 422, body
    assert str(body["error"]).startswith(f"{field} ("), body


def test_an_unversioned_agent_gets_only_fields_it_knows(api: Api) -> None:
    """A Sova 0.1 agent sends no ``p`` and refuses unknown fields in the answer (its
    Directive forbids extras): the manager answers it without ``p``."""
    status, d = _post(api, {k: v for k, v in _body(1).items() if k != "p"})
    assert status == 200, d
    assert "p" not in d
    r = api.get("/v1/hosts/h1/directive", headers=auth("h1"))
    assert "p" not in r.json()


def test_the_agent_reads_a_newer_managers_answer() -> None:
    """Before: ``ValidationError: extra_forbidden`` on the first reply of a newer manager."""
    d = Directive.model_validate_json(
        json.dumps({"i": 3, "f": True, "t": "h2", "v": "vm1", "p": PROTOCOL + 1, "q": [1]})
    )
    assert (d.id, d.flag, d.target, d.protocol) == (3, True, "h2", PROTOCOL + 1)
    with pytest.raises(ValidationError):
        Directive.model_validate_json(json.dumps({"i": -3, "f": True}))


def test_the_version_comes_from_git_and_every_build_says_it(tmp_path: Path) -> None:
    """Before, every commit was 0.1.0. A fresh clone's version names its commit (no tag
    yet: 0.1.devN+g<commit>; on a tag vX.Y.Z: X.Y.Z), and the installed build reports its
    own in ``sova --version`` and ``sova_build_info``."""
    import shutil
    import subprocess
    import sys

    from prometheus_client import generate_latest

    from sova import __version__
    from sova.manager.daemons.metrics import ManagerMetrics

    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
    head = subprocess.run(
        ["git", "rev-parse", "--short=9", "HEAD"], cwd=clone, capture_output=True, text=True
    ).stdout.strip()
    scm = subprocess.run(
        [sys.executable, "-m", "setuptools_scm"], cwd=clone, capture_output=True, text=True
    )
    assert scm.returncode == 0, scm.stderr
    described = subprocess.run(
        ["git", "describe", "--tags", "--exact-match"], cwd=clone, capture_output=True
    )
    if described.returncode == 0:  # on a release tag: the plain release number
        assert "+" not in scm.stdout.strip()
    else:
        assert scm.stdout.strip().endswith(f"+g{head}"), (scm.stdout, head)
    assert __version__ != "0.1.0"
    text = generate_latest(ManagerMetrics().registry).decode()
    assert f'version="{__version__}"' in text


def test_two_vm_entries_with_one_name_are_refused(api: Api) -> None:
    """Issue 37, Low: the second entry silently replaced the first (vm_loads is a dict)."""
    body = _body(1)
    vm = {"n": "vm1", "u": [0.1, 0.1, 0.1], "m": 1024}
    body["v"] = [vm, {**vm, "u": [0.5, 0.5, 0.5]}]
    status, d = _post(api, body)
    assert status == 422 and str(d["error"]).startswith("v ("), d
    assert "vm1" in str(d["error"]), d


def test_a_report_with_a_key_twice_is_refused(api: Api) -> None:
    """Issue 37, Low: ``{"s": 1, ..., "s": 99}`` was read as its last value; which one a
    proxy or a log reader sees is anybody's guess."""
    text = report(1, 101.0, (0.2, 0.2, 0.2), boot="a1").decode()
    twice = text[:-1] + ', "s": 99}'
    r = api.post("/v1/hosts/h1/reports", content=twice, headers=auth("h1"))
    assert r.status_code == 422, r.text
    assert "s" in r.json()["error"] and "twice" in r.json()["error"], r.text
