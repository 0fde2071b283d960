"""Issue 21, "who may act": named operator credentials with roles, kept as digests,
reloadable, several per name; the audit's "who" is the credential's name; empty or short
secrets refused; operator routes need a credential on loopback too (unless insecure).

The role table is built from the OpenAPI document, so a route added later is covered
without anyone remembering to add it here."""

from __future__ import annotations

import hashlib
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from sova.manager.daemons.config import ConfigError, load_manager_settings
from sova.manager.daemons.security import TokenBook, exposure_check
from sova.manager.daemons.service.guard import required_role

from .conftest import ADMIN, TOKENS, Api, auth, manager_settings, report

VIEWER = "viewer-" + "v" * 25
OPERATOR = "operator-" + "o" * 23
OPERATOR_NEXT = "operator-next-" + "n" * 18
ADMIN2 = "root-" + "r" * 27


def _sha(t: str) -> str:
    return "sha256:" + hashlib.sha256(t.encode()).hexdigest()


def _operators_file(path: Path, **extra: Any) -> Path:
    path.write_text(
        "[grafana]\n"
        'role = "viewer"\n'
        f'tokens = ["{_sha(VIEWER)}"]\n'
        "[alice]\n"
        'role = "operator"\n'
        f'tokens = ["{_sha(OPERATOR)}", "{OPERATOR_NEXT}"]\n'
        "[root]\n"
        'role = "admin"\n'
        f'tokens = ["{_sha(ADMIN2)}"]\n'
    )
    path.chmod(0o600)
    return path


@pytest.fixture
def roles_api(store: Any, tmp_path: Path) -> Any:
    settings = manager_settings(
        insecure=False, admin_token=ADMIN, operators_file=_operators_file(tmp_path / "ops.toml")
    )
    a = Api(settings, store)
    yield a
    a.close()


def _h(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}", "content-type": "application/json"}


def _example(path: str) -> str:
    return (
        path.replace("{kind}", "maintenance")
        .replace("{name}", "h1")
        .replace("{host}", "h1")
        .replace("{plan_id}", "1")
        .replace("{vm}", "vm1")
    )


def _operator_routes(api: Api) -> list[tuple[str, str]]:
    """(method, path) of every operator route in the app's own OpenAPI document."""
    out = []
    for path, ops in api.app.openapi()["paths"].items():
        for method, op in ops.items():
            if "agents" in op.get("tags", []) or path in ("/healthz", "/readyz"):
                continue
            out.append((method.upper(), path))
    return out


def test_a_viewer_gets_403_on_every_write_route_and_reads_every_read_route(
    roles_api: Api,
) -> None:
    """Before: one admin token, no roles (every write with it → 2xx/4xx, never 403)."""
    routes = _operator_routes(roles_api)
    writes = [(m, p) for m, p in routes if m not in ("GET", "HEAD")]
    assert len(writes) >= 9, writes  # approve, reject, fence set/clear, 4 mode, reload
    for method, path in writes:
        r = roles_api.run(
            roles_api.client.request(method, _example(path), json={}, headers=_h(VIEWER))
        )
        assert r.status_code == 403, (method, path, r.status_code, r.text)
        assert "viewer" in r.json()["detail"]
    for method, path in routes:
        if method != "GET":
            continue
        r = roles_api.get(_example(path), headers=_h(VIEWER))
        need = required_role(method, path)
        if need == "viewer":
            assert r.status_code not in (401, 403), (path, r.status_code, r.text)
        else:
            assert r.status_code == 403, (path, r.status_code)
    assert roles_api.get("/v1/fences").status_code == 401  # no token at all
    assert roles_api.get("/metrics").status_code == 401
    assert roles_api.get("/metrics", headers=_h(VIEWER)).status_code == 200


