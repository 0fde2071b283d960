"""The web console's files as the manager serves them (no browser: these run everywhere;
tests/daemon/test_web_console.py drives them in chromium)."""

from __future__ import annotations

import re

import pytest

from sova.manager.daemons.service.web_console import ASSETS

from .conftest import Api


@pytest.mark.parametrize("name", sorted(ASSETS))
def test_each_file_is_served_without_a_token_with_a_same_origin_policy(api: Api, name: str) -> None:
    path = "/console/" if name == "index.html" else f"/console/{name}"
    r = api.get(path)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == ASSETS[name]
    csp = r.headers["content-security-policy"]
    assert "default-src 'none'" in csp and "script-src 'self'" in csp
    assert "frame-ancestors 'none'" in csp
    assert r.headers["x-content-type-options"] == "nosniff"
    assert r.headers["cache-control"] == "no-store"


def test_the_bare_path_redirects_and_unknown_names_are_404(api: Api) -> None:
    r = api.get("/console")
    assert r.status_code == 308 and r.headers["location"] == "/console/"
    assert api.get("/console/secrets.txt").status_code == 404
    assert api.get("/console/..%2fapp.py").status_code == 404


def test_the_console_is_not_in_the_api_document(api: Api) -> None:
    paths = api.get("/openapi.json").json()["paths"]
    assert not [p for p in paths if p.startswith("/console")]


def test_nothing_is_loaded_from_outside_the_package(api: Api) -> None:
    """No CDN, no remote font: every URL the page names is the manager's own."""
    text = "".join(
        api.get("/console/" if n == "index.html" else f"/console/{n}").text for n in ASSETS
    )
    # (SVG's namespace name is an identifier, never fetched.)
    text = text.replace('xmlns="http://www.w3.org/2000/svg"', "")
    text = text.replace('const SVG_NS = "http://www.w3.org/2000/svg";', "")
    assert not re.findall(r"(?:https?:)?//[a-z0-9.-]+\.[a-z]{2,}", text, re.I)
    assert "<script>" not in text  # the policy forbids inline scripts; none is needed


def test_the_token_never_goes_into_a_url_or_markup(api: Api) -> None:
    js = api.get("/console/console.js").text
    assert "sessionStorage" in js and "localStorage" not in js and "document.cookie" not in js
    assert "innerHTML" not in js and "outerHTML" not in js  # API text is set as text only
    # The stored token is read into the Authorization header, or only tested for presence.
    reads = [line.strip() for line in js.splitlines() if "sessionStorage.getItem" in line]
    assert reads and all(
        line.startswith(("const headers = { Authorization: ", "if (sessionStorage.getItem(KEY))"))
        for line in reads
    ), reads
