"""Issue 38: the operator CLI against the manager the docs require — TLS with a private CA.

One real ``sova manager`` process per module, serving TLS with a self-signed certificate
(the ``openssl`` command makes it), an admin token, two hosts reporting over TLS, recommend
mode. Before the fix ``--cacert`` was ``No such option`` (exit 2), the default URL was
``http://`` (a TLS manager closes it), there was no client config, audit and plans listed
oldest first with no filter, a standby's 503 ended a write, and ``sova status`` exited 0
with one of two managers down.
"""

from __future__ import annotations

import contextlib
import http.server
import itertools
import json
import os
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import typer.main
from typer.testing import CliRunner

from sova.cli import app
from sova.cli_operator import hoist_group_options
from sova.manager.daemons.service.store import Store

from .conftest import REPO, free_port, report, wait_until
from .test_tls_guard import _cert

ADMIN = "tls-admin-token-" + "z" * 16
TOKENS = {"a0": "tls-cli-token-a0-" + "k" * 12, "a1": "tls-cli-token-a1-" + "k" * 12}


class Manager:
    def __init__(self, url: str, cert: Path, tmp: Path) -> None:
        self.url, self.cert, self.tmp = url, cert, tmp
        self.verify = ssl.create_default_context(cafile=str(cert))

    def get(self, path: str, **kw: Any) -> Any:
        r = httpx.get(
            self.url + path,
            headers={"authorization": f"Bearer {ADMIN}"},
            verify=self.verify,
            timeout=10,
            **kw,
        )
        r.raise_for_status()
        return r.json()


@pytest.fixture(scope="module")
def manager(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Manager]:
    tmp = tmp_path_factory.mktemp("tls-cli")
    cert, key = _cert(tmp)
    port = free_port()
    lines = [
        'listen = "127.0.0.1"',
        f"port = {port}",
        f'database_url = "sqlite:///{tmp / "m.db"}"',
        "plan_period_s = 0.25",
        'log_level = "warning"',
        'mode = "recommend"',
        f'admin_token = "{ADMIN}"',
        f'tls_certfile = "{cert}"',
        f'tls_keyfile = "{key}"',
        *(f'[hosts."{h}"]\ntoken = "{t}"' for h, t in TOKENS.items()),
    ]
    cfg = tmp / "m.toml"
    cfg.write_text("\n".join(lines) + "\n")
    log = tmp / "manager.log"
    p = subprocess.Popen(
        [sys.executable, "-m", "sova.cli_daemons", "manager", "--config", str(cfg)],
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        cwd=REPO,
        env={k: v for k, v in os.environ.items() if not k.startswith("SOVA_")},
    )
    m = Manager(f"https://127.0.0.1:{port}", cert, tmp)
    try:
        wait_until(
            lambda: httpx.get(m.url + "/healthz", verify=m.verify, timeout=2).status_code == 200,
            60,
            "the TLS manager",
        )
        # a0 hot on the network, a1 cold: a decision (and a plan) per round for a0
        for seq in range(1, 8):
            for host, util in (("a0", (0.3, 0.3, 0.95)), ("a1", (0.1, 0.1, 0.05))):
                vms = {f"{host}-vm": (0.1, 0.1, util[2] * 0.4)}
                r = httpx.post(
                    f"{m.url}/v1/hosts/{host}/reports",
                    content=report(seq, time.time(), util, vms),
                    headers={
                        "authorization": f"Bearer {TOKENS[host]}",
                        "content-type": "application/json",
                    },
                    verify=m.verify,
                    timeout=10,
                )
                assert r.status_code == 200, r.text
            time.sleep(0.3)
        yield m
    finally:
        p.terminate()
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(10)
        print(log.read_text()[-3000:])


