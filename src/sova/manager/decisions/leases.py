"""How a migration lease ends, and what each end means for the hosts' detector windows
(:class:`sova.manager.decisions.core.ManagerCore` keeps the leases; the daemon's ledger records
their ends).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from sova.manager.decisions.pipeline import Lease


class EndReason(StrEnum):
    """Why a lease closed. Whether the hosts' windows restart follows from it
    (:attr:`LeaseEnd.moved`): only a migration that ran, or may have, changed the loads."""

    ARRIVED = "arrived"  # the VM showed up on its target
    RELEASED = "released"  # the source reported the migration's end (either way)
    DECLINED = "declined"  # the source never started it
    TIMEOUT = "timeout"  # nobody confirmed within lease_timeout_s
    STALE = "stale"  # the source went silent: nobody is left to report the end
    WITHDRAWN = "withdrawn"  # its directive was never acknowledged: it never started
    SUPERSEDED = "superseded"  # a newer store epoch's directive replaced it unapplied
    UNDONE = "undone"  # the round that opened it could not be persisted: not decided


# The ends after which the VM may have moved: both hosts' windows restart.
MOVED = frozenset({EndReason.ARRIVED, EndReason.RELEASED, EndReason.STALE})


@dataclass(frozen=True)
class LeaseEnd:
    """A lease that closed, and why."""

    lease: Lease
    why: EndReason

    @property
    def moved(self) -> bool:
        return self.why in MOVED
