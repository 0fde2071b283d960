"""Apply actions through a driver safely: pre-condition, execute, track, time out, retry.

Decide, plan and apply are kept apart (OpenStack Watcher style). The policy says what the
host should look like; the planner turns the difference into ordered actions; this module
applies each one with the guarantees an operator needs on a real host:

* **idempotent**: never two operations in flight for one VM; an action whose effect is
  already the actual state is not sent;
* **pre-conditions**: a VF is detached only when the VM's virtio backup path is confirmed
  up — otherwise the guest would lose connectivity;
* **bounded**: every operation has a deadline; a VM whose operations keep failing is
  backed off exponentially instead of hammered every period;
* **dry-run**: everything is decided and logged, nothing is submitted.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import StrEnum

from sova.driver_protocol import Driver, DriverError, OpState
from sova.model import (
    Action,
    AttachVF,
    DetachVF,
    Inventory,
    Migrate,
    SetGuestRateLimit,
    SetVFRate,
)

# The name an action's completion has in events.csv, in every world.
EVENT_KIND: dict[type, str] = {
    AttachVF: "vf_attach",
    DetachVF: "vf_detach",
    SetVFRate: "tier_change",
    SetGuestRateLimit: "rate_limit",
    Migrate: "migrate_end",
}


def channel(action: Action) -> str:
    """Operations on different channels of one VM may run at once.

    Rate limits go through netlink or the guest agent and finish in milliseconds; they
    must not wait behind a VF hot-plug of the same VM that can take seconds.
    """
    return "rate" if isinstance(action, SetGuestRateLimit) else "nic"


Key = tuple[str, str]  # (vm, channel)


class Result(StrEnum):
    """How an operation ended (the strings are those of events.csv and the metrics)."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    TIMEOUT = "timeout"
    BLOCKED = "blocked"  # a pre-condition refused it; nothing was submitted
    DRY_RUN = "dry-run"  # decided, not submitted


# A migration that ended either way: the VM left, or it runs at the source again.
MIGRATION_ENDED = frozenset({Result.SUCCEEDED, Result.FAILED, Result.TIMEOUT})


@dataclass(frozen=True)
class Outcome:
    """A finished (or refused) operation, as the agent reports it."""

    time_s: float
    action: Action
    result: Result
    detail: str = ""


@dataclass
class _InFlight:
    op_id: str
    action: Action
    submitted_s: float