def test_operator_may_change_but_not_manage_credentials(roles_api: Api) -> None:
    r = roles_api.run(
        roles_api.client.put("/v1/fences/maintenance/h2", json={}, headers=_h(OPERATOR))
    )
    assert r.status_code == 200, r.text
    assert roles_api.get("/v1/credentials", headers=_h(OPERATOR)).status_code == 403
    assert roles_api.post("/v1/credentials/reload", headers=_h(OPERATOR)).status_code == 403
    got = roles_api.get("/v1/credentials", headers=_h(ADMIN2)).json()
    assert got == {"admin": "admin", "alice": "operator", "grafana": "viewer", "root": "admin"}
    assert roles_api.post("/v1/credentials/reload", headers=_h(ADMIN2)).status_code == 200


def test_the_audit_who_is_the_credentials_name_and_by_only_annotates(roles_api: Api) -> None:
    """Before: the audit's who was the body's ``by`` (``--by mallory``, ``--by sova``)."""
    c = roles_api.client
    roles_api.run(c.put("/v1/fences/pin/vm1", json={"by": "sova"}, headers=_h(OPERATOR)))
    roles_api.run(c.put("/v1/fences/pin/vm2", json={}, headers=_h(OPERATOR_NEXT)))
    roles_api.run(c.delete("/v1/fences/pin/vm1", params={"by": "mallory"}, headers=_h(ADMIN)))
    roles_api.run(c.put("/v1/mode", json={"mode": "recommend"}, headers=_h(ADMIN2)))
    entries = roles_api.get("/v1/audit", headers=_h(VIEWER)).json()["entries"]
    assert [(e["who"], e["action"], e["subject"]) for e in entries] == [
        ("alice (sova)", "fence:pin", "vm1"),
        ("alice", "fence:pin", "vm2"),  # the second token of the same name: rotation
        ("admin (mallory)", "unfence:pin", "vm1"),
        ("root", "mode", "cluster"),
    ]
    assert roles_api.get("/v1/whoami", headers=_h(OPERATOR_NEXT)).json() == {
        "name": "alice",
        "role": "operator",
    }


def test_a_newline_in_a_reason_cannot_forge_an_audit_line(roles_api: Api) -> None:
    """Before: 200, and `sova audit` printed the forged second line."""
    c = roles_api.client
    forged = "ok\n     9  t=0  admin        approve                plan 1"
    r = roles_api.run(c.put("/v1/fences/pin/vm1", json={"reason": forged}, headers=_h(OPERATOR)))
    assert r.status_code == 422 and "reason" in r.text
    r = roles_api.run(
        c.delete("/v1/fences/pin/vm1", params={"reason": "a\nb"}, headers=_h(OPERATOR))
    )
    assert r.status_code == 422 and "reason" in r.text
    assert roles_api.get("/v1/audit", headers=_h(VIEWER)).json()["entries"] == []


def test_operator_routes_need_a_credential_on_loopback_unless_insecure(store: Any) -> None:
    """Before: no admin_token (the default) → PUT /v1/mode 200 from anyone on the host."""
    closed = Api(manager_settings(insecure=False), store)
    try:
        r = closed.run(closed.client.put("/v1/mode", json={"mode": "recommend"}))
        assert r.status_code == 401 and "insecure" in r.json()["detail"]
        assert closed.get("/metrics").status_code == 401
        assert closed.get("/v1/cluster").status_code == 401
        # agents are unaffected
        assert (
            closed.post(
                "/v1/hosts/h1/reports", content=report(1, 1, (0.1,) * 3), headers=auth("h1")
            ).status_code
            == 200
        )
    finally:
        closed.close()
    s = manager_settings(insecure=False)
    assert any("answer 401" in w for w in exposure_check(s))
    s = manager_settings(insecure=True)
    assert any(w.startswith("INSECURE") for w in exposure_check(s))


@pytest.mark.parametrize("value", ["", "x", "short-token"])
def test_an_empty_or_short_admin_token_is_refused(value: str, tmp_path: Path) -> None:
    """Before: ``SOVA_MANAGER_ADMIN_TOKEN=`` (empty) started, and every operator route
    answered without a token; a 1-character admin token was accepted."""
    cfg = tmp_path / "m.toml"
    cfg.write_text('listen = "0.0.0.0"\ntls_certfile = "c.pem"\ntls_keyfile = "k.pem"\n')
    with pytest.raises(ConfigError, match="admin_token"):
        load_manager_settings(cfg, environ={"SOVA_MANAGER_ADMIN_TOKEN": value})


