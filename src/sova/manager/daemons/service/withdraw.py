"""Directives an operator's change made invalid, withdrawn before they start (issue 21).

A round publishes a directive; until its source acknowledges it, an operator may put its
source or its target in maintenance, pin its VM, or put its source in recommend mode. None
of those may start after (docs/operations.md#fencing), so the change withdraws it, in the
same store write as the change and its audit row:

* **never delivered** (no response has carried it): nobody can hold it. Its lease ends
  ``withdrawn`` through the core (nothing moved: the windows stay) and every later
  response says "no flag".
* **delivered, not acknowledged**: the agent may hold it. An agent applies a directive
  when a response brings it and starts the migration at its next period, *before* its next
  report, so a withdrawal cannot overtake it there; the agent's next report settles which
  it was. Its ``d`` (the last directive applied) below this id, from the same boot: it
  never applied it (the response was lost), the lease ends ``withdrawn``. Otherwise (it
  applied it, or a restarted agent cannot say): the migration may be copying, so its lease
  stays until the source reports its end, or the lease's usual expiry — a live migration
  cannot be recalled half-copied. Meanwhile every response says "no flag", so nobody
  starts it later.

An acknowledged directive is past withdrawing for the same reason: it has started.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial

from sova.manager.daemons.schema import Report
from sova.manager.daemons.service.ledger import Ledger
from sova.manager.daemons.service.state import ManagerState
from sova.manager.daemons.service.store import AuditRow, DirectiveRow, RoundWrite

log = logging.getLogger("sova.manager")

# The directive an operator's change invalidates -> why, or None where it stays valid.
Invalidates = Callable[[DirectiveRow], str | None]


@dataclass(frozen=True)
class Withdrawal:
    row: DirectiveRow
    why: str
    delivered: bool
    boot: str  # the agent boot that may hold it (delivered ones)


class Withdrawals:
    """Withdraws invalidated directives; holds the delivered ones until their source's
    next report says whether it applied them."""

    def __init__(self, st: ManagerState, ledger: Ledger) -> None:
        self.st = st
        self.ledger = ledger
        self.held: dict[str, Withdrawal] = {}  # host -> its delivered, withdrawn directive

    def settle(self, invalid: Invalidates, now: float, w: RoundWrite) -> list[Withdrawal]:
        """Stop delivering every live directive ``invalid`` names, and add the withdrawal
        to ``w`` (the operator's write). Call under the round lock; then :meth:`done` once
        ``w`` is in the store, or :meth:`undo` if it is not."""
        out = []
        book = self.ledger.directives
        for host, dr in sorted(book.items()):
            if not dr.flag or dr.acked or dr.vm is None:
                continue
            why = invalid(dr)
            if why is None:
                continue
            delivered = self.ledger.delivered.get(host) == dr.id
            hs = self.st.hosts.get(host)
            wd = Withdrawal(dr, why, delivered, hs.boot if hs is not None else "")
            # Settled first: a report answered while the write is under way must not
            # deliver it.
            book[host] = replace(dr, acked=True)
            w.acked.append((host, dr.id))
            move = f"migrate {dr.vm} {host} -> {dr.target}: {why}"
            if delivered:
                move += f"; delivered to {host}: its next report says whether it started"
            else:
                self.ledger.write_end(w, dr.vm, dr.id, now, "withdrawn", why)
            w.audit.append(AuditRow(now, "sova", "withdraw", f"directive {dr.id}", move))
            out.append(wd)
        return out

    def undo(self, pending: list[Withdrawal]) -> None:
        """The operator's write failed: the directives stand as they were."""
        book = self.ledger.directives
        for wd in pending:
            cur = book.get(wd.row.host)
            if cur is not None and cur.id == wd.row.id:
                book[wd.row.host] = wd.row

    def done(self, pending: list[Withdrawal]) -> None:
        """The withdrawal is in the store: end the undelivered ones' leases."""
        for wd in pending:
            dr = wd.row
            vm = dr.vm
            assert vm is not None
            log.warning("withdrew directive %d (%s -> %s): %s", dr.id, vm, dr.target, wd.why)
            if wd.delivered:
                self.held[dr.host] = wd
            else:
                self.ledger.change(dr.id, partial(self.st.core.withdraw, vm, dr.id))

    def on_report(self, host: str, report: Report) -> None:
        """A new report from ``host``: settle its delivered, withdrawn directive."""
        wd = self.held.pop(host, None)
        if wd is None:
            return
        dr, vm, now = wd.row, wd.row.vm, self.st.now()
        assert vm is not None
        lease = self.st.core.leases.get(vm)
        w = RoundWrite()
        if report.boot == wd.boot and report.ack < dr.id:
            detail = f"not applied by {host} (d={report.ack} < {dr.id}): lease released"
            if lease is not None and lease.id == dr.id:
                self.ledger.write_end(w, vm, dr.id, now, "withdrawn", wd.why)
                self.ledger.change(dr.id, lambda: self.st.core.withdraw(vm, dr.id))
        elif report.boot != wd.boot:
            detail = f"{host} restarted: it may have started it; the lease ends as usual"
        else:
            detail = f"already applied by {host} (d={report.ack}): the migration runs to its end"
        w.audit.append(AuditRow(now, "sova", "withdraw", f"directive {dr.id}", detail))
        log.warning("directive %d: %s", dr.id, detail)
        self.st.writer.write(w)
