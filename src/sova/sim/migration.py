"""Live migration, pre-copy (Clark et al.; SimGrid's model).

The first round copies all memory, later rounds what was dirtied meanwhile, stop-and-copy
when the rest fits the downtime budget. The migrated VM's counters restart at the target,
as a new QEMU's do. The copy competes for the source's egress and the target's ingress
(:mod:`sova.sim.network`); a migration can fail (the profile's failure rate) or be
aborted on the agent's timeout.
"""

from __future__ import annotations

from functools import partial

from sova import model
from sova.sim.state import EngineState, MigrationState, Op


def advance(eng: EngineState, m: MigrationState, rate: float, dt: float, t: float) -> None:
    """Copy for one tick; rounds shorter than the tick follow each other inside it.

    A round of ``L`` bytes at ``r`` bytes/s takes ``L/r`` seconds and meanwhile the guest
    dirties ``d·L/r`` bytes, which the next round copies. Walking the rounds inside the
    tick (rather than one round per tick) keeps a fast link's short rounds short, so the
    dirty set shrinks geometrically the way pre-copy does on a real host.
    """
    p = eng.profile
    r = rate / 8.0  # bytes/s
    d = (p.dirty_rate + p.dirty_per_tx * eng.tx[m.vm]) / 8.0
    left_s = dt
    while left_s > 1e-12 and m.round_left_bytes != float("inf"):
        if r <= 0:
            m.dirty_bytes = min(eng.mem[m.vm], m.dirty_bytes + d * left_s)
            return
        need_s = m.round_left_bytes / r
        step_s = min(left_s, need_s)
        m.sent_bytes += r * step_s
        m.round_left_bytes -= r * step_s
        m.dirty_bytes = min(eng.mem[m.vm], m.dirty_bytes + d * step_s)
        left_s -= step_s
        if m.round_left_bytes > 1e-6:
            return
        now = t - left_s
        if m.fail_at_round and m.rounds >= m.fail_at_round:
            finish(
                eng, m, now, ok=False, detail="migration aborted by the source: connection reset"
            )
            return
        fits = m.dirty_bytes <= r * p.max_downtime
        if fits or m.rounds >= p.max_rounds:
            downtime = m.dirty_bytes / max(r, 1e6 / 8.0)
            m.sent_bytes += m.dirty_bytes
            eng.paused_until[m.vm] = now + downtime
            eng.paused_through = max(eng.paused_through, now + downtime)
            eng.env.schedule(
                max(0.0, now + downtime - eng.env.now),
                partial(finish_after_downtime, eng, m, downtime),
            )
            m.round_left_bytes = float("inf")  # no more rounds
            return
        m.rounds += 1
        m.round_left_bytes, m.dirty_bytes = m.dirty_bytes, 0.0


def finish_after_downtime(eng: EngineState, m: MigrationState, downtime: float) -> None:
    finish(eng, m, eng.env.now, True, "", downtime)


def finish(
    eng: EngineState, m: MigrationState, t: float, ok: bool, detail: str, downtime: float = 0.0
) -> None:
    eng.migrations.pop(m.vm, None)
    eng.migrating[m.vm] = False
    i = m.vm
    if ok:
        eng.move(i, m.dst)
        # A new QEMU process at the target: its counters start from zero.
        for arr in (eng.cpu_ns, eng.steal_ns, eng.rx_b, eng.tx_b, eng.rx_pk, eng.tx_pk):
            arr[i] = 0.0
        detail = (
            f"{m.rounds} round(s), {m.sent_bytes / 2**20:.0f} MiB copied, "
            f"downtime {downtime * 1000:.0f} ms"
        )
    eng.migration_log.append(
        {
            "vm": eng.vm_names[i],
            "src": eng.host_names[m.src],
            "dst": eng.host_names[m.dst],
            "start_s": m.start_s,
            "end_s": t,
            "ok": "yes" if ok else "no",
            "downtime_ms": downtime * 1000,
            "rounds": m.rounds,
            "copied_mib": m.sent_bytes / 2**20,
        }
    )
    eng._complete(m.op, "succeeded" if ok else "failed", detail)


def start(eng: EngineState, op: Op, i: int, a: model.Migrate) -> None:
    p = eng.profile
    dst = eng.host_index.get(a.dst_host)
    if dst is None or dst == eng.host[i]:
        eng.env.schedule(
            0.01, lambda: eng._complete(op, "failed", f"bad target host {a.dst_host!r}")
        )
        return
    if eng.on_vf[i]:
        # A plain hostdev blocks live migration: the VF must be unplugged first.
        eng.env.schedule(
            0.01,
            lambda: eng._complete(op, "failed", "VM holds a VF: unplug it before migrating"),
        )
        return
    if eng.migrating[i]:
        eng.env.schedule(0.01, lambda: eng._complete(op, "failed", "already migrating"))
        return
    fail_at = 0
    if float(eng.orng.uniform()) < p.migration_failure_rate:
        fail_at = 2
    now = eng.env.now
    eng.migrating[i] = True
    eng.migrations[i] = MigrationState(
        vm=i,
        src=int(eng.host[i]),
        dst=dst,
        op=op,
        cap_bps=a.bandwidth_cap_bps or float(eng.capacity[eng.host[i]]),
        start_s=now,
        copy_from_s=now + p.migration_setup,
        round_left_bytes=float(eng.mem[i]),
        fail_at_round=fail_at,
    )
