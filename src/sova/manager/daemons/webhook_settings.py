"""The manager's ``[webhooks]`` settings: endpoints an operator names, what each receives
(docs/operations.md#webhooks). Delivery is :mod:`sova.manager.daemons.service.webhooks`."""

from __future__ import annotations

import ipaddress
from pathlib import Path
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from sova.manager.daemons.event_kinds import EVENT_KINDS


class WebhookEndpoint(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    url: str = Field(description="https, or http to a loopback receiver")
    secret: SecretStr | None = Field(
        default=None, min_length=16, description="HMAC-SHA256 signing key (Sova-Signature)"
    )
    secret_file: Path | None = Field(
        default=None, description="a file holding the signing key (one line), instead of secret"
    )
    kinds: list[str] = Field(default_factory=list, description="event kinds sent; empty: all")
    timeout_s: float = Field(default=5.0, gt=0, le=60, description="each POST's deadline")
    max_attempts: int = Field(default=10, ge=1, le=1000, description="then the event is given up")
    backoff_s: float = Field(
        default=2.0, gt=0, le=3600, description="first retry's delay, doubling"
    )
    max_backoff_s: float = Field(default=300.0, gt=0, le=86400, description="longest retry delay")

    @field_validator("url")
    @classmethod
    def _https_or_loopback(cls, url: str) -> str:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"url {url!r} is not an http(s) URL with a host")
        if parts.scheme == "http" and not _loopback(parts.hostname):
            raise ValueError(
                f"url {url!r}: plain http only to a loopback receiver (127.0.0.1, ::1, "
                "localhost); use https"
            )
        return url

    @field_validator("kinds")
    @classmethod
    def _known_kinds(cls, kinds: list[str]) -> list[str]:
        for k in kinds:
            if k not in EVENT_KINDS:
                raise ValueError(f"kinds: {k!r} is not an event kind ({', '.join(EVENT_KINDS)})")
        return kinds

    @model_validator(mode="after")
    def _one_secret(self) -> WebhookEndpoint:
        if self.secret is not None and self.secret_file is not None:
            raise ValueError("secret and secret_file: set one, not both")
        return self


class WebhookSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    source: str = Field(
        default="urn:sova:manager",
        min_length=1,
        max_length=200,
        description="the CloudEvents source of every event (name the cluster)",
    )
    poll_interval_s: float = Field(default=1.0, gt=0, le=60, description="outbox polled this often")
    max_age_s: float = Field(
        default=86400.0, ge=60, description="an event older than this is no longer sent"
    )
    endpoints: dict[str, WebhookEndpoint] = Field(default_factory=dict)

    @field_validator("endpoints")
    @classmethod
    def _names(cls, eps: dict[str, WebhookEndpoint]) -> dict[str, WebhookEndpoint]:
        for name in eps:
            if not (0 < len(name) <= 64) or not all(c.isalnum() or c in "-_." for c in name):
                raise ValueError(
                    f"endpoint name {name!r}: letters, digits, '-', '_', '.' (at most 64)"
                )
        return eps


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
