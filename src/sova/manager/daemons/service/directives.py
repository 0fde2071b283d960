"""Directives: the manager's migration signals, delivered at least once, applied at most once.

A flagged directive is repeated in every response to its host until the host acknowledges
it (``ack`` in a report, i.e. ``d`` on the wire), and the agent applies each id at most once,
so a lost response neither loses nor duplicates a migration. A directive its host never
acknowledges is withdrawn after a time to live, so a dead agent cannot pin a target.

This book holds the newest directive of each host; the service persists every change.
"""

from __future__ import annotations

from collections.abc import Set
from dataclasses import replace

from sova.manager.daemons.schema import Directive
from sova.manager.daemons.service.store import DirectiveRow


class DirectiveBook(dict[str, DirectiveRow]):
    """host -> its newest directive row (acknowledged or not)."""

    def view(self, host: str) -> Directive:
        """What the host is told: the flag only while the directive is unacknowledged."""
        dr = self.get(host)
        if dr is None:
            return Directive(id=0, flag=False)
        if dr.acked or not dr.flag:
            return Directive(id=dr.id, flag=False)
        return Directive(id=dr.id, flag=True, target=dr.target, vm=dr.vm)

    def ack(self, host: str, did: int) -> DirectiveRow | None:
        """The host applied every directive up to ``did``; returns the row it settled.

        An ack from an older store epoch settles nothing (the agent has not seen this
        store's directive yet); one from a newer epoch settles the row although it was
        never applied — the caller withdraws it (see ``epoch_of``).
        """
        dr = self.get(host)
        if dr is None or dr.acked or did < dr.id:
            return None
        self[host] = replace(dr, acked=True)
        return dr

    def settle(self, host: str, did: int) -> bool:
        """Mark exactly directive ``did`` of ``host`` done (its migration ended)."""
        dr = self.get(host)
        if dr is None or dr.id != did or dr.acked:
            return False
        self[host] = replace(dr, acked=True)
        return True

    def overdue(self, now: float, ttl_s: float, gone: Set[str] = frozenset()) -> list[DirectiveRow]:
        """Flagged, unacknowledged directives older than ``ttl_s`` or to a host in ``gone``
        (stale: nobody is there to apply it), withdrawn here."""
        out = []
        for host, dr in sorted(self.items()):
            if dr.flag and not dr.acked and (now - dr.issued_s > ttl_s or host in gone):
                self[host] = replace(dr, acked=True)
                out.append(dr)
        return out