def sova(*args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    """The ``sova`` CLI in-process, with nothing of this machine's environment that could
    point it elsewhere (a client config of the person running the tests)."""
    clean = {k: None for k in os.environ if k.startswith("SOVA_")}
    base = {**clean, "SOVA_CLIENT_CONFIG": None, "XDG_CONFIG_HOME": "/nonexistent"}
    argv = hoist_group_options(list(args), typer.main.get_command(app))  # as sova.cli.main
    r = CliRunner().invoke(app, argv, env={**base, **(env or {})})
    return r.exit_code, r.output


def test_the_cli_reaches_a_tls_manager_with_cacert(manager: Manager) -> None:
    env = {"SOVA_ADMIN_TOKEN": ADMIN, "SOVA_OPERATOR": "alice"}
    code, out = sova(
        "mode", "set", "recommend", "--manager-url", manager.url, "--cacert", str(manager.cert),
        env=env,
    )  # fmt: skip
    assert code == 0, out
    assert manager.get("/v1/mode")["cluster_set_by"] == "admin (alice)"
    # Without the CA: refused, saying what to do.
    code, out = sova("fence", "list", "--manager-url", manager.url, env=env)
    assert code == 3 and "--cacert" in out and "CERTIFICATE_VERIFY_FAILED" in out, out
    # The default scheme is https: host:port alone reaches the TLS manager.
    bare = manager.url.removeprefix("https://")
    code, out = sova("fence", "list", "--manager-url", bare, "--cacert", str(manager.cert), env=env)
    assert code == 0, out


def test_a_client_config_file_holds_the_managers_the_ca_and_the_credential(
    manager: Manager, tmp_path: Path
) -> None:
    (tmp_path / "ca.pem").write_bytes(manager.cert.read_bytes())
    (tmp_path / "token").write_text(ADMIN + "\n")
    cfg = tmp_path / "client.toml"
    cfg.write_text(
        f'managers = ["{manager.url.removeprefix("https://")}"]\n'
        'cacert = "ca.pem"\ntoken_file = "token"\noperator = "bob"\n'
    )
    # by the environment variable
    code, out = sova(
        "fence", "set", "pin", "a1-vm", "-m", "cfg", env={"SOVA_CLIENT_CONFIG": str(cfg)}
    )
    assert code == 0, out
    # by the default path ($XDG_CONFIG_HOME/sova/client.toml)
    home = tmp_path / "xdg"
    (home / "sova").mkdir(parents=True)
    (home / "sova" / "client.toml").write_text(
        cfg.read_text()
        .replace('"ca.pem"', f'"{tmp_path}/ca.pem"')
        .replace('"token"', f'"{tmp_path}/token"')
    )
    code, out = sova("hosts", "-o", "json", env={"XDG_CONFIG_HOME": str(home)})
    assert code == 0, out
    view = json.loads(out)
    assert {h["host"] for h in view["hosts"]} == {"a0", "a1"}
    assert any(f["name"] == "a1-vm" and f["set_by"] == "admin (bob)" for f in view["fences"])
    code, out = sova("fence", "clear", "pin", "a1-vm", "--client-config", str(cfg))
    assert code == 0, out


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('managers = ["ftp://m:8700"]', "managers[0] = 'ftp://m:8700': must be https://"),
        ('managers = ["m:99999"]', "managers[0] = 'm:99999': not a URL"),
        ('cacert = "missing.pem"', "cacert = 'missing.pem': no such file"),
        ("timeout_s = 0", "timeout_s = 0: Input should be greater than or equal to 0.1"),
        ('manager = "https://m"', "manager: unknown field"),
        ("managers = [", "not TOML"),
        ("[groups]\nrack = []", "groups.rack = []: one to 10000 names"),
        ('[groups]\nrack = ["hv1", "a b"]', "groups.rack[1] = 'a b': not a host or VM name"),
    ],
)
def test_a_bad_client_config_is_one_line_naming_the_field_and_value(
    tmp_path: Path, text: str, expected: str
) -> None:
    cfg = tmp_path / "client.toml"
    cfg.write_text(text + "\n")
    for args in (["fence", "list"], ["status"]):
        code, out = sova(*args, "--client-config", str(cfg))
        assert code == 2, out
        assert len(out.strip().splitlines()) == 1 and expected in out and str(cfg) in out, out


class _Standby(http.server.BaseHTTPRequestHandler):
    """What a standby answers a write (sova.manager.daemons.service.standby): 503 naming the leader."""

    leader = ""

    def _refuse(self) -> None:
        body = b'{"detail": "this manager is a standby", "role": "standby"}'
        self.send_response(503)
        self.send_header("x-sova-role", "standby")
        self.send_header("x-sova-leader", self.leader)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_PUT = do_POST = do_DELETE = _refuse  # /v1/cluster is the leader's too

    def log_message(self, *args: Any) -> None:
        pass


@contextlib.contextmanager
def standby(leader: str) -> Iterator[str]:
    handler = type("Handler", (_Standby,), {"leader": leader})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    th = threading.Thread(target=server.serve_forever, daemon=True)
    th.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        th.join(5)


