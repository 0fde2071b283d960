"""What Sova's Watcher strategy reads from the manager (sova.openstack.sova_loads): the real
manager's /v1/cluster and /v1/cluster/history, read with a viewer credential (the strategy's
least privilege), parsed into each host's link series, its VMs' link shares and its pins;
bad answers refused in one line naming the field (docs/openstack.md, "Next to Nova's
scheduler and Watcher")."""

from __future__ import annotations

import hashlib
import http.server
import json
import shutil
import ssl
import subprocess
import threading
import time
import urllib.parse
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from sova.openstack import sova_loads

from .conftest import Api, auth, manager_settings, report

VIEWER = "viewer-" + "w" * 25


@pytest.fixture
def viewer_api(store: Any, tmp_path: Path) -> Any:
    ops = tmp_path / "ops.toml"
    digest = hashlib.sha256(VIEWER.encode()).hexdigest()
    ops.write_text(f'[watcher]\nrole = "viewer"\ntokens = ["sha256:{digest}"]\n')
    ops.chmod(0o600)
    a = Api(manager_settings(insecure=False, operators_file=ops), store)
    yield a
    a.close()


def _through(api: Api, asked: list[str]) -> Any:
    """sova_loads' GET, carried by the in-process client instead of a socket."""

    def get(url: str, headers: Mapping[str, str], timeout_s: float, ca: str | None) -> Any:
        parts = urllib.parse.urlsplit(url)
        asked.append(f"{parts.path}?{parts.query}")
        r = api.get(f"{parts.path}?{parts.query}", headers=dict(headers))
        if r.status_code != 200:
            raise OSError(f"HTTP {r.status_code}: {r.text}")
        return r.json()

    return get


def test_a_viewer_reads_each_hosts_link_series_and_its_vms_shares(viewer_api: Api) -> None:
    # h1 reports 6 times, link 0.1 .. 0.6: the window holds the last 5; h2 twice.
    for i in range(1, 7):
        vms = {"vm-a": (0.1, 0.1, 0.05 * i), "vm-b": (0.1, 0.1, 0.01)}
        r = viewer_api.post(
            "/v1/hosts/h1/reports",
            content=report(i, 10.0 * i, (0.3, 0.3, round(0.1 * i, 2)), vms),
            headers=auth("h1"),
        )
        assert r.status_code == 200, r.text
        if i <= 2:
            r = viewer_api.post(
                "/v1/hosts/h2/reports",
                content=report(i, 10.0 * i, (0.2, 0.2, 0.4)),
                headers=auth("h2"),
            )
            assert r.status_code == 200, r.text
        viewer_api.tick(10.0 * i)
    asked: list[str] = []
    loads = sova_loads.read(
        "http://manager", VIEWER, timeout_s=2.0, get=_through(viewer_api, asked)
    )
    assert set(loads.hosts) == {"h1", "h2"}
    h1 = loads.of("h1")
    assert h1 is not None
    assert h1.series == pytest.approx((0.2, 0.3, 0.4, 0.5, 0.6))
    assert h1.vms == pytest.approx({"vm-a": 0.30, "vm-b": 0.01})  # the newest report's
    assert loads.of("h2") is not None and loads.of("h2").series == (0.4, 0.4)  # type: ignore[union-attr]
    assert loads.of("h3") is None
    assert asked == [
        f"/v1/cluster?offset=0&limit={sova_loads.PAGE}",
        f"/v1/cluster/history?offset=0&limit={sova_loads.PAGE}",
    ]
    with pytest.raises(OSError, match="HTTP 401"):
        sova_loads.read("http://manager", "x" * 30, timeout_s=2.0, get=_through(viewer_api, []))


