"""The agent's link to the manager: one report per period, directives back, migration ends.

Every call has a timeout and a bounded number of retries and nothing is queued here:
when the manager is unreachable the agent keeps scheduling locally and simply reports
again next period (:mod:`sova.daemon.agent_daemon`). After one failure the client tries
once per call until the manager answers, so a dead manager costs one timeout a period.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx

from sova.daemon.schema import PROTOCOL, Directive, MigrationDone, encode


class ManagerUnreachable(RuntimeError):
    """No answer (connection refused, timeout, 5xx) after the bounded retries."""


class ManagerRejected(RuntimeError):
    """The manager answered 4xx: a configuration problem (token, host name, schema)."""


class ManagerClient:
    def __init__(
        self,
        url: str,
        host: str,
        token: str,
        *,
        timeout_s: float = 2.0,
        retries: int = 2,
        ca_file: Path | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.host = host
        self.retries = retries
        self.degraded = False  # after a failure, try once per call until it answers again
        self._client = httpx.Client(
            base_url=url.rstrip("/"),
            timeout=httpx.Timeout(timeout_s, connect=min(1.0, timeout_s)),
            verify=str(ca_file) if ca_file else True,
            headers={
                "authorization": f"Bearer {token}",
                "content-type": "application/json",
                "x-sova-host": host,
            },
            transport=transport,
        )

    def close(self) -> None:
        self._client.close()

    def _request(self, method: str, path: str, **kw: Any) -> httpx.Response:
        attempts = 1 if self.degraded else self.retries + 1
        last = ""
        for i in range(attempts):
            if i:
                time.sleep(min(1.0, 0.1 * 2**i))
            try:
                r = self._client.request(method, path, **kw)
            except httpx.HTTPError as exc:
                last = f"{type(exc).__name__}: {exc}"
                continue
            if r.status_code >= 500:
                last = f"HTTP {r.status_code}"
                continue
            self.degraded = False
            if r.status_code >= 400:
                raise ManagerRejected(f"{method} {path}: HTTP {r.status_code}: {r.text[:300]}")
            return r
        self.degraded = True
        raise ManagerUnreachable(last)

    def report(self, report_body: bytes) -> Directive:
        r = self._request("POST", f"/v1/hosts/{self.host}/reports", content=report_body)
        return Directive.model_validate_json(r.content)

    def wait_directive(self, seq: int, wait_s: float) -> Directive:
        r = self._request(
            "GET",
            f"/v1/hosts/{self.host}/directive",
            params={"seq": seq, "wait_s": wait_s, "p": PROTOCOL},
            timeout=wait_s + 2.0,
        )
        return Directive.model_validate_json(r.content)

    def migration_done(self, vm: str, done: MigrationDone) -> bool:
        r = self._request("POST", f"/v1/migrations/{vm}/done", content=encode(done))
        return bool(r.json().get("released", False))