def test_a_write_sent_to_a_standby_follows_it_to_the_leader(manager: Manager) -> None:
    env = {"SOVA_ADMIN_TOKEN": ADMIN, "SOVA_CACERT": str(manager.cert)}
    with standby(manager.url) as sb:
        # only the standby is given: the leader's URL comes from its answer
        code, out = sova("fence", "set", "vf-freeze-vm", "a0-vm", "--manager-url", sb, env=env)
        assert code == 0, out
    assert any(f["name"] == "a0-vm" for f in manager.get("/v1/fences"))
    code, out = sova(
        "fence", "clear", "vf-freeze-vm", "a0-vm", "--manager-url", manager.url, env=env
    )
    assert code == 0, out


def test_fences_refuse_a_name_no_host_reported_unless_forced_and_take_lists(
    manager: Manager,
) -> None:
    env = {
        "SOVA_ADMIN_TOKEN": ADMIN,
        "SOVA_CACERT": str(manager.cert),
        "SOVA_MANAGER_URL": manager.url,
    }
    code, out = sova("fence", "set", "maintenance", "a0", "a9", env=env)  # a9: a typo
    assert code == 2 and "'a9': no host of that name has reported" in out, out
    code, out = sova("fence", "set", "pin", "a0-vm", "a0", env=env)  # a0 is a host, not a VM
    assert code == 2 and "'a0': no VM of that name" in out, out
    assert manager.get("/v1/fences") == []  # nothing set by a refused command
    code, out = sova("fence", "set", "maintenance", "a0", "a1", "-m", "rack 7", env=env)
    assert code == 0, out
    assert {f["name"] for f in manager.get("/v1/fences")} == {"a0", "a1"}
    code, out = sova("fence", "set", "maintenance", "a9", "--force", env=env)
    assert code == 0, out
    code, out = sova("fence", "clear", "maintenance", "a0", "a1", "a9", env=env)
    assert code == 0, out
    assert manager.get("/v1/fences") == []


def test_fences_take_the_client_configs_groups_and_an_end(manager: Manager, tmp_path: Path) -> None:
    cfg = tmp_path / "client.toml"
    cfg.write_text(
        f'managers = ["{manager.url}"]\ncacert = "{manager.cert}"\n'
        '[groups]\nrack-7 = ["a0", "a1"]\nfront = ["a1"]\n'
    )
    env = {"SOVA_ADMIN_TOKEN": ADMIN, "SOVA_CLIENT_CONFIG": str(cfg)}
    code, out = sova("fence", "set", "maintenance", "@rack-9", env=env)
    assert code == 2, out
    assert out.strip().splitlines() == [
        "error: name = '@rack-9': no group 'rack-9' in the client config (groups: front, rack-7)"
    ]
    before = time.time()
    # a1 is in both: fenced once
    code, out = sova("fence", "set", "maintenance", "@rack-7", "@front", "--until", "2h", env=env)
    assert code == 0, out
    fences = {f["name"]: f for f in manager.get("/v1/fences")}
    assert set(fences) == {"a0", "a1"}
    # the manager's clock is the wall clock here: the end is two hours from the request
    assert before + 7200 <= fences["a0"]["until_s"] <= time.time() + 7200
    code, out = sova("fence", "list", env=env)
    assert code == 0 and out.count("  until 20") == 2, out
    code, out = sova("fence", "clear", "maintenance", "@rack-7", env=env)
    assert code == 0, out
    assert manager.get("/v1/fences") == []