@pytest.mark.parametrize(
    ("body", "why"),
    [
        ('[a]\nrole = "viewer"\ntokens = ["short"]\n', "at least 16"),
        ('[a]\nrole = "viewer"\ntokens = [""]\n', "at least 16"),
        ('[a]\nrole = "root"\ntokens = ["' + "x" * 20 + '"]\n', "role"),
        ('[a]\nrole = "viewer"\ntokens = []\n', "non-empty"),
        ('["a b"]\nrole = "viewer"\ntokens = ["' + "x" * 20 + '"]\n', "name"),
        ('[a]\nrole = "viewer"\ntokens = ["sha256:abc"]\n', "digest"),
        (
            '[a]\nrole = "viewer"\ntokens = ["' + "x" * 20 + '"]\n'
            '[b]\nrole = "admin"\ntokens = ["' + "x" * 20 + '"]\n',
            "same secret",
        ),
        # Issue 37, Lows: names differing only in case read as one person in the audit; a
        # host's token as an operator secret lets a compromised agent act as an operator.
        (
            '[alice]\nrole = "viewer"\ntokens = ["' + "x" * 20 + '"]\n'
            '[Alice]\nrole = "admin"\ntokens = ["' + "y" * 20 + '"]\n',
            "Alice: differs from alice only in case",
        ),
        ('[Admin]\nrole = "viewer"\ntokens = ["' + "y" * 20 + '"]\n', "admin_token"),
        ('[a]\nrole = "viewer"\ntokens = ["' + TOKENS["h1"] + '"]\n', "host h1's token"),
        ('[a]\nrole = "viewer"\ntokens = ["' + _sha(TOKENS["h2"]) + '"]\n', "host h2's token"),
    ],
)
def test_bad_operators_files_are_one_line_errors(body: str, why: str, tmp_path: Path) -> None:
    f = tmp_path / "ops.toml"
    f.write_text(body)
    with pytest.raises(ConfigError, match=why) as exc:
        TokenBook.load(manager_settings(operators_file=f, admin_token=ADMIN))
    assert "\n" not in str(exc.value)


@pytest.mark.parametrize("which", ["operators_file", "tokens_file"])
def test_a_world_writable_credentials_file_is_refused_and_a_reload_keeps_the_old(
    store: Any, tmp_path: Path, which: str
) -> None:
    """Issue 37, Low: anyone on the host could add themselves as admin (or a host's token)
    to a world-writable file; it was reloaded without a word. Refused now, as sshd's
    StrictModes refuses such an authorized_keys: one line naming the file, the old
    credentials stay in force."""
    ops = _operators_file(tmp_path / "ops.toml")
    tokens = tmp_path / "tokens.toml"
    tokens.write_text(f'h1 = "{TOKENS["h1"]}"\n')
    tokens.chmod(0o600)
    api = Api(manager_settings(hosts={}, tokens_file=tokens, operators_file=ops), store)
    try:
        path = {"operators_file": ops, "tokens_file": tokens}[which]
        path.chmod(0o666)
        with pytest.raises(ConfigError, match=f"{which} {path} is world-writable") as exc:
            TokenBook.load(api.svc.settings)
        assert "\n" not in str(exc.value)
        assert api.svc.reload_tokens() is False
        assert api.get("/v1/fences", headers=_h(VIEWER)).status_code == 200
        r = api.post("/v1/hosts/h1/reports", content=report(1, 1, (0.1,) * 3), headers=auth("h1"))
        assert r.status_code == 200
    finally:
        api.close()


