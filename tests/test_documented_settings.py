"""Every settings block the documentation and deploy/ show an operator is accepted as written.

A ```toml block in docs/ (or README.md) and every deploy/*.toml file must validate as the
agent's or the manager's settings: an unknown key, a wrong type or an out-of-range value in
a documented example fails here, naming the file, the block's line and the key.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from sova.cli_client import ClientConfig
from sova.manager.daemons.config import AgentSettings, ManagerSettings, format_errors
from sova.manager.daemons.credentials import parse_operators

ROOT = Path(__file__).resolve().parents[1]
FENCE = re.compile(r"^```toml[^\n]*\n(.*?)^```", re.S | re.M)


def _blocks() -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for md in sorted([*(ROOT / "docs").rglob("*.md"), ROOT / "README.md"]):
        text = md.read_text()
        for m in FENCE.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            out.append((f"{md.relative_to(ROOT)}:{line}", m.group(1)))
    for f in sorted((ROOT / "deploy").rglob("*.toml")):
        out.append((str(f.relative_to(ROOT)), f.read_text()))
    return out


# An operators file (docs/operations.md#who-may-act) is its own format, read by the
# credentials loader, not a daemon's settings; its first line names it.
OPERATOR_BLOCKS = [(w, t) for w, t in _blocks() if "operators.toml" in t.split("\n", 1)[0]]
# The operator CLI's client config (docs/operations.md#the-client-config) is the
# workstation's file, read by sova.cli_client; its first line names it too.
CLIENT_BLOCKS = [(w, t) for w, t in _blocks() if "client.toml" in t.split("\n", 1)[0]]
BLOCKS = [(w, t) for w, t in _blocks() if (w, t) not in OPERATOR_BLOCKS + CLIENT_BLOCKS]


def _errors(data: dict[str, Any], where: str) -> dict[str, str]:
    errs: dict[str, str] = {}
    for model in (AgentSettings, ManagerSettings):
        try:
            model.model_validate(data)
        except ValidationError as err:
            errs[model.__name__] = format_errors(err, where, {})
        else:
            return {}
    return errs


def test_the_documentation_has_settings_blocks() -> None:
    names = {w.split(":")[0] for w, _ in BLOCKS}
    # The files an operator copies from: if these stop matching, the test checks nothing.
    assert {"deploy/agent.toml", "deploy/manager.toml", "docs/deployment.md"} <= names


@pytest.mark.parametrize(("where", "text"), BLOCKS, ids=[w for w, _ in BLOCKS])
def test_every_documented_settings_block_is_accepted(where: str, text: str) -> None:
    data = tomllib.loads(text)
    errs = _errors(data, where)
    assert not errs, "\n".join(errs.values())


@pytest.mark.parametrize(("where", "text"), OPERATOR_BLOCKS, ids=[w for w, _ in OPERATOR_BLOCKS])
def test_every_documented_operators_file_is_accepted(where: str, text: str) -> None:
    # The docs write digests as placeholders (``sha256:<hex>``); each becomes a distinct
    # well-formed digest, so what is checked is the file's shape: names, roles, lists.
    n = iter(range(1, 1000))
    concrete = re.sub(r"<[^>]*>", lambda _m: f"{next(n):064x}", text)
    book = parse_operators(tomllib.loads(concrete), where)
    assert book and {role for role, _ in book.values()} <= {"viewer", "operator", "admin"}


@pytest.mark.parametrize(("where", "text"), CLIENT_BLOCKS, ids=[w for w, _ in CLIENT_BLOCKS])
def test_every_documented_client_config_is_accepted(where: str, text: str) -> None:
    cfg = ClientConfig.model_validate(tomllib.loads(text))
    assert cfg.managers and all(u.startswith("https://") for u in cfg.managers), where


def test_the_documentation_has_a_client_config() -> None:
    assert [w for w, _ in CLIENT_BLOCKS if w.startswith("docs/operations.md")]


def test_a_typo_in_a_block_is_caught() -> None:
    """The check above can fail: a misspelt key is rejected by both daemons."""
    errs = _errors({"libvirt": {"vf_pol": 4}}, "x")
    assert set(errs) == {"AgentSettings", "ManagerSettings"}
    assert "libvirt.vf_pol" in errs["AgentSettings"]
