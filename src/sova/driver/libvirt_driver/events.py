"""Domain events from libvirt's event-loop thread, waited on by the operation threads."""

from __future__ import annotations

import contextlib
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sova.driver.libvirt_driver.connection import require_libvirt


@dataclass(frozen=True)
class DomainEvent:
    seq: int
    # lifecycle | device-added | device-removed | device-removal-failed | reconnected (the
    # connection was replaced: events between the old one's death and this were missed)
    kind: str
    vm: str
    alias: str = ""
    event: int = 0  # lifecycle: VIR_DOMAIN_EVENT_*
    detail: int = 0
    time_s: float = 0.0


class EventHub:
    """A bounded, sequence-numbered history of events with a condition to wait on."""

    def __init__(self, maxlen: int = 2048) -> None:
        self._cond = threading.Condition()
        self._events: deque[DomainEvent] = deque(maxlen=maxlen)
        self._seq = 0
        self.listeners: list[Callable[[DomainEvent], None]] = []

    def post(self, kind: str, vm: str, alias: str = "", event: int = 0, detail: int = 0) -> None:
        with self._cond:
            self._seq += 1
            ev = DomainEvent(self._seq, kind, vm, alias, event, detail, time.monotonic())
            self._events.append(ev)
            self._cond.notify_all()
        for cb in list(self.listeners):
            with contextlib.suppress(Exception):  # a listener must not kill the event loop
                cb(ev)

    def mark(self) -> int:
        with self._cond:
            return self._seq

    def recent(self) -> list[DomainEvent]:
        with self._cond:
            return list(self._events)

    def wait(
        self, pred: Callable[[DomainEvent], bool], since: int, timeout_s: float
    ) -> DomainEvent | None:
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while True:
                for ev in self._events:
                    if ev.seq > since and pred(ev):
                        return ev
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._cond.wait(left)


def register_domain_events(conn: Any, hub: EventHub) -> list[int]:
    """Route lifecycle and device events of ``conn`` into ``hub``; the callback ids."""
    lv = require_libvirt()

    def lifecycle(_c: Any, dom: Any, event: int, detail: int, _o: Any) -> None:
        hub.post("lifecycle", dom.name(), event=event, detail=detail)

    def device(kind: str) -> Callable[[Any, Any, str, Any], None]:
        def cb(_c: Any, dom: Any, alias: str, _o: Any) -> None:
            hub.post(kind, dom.name(), alias=alias)

        return cb

    regs: list[tuple[int, Callable[..., None]]] = [
        (lv.VIR_DOMAIN_EVENT_ID_LIFECYCLE, lifecycle),
        (lv.VIR_DOMAIN_EVENT_ID_DEVICE_ADDED, device("device-added")),
        (lv.VIR_DOMAIN_EVENT_ID_DEVICE_REMOVED, device("device-removed")),
        (lv.VIR_DOMAIN_EVENT_ID_DEVICE_REMOVAL_FAILED, device("device-removal-failed")),
    ]
    ids: list[int] = []
    for event_id, cb in regs:
        try:
            ids.append(conn.domainEventRegisterAny(None, event_id, cb, None))
        except lv.libvirtError:
            # Older servers lack some event ids; completion then falls back to the XML.
            continue
    return ids


def is_stopped(ev: DomainEvent, vm: str) -> bool:
    lv = require_libvirt()
    return (
        ev.vm == vm
        and ev.kind == "lifecycle"
        and ev.event in (lv.VIR_DOMAIN_EVENT_STOPPED, lv.VIR_DOMAIN_EVENT_UNDEFINED)
    )


def migrating_now(hub: EventHub, in_flight: set[str]) -> set[str]:
    """VMs migrating: ours in flight, plus any whose last lifecycle event says so."""
    lv = require_libvirt()
    out = set(in_flight)
    last: dict[str, DomainEvent] = {}
    for ev in hub.recent():
        if ev.kind == "reconnected":
            last.clear()  # a migration seen on the dead connection may have ended since
        elif ev.kind == "lifecycle":
            last[ev.vm] = ev
    for vm, ev in last.items():
        if (
            ev.event == lv.VIR_DOMAIN_EVENT_SUSPENDED
            and ev.detail == lv.VIR_DOMAIN_EVENT_SUSPENDED_MIGRATED
        ):
            out.add(vm)
    return out


class DomainEvents:
    """The driver's subscription to one connection's domain events, and their history.

    A connection's callbacks die with it: after a reconnect they are registered again on
    the new one, and a ``reconnected`` marker tells readers of the history that it has a
    gap (events of the dead connection's last moments were never delivered)."""

    def __init__(self) -> None:
        self.hub = EventHub()
        self._callback_ids: list[int] = []

    def register(self, conn: Any) -> None:
        self._callback_ids.extend(register_domain_events(conn, self.hub))

    def reconnected(self, conn: Any) -> None:
        self._callback_ids.clear()
        self.hub.post("reconnected", "")
        self.register(conn)

    def close(self, conn: Any) -> None:
        for cid in self._callback_ids:
            with contextlib.suppress(Exception):
                conn.domainEventDeregisterAny(cid)
        self._callback_ids.clear()

    def add_listener(self, cb: Callable[[DomainEvent], None]) -> None:
        self.hub.listeners.append(cb)

    def recent(self) -> list[DomainEvent]:
        return self.hub.recent()
