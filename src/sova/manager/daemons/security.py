"""Secure defaults: who may talk to the manager, and what it refuses to expose.

* **Exposure**: a manager bound to anything but loopback serves the cluster's decision log
  and every host's load. It refuses to start there without an operator (admin) token *and*
  TLS, unless the operator writes ``insecure = true`` — and then it says so, loudly, on
  every start (as Kubernetes components do for ``--insecure-port``).
* **Token hashes**: the manager keeps SHA-256 digests of tokens, never the tokens; the tokens
  file may hold ``"sha256:<hex>"`` digests instead of tokens, so a leaked file (or a core
  dump) leaks nothing an agent could use. Comparison is constant-time.
* **Rotation**: :meth:`TokenBook.load` is called again on SIGHUP; a file that does not load
  leaves the old tokens in force (and says why).
* **Agents** warn about a plain-http manager URL (tokens would cross the network in clear)
  and about a token file other users can read.

``python -m sova.manager.daemons.security hash TOKEN`` prints the digest line for a file.
"""

from __future__ import annotations

import hashlib
import ipaddress
import stat
import sys
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from sova.manager.daemons.config import AgentSettings, ConfigError, ManagerSettings, read_toml
from sova.manager.daemons.credentials import (
    HASH_PREFIX,
    Credential,
    CredentialError,
    OperatorCredentials,
    matches,
    parse_operators,
    secret_digest,
)

ADMIN_NAME = "admin"  # the credential the single admin_token setting stands for


def digest(token: str) -> bytes:
    """The digest a token is kept as (a ``sha256:<hex>`` entry is one already)."""
    try:
        return secret_digest(
            token, f"token {token[:12]}…" if token.startswith(HASH_PREFIX) else "token"
        )
    except CredentialError as exc:
        raise ConfigError(str(exc)) from None


@dataclass
class TokenBook:
    """Digests of the hosts' tokens (several per host while one is rotated) and the
    operators' named credentials (:mod:`sova.manager.daemons.credentials`)."""

    hosts: dict[str, tuple[bytes, ...]] = field(default_factory=dict)
    operators: OperatorCredentials = field(default_factory=lambda: OperatorCredentials({}))
    admin: bytes | None = None  # the admin_token setting's digest (also in operators)

    @classmethod
    def load(cls, settings: ManagerSettings) -> TokenBook:
        """Every secret the manager accepts; ConfigError (naming the entry) if one is
        unusable — then a SIGHUP reload keeps the old book in force."""
        for what, path in (
            ("tokens_file", settings.tokens_file),
            ("operators_file", settings.operators_file),
        ):
            if path is not None and _world_writable(path):
                # Anyone on the host could make themselves admin (sshd's StrictModes).
                raise ConfigError(
                    f"{what} {path} is world-writable: anyone on this host could add a "
                    "credential; chmod 600 it"
                )
        try:
            hosts = {
                h: tuple(secret_digest(t, f"host {h} token") for t in ts)
                for h, ts in settings.tokens().items()
            }
            host_of = {d: h for h, ds in hosts.items() for d in ds}
            entries: dict[str, tuple[str, tuple[bytes, ...]]] = {}
            admin = None
            if settings.admin_token is not None:
                admin = secret_digest(settings.admin_token.get_secret_value(), "admin_token")
                if admin in host_of:
                    raise ConfigError(
                        f"admin_token: host {host_of[admin]}'s token; the admin needs a "
                        "secret of its own"
                    )
                entries[ADMIN_NAME] = ("admin", (admin,))
            if settings.operators_file is not None:
                data = read_toml(settings.operators_file, "operators_file")
                source = f"operators_file {settings.operators_file}"
                for name, entry in parse_operators(data, source).items():
                    if name.lower() == ADMIN_NAME and admin is not None:
                        raise ConfigError(
                            f"{source}: {name}: the name of the admin_token setting's credential"
                        )
                    for i, d in enumerate(entry[1]):
                        if d in host_of:
                            # A compromised agent would act as an operator with its token.
                            raise ConfigError(
                                f"{source}: {name}.tokens[{i}]: host {host_of[d]}'s token; "
                                "an operator needs a secret of its own"
                            )
                    entries[name] = entry
        except CredentialError as exc:
            raise ConfigError(str(exc)) from None
        return cls(hosts, OperatorCredentials(entries), admin)

    def keys(self) -> set[str]:
        return set(self.hosts)

    def check_host(self, host: str, presented: bytes | None) -> bool:
        expected = self.hosts.get(host)
        if expected is None:
            return False
        return matches(expected, presented)

    def operator(self, presented: bytes | None) -> Credential | None:
        return self.operators.identify(presented)


def is_loopback(host: str) -> bool:
    if host in ("localhost", "localhost.localdomain"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _world_writable(path: Path) -> bool:
    try:
        return bool(path.stat().st_mode & stat.S_IWOTH)
    except OSError:
        return False


def _world_readable(path: Path) -> bool:
    try:
        return bool(path.stat().st_mode & (stat.S_IROTH | stat.S_IWOTH))
    except OSError:
        return False


def exposure_check(settings: ManagerSettings) -> list[str]:
    """Refuse an exposed manager without a token and TLS; the warnings to log otherwise."""
    warnings: list[str] = []
    exposed = not is_loopback(settings.listen)
    missing = [
        what
        for what, ok in (
            (
                "an operator credential (admin_token or operators_file)",
                settings.admin_token is not None or settings.operators_file is not None,
            ),
            ("TLS (tls_certfile, tls_keyfile)", settings.tls_certfile is not None),
        )
        if not ok
    ]
    if exposed and missing:
        if not settings.insecure:
            raise ConfigError(
                f"listen = {settings.listen!r} is reachable from the network but "
                f"{' and '.join(missing)} is not set; set it, listen on 127.0.0.1, or "
                "set insecure = true to accept an open manager"
            )
        warnings.append(
            f"INSECURE: listening on {settings.listen} without {' and '.join(missing)} "
            "(insecure = true): anyone who can reach it reads the cluster's state"
        )
    if settings.admin_token is None and settings.operators_file is None:
        if settings.insecure:
            warnings.append(
                "INSECURE: no operator credential and insecure = true: anyone who can "
                "connect may fence hosts, approve plans, change the mode and read /metrics"
            )
        else:
            warnings.append(
                "no operator credential (admin_token or operators_file): operator routes "
                "and /metrics answer 401 to everyone (set one, or insecure = true)"
            )
    elif settings.insecure:
        warnings.append("insecure = true (operator credentials are still required where set)")
    for what, path in (
        ("tokens_file", settings.tokens_file),
        ("operators_file", settings.operators_file),
    ):
        if path is not None and _world_readable(path):
            warnings.append(
                f"{what} {path} is world-readable: chmod 600 it (or store sha256: digests in it)"
            )
    return warnings


def agent_warnings(settings: AgentSettings) -> list[str]:
    out: list[str] = []
    for url in settings.manager_url_list():
        parts = urlsplit(url)
        if parts.scheme == "http" and not is_loopback(parts.hostname or ""):
            out.append(
                f"manager_url {url} is plain http: the host's token and reports cross the "
                "network unencrypted; use https:// (the manager's TLS) and ca_file"
            )
    if settings.token_file is not None and _world_readable(settings.token_file):
        out.append(f"token_file {settings.token_file} is world-readable: chmod 600 it")
    return out


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2 or args[0] != "hash":
        print("usage: python -m sova.manager.daemons.security hash TOKEN", file=sys.stderr)
        return 2
    print(f'"{HASH_PREFIX}{hashlib.sha256(args[1].encode()).hexdigest()}"')
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
