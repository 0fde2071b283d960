"""What a drain would do, decided now and nothing kept (``sova host drain HOST --preview``).

A module of its own rather than a method of :class:`~sova.manager.decisions.core.ManagerCore`: it runs
the round's own filter and score stages over the core's state, and the core stays within its
size (issue 40)."""

from __future__ import annotations

from sova.manager.decisions.core import ManagerCore


def preview_drain(
    core: ManagerCore, host: str, now_s: float
) -> list[tuple[str | None, str | None, str]]:
    """The moves a drain of ``host`` would make, in order, decided now and nothing kept
    (``sova host drain HOST --preview``): each (VM, target, why) as the round's drain
    stage picks it, the VMs chosen before it left out, until the stage moves none (its
    last entry then says why, with VM or target None). The targets' load is as last
    reported: a later round re-plans each move with the load it then sees."""
    saved_draining, saved_pinned = core.draining, core.pinned
    moves: list[tuple[str | None, str | None, str]] = []
    try:
        core.draining = saved_draining | {host}
        # A VM already previewed is left out of the next pick as a pinned one is.
        core.pinned = set(saved_pinned)
        stale = core.stale(now_s)
        for _ in range(len(core.vms.get(host, {})) + 1):
            r = core.begin_round(now_s, 1, stale)
            core.pipeline.filter(r)
            core.pipeline.score(r)
            sig = r.signals.get(host)
            if sig is None:
                moves.append((None, None, "no report from the host to plan with"))
                break
            if not (sig.flag and sig.vm and sig.target):
                moves.append((sig.vm, None, sig.reason))
                break
            moves.append((sig.vm, sig.target, sig.reason))
            core.pinned.add(sig.vm)
            left = [v for v in core.vms.get(host, {}) if v not in core.pinned]
            if not left:
                held = sorted(v for v in core.vms.get(host, {}) if v in saved_pinned)
                if held:
                    moves.append((None, None, f"pinned, not moved: {', '.join(held)}"))
                break
    finally:
        core.draining, core.pinned = saved_draining, saved_pinned
    return moves
