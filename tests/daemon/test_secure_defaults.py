"""Issue 10 #7: secure by default. Real manager processes on loopback (a few seconds each)."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from sova.manager.daemons.config import AgentSettings

from .conftest import REPO, TOKENS, free_port, report, wait_until

ADMIN = "admin-" + "q" * 26


def _toml(
    path: Path, listen: str, port: int, extra: str = "", tokens_file: Path | None = None
) -> Path:
    lines = [
        f'listen = "{listen}"',
        f"port = {port}",
        f'database_url = "sqlite:///{path.parent / "m.db"}"',
        "plan_period_s = 0",
        extra,
    ]
    if tokens_file is not None:
        lines.append(f'tokens_file = "{tokens_file}"')
    path.write_text("\n".join(lines) + "\n")
    return path


def _manager(cfg: Path, log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "sova.cli_daemons", "manager", "--config", str(cfg)],
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        cwd=REPO,
    )


def _stop(p: subprocess.Popen[bytes]) -> None:
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


@pytest.mark.parametrize(
    "extra",
    ["", f'admin_token = "{ADMIN}"'],
    ids=["no-token-no-tls", "token-but-no-tls"],
)
def test_an_exposed_manager_refuses_to_start(tmp_path: Path, extra: str) -> None:
    cfg = _toml(tmp_path / "m.toml", "0.0.0.0", free_port(), extra)
    p = _manager(cfg, tmp_path / "log")
    try:
        code = p.wait(90)  # start-up imports take seconds on a loaded machine
    except subprocess.TimeoutExpired:
        pytest.fail("the manager started on 0.0.0.0 without an operator token and TLS")
    finally:
        _stop(p)
    out = (tmp_path / "log").read_text().strip()
    assert code == 2, out
    assert "listen" in out and "0.0.0.0" in out and "insecure" in out, out
    assert len(out.splitlines()) == 1, out


def test_insecure_must_be_explicit_and_warns_on_every_start(tmp_path: Path) -> None:
    port = free_port()
    cfg = _toml(tmp_path / "m.toml", "0.0.0.0", port, "insecure = true")
    for _ in range(2):
        log = tmp_path / "log"
        p = _manager(cfg, log)
        try:
            wait_until(
                lambda: httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200,
                30,
                "the manager",
            )
        finally:
            _stop(p)
        assert "INSECURE" in log.read_text(), log.read_text()


def test_tokens_are_kept_as_hashes_and_reloaded_on_sighup(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.toml"
    old, new = TOKENS["h1"], "rotated-" + "n" * 24
    # The file may hold hashes only: a leaked file leaks no token.
    digest = hashlib.sha256(old.encode()).hexdigest()
    tokens.write_text(f'h1 = "sha256:{digest}"\n')
    os.chmod(tokens, 0o600)
    port = free_port()
    cfg = _toml(tmp_path / "m.toml", "127.0.0.1", port, tokens_file=tokens)
    p = _manager(cfg, tmp_path / "log")
    url = f"http://127.0.0.1:{port}/v1/hosts/h1/reports"

    def post(token: str, seq: int) -> int:
        r = httpx.post(
            url,
            content=report(seq, 10.0 * seq, (0.1, 0.1, 0.1)),
            headers={"authorization": f"Bearer {token}", "content-type": "application/json"},
            timeout=5,
        )
        return r.status_code

    try:
        wait_until(lambda: post(old, 1) == 200, 30, "the manager to accept h1's token")
        tokens.write_text(f'h1 = "{new}"\n')
        os.chmod(tokens, 0o600)
        p.send_signal(signal.SIGHUP)
        wait_until(lambda: post(new, 2) == 200, 10, "the rotated token to work")
        assert post(old, 3) == 401
        assert p.poll() is None  # reloaded, not restarted
    finally:
        _stop(p)
    assert "reloaded tokens" in (tmp_path / "log").read_text()


def test_service_keeps_no_plaintext_token(tmp_path: Path) -> None:
    from sova.manager.daemons.service.service import ManagerService
    from sova.manager.daemons.service.store import Store

    from .conftest import manager_settings

    store = Store(f"sqlite:///{tmp_path / 's.db'}")
    svc = ManagerService(manager_settings(admin_token=ADMIN), store)
    state = repr(vars(svc.tokens)) if hasattr(svc.tokens, "__dict__") else repr(svc.tokens)
    for tok in [*TOKENS.values(), ADMIN]:
        assert tok not in state and tok.encode().hex() not in state
    assert svc.check_host_token("h1", TOKENS["h1"].encode())
    assert not svc.check_host_token("h1", TOKENS["h2"].encode())
    store.close()


def test_agent_warns_on_plain_http_and_a_world_readable_token_file(tmp_path: Path) -> None:
    from sova.manager.daemons.security import agent_warnings

    tok = tmp_path / "token"
    tok.write_text(TOKENS["h1"])
    os.chmod(tok, 0o644)
    s = AgentSettings.model_validate(
        {"driver": "mock", "manager_url": "http://10.1.2.3:8700", "token_file": str(tok)}
    )
    text = "\n".join(agent_warnings(s))
    assert "http://10.1.2.3:8700" in text and "TLS" in text
    assert str(tok) in text and "world-readable" in text
    os.chmod(tok, 0o600)
    s = AgentSettings.model_validate(
        {"driver": "mock", "manager_url": "https://m.example:8700", "token_file": str(tok)}
    )
    assert agent_warnings(s) == []


def test_a_world_readable_tokens_file_is_warned_about(tmp_path: Path) -> None:
    from sova.manager.daemons.security import exposure_check

    from .conftest import manager_settings

    tokens = tmp_path / "tokens.toml"
    tokens.write_text(f'h9 = "{"k" * 20}"\n')
    os.chmod(tokens, 0o644)
    warnings = exposure_check(manager_settings(tokens_file=str(tokens)))
    assert any("world-readable" in w and str(tokens) in w for w in warnings), warnings
    _ = time
