"""Sova's manager's two reads the Watcher strategy makes (``GET /v1/cluster`` and
``/v1/cluster/history``), answered over loopback HTTP in the manager's JSON shape to one
viewer token, from a state file re-read at each request (so a test changes the series
between audits). A process of its own: Watcher's tests run under eventlet, whose
monkey-patched sockets and threads never let an in-process server answer.

    python sova_manager_standin.py STATE_FILE PORT_FILE

Writes the port it listens on to PORT_FILE; each request's path is appended to the state
file's ``asked`` list in ``STATE_FILE.asked``.
"""

from __future__ import annotations

import http.server
import json
import pathlib
import sys
import urllib.parse
from typing import Any

USE = {"cpu": 0.1, "mem": 0.1}


def answer(state: dict[str, Any], path: str) -> Any:
    net: dict[str, list[float]] = state["net"]
    if path == "/v1/cluster":
        hosts = [
            {
                "host": h,
                "state": "stale" if h in state["stale"] else "fresh",
                "utilisation": {**USE, "net": s[-1]},
                "vms": {vm: {**USE, "net": x} for vm, x in state["vm_net"].get(h, {}).items()},
                "pinned_vms": state["pinned"].get(h, []),
            }
            for h, s in net.items()
        ]
        return {"now_s": 1.0, "rounds": 1, "hosts": hosts, "leases": []}
    if path == "/v1/cluster/history":
        hosts = [
            {"host": h, "cpu": [0.1] * len(s), "mem": [0.1] * len(s), "net": s}
            for h, s in net.items()
        ]
        return {"now_s": 1.0, "n": 5, "hosts": hosts}
    return None


def main(state_file: pathlib.Path, port_file: pathlib.Path) -> None:
    asked = state_file.with_suffix(".asked")

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            state = json.loads(state_file.read_text())
            path = urllib.parse.urlsplit(self.path).path
            with asked.open("a") as f:
                f.write(path + "\n")
            if self.headers.get("Authorization") != f"Bearer {state['token']}":
                return self.send(401, {"detail": "not authenticated"})
            body = answer(state, path)
            return self.send(404, {}) if body is None else self.send(200, body)

        def send(self, code: int, body: Any) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *a: Any) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    port_file.write_text(str(server.server_address[1]))
    server.serve_forever()


if __name__ == "__main__":
    main(pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]))
