"""Neutron's API as a server process for the joined OpenStack tier (run by the neutron env).

Nova 34 and Neutron 29 pin different oslo/SQLAlchemy versions, so they cannot share one
Python environment; the joined test in ``tier_nova`` runs this file with the neutron
environment's interpreter and points Nova's harness (its ``[neutron]`` client) and Sova's
openstacksdk connection at it over HTTP on a loopback port.

What serves: Neutron's WSGI API (versions document at ``/``, v2.0 under ``/v2.0``) on the
ML2 plugin with the ``openvswitch`` (the VMs' virtio ports) and ``sriovnicswitch`` (Sova's
VF ports) mechanism drivers, the port-security extension, VLAN ranges on ``physnet2``
(200-300), Neutron's L3 plugin (Nova reads floating IPs) and SQLite, set up by Neutron's own
ML2 test base. Each ``HOST`` gets an OVS agent record (``physnet2`` bridged) and an SR-IOV
NIC agent record (``physnet2`` on ``ens1f0``), as a compute running both agents reports them.
Keystone is the one stand-in (:func:`identity`).

    python tests/openstack/neutron_server.py HOST [HOST ...]

prints the base URL on stdout once listening and serves until stdin is closed.
"""

from __future__ import annotations

import io
import json
import sys
import threading
import unittest
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

from neutron.tests.common import helpers
from neutron.tests.unit.plugins.ml2 import test_plugin as plugin_tests


def identity(app: Any) -> Any:
    """keystonemiddleware's part: the X-* identity headers Neutron's context middleware reads.

    A caller that sets them (Sova's connection) is taken as it says. Otherwise the caller is
    Nova: with its API user's token (Nova's noauth2 tokens are ``user:project``; ``admin`` is
    an admin) Nova acts for that user; with no token it uses its own ``[neutron]`` service
    credential, which a deployment gives the ``admin`` and ``service`` roles (Neutron's policy
    wants ``service`` for binding a port to a host and PCI slot).
    """

    def wrapped(environ: dict[str, Any], start_response: Any) -> Any:
        if "HTTP_X_ROLES" not in environ:
            user, _, project = environ.get("HTTP_X_AUTH_TOKEN", "").partition(":")
            if user and project:
                roles = "admin,member,reader" if user == "admin" else "member,reader"
            else:
                user, project, roles = "nova", "service", "admin,service"
            environ.update(HTTP_X_USER_ID=user, HTTP_X_PROJECT_ID=project, HTTP_X_ROLES=roles)
        return app(environ, start_response)

    return wrapped


class _Quiet(WSGIRequestHandler):
    def log_message(self, *args: Any) -> None:
        pass


class NeutronServer(plugin_tests.Ml2PluginV2TestCase):
    _mechanism_drivers = ["openvswitch", "sriovnicswitch"]
    hosts: tuple[str, ...] = ("compute0",)

    def get_additional_service_plugins(self) -> dict[str, str]:
        # Neutron loads its tag plugin by default; its unit-test base does not (Sova's ports
        # carry the tag "sova-vf").
        return {"tag": "tag"}

    def setUp(self) -> None:
        from oslo_config import cfg

        cfg.CONF.set_override("extension_drivers", ["port_security"], group="ml2")
        super().setUp()
        # Nobody listens for Neutron's notifications to Nova (Nova is told vif_plugging_timeout
        # = 0), and the agent records are written once: keep them alive for the whole run.
        cfg.CONF.set_override("notify_nova_on_port_status_changes", False)
        cfg.CONF.set_override("notify_nova_on_port_data_changes", False)
        cfg.CONF.set_override("agent_down_time", 86400)
        for host in self.hosts:
            helpers.register_ovs_agent(host=host, bridge_mappings={"physnet2": "br-phys"})
            helpers.register_sriovnicswitch_agent(
                host=host, device_mappings={"physnet2": ["ens1f0"]}
            )

    def serve(self) -> None:
        from neutron.auth import NeutronKeystoneContext
        from neutron.pecan_wsgi.app import versions_factory

        api, versions = NeutronKeystoneContext(self.api), versions_factory({})

        def app(environ: dict[str, Any], start_response: Any) -> Any:
            # Neutron's api-paste.ini composite: "/" the versions document, "/v2.0" the API.
            path = environ.get("PATH_INFO", "")
            activate = environ.get("REQUEST_METHOD") == "PUT" and path.endswith("/activate")
            if activate and not int(environ.get("CONTENT_LENGTH") or 0):
                # Nova activates a port's binding on a live migration's target with an empty
                # PUT; this pecan app's member action takes the port from the body it never
                # got (KeyError 'request_data', then 'port_id': a 500), so it gets the port.
                port = path.split("/ports/", 1)[-1].split("/", 1)[0]
                body = json.dumps({"port_id": port}).encode()
                environ.update(CONTENT_LENGTH=str(len(body)), CONTENT_TYPE="application/json")
                environ["wsgi.input"] = io.BytesIO(body)
            if path.startswith("/v2.0"):
                environ["SCRIPT_NAME"] = "/v2.0"
                environ["PATH_INFO"] = path[len("/v2.0") :] or "/"
                return api(environ, start_response)
            return versions(environ, start_response)

        # One request at a time: Neutron's test database is one in-memory SQLite connection.
        httpd = make_server("127.0.0.1", 0, identity(app), handler_class=_Quiet)
        thread = threading.Thread(target=httpd.serve_forever, daemon=True)
        thread.start()
        print(f"http://127.0.0.1:{httpd.server_port}/", flush=True)
        sys.stdin.read()  # until the test closes our stdin
        httpd.shutdown()
        httpd.server_close()


def main() -> int:
    NeutronServer.hosts = tuple(sys.argv[1:]) or ("compute0",)
    result = unittest.TestResult()
    NeutronServer("serve").run(result)
    for _, trace in result.errors + result.failures:
        print(trace, file=sys.stderr)
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
