"""Webhooks: the manager's events POSTed to the operator's receivers as CloudEvents.

Events come from the store's outbox (:mod:`sova.manager.daemons.service.store_outbox`), written with what
they report; only the leader runs this (a standby serves another app), so one manager
sends. Each POST is claimed in the store first, fenced by the leader's epoch — a deposed
leader's claim is refused and it sends nothing — then marked delivered on a 2xx. A new
leader reads the marks and sends what the old one had not. The one duplicate left is a
POST in flight when its sender lost the leadership (or crashed) before marking: the
receiver deduplicates by the event's ``id`` (docs/operations.md#webhooks).

Retries are kept in the store (attempts, next attempt's time), not in a retry library's
loop (tenacity, stamina): a retry must survive a failover and must not hold up the
endpoint's other events or the round, so each pass sends what is due and moves on.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter

from sova import __version__
from sova.manager.daemons.config import ConfigError
from sova.manager.daemons.service.store import Store
from sova.manager.daemons.service.store_admin import Deposed
from sova.manager.daemons.service.store_outbox import Event
from sova.manager.daemons.webhook_settings import WebhookEndpoint, WebhookSettings

if TYPE_CHECKING:
    import httpx

log = logging.getLogger("sova.manager.webhooks")

SIGNATURE_HEADER = "Sova-Signature"
CONTENT_TYPE = "application/cloudevents+json"
BATCH = 100  # events per endpoint and pass: a backlog is sent over several passes
PRUNE_EVERY_S = 60.0


def cloudevent(ev: Event, source: str) -> dict[str, Any]:
    """CloudEvents 1.0, structured mode. ``id`` is the one stored with the event: the same
    on every attempt and from every manager, so a receiver deduplicates by (source, id)."""
    return {
        "specversion": "1.0",
        "id": ev.uid,
        "source": source,
        "type": f"io.sova.{ev.kind}",
        "subject": ev.subject,
        "time": datetime.fromtimestamp(ev.time_s, UTC).isoformat(timespec="milliseconds"),
        "datacontenttype": "application/json",
        "data": ev.data,
    }


def sign(key: bytes, body: bytes, t: int) -> str:
    """``t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>." + body>``: the time is signed too,
    so a receiver can refuse a replayed old request."""
    mac = hmac.new(key, f"{t}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={t},v1={mac}"


def verify(key: bytes, body: bytes, header: str, now: float, tolerance_s: float = 300.0) -> bool:
    """What a receiver checks (the tests do, and docs/operations.md shows it)."""
    parts = dict(p.split("=", 1) for p in header.split(",") if "=" in p)
    try:
        t = int(parts["t"])
    except (KeyError, ValueError):
        return False
    if abs(now - t) > tolerance_s:
        return False
    return hmac.compare_digest(sign(key, body, t), header)


def signing_key(ep: WebhookEndpoint) -> bytes | None:
    """The endpoint's key, its ``secret_file`` read at each call (a rotated file is taken
    up without a restart); ConfigError, one line, if the file cannot serve."""
    if ep.secret is not None:
        return ep.secret.get_secret_value().encode()
    if ep.secret_file is None:
        return None
    try:
        key = ep.secret_file.read_text().strip()
    except OSError as exc:
        raise ConfigError(f"webhooks: secret_file {ep.secret_file}: {exc.strerror}") from None
    if len(key) < 16 or any(c.isspace() for c in key):
        raise ConfigError(
            f"webhooks: secret_file {ep.secret_file}: holds no key of >= 16 characters "
            "(one line, no spaces)"
        )
    return key.encode()


def backoff(ep: WebhookEndpoint, attempts: int) -> float:
    """Delay after the ``attempts``-th failed attempt: backoff_s doubling, at most max_backoff_s."""
    return float(min(ep.max_backoff_s, ep.backoff_s * 2 ** (attempts - 1)))


class Webhooks:
    """Delivers the outbox to every configured endpoint, a pass each ``poll_interval_s``."""

    def __init__(
        self,
        settings: WebhookSettings,
        store: Store,
        registry: CollectorRegistry | None = None,
        *,
        clock: Callable[[], float] = time.time,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.settings = settings
        self.store = store
        self.clock = clock
        self._transport = transport
        self._pruned = 0.0
        self.sent = Counter(
            "sova_manager_webhook_posts_total",
            "webhook POSTs by endpoint and outcome (delivered, retry, given_up)",
            ["endpoint", "outcome"],
            registry=registry,
        )

    @classmethod
    def configured(
        cls, settings: WebhookSettings, store: Store, registry: CollectorRegistry | None
    ) -> Webhooks | None:
        """None without endpoints; else the store starts recording events."""
        if not settings.endpoints:
            return None
        for ep in settings.endpoints.values():
            signing_key(ep)  # an unreadable secret_file stops the start (ConfigError)
        store.outbox_endpoints = {
            name: frozenset(ep.kinds) for name, ep in settings.endpoints.items()
        }
        return cls(settings, store, registry)

    async def run(self) -> None:
        """Until cancelled. The leader's election is an event of its own (once per epoch)."""
        if self.store.fence is not None:
            try:
                await asyncio.to_thread(self.record_leader, self.store.fence)
            except Deposed:
                return
            except Exception as exc:  # an error here must not end the manager's other tasks
                log.error("recording the leader's election for the webhooks failed: %s", exc)
        async with self._client() as client:
            while True:
                try:
                    await self.deliver_due(client)
                    if self.clock() - self._pruned >= PRUNE_EVERY_S:
                        self._pruned = self.clock()
                        before = self._pruned - self.settings.max_age_s
                        await asyncio.to_thread(self.store.prune_events, before)
                except Deposed:
                    return  # the leadership is lost: the process is stepping down
                except Exception as exc:  # the store unreachable: the next pass tries again
                    log.error("webhook delivery pass failed: %s", exc)
                await asyncio.sleep(self.settings.poll_interval_s)

    def record_leader(self, epoch: int) -> bool:
        from sova.manager.daemons.service.leadership import read_leader

        row = read_leader(self.store)
        data = {"epoch": epoch, "holder": row.holder if row else "", "url": row.url if row else ""}
        return self.store.add_event(
            "leader.elected", self.clock(), f"epoch {epoch}", data, key=f"leader-{epoch}"
        )

    def _client(self) -> httpx.AsyncClient:
        # Imported where a delivery starts: the manager's service imports this module, and
        # an environment running the service in-process (Nova's, in the OpenStack tier)
        # need not carry httpx unless it configures webhooks.
        import httpx

        return httpx.AsyncClient(
            transport=self._transport,
            follow_redirects=False,  # a signed event goes where the operator said, only
            headers={"User-Agent": f"sova-manager/{__version__}"},
        )

    async def deliver_due(self, client: httpx.AsyncClient) -> int:
        """One pass over every endpoint (concurrently); returns the events delivered."""
        done = await asyncio.gather(
            *(self._endpoint(client, name, ep) for name, ep in self.settings.endpoints.items())
        )
        return sum(done)

    async def _endpoint(self, client: httpx.AsyncClient, name: str, ep: WebhookEndpoint) -> int:
        now = self.clock()
        events = await asyncio.to_thread(
            self.store.pending_events, name, now - self.settings.max_age_s, now, BATCH
        )
        delivered = 0
        for ev in events:
            if not await self._post(client, name, ep, ev):
                break  # the receiver is failing: its other events wait for the next pass
            delivered += 1
        return delivered

    async def _post(
        self, client: httpx.AsyncClient, name: str, ep: WebhookEndpoint, ev: Event
    ) -> bool:
        import httpx

        attempt = ev.attempts + 1
        retry_at = self.clock() + backoff(ep, attempt)
        # The claim: written (fenced) before the POST, so a deposed leader sends nothing
        # and a crash mid-POST is retried after the backoff, not at once.
        await asyncio.to_thread(
            self.store.mark_delivery, name, ev.id, attempts=attempt, next_s=retry_at
        )
        body = json.dumps(cloudevent(ev, self.settings.source), separators=(",", ":")).encode()
        headers = {"Content-Type": CONTENT_TYPE}
        try:
            key = signing_key(ep)
        except ConfigError as exc:
            error = str(exc)
        else:
            if key is not None:
                headers[SIGNATURE_HEADER] = sign(key, body, int(self.clock()))
            try:
                # httpx's timeout bounds each phase (connect, each read); wait_for bounds
                # the whole POST, so a receiver trickling its answer cannot hold the pass.
                r = await asyncio.wait_for(
                    client.post(ep.url, content=body, headers=headers, timeout=ep.timeout_s),
                    ep.timeout_s,
                )
            except TimeoutError:
                error = f"no answer within timeout_s = {ep.timeout_s:g} s"
            except httpx.HTTPError as exc:
                error = f"{type(exc).__name__}: {exc}"
            else:
                if r.is_success:
                    await asyncio.to_thread(
                        self.store.mark_delivery,
                        name,
                        ev.id,
                        attempts=attempt,
                        next_s=retry_at,
                        delivered_s=self.clock(),
                    )
                    self.sent.labels(name, "delivered").inc()
                    return True
                error = f"HTTP {r.status_code}"
        given_up = attempt >= ep.max_attempts
        await asyncio.to_thread(
            self.store.mark_delivery,
            name,
            ev.id,
            attempts=attempt,
            next_s=retry_at,
            given_up=given_up,
            error=error,
        )
        self.sent.labels(name, "given_up" if given_up else "retry").inc()
        (log.error if given_up else log.warning)(
            "webhook %s: event %d (%s) attempt %d/%d: %s%s",
            name,
            ev.id,
            ev.kind,
            attempt,
            ep.max_attempts,
            error,
            ": given up" if given_up else f": again in {retry_at - self.clock():.1f} s",
        )
        return False