def test_logs_list_newest_first_with_a_limit_and_filters(manager: Manager) -> None:
    env = {
        "SOVA_ADMIN_TOKEN": ADMIN,
        "SOVA_CACERT": str(manager.cert),
        "SOVA_MANAGER_URL": manager.url,
    }
    for name in ("a0", "a1", "a0"):
        assert sova("fence", "set", "maintenance", name, env=env)[0] == 0
        assert sova("fence", "clear", "maintenance", name, env=env)[0] == 0
    every = manager.get("/v1/audit", params={"limit": 1000})["entries"]
    code, out = sova("audit", "--limit", "3", "-o", "json", env=env)
    assert code == 0, out
    page = json.loads(out)
    # the three newest, newest first
    assert [e["id"] for e in page["entries"]] == [e["id"] for e in every][::-1][:3]
    assert page["next_before"] == page["entries"][-1]["id"]
    code, out = sova("audit", "--host", "a1", "--action", "fence", "-o", "json", env=env)
    assert code == 0, out
    got = [e["id"] for e in json.loads(out)["entries"]]
    every = manager.get("/v1/audit", params={"limit": 1000})["entries"]
    want = [e["id"] for e in every if e["subject"] == "a1" and e["action"].startswith("fence:")]
    assert got == want[::-1] and got, (got, want)
    code, out = sova("audit", "--since", "2h", "--until", "1h", env=env)
    assert (code, out.strip()) == (0, "(empty)"), out
    code, out = sova("audit", "--since", "yesterday", env=env)
    assert code == 2 and "--since = 'yesterday'" in out, out
    # decisions of one host, newest first
    code, out = sova("decisions", "--host", "a0", "-o", "json", env=env)
    assert code == 0, out
    ds = json.loads(out)["decisions"]
    assert ds and {d["host"] for d in ds} == {"a0"}, ds
    assert [d["id"] for d in ds] == sorted((d["id"] for d in ds), reverse=True)
    # plans of a host (a0's VM to a1), newest first
    code, out = sova("plans", "list", "--host", "a1", "-o", "json", env=env)
    assert code == 0, out
    plans = json.loads(out)["plans"]
    assert plans and all(
        a["dst"] == "a1" or a["src"] == "a1" for p in plans for a in p["actions"]
    ), [d["reason"] for d in ds[:2]]
    assert [p["id"] for p in plans] == sorted((p["id"] for p in plans), reverse=True)


def test_status_is_not_ok_while_a_listed_manager_is_down(manager: Manager) -> None:
    dead = f"https://127.0.0.1:{free_port()}"
    code, out = sova("status", "--cacert", str(manager.cert), "--manager-url", manager.url)
    assert code == 0, out
    code, out = sova(
        "status", "--cacert", str(manager.cert), "--manager-url", f"{manager.url},{dead}"
    )
    assert code == 1, out
    assert out.splitlines()[-1].endswith(f"unhealthy: {dead} (down)"), out


def test_a_log_slice_reads_newest_first_within_ids_and_times(tmp_path: Path) -> None:
    """The store's side: ids 1..6 at t = 10, 20, ... 60 s, subjects alternating h1/h2."""
    from sova.manager.daemons.service.store_rows import AuditRow, LogSlice, RoundWrite

    store = Store(f"sqlite:///{tmp_path / 's.db'}")
    try:
        store.migrate()
        rows = [
            AuditRow(10.0 * i, "op", "fence:pin" if i % 3 == 0 else "mode", f"h{1 + i % 2}", "")
            for i in range(1, 7)
        ]
        store.write_round(RoundWrite(audit=rows))

        def ids(**kw: Any) -> list[int]:
            return [r.id for r in store.audit_slice(LogSlice(**kw))]

        assert ids() == [1, 2, 3, 4, 5, 6]
        assert ids(newest_first=True, limit=2) == [6, 5]
        assert ids(newest_first=True, limit=2, before=5) == [4, 3]  # the next page
        assert ids(since_s=20, until_s=40) == [2, 3, 4]  # inclusive
        assert ids(host="h1") == [2, 4, 6]  # i even: h1
        assert ids(kind="fence") == [3, 6]
        assert ids(kind="fence:pin", host="h2") == [3]
    finally:
        store.close()


def test_drain_wait_follows_the_drain_until_the_host_is_empty(manager: Manager) -> None:
    from sova.manager.daemons.schema import build_report, encode
    from sova.policy.hotspot import Utilisation

    env = {
        "SOVA_ADMIN_TOKEN": ADMIN,
        "SOVA_CACERT": str(manager.cert),
        "SOVA_MANAGER_URL": manager.url,
    }
    # nothing moves a1-vm here (no agents run): --wait gives up, saying what is left
    code, out = sova("host", "drain", "a1", "--wait", "--wait-timeout", "2", env=env)
    assert code == 1 and "a1: still draining after 2 s (a1-vm)" in out, out
    # a1-vm leaves a1 (its next report no longer carries it): --wait ends when it is empty
    body = encode(build_report(100, time.time(), Utilisation(0.05, 0.05, 0.01), {}))
    r = httpx.post(
        f"{manager.url}/v1/hosts/a1/reports",
        content=body,
        headers={"authorization": f"Bearer {TOKENS['a1']}", "content-type": "application/json"},
        verify=manager.verify,
        timeout=10,
    )
    assert r.status_code == 200, r.text
    code, out = sova("host", "drain", "a1", "--wait", "--wait-timeout", "30", env=env)
    assert code == 0 and "a1: drained" in out, out
    code, out = sova("host", "drain", "a1", "--cancel", env=env)
    assert code == 0, out


