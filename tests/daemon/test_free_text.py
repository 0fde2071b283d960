"""Issue 37, Medium 4: free text that could forge a line is refused on input and escaped on
output. Before, only U+0000-001F and U+007F were refused: U+2028 (line separator), U+0085
(NEL), the 8-bit CSI U+009B and bidi overrides (U+202E) in ``--by`` or a reason were
stored, and ``sova audit`` / ``sova fence list`` printed them raw — a fake row whose who
is ``root`` for a Unicode-aware reader, colours in the operator's terminal."""

from __future__ import annotations

from typing import Any

import pytest
import typer

from sova.cli_fence import fence_line
from sova.cli_operator import audit_line, check_reason

from .conftest import ADMIN, Api

H = {"authorization": f"Bearer {ADMIN}"}
FORGERS = {
    "line separator": "x\u2028     7  2026-01-01T00:00:00Z  root  unfence",
    "paragraph separator": "x\u2029y",
    "next line (C1)": "x\u0085y",
    "8-bit CSI (C1)": "x\u009b31mred",
    "right-to-left override": "toor\u202e",
    "left-to-right isolate": "a\u2066b",
    "right-to-left mark": "a\u200fb",
    "arabic letter mark": "a\u061cb",
}


@pytest.fixture
def api(api_factory: Any) -> Api:
    return api_factory(admin_token=ADMIN)  # type: ignore[no-any-return]


@pytest.mark.parametrize("text", FORGERS.values(), ids=FORGERS.keys())
def test_forging_text_is_refused_in_every_field(api: Api, text: str) -> None:
    r = api.run(
        api.client.put("/v1/fences/maintenance/h1", json={"by": text}, headers=H)
    )
    assert r.status_code == 422, r.text
    r = api.run(
        api.client.put("/v1/fences/maintenance/h1", json={"reason": text}, headers=H)
    )
    assert r.status_code == 422, r.text
    for q in ({"by": text}, {"reason": text}):
        r = api.run(api.client.delete("/v1/fences/maintenance/h1", params=q, headers=H))
        assert r.status_code == 422, r.text
    api.drain()
    assert api.get("/v1/audit", headers=H).json()["entries"] == []  # nothing stored
    with pytest.raises(typer.Exit):
        check_reason(text)


def test_ordinary_unicode_is_kept(api: Api) -> None:
    r = api.run(
        api.client.put(
            "/v1/fences/maintenance/h1", json={"by": "José", "reason": "Wartung für 日本"}, headers=H
        )
    )
    assert r.status_code == 200, r.text
    assert check_reason("Wartung für 日本") == "Wartung für 日本"


@pytest.mark.parametrize("text", FORGERS.values(), ids=FORGERS.keys())
def test_stored_forging_text_is_printed_escaped(text: str) -> None:
    """Rows stored before (or by anything else) are printed as one line, escaped."""
    line = audit_line(
        {"id": 7, "time_s": 0.0, "who": text, "action": "fence", "subject": text, "detail": text}
    )
    fence = fence_line(
        {"kind": "pin", "name": "vm1", "set_by": text, "since_s": 1.0, "reason": text}
    )
    for out in (line, fence):
        assert all(c not in out for c in "\u2028\u2029\u0085\u009b\u202e\u2066\u200f\u061c")
        assert len(out.splitlines()) == 1
        assert "\\u" in out or "\\x" in out  # shown, not dropped


def test_the_command_line_refuses_what_the_manager_refuses() -> None:
    from sova import cli_operator
    from sova.manager.daemons import schema

    assert cli_operator.FORGING_CHARS == schema.FORGING_CHARS
