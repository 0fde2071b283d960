"""A hot host left as it is, as one state in a run's events (``hotspot`` when it starts,
``hotspot_end`` when it ends) rather than one event per host and round.

Apart from :mod:`sova.record` (the rows and the conversions into them): this is the one
piece of the events with state across rounds, kept by the worlds that write a manager's
decisions (the simulator and the demo's world).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from sova.record import EventRow, decision_event


def _stuck_kind(reason: str) -> str:
    for kind in ("no cold spot", "no VM", "held", "skipped"):
        if kind in reason:
            return kind
    return "no move"


@dataclasses.dataclass
class HotspotStates:
    """A hot host left as it is, round after round, as one state with a start and an end
    in the events (issue 36: a sixth of a fleet hot with no target wrote an event per host
    and period, 195 MB for an hour). A round's decision that moves nothing starts a state
    (its ``hotspot`` event, as before) unless the host is already in one for the same VM
    and cause; the state ends with a ``hotspot_end`` event when the host is no longer
    hot, moves a VM, or is refused for another cause, and at the end of the run."""

    policy: str
    # host -> ((vm, cause), since, rounds)
    open: dict[str, tuple[tuple[str, str], float, int]] = dataclasses.field(default_factory=dict)

    def _end(self, host: str, time_s: float, why: str) -> EventRow:
        (vm, kind), since, rounds = self.open.pop(host)
        detail = f"{kind} from {since:g} s to {time_s:g} s ({rounds} rounds); {why}"
        return EventRow(self.policy, round(time_s, 3), "hotspot_end", vm, host, "", detail)

    def round(
        self, time_s: float, decided: Sequence[tuple[str, bool, str | None, str | None, str]]
    ) -> tuple[list[int], list[EventRow]]:
        """``decided``: the round's decisions ``(host, flag, vm, target, reason)``. Returns
        which of them to write as events (positions) and the states they ended."""
        keep: list[int] = []
        ended: list[EventRow] = []
        seen: set[str] = set()
        for i, (host, flag, vm, target, reason) in enumerate(decided):
            seen.add(host)
            stuck = not flag and target is None
            key = (vm or "", _stuck_kind(reason))
            prior = self.open.get(host)
            if stuck and prior is not None and prior[0] == key:
                self.open[host] = (key, prior[1], prior[2] + 1)
                continue
            if prior is not None:
                ended.append(self._end(host, time_s, "then: " + reason.rsplit("; ", 1)[-1]))
            if stuck:
                self.open[host] = (key, time_s, 1)
            keep.append(i)
        for host in sorted(set(self.open) - seen):
            ended.append(self._end(host, time_s, "then: not hot"))
        return keep, ended

    def events(self, time_s: float, decided: Sequence[Mapping[str, Any]]) -> list[EventRow]:
        """A round's events: the states it ended, then the decisions it writes, worded by
        :func:`decision_event`. ``decided``: the round's decisions as records (host, flag,
        vm, target, reason, and ``inputs["utilisation"]``)."""
        keep, out = self.round(
            time_s,
            [
                (d["host"], bool(d["flag"]), d.get("vm"), d.get("target"), d["reason"])
                for d in decided
            ],
        )
        for i in keep:
            d = decided[i]
            out.append(
                decision_event(
                    self.policy,
                    time_s,
                    d["host"],
                    vm=d.get("vm"),
                    target=d.get("target"),
                    reason=d["reason"],
                    utilisation=d["inputs"]["utilisation"],
                )
            )
        return out

    def close(self, time_s: float) -> list[EventRow]:
        """The states still open when the run ends."""
        return [self._end(h, time_s, "open at the end of the run") for h in sorted(self.open)]