def _views(**host: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    row = {"host": "h1", "state": "fresh", "vms": {"vm-a": {"cpu": 0, "mem": 0, "net": 0.2}}}
    cluster = {"hosts": [{**row, **host}]}
    history = {"hosts": [{"host": "h1", "cpu": [0.1], "mem": [0.1], "net": [0.5, 0.6]}]}
    return cluster, history


def test_a_stale_host_is_left_out_and_pins_are_kept() -> None:
    cluster, history = _views(pinned_vms=["vm-a"])
    assert sova_loads.parse(cluster, history).hosts == {
        "h1": sova_loads.HostNet((0.5, 0.6), {"vm-a": 0.2}, frozenset({"vm-a"}))
    }
    cluster, history = _views(state="stale")
    assert sova_loads.parse(cluster, history).hosts == {}


@pytest.mark.parametrize(
    ("cluster_row", "history_net", "message"),
    [
        ({"vms": {"vm-a": {"net": 1.5}}}, [0.5], "cluster.h1.vms.vm-a.net: 1.5 is not a share"),
        ({"vms": {"vm-a": {"net": True}}}, [0.5], "cluster.h1.vms.vm-a.net: not a number: True"),
        ({"vms": {"vm-a": 0.3}}, [0.5], "cluster.h1.vms.vm-a.net: not a number: None"),
        ({"vms": []}, [0.5], "cluster.h1.vms: not a mapping: []"),
        ({"pinned_vms": "vm-a"}, [0.5], "cluster.h1.pinned_vms: not a list: 'vm-a'"),
        ({}, [0.5, float("nan")], "cluster/history.h1.net[1]: nan is not a share"),
        ({}, [-0.1], "cluster/history.h1.net[0]: -0.1 is not a share"),
        ({}, "0.5", "cluster/history.h1.net: not a list: '0.5'"),
    ],
)
def test_an_answer_out_of_the_schema_is_refused_naming_the_field(
    cluster_row: dict[str, Any], history_net: Any, message: str
) -> None:
    cluster, history = _views(**cluster_row)
    history["hosts"][0]["net"] = history_net
    with pytest.raises(ValueError, match="^" + message.replace("[", r"\[").replace(".", r"\.")):
        sova_loads.parse(cluster, history)


def test_no_host_list_and_no_http_url_are_refused() -> None:
    with pytest.raises(ValueError, match=r"^cluster\.hosts: not a list of hosts: None"):
        sova_loads.parse({}, {"hosts": []})
    with pytest.raises(ValueError, match=r"^cluster/history\.hosts: not a list of hosts"):
        sova_loads.parse({"hosts": []}, {"hosts": [{"host": 3}]})
    with pytest.raises(ValueError, match="^sova_url: not an http"):
        sova_loads.read("file:///etc/passwd", VIEWER, timeout_s=1.0)


def test_every_page_is_read() -> None:
    # A cluster of PAGE + 1 hosts: two pages of each read.
    names = [f"h{i:05d}" for i in range(sova_loads.PAGE + 1)]
    asked: list[tuple[str, int]] = []

    def get(url: str, headers: Mapping[str, str], timeout_s: float, ca: str | None) -> Any:
        parts = urllib.parse.urlsplit(url)
        q = dict(urllib.parse.parse_qsl(parts.query))
        offset, limit = int(q["offset"]), int(q["limit"])
        asked.append((parts.path, offset))
        assert headers["Authorization"] == f"Bearer {VIEWER}"
        page = names[offset : offset + limit]
        if parts.path == "/v1/cluster":
            return {"hosts": [{"host": h, "state": "fresh", "vms": {}} for h in page]}
        return {"hosts": [{"host": h, "net": [0.1]} for h in page]}

    loads = sova_loads.read("https://m/", VIEWER, timeout_s=1.0, get=get)
    assert len(loads.hosts) == len(names)
    assert asked == [
        ("/v1/cluster", 0),
        ("/v1/cluster", sova_loads.PAGE),
        ("/v1/cluster/history", 0),
        ("/v1/cluster/history", sova_loads.PAGE),
    ]


class _Server:
    """A loopback server answering ``{"hosts": []}`` (over TLS with ``cert``), or never
    (``hang``: it accepts and says nothing), recording each request's token."""

    def __init__(self, cert: tuple[Path, Path] | None = None, hang: bool = False) -> None:
        self.seen: list[str | None] = []
        self.release = threading.Event()
        outer = self

        class H(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                outer.seen.append(self.headers.get("Authorization"))
                if hang:
                    outer.release.wait(30)
                    return
                data = json.dumps({"hosts": []}).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *a: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        scheme = "http"
        if cert is not None:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(str(cert[0]), str(cert[1]))
            self.server.socket = ctx.wrap_socket(self.server.socket, server_side=True)
            scheme = "https"
        self.url = f"{scheme}://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


def _cert(tmp: Path) -> tuple[Path, Path]:
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is needed to make a test certificate")
    cert, key = tmp / "cert.pem", tmp / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
         "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return cert, key


def test_https_is_verified_against_the_configured_ca(tmp_path: Path) -> None:
    # The manager's private CA (docs/operations.md): trusted through sova_ca_file only.
    cert = _cert(tmp_path)
    server = _Server(cert)
    try:
        assert server.url.startswith("https://")
        assert sova_loads.read(server.url, VIEWER, timeout_s=10.0, ca_file=str(cert[0])).hosts == {}
        with pytest.raises(OSError, match="CERTIFICATE_VERIFY_FAILED"):
            sova_loads.read(server.url, VIEWER, timeout_s=10.0)
    finally:
        server.close()
    assert server.seen == [f"Bearer {VIEWER}"] * 2  # the refused handshake sent no token


def test_a_manager_that_never_answers_times_out() -> None:
    server = _Server(hang=True)
    try:
        t0 = time.monotonic()
        with pytest.raises(OSError, match="timed out"):
            sova_loads.read(server.url, VIEWER, timeout_s=0.5)
        assert time.monotonic() - t0 < 10.0
    finally:
        server.close()


def test_shares_at_the_bounds_are_taken() -> None:
    cluster, history = _views(vms={"vm-a": {"net": 0}, "vm-b": {"net": sova_loads.MAX_SHARE}})
    history["hosts"][0]["net"] = [0.0, sova_loads.MAX_SHARE]
    h1 = sova_loads.parse(cluster, history).hosts["h1"]
    assert h1.series == (0.0, sova_loads.MAX_SHARE)
    assert h1.vms == {"vm-a": 0.0, "vm-b": sova_loads.MAX_SHARE}


def test_a_read_names_the_answer_out_of_its_schema() -> None:
    def get(url: str, headers: Mapping[str, str], timeout_s: float, ca: str | None) -> Any:
        return {"hosts": []} if "/history" in url else {"detail": "not a view"}

    with pytest.raises(ValueError, match=r"^cluster\.hosts: not a list of hosts: None"):
        sova_loads.read("http://m", VIEWER, timeout_s=1.0, get=get)


def test_the_standard_librarys_get_sends_the_token_and_decodes() -> None:
    server = _Server()
    try:
        assert sova_loads.read(server.url, VIEWER, timeout_s=5.0).hosts == {}
    finally:
        server.close()
    assert server.seen == [f"Bearer {VIEWER}"] * 2
