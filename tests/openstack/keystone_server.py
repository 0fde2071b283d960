"""Keystone as a server process for the OpenStack tier (run by the keystone env).

Keystone 30 and Nova 34 (or Neutron 29) pin different oslo versions, so Keystone cannot run
in their environments; ``tier_nova`` and ``tier_neutron`` run this file with the keystone
environment's interpreter (:class:`KeystoneProcess`), as tier_nova runs Neutron's
(neutron_server.py). Keystone's own WSGI app on SQLite, set up with ``keystone-manage``
(db_sync, fernet_setup, credential_setup, bootstrap) in ``DIR``; then what
docs/openstack.md#credentials-roles-and-policies has an operator do: the catalog's compute
and network services, a ``sova`` role, a ``sova`` user in ``service`` holding ``admin`` and
``sova`` and, as that user, an application credential with both roles and the shipped
access rules. Besides: a second credential of that user holding ``sova`` alone and no access
rules, whose tokens keystonemiddleware passes to the services' own policies (what a policy
fragment grants and refuses, on a real token), and Nova's own service user ``nova`` in
``service`` holding ``admin`` and ``service``.

    python tests/openstack/keystone_server.py DIR

prints one JSON line once listening (``url``, ``admin_password``, ``nova_password``, the
``service`` project's ``project_id``, the first credential's ``id`` and ``secret``, the
second's ``only_id`` and ``only_secret``) and serves until stdin is closed.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import tempfile
import threading
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

ROOT = pathlib.Path(__file__).resolve().parents[2]
ADMIN_PASSWORD = "tier-admin-secret"
SOVA_PASSWORD = "tier-sova-secret"
NOVA_PASSWORD = "tier-nova-secret"


class _Quiet(WSGIRequestHandler):
    def log_message(self, *args: Any) -> None:
        pass


def _setup(d: pathlib.Path, url: str) -> None:
    conf = d / "keystone.conf"
    conf.write_text(
        f"[database]\nconnection = sqlite:///{d}/keystone.db\n"
        f"[fernet_tokens]\nkey_repository = {d}/fernet-keys\n"
        f"[fernet_receipts]\nkey_repository = {d}/fernet-keys\n"
        f"[credential]\nkey_repository = {d}/credential-keys\n"
    )
    for keys in ("fernet-keys", "credential-keys"):  # keystone-manage fills, never makes, them
        (d / keys).mkdir(mode=0o700, exist_ok=True)
    script = pathlib.Path(sys.executable).parent / "keystone-manage"
    manage = [sys.executable, str(script), "--config-file", str(conf)]
    ids = str(os.getuid()), str(os.getgid())
    for args in (
        ["db_sync"],
        ["fernet_setup", "--keystone-user", ids[0], "--keystone-group", ids[1]],
        ["credential_setup", "--keystone-user", ids[0], "--keystone-group", ids[1]],
        ["bootstrap", "--bootstrap-password", ADMIN_PASSWORD, "--bootstrap-public-url", url]
        + ["--bootstrap-region-id", "RegionOne"],
    ):
        done = subprocess.run(manage + args, capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            raise SystemExit(f"keystone-manage {args[0]}: {done.stderr[-3000:]}")
    os.environ["OS_KEYSTONE_CONFIG_FILES"] = str(conf)
    os.environ["OS_KEYSTONE_CONFIG_DIR"] = str(d)


def _credential(url: str) -> Any:
    import openstack

    def connect(user: str, password: str, project: str) -> Any:
        return openstack.connect(
            auth_url=url,
            username=user,
            password=password,
            project_name=project,
            user_domain_name="Default",
            project_domain_name="Default",
            api_timeout=30,
        )

    admin = connect("admin", ADMIN_PASSWORD, "admin")
    # keystonemiddleware checks its service_type against the catalog before the access rules.
    for kind, name in (("compute", "nova"), ("network", "neutron")):
        svc = admin.identity.create_service(type=kind, name=name)
        admin.identity.create_endpoint(
            service_id=svc.id, interface="public", url=f"http://{kind}", region_id="RegionOne"
        )
    project = admin.identity.create_project(name="service", domain_id="default")
    user = admin.identity.create_user(
        name="sova", password=SOVA_PASSWORD, domain_id="default", default_project_id=project.id
    )
    for name in ("admin", "sova"):
        role = admin.identity.find_role(name) or admin.identity.create_role(name=name)
        admin.identity.assign_project_role_to_user(project, user, role)
    # Nova's own service user, for its [neutron] client: Neutron's policy wants `service`
    # for binding a port to a host and PCI slot (admin alone is refused).
    nova = admin.identity.create_user(
        name="nova", password=NOVA_PASSWORD, domain_id="default", default_project_id=project.id
    )
    for name in ("admin", "service"):
        role = admin.identity.find_role(name) or admin.identity.create_role(name=name)
        admin.identity.assign_project_role_to_user(project, nova, role)
    rules = json.loads((ROOT / "deploy/openstack/sova-access-rules.json").read_text())
    identity = connect("sova", SOVA_PASSWORD, "service").identity
    cred = identity.create_application_credential(
        user=user.id,
        name="sova-agent",
        roles=[{"name": "admin"}, {"name": "sova"}],
        access_rules=rules,
    )
    only = identity.create_application_credential(
        user=user.id, name="sova-role-only", roles=[{"name": "sova"}]
    )
    return project.id, cred, only


class KeystoneProcess:
    """This file run as Keystone's server in the keystone environment, for a test in another
    environment (the tier's nova or neutron one): ``info`` is its JSON line."""

    def __init__(self) -> None:
        import pytest

        python = os.environ.get("SOVA_KEYSTONE_PYTHON")
        if not python or not pathlib.Path(python).exists():
            pytest.skip(
                "needs the keystone environment's interpreter in SOVA_KEYSTONE_PYTHON "
                "(scripts/openstack-envs.sh test nova or neutron sets it)"
            )
        self.dir = tempfile.TemporaryDirectory()
        self.proc = subprocess.Popen(
            [python, __file__, self.dir.name],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        assert self.proc.stdout is not None
        for line in self.proc.stdout:  # Keystone logs there too; ours is the JSON line
            if line.startswith("{"):
                self.info: dict[str, str] = json.loads(line)
                return
        self.proc.wait(timeout=30)
        raise AssertionError(f"Keystone's server did not start (exit {self.proc.returncode})")

    def clouds_yaml(self, service: str, url: str) -> pathlib.Path:
        """A clouds.yaml for Sova's ``connect``: ``sova``, the credential with the shipped
        access rules, and ``sova-only``, the ``sova`` role alone and no rules (the service's
        own policy judges it), each reaching ``service`` (``compute``, ``network``) at ``url``."""
        ks = self.info
        path = pathlib.Path(self.dir.name) / "clouds.yaml"
        path.write_text(
            "clouds:\n"
            + "".join(
                f"  {name}:\n"
                "    auth_type: v3applicationcredential\n"
                "    auth:\n"
                f"      auth_url: {ks['url']}\n"
                f"      application_credential_id: {ks[key + 'id']}\n"
                f"      application_credential_secret: {ks[key + 'secret']}\n"
                "    region_name: RegionOne\n"
                f"    {service}_endpoint_override: {url}\n"
                for name, key in (("sova", ""), ("sova-only", "only_"))
            )
        )
        return path

    def auth_token(self, app: Any, service_type: str) -> Any:
        """``app`` behind keystonemiddleware's ``auth_token`` (the caller's environment's)
        validating tokens against this Keystone as the ``service_type`` service does."""
        from keystonemiddleware import auth_token
        from oslo_config import cfg

        ks = self.info
        return auth_token.AuthProtocol(
            app,
            {
                # Its own options object: on the process-wide one the password plugin's
                # required options would outlive the test and fail every later setUp.
                "oslo_config_config": cfg.ConfigOpts(),
                "auth_type": "password",
                "auth_url": ks["url"],
                "www_authenticate_uri": ks["url"],
                "username": "admin",
                "password": ks["admin_password"],
                "project_name": "admin",
                "user_domain_name": "Default",
                "project_domain_name": "Default",
                "service_type": service_type,
                "interface": "public",  # the only endpoint the bootstrap made
                "delay_auth_decision": False,
            },
        )

    def stop(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.dir.cleanup()


class OneKeystone:
    """A test-case mixin (before the ``TestCase`` base): one :class:`KeystoneProcess` for the
    class as ``keystone``; its set-up is a third or more of a test's time."""

    keystone: KeystoneProcess

    @classmethod
    def setUpClass(cls) -> None:
        super().setUpClass()  # type: ignore[misc]
        cls.keystone = KeystoneProcess()

    @classmethod
    def tearDownClass(cls) -> None:
        cls.keystone.stop()
        super().tearDownClass()  # type: ignore[misc]


def main() -> int:
    d = pathlib.Path(sys.argv[1])
    holder: dict[str, Any] = {}
    httpd = make_server(
        "127.0.0.1", 0, lambda env, start: holder["app"](env, start), handler_class=_Quiet
    )
    url = f"http://127.0.0.1:{httpd.server_port}/v3"
    _setup(d, url)
    from keystone.server import wsgi

    argv, sys.argv = sys.argv, sys.argv[:1]  # Keystone's config parses the command line
    try:
        holder["app"] = wsgi.initialize_public_application()
    finally:
        sys.argv = argv
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    project_id, cred, only = _credential(url)
    out = {
        "url": url,
        "admin_password": ADMIN_PASSWORD,
        "nova_password": NOVA_PASSWORD,
        "project_id": project_id,
        "id": cred.id,
        "secret": cred.secret,
        "only_id": only.id,
        "only_secret": only.secret,
    }
    print(json.dumps(out), flush=True)
    sys.stdin.read()  # until the test closes our stdin
    httpd.shutdown()
    httpd.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
