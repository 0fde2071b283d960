"""A real Keystone for Sova's credentials (the OpenStack tier, keystone env).

Keystone 30's own WSGI application (``keystone.server.wsgi``) on SQLite, set up with
``keystone-manage`` (db_sync, fernet_setup, credential_setup, bootstrap) and served on a
loopback port. The tier then does what docs/openstack.md#credentials-roles-and-policies tells
an operator to do: a ``sova`` role, a ``sova`` user in the ``service`` project holding only
that role, an application credential made by that user with the ``sova`` role and access
rules for exactly the agent's calls; Sova's ``connect`` reads it from a clouds.yaml entry
(``auth_type: v3applicationcredential``) and gets a token carrying the ``sova`` role and
nothing else; a call outside what it was given is refused 403.

Run with ``scripts/openstack-envs.sh test keystone``.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip(
    "keystone.server.wsgi",
    reason="needs the pinned keystone environment: scripts/openstack-envs.sh test keystone",
)

pytestmark = pytest.mark.openstack

ROOT = pathlib.Path(__file__).resolve().parents[3]
ADMIN_PASSWORD = "tier-admin-secret"
SOVA_PASSWORD = "tier-sova-secret"


def test_sova_is_imported_from_this_checkout() -> None:
    import sova

    assert pathlib.Path(sova.__file__).resolve().is_relative_to(ROOT / "src"), sova.__file__


@pytest.fixture(scope="module")
def keystone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Keystone's public API on a loopback port; its URL (``…/v3``)."""
    from wsgiref.simple_server import WSGIRequestHandler, make_server

    d = tmp_path_factory.mktemp("keystone")
    conf = d / "keystone.conf"
    conf.write_text(
        f"[database]\nconnection = sqlite:///{d}/keystone.db\n"
        f"[fernet_tokens]\nkey_repository = {d}/fernet-keys\n"
        f"[fernet_receipts]\nkey_repository = {d}/fernet-keys\n"
        f"[credential]\nkey_repository = {d}/credential-keys\n"
    )
    for keys in ("fernet-keys", "credential-keys"):  # keystone-manage fills, never makes, them
        (d / keys).mkdir(mode=0o700)
    holder: dict[str, Any] = {}

    class Quiet(WSGIRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

    httpd = make_server(
        "127.0.0.1", 0, lambda env, start: holder["app"](env, start), handler_class=Quiet
    )
    url = f"http://127.0.0.1:{httpd.server_port}/v3"
    # keystone-manage's console script, run by this interpreter (keystone.cmd.manage has no
    # __main__: ``-m`` would do nothing and exit 0).
    script = pathlib.Path(sys.executable).parent / "keystone-manage"
    manage = [sys.executable, str(script), "--config-file", str(conf)]
    user = os.getuid(), os.getgid()
    for args in (
        ["db_sync"],
        ["fernet_setup", "--keystone-user", str(user[0]), "--keystone-group", str(user[1])],
        ["credential_setup", "--keystone-user", str(user[0]), "--keystone-group", str(user[1])],
        [
            "bootstrap",
            "--bootstrap-password",
            ADMIN_PASSWORD,
            "--bootstrap-admin-url",
            url,
            "--bootstrap-public-url",
            url,
            "--bootstrap-internal-url",
            url,
            "--bootstrap-region-id",
            "RegionOne",
        ],
    ):
        done = subprocess.run(manage + args, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, f"keystone-manage {args[0]}: {done.stderr[-3000:]}"
    os.environ["OS_KEYSTONE_CONFIG_FILES"] = str(conf)
    os.environ["OS_KEYSTONE_CONFIG_DIR"] = str(d)
    from keystone.server import wsgi

    argv, sys.argv = sys.argv, sys.argv[:1]  # Keystone's config parses the command line
    try:
        holder["app"] = wsgi.initialize_public_application()
    finally:
        sys.argv = argv
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield url
    httpd.shutdown()
    httpd.server_close()


def _admin(url: str) -> Any:
    import openstack

    return openstack.connect(
        auth_url=url,
        username="admin",
        password=ADMIN_PASSWORD,
        project_name="admin",
        user_domain_name="Default",
        project_domain_name="Default",
        api_timeout=30,
    )


@pytest.fixture(scope="module")
def sova_credential(keystone: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """What docs/openstack.md has the operator do: the ``sova`` role, the ``sova`` user in
    ``service`` with that role only, then (as that user) an application credential with
    the role and the shipped access rules, written into a clouds.yaml entry."""
    import json

    import openstack

    admin = _admin(keystone)
    # The catalog a cloud has: keystonemiddleware checks its service_type against it before
    # it matches a token's access rules.
    for kind, name, url in (
        ("compute", "nova", "http://compute:8774/v2.1"),
        ("network", "neutron", "http://network:9696"),
    ):
        svc = admin.identity.create_service(type=kind, name=name)
        admin.identity.create_endpoint(
            service_id=svc.id, interface="public", url=url, region_id="RegionOne"
        )
    role = admin.identity.create_role(name="sova")
    project = admin.identity.create_project(name="service", domain_id="default")
    user = admin.identity.create_user(
        name="sova", password=SOVA_PASSWORD, domain_id="default", default_project_id=project.id
    )
    admin.identity.assign_project_role_to_user(project, user, role)
    as_sova = openstack.connect(
        auth_url=keystone,
        username="sova",
        password=SOVA_PASSWORD,
        project_name="service",
        user_domain_name="Default",
        project_domain_name="Default",
        api_timeout=30,
    )
    rules = json.loads((ROOT / "deploy/openstack/sova-access-rules.json").read_text())
    cred = as_sova.identity.create_application_credential(
        user=user.id, name="sova-agent", roles=[{"name": "sova"}], access_rules=rules
    )
    d = tmp_path_factory.mktemp("clouds")
    clouds = d / "clouds.yaml"
    clouds.write_text(
        "clouds:\n"
        "  sova:\n"
        "    auth_type: v3applicationcredential\n"
        "    auth:\n"
        f"      auth_url: {keystone}\n"
        f"      application_credential_id: {cred.id}\n"
        f"      application_credential_secret: {cred.secret}\n"
        "    region_name: RegionOne\n"
    )
    return {
        "clouds": str(clouds),
        "cred": cred,
        "rules": rules,
        "user": user,
        "project": project,
        "as_sova": as_sova,
    }


def test_agent_connects_with_the_application_credential_and_holds_only_the_sova_role(
    sova_credential: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    from sova.orchestrator.openstack import connect

    monkeypatch.setenv("OS_CLIENT_CONFIG_FILE", sova_credential["clouds"])
    conn = connect("sova", api_timeout_s=30)
    access = conn.session.auth.get_access(conn.session)
    assert access.role_names == ["sova"]
    assert access.project_id == sova_credential["project"].id
    assert access.user_id == sova_credential["user"].id
    assert access.application_credential["id"] == sova_credential["cred"].id
    # Keystone keeps the access rules the credential was made with (the shipped file).
    kept = sova_credential["as_sova"].identity.get_application_credential(
        sova_credential["user"].id, sova_credential["cred"].id
    )
    got = sorted((r["service"], r["method"], r["path"]) for r in kept.access_rules)
    want = sorted((r["service"], r["method"], r["path"]) for r in sova_credential["rules"])
    assert got == want


def test_calls_outside_the_sova_role_are_refused_403_and_outside_the_rules_401(
    sova_credential: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ``sova`` user holding only the ``sova`` role is refused Keystone's admin calls by
    Keystone's policy (403); the application credential, whose access rules name no
    identity call, is refused any of Keystone's own calls before the policy is asked: its
    token is not valid there (401), as it is not for any call outside its rules."""
    from openstack import exceptions as sdk_exc
    from sova.orchestrator.openstack import connect

    as_sova = sova_credential["as_sova"]
    with pytest.raises(sdk_exc.ForbiddenException) as err:  # identity:list_users
        list(as_sova.identity.users())
    assert err.value.status_code == 403
    with pytest.raises(sdk_exc.ForbiddenException) as err:  # identity:create_role
        as_sova.identity.create_role(name="wider")
    assert err.value.status_code == 403

    monkeypatch.setenv("OS_CLIENT_CONFIG_FILE", sova_credential["clouds"])
    conn = connect("sova", api_timeout_s=30)
    with pytest.raises(sdk_exc.HttpException) as err2:
        list(conn.identity.users())
    assert err2.value.status_code == 401
    # Nor can it mint another credential (a restricted one, and no identity rule).
    with pytest.raises(sdk_exc.HttpException) as err2:
        conn.identity.create_application_credential(
            user=sova_credential["user"].id, name="wider", roles=[{"name": "sova"}]
        )
    assert err2.value.status_code in (401, 403)


def test_a_service_behind_keystonemiddleware_lets_through_only_the_access_rules(
    keystone: str, sova_credential: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """keystonemiddleware's auth_token (what Nova and Neutron run) in front of a stand-in
    compute API, validating against this Keystone with ``service_type = compute``: the
    application credential's token passes for the agent's calls and is refused for any
    other (the access rules), whatever the service's policy would say."""
    from keystonemiddleware import auth_token

    from sova.orchestrator.openstack import connect

    seen: list[str] = []

    def compute(environ: dict[str, Any], start: Any) -> list[bytes]:
        seen.append(f"{environ['REQUEST_METHOD']} {environ['PATH_INFO']} {environ['HTTP_X_ROLES']}")
        start("200 OK", [("Content-Type", "application/json")])
        return [b"{}"]

    app = auth_token.AuthProtocol(
        compute,
        {
            "auth_type": "password",
            "auth_url": keystone,
            "www_authenticate_uri": keystone,
            "username": "admin",
            "password": ADMIN_PASSWORD,
            "project_name": "admin",
            "user_domain_name": "Default",
            "project_domain_name": "Default",
            "service_type": "compute",
            "delay_auth_decision": False,
        },
    )
    monkeypatch.setenv("OS_CLIENT_CONFIG_FILE", sova_credential["clouds"])
    token = connect("sova", api_timeout_s=30).session.get_token()

    def call(method: str, path: str) -> str:
        status: list[str] = []
        environ = {
            "REQUEST_METHOD": method,
            "PATH_INFO": path,
            "SCRIPT_NAME": "",
            "QUERY_STRING": "",
            "SERVER_NAME": "compute",
            "SERVER_PORT": "8774",
            "HTTP_HOST": "compute:8774",
            "HTTP_X_AUTH_TOKEN": token,
            "wsgi.url_scheme": "http",
            "wsgi.input": __import__("io").BytesIO(b""),
            "wsgi.errors": sys.stderr,
        }
        app(environ, lambda s, h, exc=None: status.append(s))
        return status[0].split()[0]

    assert call("GET", "/v2.1/servers/detail") == "200"
    assert call("POST", "/v2.1/servers/abc/os-interface") == "200"
    assert seen and seen[0].endswith("sova")
    assert call("DELETE", "/v2.1/servers/abc") == "401"  # outside the access rules
    assert call("GET", "/v2.1/os-hypervisors") == "401"
    assert len(seen) == 2
