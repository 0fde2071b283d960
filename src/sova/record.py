"""The records every world writes, and every conversion into them.

A run's output is the same in every world (simulator, demo, namespace testbed):
``timeline.csv`` (one row per control period and VM), ``events.csv`` (what the
controllers did and what came of it) and ``summary.json``. This module owns the first
two: their columns, their rows and how an agent's step, an action's outcome and a
manager's decision become rows. Worlds only add what they alone measure (the
simulator's offered load and response time, the testbed's kernel counters), so "the
demo writes the same events as simulate" rests on one function, not on copies.

Adding an output column: a field on :class:`TimelineRow` (or :class:`EventRow`), filled
in :func:`step_rows` if the agent knows it; the CSV columns follow the fields.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sova.agent.executor import EVENT_KIND, Outcome
from sova.agent.loop import StepReport
from sova.model import (
    AttachVF,
    Migrate,
    NicKind,
    SetGuestRateLimit,
    SetVFRate,
    VMCounters,
    VMState,
)
from sova.policy.sensing import VMFactors


@dataclass(frozen=True)
class TimelineRow:
    policy: str
    time_s: float
    host: str
    vm: str
    nic: str
    vf_rate_mbps: float | None
    tx_mbps: float
    rx_mbps: float
    cpu_usage: float
    io_degree: float
    net_factor: float
    net_degree: float
    io_factor: float
    offered_mbps: float | None  # the world's offered load; None where it is not known
    response_ms: float | None
    limit_mbps: float | None


@dataclass(frozen=True)
class EventRow:
    policy: str
    time_s: float
    event: str
    vm: str
    src_host: str
    dst_host: str
    detail: str


TIMELINE_COLUMNS = [f.name for f in dataclasses.fields(TimelineRow)]
EVENT_COLUMNS = [f.name for f in dataclasses.fields(EventRow)]
# Filled by the world, not by the agent: what the offered load and the response were.
WORLD_COLUMNS = ("policy", "host", "offered_mbps", "response_ms")


@dataclass
class RunRecord:
    """The records of one policy's run in any world."""

    policy: str
    timeline: list[TimelineRow] = field(default_factory=list)
    events: list[EventRow] = field(default_factory=list)
    decisions: list[dict[str, object]] = field(default_factory=list)


# --------------------------------------------------------------------------- conversions


def step_rows(
    rep: StepReport,
    *,
    policy: str = "",
    host: str = "",
    world: Callable[[str], tuple[float | None, float | None]] | None = None,
) -> Iterator[TimelineRow]:
    """An agent's control step as timeline rows, one per VM it has factors for.

    ``offered_mbps`` and ``response_ms`` come from ``world`` (VM name -> both) when the
    world knows them at once, else they are left empty (see :func:`complete_row`).
    """
    for vm, f in sorted(rep.factors.items()):
        st = rep.actual.vms.get(vm)
        if st is None:
            continue
        on_vf = st.nic is NicKind.VF
        offered, response = (None, None) if world is None else world(vm)
        yield TimelineRow(
            policy=policy,
            time_s=round(rep.time_s, 3),
            host=host,
            vm=vm,
            nic=st.nic.value,
            vf_rate_mbps=(st.vf_max_bps / 1e6 if st.vf_max_bps else None) if on_vf else None,
            tx_mbps=f.tx_bps / 1e6,
            rx_mbps=f.rx_bps / 1e6,
            cpu_usage=f.cpu_usage,
            io_degree=f.io_degree,
            net_factor=f.net_factor,
            net_degree=f.net_degree,
            io_factor=f.io_factor,
            offered_mbps=offered,
            response_ms=response,
            limit_mbps=st.guest_limit_bps / 1e6 if st.guest_limit_bps else None,
        )


def measured_rates(
    prev: VMCounters | None, cur: VMCounters, dt: float
) -> tuple[float, float, float]:
    """tx and rx in Mbit/s and the share of the VM's vCPUs it used over ``dt`` seconds, from
    two counter readings (all zero without an earlier one; a counter that went back counts
    as zero, not as negative traffic)."""
    if prev is None:
        return 0.0, 0.0, 0.0
    return (
        max(0, cur.tx_bytes - prev.tx_bytes) * 8 / dt / 1e6,
        max(0, cur.rx_bytes - prev.rx_bytes) * 8 / dt / 1e6,
        max(0, cur.cpu_time_ns - prev.cpu_time_ns) / (dt * 1e9 * cur.vcpus),
    )


