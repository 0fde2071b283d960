"""Fleet controls at the operator's desk: drain a host, follow the drain, forget a host.

* **drain** is a fence (``drain`` on a host, persisted and audited like the others): the
  host is in maintenance — never a target — and each round the planner sends one of its VMs
  to the cold spot its own screening picks (:mod:`sova.manager.decisions.fleet`), under the same
  limits, anti-thrash rules, placement rules and mode as any move: autonomic → a directive,
  recommend → a plan per move. The drain stays when the host is empty (it is drained, in
  maintenance) until an operator cancels it;
* **status** is read from what the manager already holds: the host's last report (the VMs
  left), the leases (in flight), the migration log since the drain began (moves done or
  failed) and the last round's signal for the host (what it did, or why it is blocked);
* **forget** decommissions a host: its windows, reports, directive and state leave the
  manager's memory and the store (the audit log keeps who did it). Refused while anything
  could still depend on them: a migration from or to it, an open plan, or a host still
  reporting that is not fenced.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from pydantic import BaseModel, Field

from sova.manager.daemons.logs import fields
from sova.manager.daemons.service.ledger import Ledger
from sova.manager.daemons.service.operator import OperatorDesk
from sova.manager.daemons.service.rounds import Rounds
from sova.manager.daemons.service.state import ManagerState
from sova.manager.daemons.service.store import AuditRow, RoundWrite
from sova.manager.decisions.drain_preview import preview_drain
from sova.manager.decisions.fleet import DRAIN

log = logging.getLogger("sova.manager")


class HostUnknown(ValueError):
    """No host of this name has reported (HTTP 404)."""


class HostBusy(ValueError):
    """A host that may not be forgotten now; the message says why (HTTP 409)."""


class InFlight(BaseModel):
    vm: str
    dst: str


class DrainView(BaseModel):
    """A drain's progress (``sova host drain HOST --status``)."""

    host: str
    state: str = Field(description="not draining | draining | drained")
    set_by: str | None = None
    since_s: float | None = None
    remaining: list[str] = Field(default_factory=list, description="VMs in the host's last report")
    in_flight: list[InFlight] = Field(default_factory=list)
    moves_done: int = Field(default=0, description="migrations off it that succeeded")
    moves_failed: int = Field(default=0, description="migrations off it that did not")
    why: str = Field(default="", description="what the last round did for it, or why not")


class PreviewMove(BaseModel):
    vm: str | None = Field(description="the VM moved; null on a last line saying why no more")
    target: str | None = Field(description="where the planner would send it; null: nowhere")
    why: str


class DrainPreview(BaseModel):
    """The moves a drain would make (``sova host drain HOST --preview``); nothing proposed,
    fenced or recorded."""

    host: str
    draining: bool = Field(description="a drain of this host is already in force")
    moves: list[PreviewMove]


