"""Fences that expire (issue 38, ``sova fence set … --until``): a fence may carry its end
(``until_s``, on the manager's clock like its ``since_s``); the first planning round at or
after it lifts the fence in the round's own write, with an audit row by ``sova`` saying it
expired, so the round plans without it and a restarted manager never restores it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, MutableMapping
from datetime import UTC, datetime

from sova.manager.daemons.logs import fields
from sova.manager.daemons.service.control import FENCE_KINDS
from sova.manager.daemons.service.store import AuditRow, FenceRow, RoundWrite

log = logging.getLogger("sova.manager")


def until_text(until_s: float) -> str:
    """A fence's end as operators read it: ISO 8601, UTC."""
    return datetime.fromtimestamp(until_s, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def fence_end(until_s: float | None, for_s: float | None, now: float) -> float | None:
    """A fence's end from a request (``until_s`` or ``for_s`` from ``now``); ValueError
    naming the field when it is already past."""
    if for_s is not None:
        return now + for_s
    if until_s is not None and until_s <= now:
        raise ValueError(
            f"until_s = {until_s:.0f} ({until_text(until_s)}): already past; the manager's "
            f"clock reads {now:.0f} ({until_text(now)})"
        )
    return until_s


def expire_fences(
    fences: MutableMapping[tuple[str, str], FenceRow],
    now: float,
    w: RoundWrite,
    sync: Callable[[], None],
) -> list[FenceRow]:
    """The fences (the operator desk's, by kind and name) whose end has come, lifted from
    memory and added to the round's write (cleared, with an audit row each), then ``sync``
    (the desk's: the core and the agents' lists follow); what was lifted."""
    gone = sorted(
        (f for f in fences.values() if f.until_s is not None and f.until_s <= now),
        key=lambda f: (f.kind, f.name),
    )
    for f in gone:
        assert f.until_s is not None
        w.fences_cleared.append((f.kind, f.name))
        why = f"expired at {until_text(f.until_s)} (set by {f.set_by})"
        w.audit.append(AuditRow(now, "sova", f"unfence:{f.kind}", f.name, why))
        fences.pop((f.kind, f.name), None)
        subject = FENCE_KINDS.get(f.kind, "host")
        log.warning("%s on %s %s", f.kind, f.name, why, extra=fields(**{subject: f.name}))
    if gone:
        sync()
    return gone