def measured_row(
    *,
    policy: str,
    time_s: float,
    host: str,
    vm: str,
    state: VMState,
    tx_mbps: float,
    rx_mbps: float,
    cpu_usage: float,
    factors: VMFactors | None,
    **world: Any,
) -> TimelineRow:
    """A row of a world that measures rates itself each second (testbed, lab): its own
    tx/rx/CPU beside the agent's latest sensing factors (neutral before the first ones).
    """
    f = factors
    on_vf = state.nic is NicKind.VF
    return timeline_row(
        policy=policy,
        time_s=time_s,
        host=host,
        vm=vm,
        nic=state.nic.value,
        vf_rate_mbps=state.vf_max_bps / 1e6 if on_vf and state.vf_max_bps else None,
        tx_mbps=tx_mbps,
        rx_mbps=rx_mbps,
        cpu_usage=min(1.0, cpu_usage),
        io_degree=f.io_degree if f else 100.0,
        net_factor=f.net_factor if f else 0.0,
        net_degree=f.net_degree if f else 0.0,
        io_factor=f.io_factor if f else 0.0,
        **world,
    )


def complete_row(row: TimelineRow, **world: Any) -> TimelineRow:
    """``row`` with the columns the world fills (policy, host, offered, response)."""
    unknown = set(world) - set(WORLD_COLUMNS)
    if unknown:
        raise ValueError(f"not world columns: {sorted(unknown)}")
    return dataclasses.replace(row, **world)


def timeline_row(**values: Any) -> TimelineRow:
    """A timeline row from named values; columns this world does not measure stay empty."""
    for f in dataclasses.fields(TimelineRow):
        values.setdefault(f.name, None)
    return TimelineRow(**values)


def outcome_event(
    o: Outcome,
    *,
    policy: str = "",
    host: str = "",
    time_s: float | None = None,
    rate_limits: bool = False,
) -> EventRow | None:
    """An action's outcome as an event row, or None for what the timeline already shows.

    Successful guest rate limits change every bandwidth period and the timeline carries
    them, so they are no event unless ``rate_limits`` (the testbed, whose timeline is
    per second but whose limits are checked against the second they came into force).
    """
    a = o.action
    if isinstance(a, SetGuestRateLimit) and o.result == "succeeded" and not rate_limits:
        return None
    kind = EVENT_KIND.get(type(a), a.kind)
    event = kind if o.result == "succeeded" else f"{kind}_{o.result}"
    detail = o.detail
    if isinstance(a, AttachVF | SetVFRate) and a.max_bps:
        detail = _join(detail, f"rate {a.max_bps / 1e6:.0f} Mbit/s")
    if rate_limits and isinstance(a, SetGuestRateLimit):
        limit = "none" if a.rate_bps is None else f"{a.rate_bps / 1e6:.1f} Mbit/s"
        detail = _join(detail, f"limit {limit}")
    dst = ""
    if isinstance(a, Migrate):
        dst = a.dst_host
        if o.result != "succeeded":
            event = "migrate_failed"
    t = o.time_s if time_s is None else time_s
    return EventRow(policy, round(t, 3), event, a.vm, host, dst, detail)


def migration_start_event(policy: str, time_s: float, a: Migrate, host: str) -> EventRow:
    return EventRow(policy, round(time_s, 3), "migrate_start", a.vm, host, a.dst_host, "")


def decision_event(
    policy: str,
    time_s: float,
    host: str,
    *,
    vm: str | None,
    target: str | None,
    reason: str,
    utilisation: Sequence[float],
) -> EventRow:
    """A manager's decision (a hot spot and what it chose) as a ``hotspot`` event."""
    u = utilisation
    detail = f"cpu={u[0]:.2f} mem={u[1]:.2f} net={u[2]:.2f}; {reason}"
    return EventRow(policy, round(time_s, 3), "hotspot", vm or "", host, target or "", detail)


def decision_record(
    time_s: float, host: str, *, flag: bool, target: str | None, vm: str | None, reason: str
) -> dict[str, object]:
    """A manager's decision as the run's decision log keeps it."""
    return {
        "time_s": time_s,
        "host": host,
        "flag": flag,
        "target": target,
        "vm": vm,
        "reason": reason,
    }


def row_dict(row: TimelineRow | EventRow) -> dict[str, Any]:
    """A row as JSON-ready values (the demo's agents send theirs to the world)."""
    return dataclasses.asdict(row)


def timeline_from_dict(values: Mapping[str, Any]) -> TimelineRow:
    return timeline_row(**{f.name: values[f.name] for f in dataclasses.fields(TimelineRow)})


def event_from_dict(values: Mapping[str, Any]) -> EventRow:
    return EventRow(**{f.name: values.get(f.name, "") for f in dataclasses.fields(EventRow)})


def _join(detail: str, more: str) -> str:
    return (detail + "; " if detail else "") + more