def test_host_tokens_may_be_several_so_rotation_overlaps(store: Any, tmp_path: Path) -> None:
    old, new = "old-" + "o" * 28, "new-" + "n" * 28
    f = tmp_path / "tokens.toml"
    f.write_text(f'h1 = ["{old}", "{_sha(new)}"]\n')
    api = Api(manager_settings(hosts={}, tokens_file=f), store)
    try:
        for seq, tok in ((1, old), (2, new)):
            r = api.post(
                "/v1/hosts/h1/reports", content=report(seq, seq, (0.1,) * 3), headers=_h(tok)
            )
            assert r.status_code == 200, r.text
        # drop the old one and reload: the old token is refused, the new one still works
        f.write_text(f'h1 = "{_sha(new)}"\n')
        assert api.svc.reload_tokens()
        r = api.post("/v1/hosts/h1/reports", content=report(3, 3, (0.1,) * 3), headers=_h(old))
        assert r.status_code == 401
        r = api.post("/v1/hosts/h1/reports", content=report(4, 4, (0.1,) * 3), headers=_h(new))
        assert r.status_code == 200
    finally:
        api.close()


@pytest.mark.parametrize(
    "content",
    [b"", b"# everything commented out\n", 'h1 = "caf\u00e9-token-0123456"\n'.encode("latin-1")],
    ids=["empty", "comments-only", "latin-1"],
)
def test_a_tokens_file_that_would_lock_everyone_out_keeps_the_old_tokens(
    store: Any, tmp_path: Path, content: bytes
) -> None:
    """Before: an empty file reloaded as 0 hosts (every agent 401); a Latin-1 byte raised
    UnicodeDecodeError out of the SIGHUP handler."""
    f = tmp_path / "tokens.toml"
    f.write_text(f'h1 = "{TOKENS["h1"]}"\n')
    api = Api(manager_settings(hosts={}, tokens_file=f), store)
    try:
        f.write_bytes(content)
        assert api.svc.reload_tokens() is False
        r = api.post("/v1/hosts/h1/reports", content=report(1, 1, (0.1,) * 3), headers=auth("h1"))
        assert r.status_code == 200
    finally:
        api.close()


def test_operators_file_is_reloaded_on_sighup_without_restart(tmp_path: Path) -> None:
    """A real manager process: a credential added to the file works after SIGHUP, and the
    file's viewer gets 403 on a write, the operator 200; ``sova audit`` shows the name."""
    import subprocess
    import sys

    import httpx

    from .conftest import REPO, free_port, wait_until

    ops = tmp_path / "ops.toml"
    ops.write_text(f'[grafana]\nrole = "viewer"\ntokens = ["{_sha(VIEWER)}"]\n')
    ops.chmod(0o600)
    port = free_port()
    cfg = tmp_path / "m.toml"
    cfg.write_text(
        f'port = {port}\ndatabase_url = "sqlite:///{tmp_path / "m.db"}"\noperators_file = "{ops}"\n'
    )
    log = (tmp_path / "m.log").open("wb")
    p = subprocess.Popen(
        [sys.executable, "-m", "sova.cli_daemons", "manager", "--config", str(cfg)],
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=REPO,
        env={k: v for k, v in os.environ.items() if not k.startswith("SOVA_")},
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: httpx.get(url + "/healthz").status_code == 200, 30, "manager")

        def put(tok: str) -> int:
            return httpx.put(
                url + "/v1/fences/maintenance/h9", json={"by": "bob"}, headers=_h(tok)
            ).status_code

        assert put(VIEWER) == 403
        assert put(OPERATOR) == 401
        with ops.open("a") as f:
            f.write(f'[alice]\nrole = "operator"\ntokens = ["{_sha(OPERATOR)}"]\n')
        p.send_signal(signal.SIGHUP)
        wait_until(lambda: put(OPERATOR) == 200, 10, "the new credential after SIGHUP")
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("SOVA_")},
            "SOVA_MANAGER_URL": url,
            "SOVA_ADMIN_TOKEN": VIEWER,
        }
        out = subprocess.run(
            [sys.executable, "-m", "sova", "audit"],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
            check=False,
        )
        assert out.returncode == 0, out.stderr
        assert "alice (bob)" in out.stdout and "fence:maintenance" in out.stdout
    finally:
        p.terminate()
        try:
            p.wait(20)
        except subprocess.TimeoutExpired:
            p.kill()
        log.close()
    text = (tmp_path / "m.log").read_text()
    assert "reloaded tokens" in text
