"""Where the operator CLI finds its managers: the client config file, and how the CLI trusts
a TLS manager (docs/operations.md#the-client-config).

One file holds what an operator would otherwise repeat on every command, as a kubeconfig
or clouds.yaml does::

    # ~/.config/sova/client.toml (or $SOVA_CLIENT_CONFIG, or --client-config FILE)
    managers = ["https://mgr-a:8700", "https://mgr-b:8700"]
    cacert = "/etc/sova/ca.pem"          # the CA that signed the managers' certificates
    token_file = "~/.config/sova/token"  # the token, or the manager's env file
    operator = "alice"                   # --by
    timeout_s = 10
    [groups]                             # named host lists: sova fence set maintenance @rack7
    rack7 = ["hv012", "hv013", "hv014"]

Relative paths are read from the file's directory. A command-line option wins over its
environment variable, which wins over the file. Every mistake in the file is one line
naming the file, the field and the value, and exit code 2.
"""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

if TYPE_CHECKING:
    import ssl

CONFIG_ENV = "SOVA_CLIENT_CONFIG"
# Production managers serve TLS (docs/deployment.md): a URL without a scheme is https.
DEFAULT_SCHEME = "https"
DEFAULT_URL = "https://127.0.0.1:8700"
GROUP_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
MEMBER = re.compile(r"[^\x00-\x20\x7f/@]{1,64}")


class ClientConfigError(ValueError):
    """One line for the operator: the file, the field and the value."""


def default_config_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "sova" / "client.toml"


def with_scheme(url: str) -> str:
    """``mgr-a:8700`` as ``https://mgr-a:8700``; a URL with a scheme as it is."""
    url = url.strip()
    return url if "://" in url else f"{DEFAULT_SCHEME}://{url}"


def url_problem(url: str) -> str | None:
    """Why ``url`` is not a manager's base URL, or None."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (raises on a port that is not a number or out of range)
    except ValueError as exc:
        return f"not a URL ({exc})"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "must be https://HOST[:PORT] (or http:// for a manager without TLS)"
    return None


class ClientConfig(BaseModel):
    """The client config file's fields."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    managers: list[str] = Field(default_factory=list, max_length=32)
    cacert: Path | None = None
    token_file: Path | None = None
    operator: str | None = Field(
        default=None, min_length=1, max_length=128, pattern=r"^[^\x00-\x1f\x7f]+$"
    )
    timeout_s: float = Field(default=10.0, ge=0.1, le=600)
    # named lists of hosts (or VMs) that the fence commands take as @NAME
    groups: dict[str, list[str]] = Field(default_factory=dict, max_length=1000)

    @field_validator("groups")
    @classmethod
    def _groups(cls, v: dict[str, list[str]]) -> dict[str, list[str]]:
        for name, members in v.items():
            if not GROUP_NAME.fullmatch(name):
                raise ValueError(
                    f"groups.{name} = {members!r}: a group's name is letters, digits, '.', '_', '-'"
                )
            if not members or len(members) > 10_000:
                raise ValueError(f"groups.{name} = {members!r}: one to 10000 names")
            bad = next((m for m in members if not MEMBER.fullmatch(m)), None)
            if bad is not None:
                raise ValueError(
                    f"groups.{name}[{members.index(bad)}] = {bad!r}: not a host or VM name"
                )
        return v

    @field_validator("managers", mode="before")
    @classmethod
    def _one_or_many(cls, v: Any) -> Any:
        return [u for u in v.split(",") if u.strip()] if isinstance(v, str) else v

    @field_validator("managers")
    @classmethod
    def _urls(cls, v: list[str]) -> list[str]:
        out = []
        for i, url in enumerate(v):
            full = with_scheme(url)
            why = url_problem(full)
            if why:
                raise ValueError(f"managers[{i}] = {url!r}: {why}")
            out.append(full.rstrip("/"))
        return out


def _field_error(path: Path, exc: ValidationError) -> str:
    err = exc.errors()[0]
    field = ".".join(str(p) for p in err["loc"]) or "(file)"
    msg = str(err["msg"]).removeprefix("Value error, ")
    if msg.startswith((f"{field}[", f"{field}.")):  # the validator named the item and value
        return f"{path}: {msg}"
    if err["type"] == "extra_forbidden":
        return f"{path}: {field}: unknown field (fields: {', '.join(ClientConfig.model_fields)})"
    return f"{path}: {field} = {err.get('input')!r}: {msg}"


def load_client_config(explicit: Path | None) -> tuple[ClientConfig, Path | None]:
    """The config from ``explicit``, else ``$SOVA_CLIENT_CONFIG``, else the default path
    (absent: an empty config). Paths in it are made absolute from the file's directory."""
    named = explicit or (Path(os.environ[CONFIG_ENV]) if os.environ.get(CONFIG_ENV) else None)
    path = (named or default_config_path()).expanduser()
    if named is None and not path.exists():
        return ClientConfig(), None
    try:
        raw = tomllib.loads(path.read_bytes().decode("utf-8"))
    except OSError as exc:
        raise ClientConfigError(f"client config {path}: cannot read it: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise ClientConfigError(f"client config {path}: not UTF-8 (byte {exc.start})") from None
    except tomllib.TOMLDecodeError as exc:
        raise ClientConfigError(f"client config {path}: not TOML: {exc}") from None
    try:
        cfg = ClientConfig.model_validate(raw)
    except ValidationError as exc:
        raise ClientConfigError(_field_error(path, exc)) from None
    fixed: dict[str, Any] = {}
    for name in ("cacert", "token_file"):
        value = getattr(cfg, name)
        if value is not None:
            full = (path.parent / value.expanduser()).resolve()
            if not full.is_file():
                raise ClientConfigError(f"{path}: {name} = {str(value)!r}: no such file")
            fixed[name] = full
    return cfg.model_copy(update=fixed), path


def tls_context(cacert: Path | None, source: str) -> ssl.SSLContext | bool:
    """How to check a manager's certificate: the system's CAs, or only ``cacert``'s
    (a private CA, or a self-signed certificate itself)."""
    if cacert is None:
        return True
    import ssl  # here: `sova simulate` registers this command but loads no TLS (~6 MiB)

    try:
        return ssl.create_default_context(cafile=str(cacert))
    except FileNotFoundError:
        raise ClientConfigError(f"{source} {str(cacert)!r}: no such file") from None
    except (ssl.SSLError, OSError) as exc:
        raise ClientConfigError(
            f"{source} {str(cacert)!r}: not a PEM certificate ({exc.__class__.__name__})"
        ) from None


def tls_hint(error: str, url: str) -> str:
    """What to do about a failed TLS connection, from the error's text."""
    if "CERTIFICATE_VERIFY_FAILED" in error:
        return (
            "; the manager's certificate is not signed by a CA this client trusts: give "
            f"--cacert FILE (or cacert in {default_config_path()})"
        )
    if url.startswith("https:") and ("WRONG_VERSION_NUMBER" in error or "record layer" in error):
        return "; it does not speak TLS: give --manager-url http://... for a manager without TLS"
    if url.startswith("http:") and ("Server disconnected" in error or "RemoteProtocol" in error):
        return "; a TLS manager closes plain HTTP: give --manager-url https://..."
    return ""
