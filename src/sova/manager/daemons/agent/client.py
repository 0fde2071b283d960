"""The agent's link to the manager: one report per period, directives back, migration ends.

Every call has a timeout and a bounded number of retries and nothing is queued here:
when the manager is unreachable the agent keeps scheduling locally and simply reports
again next period (:mod:`sova.manager.daemons.agent.daemon`). After one failure the client tries
once per call until the manager answers, so a dead manager costs one timeout a period.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
from pydantic import ValidationError

from sova.manager.daemons.schema import PROTOCOL, Directive, MigrationDone, encode


class ManagerUnreachable(RuntimeError):
    """No answer (connection refused, timeout, 5xx) after the bounded retries."""


class ManagerRejected(RuntimeError):
    """The manager answered 4xx: a configuration problem (token, host name, schema)."""


LEADER_HEADER = "x-sova-leader"  # a standby manager's 503 names the leader's URL in it


class ManagerClient:
    """Reports to one manager, or to the leader among several (active/standby managers).

    With several URLs the client stays with the one that answered last. A manager that
    does not answer (or answers 5xx) costs one attempt and the next URL is tried; a standby
    answers 503 naming the leader, and the client goes there at once — but only to a URL of
    its own list: the host's token is never sent to an address a response named.

    A report is sent again, across the URLs, for up to ``patience_s`` when no manager
    takes it: a takeover leaves the managers without a leader for a few seconds, and a
    report given up then is a period of the host the new leader never sees. Patience
    applies only while the managers were answering (not ``degraded``): when they are all
    down for good, a report still costs one try per URL a period.
    """

    def __init__(
        self,
        url: str | list[str],
        host: str,
        token: str,
        *,
        timeout_s: float = 2.0,
        retries: int = 2,
        ca_file: Path | None = None,
        transport: httpx.BaseTransport | None = None,
        patience_s: float = 0.0,
    ) -> None:
        self.host = host
        self.retries = retries
        self.patience_s = patience_s
        self.degraded = False  # after a failure, try once per call until it answers again
        self.urls = [u.rstrip("/") for u in ([url] if isinstance(url, str) else url)]
        if not self.urls:
            raise ValueError("manager_url: no manager URL given")
        self.current = 0  # index of the manager that answered last
        self._clients = [
            httpx.Client(
                base_url=u,
                timeout=httpx.Timeout(timeout_s, connect=min(1.0, timeout_s)),
                verify=str(ca_file) if ca_file else True,
                headers={
                    "authorization": f"Bearer {token}",
                    "content-type": "application/json",
                    "x-sova-host": host,
                },
                transport=transport,
            )
            for u in self.urls
        ]

    @property
    def url(self) -> str:
        """The manager this client reports to now."""
        return self.urls[self.current]

    def close(self) -> None:
        for c in self._clients:
            c.close()

    def _request(
        self, method: str, path: str, patience_s: float = 0.0, **kw: Any
    ) -> httpx.Response:
        # Every URL gets at least one try, each more than once when retries allow; then,
        # with patience (a report, managers answering until now), more until it runs out.
        attempts = (1 if self.degraded else self.retries + 1) * len(self.urls)
        until = time.monotonic() + (0.0 if self.degraded else patience_s)
        last = ""
        hops = 0  # leader redirects followed in this call (bounded: standbys may disagree)
        i = 0
        while i < attempts or time.monotonic() < until:
            if i and not hops:
                pause = min(1.0, 0.1 * 2 ** (i // len(self.urls)))
                if i >= attempts:  # patient: short pauses, so the new leader is found soon
                    pause = min(0.25, until - time.monotonic())
                time.sleep(max(0.0, pause))
            hops = 0
            i += 1
            try:
                r = self._clients[self.current].request(method, path, **kw)
            except httpx.HTTPError as exc:
                last = f"{self.url}: {type(exc).__name__}: {exc}"
                self.current = (self.current + 1) % len(self.urls)
                continue
            if r.status_code >= 500:
                last = f"{self.url}: HTTP {r.status_code}"
                leader = self._leader(r)
                if leader is not None and leader != self.current:
                    self.current, hops = leader, 1
                else:
                    self.current = (self.current + 1) % len(self.urls)
                continue
            self.degraded = False
            if r.status_code >= 400:
                raise ManagerRejected(f"{method} {path}: HTTP {r.status_code}: {r.text[:300]}")
            return r
        self.degraded = True
        raise ManagerUnreachable(last)

    def _leader(self, r: httpx.Response) -> int | None:
        """The index of the leader a standby's answer names, if it is one of ours."""
        named = r.headers.get(LEADER_HEADER, "").rstrip("/")
        return self.urls.index(named) if named in self.urls else None

    def report(self, report_body: bytes) -> Directive:
        r = self._request(
            "POST", f"/v1/hosts/{self.host}/reports", self.patience_s, content=report_body
        )
        return _directive(r)

    def wait_directive(self, seq: int, wait_s: float) -> Directive:
        r = self._request(
            "GET",
            f"/v1/hosts/{self.host}/directive",
            params={"seq": seq, "wait_s": wait_s, "p": PROTOCOL},
            timeout=wait_s + 2.0,
        )
        return _directive(r)

    def migration_done(self, vm: str, done: MigrationDone) -> bool:
        r = self._request("POST", f"/v1/migrations/{vm}/done", content=encode(done))
        return bool(r.json().get("released", False))


def _directive(r: httpx.Response) -> Directive:
    """The answer as a directive; one that does not parse is the manager's fault, not a
    reason for the agent to exit (ManagerRejected: logged, the next period goes on)."""
    try:
        return Directive.model_validate_json(r.content)
    except ValidationError as exc:
        e = exc.errors()[0]
        where = ".".join(str(p) for p in e["loc"]) or "body"
        raise ManagerRejected(f"the manager's directive is malformed: {where}: {e['msg']}") from None