class Fleet:
    def __init__(
        self,
        st: ManagerState,
        ledger: Ledger,
        desk: OperatorDesk,
        rounds: Rounds,
        flush_reports: Callable[[], Awaitable[int]],
        drop_reports: Callable[[str], int],
    ):
        self.st = st
        self.ledger = ledger
        self.desk = desk
        self.rounds = rounds
        # Report rows are written behind: flushed before a forget deletes the host's.
        self.flush_reports = flush_reports
        self.drop_reports = drop_reports

    # ------------------------------------------------------------------ drain

    async def drain(self, host: str, by: str, reason: str) -> DrainView:
        known = self.st.tokens.keys()  # a TokenBook, not a dict: the hosts with a token
        if host not in self.st.hosts and host not in known:
            raise HostUnknown(f"no host {host}")
        bound = self.st.settings.max_fences_per_kind
        held = self.desk.ops.names("drain")
        if host not in held and len(held) >= bound:
            raise ValueError(f"drain: at most max_fences_per_kind = {bound} hosts drain at once")
        await self.desk.set_fence("drain", host, by, reason)
        return await self.status(host)

    async def cancel(self, host: str, by: str, reason: str) -> DrainView:
        await self.desk.clear_fence("drain", host, by, reason)
        await self.desk.end_drain_plans(host)
        return await self.status(host)

    async def status(self, host: str) -> DrainView:
        fence = self.desk.ops.fences.get(("drain", host))
        if fence is None:
            return DrainView(host=host, state="not draining")
        hs = self.st.hosts.get(host)
        remaining = sorted(hs.vms) if hs is not None else []
        in_flight = [
            InFlight(vm=lease.vm, dst=lease.dst)
            for lease in sorted(self.st.core.leases.values(), key=lambda x: x.vm)
            if lease.src == host
        ]
        loop = asyncio.get_running_loop()
        rows = await loop.run_in_executor(None, self.st.store.migration_rows)
        since = fence.since_s
        ended = [
            m
            for m in rows
            if m["src"] == host and m["started_s"] >= since and m["ended_s"] is not None
        ]
        done = sum(1 for m in ended if m["result"] == "succeeded")
        _, why = self.rounds.verdicts.get(host, (False, ""))
        # Every round after the drain began says what it did for the host (a drain reason).
        why = why[why.find(DRAIN) :] if DRAIN in why else "not planned since the drain began"
        plan = self.desk.ops.open_for(host)
        if plan is not None:
            why = f"{why} (plan {plan.id} awaiting approval: move {plan.vm} to {plan.dst})"
        return DrainView(
            host=host,
            state="drained" if hs is not None and not remaining and not in_flight else "draining",
            set_by=fence.set_by,
            since_s=since,
            remaining=remaining,
            in_flight=in_flight,
            moves_done=done,
            moves_failed=len(ended) - done,
            why=why,
        )

    async def preview(self, host: str) -> DrainPreview:
        """The moves a drain of ``host`` would make now, in order, each as the round's drain
        stage would pick it (:func:`sova.manager.decisions.drain_preview.preview_drain`): under the round lock, so
        no round sees the drain fence it sets for the while; nothing is written."""
        known = self.st.tokens.keys()
        if host not in self.st.hosts and host not in known:
            raise HostUnknown(f"no host {host}")
        lock, _ = self.st.primitives()
        async with lock:
            moves = preview_drain(self.st.core, host, self.st.now())
        return DrainPreview(
            host=host,
            draining=("drain", host) in self.desk.ops.fences,
            moves=[PreviewMove(vm=vm, target=dst, why=why) for vm, dst, why in moves],
        )

    # ------------------------------------------------------------------ forget

    def busy(self, host: str) -> str | None:
        """Why ``host`` may not be forgotten now, or None."""
        st, core = self.st, self.st.core
        if host not in st.hosts and host not in core.history:
            raise HostUnknown(f"no host {host} is known")
        moving = sorted(
            lease.vm for lease in core.leases.values() if host in (lease.src, lease.dst)
        )
        if moving:
            return f"{host} takes part in a migration ({', '.join(moving)}): wait for its end"
        plan = self.desk.ops.open_for(host) or next(
            (p for p in self.desk.ops.open_plans.values() if p.dst == host), None
        )
        if plan is not None:
            return f"plan {plan.id} names {host}: reject it or let it expire first"
        # Only a silent host: a live one's next report brings it back, without the fences
        # forgetting clears (a fenced host would return unfenced).
        if host not in core.stale(st.now()):
            return f"{host} is live (it still reports): stop its agent until it is stale"
        return None

    async def forget(self, host: str, by: str, reason: str) -> None:
        st = self.st
        lock, _ = st.primitives()
        async with lock:  # never in the middle of a round
            why = self.busy(host)
            if why is not None:
                raise HostBusy(f"cannot forget {host}: {why}")
            now = st.now()
            fences = [k for (k, n) in self.desk.ops.fences if n == host]
            await st.writer.write(
                RoundWrite(
                    fences_cleared=[(k, host) for k in fences],
                    audit=[AuditRow(now, by, "forget", host, reason)],
                )
            )
            await self.flush_reports()
            await st.writer.run(st.store.forget_host, host)
            # Rows buffered since the flush (the host reported meanwhile) would be written
            # after forget_host and bring it back at the next restart: dropped, in the same
            # step as the memory (no await in between).
            self.drop_reports(host)
            st.core.forget(host)
            st.hosts.pop(host, None)
            st.planned_seq.pop(host, None)
            self.ledger.directives.pop(host, None)
            self.rounds.verdicts.pop(host, None)
            for k in fences:
                self.desk.ops.fences.pop((k, host), None)
            self.desk.sync_fences()
            st.count_hosts(now)
        log.warning(
            "%s forgot host %s%s",
            by,
            host,
            f" ({reason})" if reason else "",
            extra=fields(host=host),
        )
