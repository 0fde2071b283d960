"""Named operator credentials with roles: who may read, who may act, who manages tokens.

Kept as small as Kubernetes' static token file with RBAC's three default roles, or an
OpenStack policy with reader/member/admin:

* ``viewer`` reads (every GET under ``/v1`` and ``/metrics``);
* ``operator`` also changes: fences, plans, modes;
* ``admin`` also manages credentials (``POST /v1/credentials/reload``).

A credential is a *name* (the audit log's "who"; a ``by`` the client sends only annotates
it), a role, and one or more secrets, so a new token can be handed out before the old one is
withdrawn. The file (``operators_file``, TOML, re-read on SIGHUP like the host tokens)::

    [alice]
    role = "operator"
    tokens = ["sha256:<hex>", "sha256:<hex of the next one>"]

    [prometheus]
    role = "viewer"
    tokens = ["sha256:<hex>"]

Secrets are kept as SHA-256 digests (a file may hold the digests only) and compared with
:func:`hmac.compare_digest`. A plain secret shorter than :data:`MIN_SECRET` characters is
refused wherever one is read: an empty ``SOVA_MANAGER_ADMIN_TOKEN=`` must not open the API.
The single ``admin_token`` setting stays: it is the credential ``admin`` with role admin.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

ROLES = ("viewer", "operator", "admin")
RESERVED_NAMES = frozenset({"sova", "anonymous"})
MIN_SECRET = 16
HASH_PREFIX = "sha256:"
# Credential names go into the audit log and the journal: printable, no spaces or controls.
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}$")


class CredentialError(ValueError):
    """A secret or credentials file that cannot be used (the message names it)."""


def secret_digest(secret: str, what: str) -> bytes:
    """The digest ``secret`` is kept as; ``sha256:<hex>`` is one already.

    Refuses an empty or short plain secret, and a malformed digest, naming ``what``.
    """
    if secret.startswith(HASH_PREFIX):
        raw = secret[len(HASH_PREFIX) :]
        try:
            out = bytes.fromhex(raw)
        except ValueError:
            out = b""
        if len(out) != 32:
            raise CredentialError(f"{what}: not a sha256:<64 hex digits> digest")
        return out
    if len(secret) < MIN_SECRET:
        raise CredentialError(
            f"{what}: a secret must be at least {MIN_SECRET} characters "
            f"(got {len(secret)}); generate one with "
            "python -c 'import secrets; print(secrets.token_urlsafe(32))'"
        )
    if secret != secret.strip() or any(ord(c) < 0x21 or ord(c) == 0x7F for c in secret):
        raise CredentialError(f"{what}: a secret has no spaces or control characters")
    return hashlib.sha256(secret.encode()).digest()


def matches(digests: Iterable[bytes], presented: bytes | None) -> bool:
    """Whether ``presented`` is one of the secrets behind ``digests`` (constant time each)."""
    if not presented:
        return False
    got = hashlib.sha256(presented).digest()
    found = False
    for d in digests:
        found |= hmac.compare_digest(d, got)  # no early exit: every digest is compared
    return found


@dataclass(frozen=True)
class Credential:
    name: str
    role: str

    def may(self, role: str) -> bool:
        return ROLES.index(self.role) >= ROLES.index(role)


@dataclass(frozen=True)
class OperatorCredentials:
    """Every operator credential: name -> (role, digests)."""

    entries: Mapping[str, tuple[str, tuple[bytes, ...]]]

    def __len__(self) -> int:
        return len(self.entries)

    def identify(self, presented: bytes | None) -> Credential | None:
        """The credential ``presented`` belongs to, or None."""
        hit: Credential | None = None
        for name, (role, digests) in self.entries.items():
            if matches(digests, presented) and hit is None:
                hit = Credential(name, role)
        return hit

    def names(self) -> dict[str, str]:
        return {n: r for n, (r, _) in sorted(self.entries.items())}


def parse_operators(
    data: Mapping[str, Any], source: str
) -> dict[str, tuple[str, tuple[bytes, ...]]]:
    """``[name] role = ..., tokens = [...]`` tables into name -> (role, digests)."""
    out: dict[str, tuple[str, tuple[bytes, ...]]] = {}
    seen: dict[bytes, str] = {}
    folded: dict[str, str] = {}
    for name, entry in data.items():
        where = f"{source}: {name}"
        if not NAME_RE.match(name):
            raise CredentialError(
                f"{where}: a credential name is 1-64 letters, digits, '_', '.', '@', '-'"
            )
        if name.lower() in folded:
            # "Admin" beside "admin": one person to a reader of the audit log, two roles.
            raise CredentialError(f"{where}: differs from {folded[name.lower()]} only in case")
        folded[name.lower()] = name
        if name.lower() in RESERVED_NAMES:
            raise CredentialError(f"{where}: reserved (the audit's name for the manager itself)")
        if not isinstance(entry, Mapping):
            raise CredentialError(f"{where}: a table with role and tokens")
        unknown = set(entry) - {"role", "tokens"}
        if unknown:
            raise CredentialError(f"{where}.{sorted(unknown)[0]}: unknown setting")
        role = entry.get("role")
        if role not in ROLES:
            raise CredentialError(f"{where}.role = {role!r}: one of {', '.join(ROLES)}")
        tokens = entry.get("tokens")
        if not isinstance(tokens, list) or not tokens:
            raise CredentialError(f"{where}.tokens: a non-empty list of secrets or digests")
        digests = []
        for i, t in enumerate(tokens):
            if not isinstance(t, str):
                raise CredentialError(f"{where}.tokens[{i}]: a string")
            d = secret_digest(t, f"{where}.tokens[{i}]")
            if d in seen and seen[d] != name:
                # One secret, two names: the audit could not say who acted.
                raise CredentialError(f"{where}.tokens[{i}]: the same secret as {seen[d]}'s")
            seen[d] = name
            digests.append(d)
        out[name] = (role, tuple(digests))
    return out
