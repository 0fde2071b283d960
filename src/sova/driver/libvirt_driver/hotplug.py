"""Hot-plug confirmed by events: the one retry-until-event loop attach and detach share.

libvirt's attach/detach calls only *send* the request; the guest completes it later (or
never). Completion is a DEVICE_ADDED / DEVICE_REMOVED event, cross-checked against the live
XML because events can be missed across a reconnect; the guest can refuse
(DEVICE_REMOVAL_FAILED) or stop meanwhile. Every attempt is bounded, attempts are bounded,
and the back-off grows with the attempt number.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sova.driver.libvirt_driver.connection import is_permanent, require_libvirt
from sova.driver.libvirt_driver.events import DomainEvent, EventHub, is_stopped

EVENT_NAMES = {
    "device-added": "DEVICE_ADDED",
    "device-removed": "DEVICE_REMOVED",
    "device-removal-failed": "DEVICE_REMOVAL_FAILED",
}


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int
    timeout_s: float  # per attempt, waiting for the event
    backoff_s: float  # multiplied by the attempt number


@dataclass(frozen=True)
class HotplugOutcome:
    """How the loop ended: ``done`` with ``how`` it was confirmed, or not with ``last``."""

    done: bool
    how: str = ""  # "already" | "DEVICE_ADDED" | "DEVICE_REMOVED" | "live XML (no … event)"
    stopped: bool = False  # the domain stopped while we waited
    gone: bool = False  # ... and left this host (migrated away or undefined)
    last: str = ""  # why the last attempt did not complete
    attempts: int = 0


GONE = "the domain left this host (migrated away or undefined)"


class PermanentRefusal(Exception):
    """libvirt refused the request in a way no retry can fix (message: its error)."""


def retry_until_event(
    *,
    hub: EventHub,
    vm: str,
    verb: str,  # "attach" | "detach": the wording of refusals
    request: Callable[[], object],
    completed: Callable[[], bool],
    success_kind: str,
    alias: str = "",
    policy: RetryPolicy,
    progress: Callable[[int], None] = lambda _attempt: None,
    sleep: Callable[[float], None] = time.sleep,
) -> HotplugOutcome:
    """Send ``request`` until ``completed()`` holds, each attempt waiting for its event.

    ``completed`` reads the live state (XML); it is checked before every attempt (an earlier
    attempt may have completed late) and after every wait. ``alias`` narrows the events to
    one device. Raises :class:`PermanentRefusal` when retrying cannot help.
    """
    lv = require_libvirt()
    failure_kind = "device-removal-failed" if success_kind == "device-removed" else ""
    last = ""

    def relevant(e: DomainEvent) -> bool:
        if is_stopped(e, vm):
            return True
        if e.vm != vm or e.kind not in (success_kind, failure_kind):
            return False
        return not alias or not e.alias or e.alias == alias

    def gone(e: Any) -> bool:
        # A migration someone else ran (QEMU unplugs a failover primary itself and sends no
        # DEVICE_REMOVED) or an undefine: the lifecycle event may have been missed too.
        return bool(e.get_error_code() == lv.VIR_ERR_NO_DOMAIN)

    def left(attempt: int) -> HotplugOutcome:
        return HotplugOutcome(False, stopped=True, gone=True, last=GONE, attempts=attempt)

    for attempt in range(1, policy.attempts + 1):
        progress(attempt)
        try:
            if completed():
                how = "already" if attempt == 1 else "live XML"
                return HotplugOutcome(True, how, attempts=attempt)
        except lv.libvirtError as e:
            if gone(e):
                return left(attempt)
            raise
        mark = hub.mark()
        try:
            request()
        except lv.libvirtError as e:
            if gone(e):
                return left(attempt)
            last = f"{verb} refused: {e}"
            if is_permanent(e):
                raise PermanentRefusal(last) from e
            sleep(policy.backoff_s * attempt)
            continue
        ev = hub.wait(relevant, mark, policy.timeout_s)
        if ev is not None and ev.kind == "lifecycle":
            return HotplugOutcome(False, stopped=True, last="domain stopped", attempts=attempt)
        try:
            done = completed()
        except lv.libvirtError as e:
            if gone(e):
                return left(attempt)
            raise
        verdict = _verdict(ev, done, verb, success_kind, failure_kind, policy.timeout_s)
        if not verdict:
            name = EVENT_NAMES[success_kind]
            how = name if ev is not None else f"live XML (no {name} event)"
            return HotplugOutcome(True, how, attempts=attempt)
        last = verdict
        sleep(policy.backoff_s * attempt)
    return HotplugOutcome(False, last=last, attempts=policy.attempts)


def _verdict(
    ev: DomainEvent | None,
    done: bool,
    verb: str,
    success_kind: str,
    failure_kind: str,
    timeout_s: float,
) -> str:
    """After one attempt's wait: why it did not complete, or "" when it did."""
    name = EVENT_NAMES[success_kind]
    if ev is not None and ev.kind == failure_kind:
        return "the guest refused the unplug (DEVICE_REMOVAL_FAILED)"
    if done:
        return ""
    if ev is None:
        return (
            f"{verb} not completed within {timeout_s:g}s (no "
            f"{name}; guest busy or not answering the request)"
        )
    return f"{name} arrived but the live XML disagrees"
