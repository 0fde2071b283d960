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
class _Stuck:
    vm: str  # the VM the state started with (its ``hotspot`` event names it)
    kind: str
    since: float
    rounds: int = 1
    others: list[str] = dataclasses.field(default_factory=list)  # refused for too


@dataclasses.dataclass
class HotspotStates:
    """A hot host left as it is, round after round, as one state with a start and an end
    in the events (issue 36: a sixth of a fleet hot with no target wrote an event per host
    and period, 195 MB for an hour). A round's decision that moves nothing starts a state
    (its ``hotspot`` event, as before) unless the host is already in one for the same
    cause; the state ends with a ``hotspot_end`` event when the host is no longer hot,
    moves a VM, or is refused for another cause, and at the end of the run. Which VM was
    offered does not split the state: a host whose VMs carry about equal loads offers a
    different one as the jitter falls, and each refusal is the same condition of the host
    (the end names the others)."""

    policy: str
    open: dict[str, _Stuck] = dataclasses.field(default_factory=dict)

    def _end(self, host: str, time_s: float, why: str) -> EventRow:
        st = self.open.pop(host)
        also = f"; also refused for {', '.join(st.others)}" if st.others else ""
        detail = f"{st.kind} from {st.since:g} s to {time_s:g} s ({st.rounds} rounds{also}); {why}"
        return EventRow(self.policy, round(time_s, 3), "hotspot_end", st.vm, host, "", detail)

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
            kind = _stuck_kind(reason)
            prior = self.open.get(host)
            if stuck and prior is not None and prior.kind == kind:
                prior.rounds += 1
                if vm and vm != prior.vm and vm not in prior.others:
                    prior.others.append(vm)
                continue
            if prior is not None:
                ended.append(self._end(host, time_s, "then: " + reason.rsplit("; ", 1)[-1]))
            if stuck:
                self.open[host] = _Stuck(vm or "", kind, time_s)
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
