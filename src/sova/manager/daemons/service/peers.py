"""Peers agree or say so (issue 37, Medium 1 and 2): what a leader publishes for its
standbys through the store, and how a standby compares it with its own configuration.

* **Credentials**: the leader publishes its operator book (names, roles and the SHA-256
  digests of the secrets — what an operators file may hold itself; never a secret) at
  its start and after every reload (``POST /v1/credentials/reload``, SIGHUP, the operators
  or tokens file changing on disk). A standby reads the generation every poll and, when
  it moves, authorizes operators with the leader's book from then on: a credential the
  leader revoked is refused by every standby within one poll.
* **Digest**: every safety-relevant setting (the mode, the planner's rules, the lease,
  the period...) and the credential and host-token sets, each as a short hash of its
  value. A standby whose own digest differs names the settings (a log line when the set
  changes, ``sova_manager_config_differs{setting}``, ``/readyz``), so ``sova status``
  fails before a takeover would make the standby's configuration the cluster's.

Why the standby follows the leader's credentials rather than its own file, and why a
differing setting is reported rather than refused: docs/design.md, "Peers agree or say so".
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from typing import Any

from sova.manager.daemons.config import ManagerSettings
from sova.manager.daemons.credentials import ROLES, OperatorCredentials
from sova.manager.daemons.security import TokenBook

# Settings whose difference between peers changes what the cluster does after a takeover.
# Connection limits, ports, log levels and the like may differ between hosts; these may not.
SAFETY_SETTINGS = (
    "mode",
    "host_modes",
    "plan_period_s",
    "plan_trigger",
    "clock",
    "plan_ttl_s",
    "leader_lease_s",
    "max_clock_skew_s",
    "max_fences_per_kind",
    "insecure",
    "placement",
)

# How often a leader looks at its credentials files (a stat each): well inside a heartbeat.
CREDENTIAL_PULSE_S = 0.5


def credential_files(settings: ManagerSettings) -> tuple[tuple[int, int, int] | None, ...]:
    """(inode, size, mtime in ns) of the operators and tokens files, None where absent: a
    change is a file edited, replaced or removed."""
    out: list[tuple[int, int, int] | None] = []
    for path in (settings.operators_file, settings.tokens_file):
        try:
            st = os.stat(path) if path is not None else None
        except OSError:
            st = None
        out.append(None if st is None else (st.st_ino, st.st_size, st.st_mtime_ns))
    return tuple(out)


def _hash(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def book_json(book: OperatorCredentials) -> dict[str, Any]:
    """The operator book as stored: name -> [role, [hex digests]]."""
    return {n: [r, sorted(d.hex() for d in ds)] for n, (r, ds) in sorted(book.entries.items())}


def book_from_json(data: Mapping[str, Any]) -> OperatorCredentials:
    """The book :func:`book_json` stored; an entry that is not one is left out (a reader
    does not trust the store more than a file)."""
    entries: dict[str, tuple[str, tuple[bytes, ...]]] = {}
    for name, value in data.items():
        try:
            role, digests = value
            raw = tuple(bytes.fromhex(d) for d in digests)
        except (TypeError, ValueError):
            continue
        if role in ROLES and raw and all(len(d) == 32 for d in raw):
            entries[str(name)] = (str(role), raw)
    return OperatorCredentials(entries)


def settings_digest(settings: ManagerSettings, tokens: TokenBook) -> dict[str, str]:
    """Setting -> a 16-hex-digit hash of its value, for every safety-relevant setting,
    each planner rule, the operator credentials and the host tokens."""
    dumped = settings.model_dump(mode="json")
    out = {name: _hash(dumped.get(name)) for name in SAFETY_SETTINGS}
    for name, value in sorted(dumped.get("planner", {}).items()):
        out[f"planner.{name}"] = _hash(value)
    out["operators"] = _hash(book_json(tokens.operators))
    out["host_tokens"] = _hash({h: sorted(d.hex() for d in ds) for h, ds in tokens.hosts.items()})
    return out


def differing(mine: Mapping[str, str], leaders: Mapping[str, str]) -> list[str]:
    """The settings whose hashes differ (or that one side does not publish), sorted."""
    return sorted(k for k in set(mine) | set(leaders) if mine.get(k) != leaders.get(k))