_SEQ = itertools.count(1001)


@contextlib.contextmanager
def reporting(manager: Manager) -> Iterator[None]:
    """a0 (hot) and a1 (cold) report every 0.2 s, as their agents would, until the end."""
    stop = threading.Event()

    def run() -> None:
        while not stop.is_set():
            # One sequence across every use in this module's manager: a number it already
            # took is a replay (409) and leaves the host stale.
            seq = next(_SEQ)
            for host, util in (("a0", (0.3, 0.3, 0.95)), ("a1", (0.1, 0.1, 0.05))):
                vms = {f"{host}-vm": (0.1, 0.1, util[2] * 0.4)}
                httpx.post(
                    f"{manager.url}/v1/hosts/{host}/reports",
                    content=report(seq, time.time(), util, vms),
                    headers={
                        "authorization": f"Bearer {TOKENS[host]}",
                        "content-type": "application/json",
                    },
                    verify=manager.verify,
                    timeout=10,
                )
            stop.wait(0.2)

    th = threading.Thread(target=run, daemon=True)
    th.start()
    try:
        time.sleep(0.5)
        yield
    finally:
        stop.set()
        th.join(10)


def test_drain_preview_shows_the_moves_as_a_table_and_json_and_changes_nothing(
    manager: Manager,
) -> None:
    env = {
        "SOVA_ADMIN_TOKEN": ADMIN,
        "SOVA_CACERT": str(manager.cert),
        "SOVA_MANAGER_URL": manager.url,
    }

    def drains() -> tuple[list[Any], list[Any]]:
        h = {"authorization": f"Bearer {ADMIN}"}
        audit = httpx.get(
            f"{manager.url}/v1/audit?limit=1000", headers=h, verify=manager.verify, timeout=10
        ).json()["entries"]
        plans = httpx.get(
            f"{manager.url}/v1/plans", headers=h, verify=manager.verify, timeout=10
        ).json()["plans"]
        return (
            [e for e in audit if "drain" in e["action"] and e["subject"] == "a0"],
            [p for p in plans if p["inputs"].get("drain")],
        )

    with reporting(manager):
        before = drains()
        # a0's one VM would go to a1, the only other host
        code, out = sova("host", "drain", "a0", "--preview", env=env)
        got = json.loads(sova("host", "drain", "a0", "--preview", "-o", "json", env=env)[1])
        after = drains()
    assert code == 0, out
    lines = out.splitlines()
    assert lines[0] == "a0: a drain would make 1 move(s)", out
    assert lines[1].split() == ["VM", "TARGET", "WHY"], out
    assert lines[2].split()[:2] == ["a0-vm", "a1"] and "drain: move a0-vm to a1" in lines[2]
    assert got["host"] == "a0" and got["draining"] is False, got
    assert [(m["vm"], m["target"]) for m in got["moves"]] == [("a0-vm", "a1")], got
    assert after == before  # no drain fence, audit row or drain plan
    code, out = sova("host", "drain", "a0", "--preview", "--cancel", env=env)
    assert code == 2 and "--preview changes nothing" in out, out


def test_plans_approve_takes_every_plan_off_a_host_in_one_command(manager: Manager) -> None:
    env = {
        "SOVA_ADMIN_TOKEN": ADMIN,
        "SOVA_CACERT": str(manager.cert),
        "SOVA_MANAGER_URL": manager.url,
    }
    code, out = sova("plans", "approve", "--host", "a1", env=env)  # a1 is only ever a target
    assert code == 1 and "no proposed plan moves a VM off it" in out, out
    open_a0 = wait_until(
        lambda: manager.get("/v1/plans", params={"state": "proposed", "host": "a0"})["plans"],
        30,
        "a plan off a0",
    )
    # the hosts keep reporting: an approval re-checks that source and target are not stale
    with reporting(manager):
        code, out = sova("plans", "approve", "--host", "a0", "-m", "bulk", env=env)
    assert code == 0, out
    for p in open_a0:
        assert manager.get(f"/v1/plans/{p['id']}")["state"] in ("approved", "executed"), p