@dataclass
class Executor:
    driver: Driver
    op_timeout_s: float = 30.0
    migration_timeout_s: float = 600.0  # pre-copy of a busy VM legitimately takes minutes
    max_retries: int = 3
    backoff_base_s: float = 20.0
    dry_run: bool = False
    on_outcome: Callable[[Outcome], None] | None = None
    # Called whenever the executor starts tracking something (an operation in flight, a
    # failure): a caller watching many executors (the simulated world, one per host) asks
    # only those that called it since they last tracked nothing (tracks_nothing).
    on_track: Callable[[], None] | None = None
    # Called whenever :attr:`in_flight` changes (an operation submitted or finished): a
    # simulated world keeps which hosts' agents have one in flight in an array this way
    # (HostAgent.join_fleet) instead of reading every executor each period.
    on_flight: Callable[[], None] | None = None
    in_flight: dict[Key, _InFlight] = field(default_factory=dict)
    _failures: dict[Key, int] = field(default_factory=dict)
    _blocked_until: dict[Key, float] = field(default_factory=dict)

    @property
    def idle(self) -> bool:
        """Nothing in flight and nothing backing off: every action would be submitted."""
        return not self.in_flight and not self._blocked_until

    @property
    def tracks_nothing(self) -> bool:
        """Idle, and no failure counted either: nothing :attr:`on_track` announced is left."""
        return not self.in_flight and not self._blocked_until and not self._failures

    def busy(self, vm: str, chan: str = "nic") -> bool:
        return (vm, chan) in self.in_flight

    def backing_off(self, vm: str, now: float, chan: str = "nic") -> bool:
        return self._blocked_until.get((vm, chan), -1.0) > now

    def pending_actions(self) -> list[Action]:
        return [f.action for f in self.in_flight.values()]

    def _emit(self, outcome: Outcome) -> Outcome:
        if self.on_outcome is not None:
            self.on_outcome(outcome)
        return outcome

    def precondition(self, action: Action, actual: Inventory) -> str | None:
        """Why ``action`` must not run now, or None."""
        state = actual.vms.get(action.vm)
        if state is None:
            return f"VM {action.vm!r} is not on this host"
        if isinstance(action, DetachVF) and not (state.failover_ready and state.backup_link_up):
            return "virtio backup path not confirmed up; keeping the VF"
        return None

    def apply(self, action: Action, actual: Inventory) -> Outcome | None:
        return self._apply(action, lambda: self.precondition(action, actual))

    def apply_limit(self, action: SetGuestRateLimit) -> Outcome | None:
        """A rate limit for a VM the caller has just read on this host (the simulated
        world reads every host's VMs at once, sova.sim.fleet_bandwidth): a limit's only
        pre-condition is the VM's presence, so no inventory is read to check it again."""
        return self._apply(action, lambda: None)

    def _apply(self, action: Action, precondition: Callable[[], str | None]) -> Outcome | None:
        now = self.driver.now()
        key = (action.vm, channel(action))
        if key in self.in_flight or self.backing_off(action.vm, now, key[1]):
            return None
        why = precondition()
        if why is not None:
            return self._emit(Outcome(now, action, Result.BLOCKED, why))
        if self.dry_run:
            return self._emit(Outcome(now, action, Result.DRY_RUN, "not submitted"))
        try:
            op_id = self.driver.submit(action)
        except DriverError as exc:
            self._record_failure(key, now)
            return self._emit(Outcome(now, action, Result.FAILED, f"submit refused: {exc}"))
        self.in_flight[key] = _InFlight(op_id, action, now)
        if self.on_flight is not None:
            self.on_flight()
        if self.on_track is not None:
            self.on_track()
        return None

    def poll(self) -> list[Outcome]:
        """Collect finished operations; expire those past their deadline."""
        now = self.driver.now()
        done: list[Outcome] = []
        for key, f in list(self.in_flight.items()):
            try:
                status = self.driver.poll(f.op_id)
            except DriverError:
                status = None  # an unreachable host: the deadline below still applies
            if status is not None and status.state is OpState.SUCCEEDED:
                del self.in_flight[key]
                self._failures.pop(key, None)
                done.append(self._emit(Outcome(now, f.action, Result.SUCCEEDED, status.detail)))
            elif status is not None and status.state is OpState.FAILED:
                del self.in_flight[key]
                self._record_failure(key, now)
                done.append(self._emit(Outcome(now, f.action, Result.FAILED, status.detail)))
            elif now - f.submitted_s > self.timeout_for(f.action):
                # The operation may still complete on the host; reconciliation against the
                # next inventory repairs whatever state it leaves.
                del self.in_flight[key]
                self._record_failure(key, now)
                detail = f"no completion after {self.timeout_for(f.action):.0f} s"
                done.append(self._emit(Outcome(now, f.action, Result.TIMEOUT, detail)))
        if done and self.on_flight is not None:  # (each outcome left in_flight)
            self.on_flight()
        return done

    def settle(self, outcome: Outcome) -> Outcome:
        """An operation that finished outside :meth:`poll`'s per-operation tracking (the
        simulated world applies its hosts' limit changes in one batch): the same
        bookkeeping and the same outcome as if :meth:`poll` had collected it."""
        key = (outcome.action.vm, channel(outcome.action))
        if outcome.result is Result.SUCCEEDED:
            self._failures.pop(key, None)
        else:
            self._record_failure(key, outcome.time_s)
        return self._emit(outcome)

    @property
    def failing(self) -> bool:
        """Some action failed since its last success (retries counted)."""
        return bool(self._failures)

    def settled_all(self, vms: Iterable[str], chan: str) -> None:
        """Successes settled by the caller without an outcome (the simulated world's
        batched limits, see :meth:`settle`): their failure counts start again."""
        if self._failures:
            for vm in vms:
                self._failures.pop((vm, chan), None)

    def timeout_for(self, action: Action) -> float:
        return self.migration_timeout_s if isinstance(action, Migrate) else self.op_timeout_s

    def _record_failure(self, key: Key, now: float) -> None:
        n = self._failures.get(key, 0) + 1
        self._failures[key] = n
        if self.on_track is not None:
            self.on_track()
        if n >= self.max_retries:
            # Exponential back-off once the retry budget is spent, capped at ~10 min.
            self._blocked_until[key] = now + min(
                600.0, self.backoff_base_s * 2 ** (n - self.max_retries)
            )
