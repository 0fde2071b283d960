"""The readable per-host form of VF scheduling, kept as the oracle the compiled core is held to.

This was ``sova.policy.vfsched.schedule`` (and its steps ``io_filter``, ``rank``, the
cost-benefit gate) before the VF scheduling moved into the compiled core
(rust/sova-core/src/vfsched.rs, docs/design.md "The compiled core"). The agents' VF policies,
``policy/operation.py`` and the simulator run the core through ``sova.policy.vfkernel``;
tests/test_vfkernel.py holds its decisions (queues, rankings and reasons) equal to these on
random heterogeneous clusters, and tests/test_vfsched.py keeps each step readable here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from sova.policy.vfsched import Candidate, VFDecision, VFSchedulerConfig


def rank(
    candidates: Sequence[Candidate],
    tolerance: float,
    boost: Mapping[str, float] | None = None,
) -> list[str]:
    """Order VMs best first: by net score in tolerance groups, then by I/O score, then name."""
    boost = boost or {}

    def net(c: Candidate) -> float:
        return c.net_score * boost.get(c.vm, 1.0)

    def io(c: Candidate) -> float:
        return c.io_score * boost.get(c.vm, 1.0)

    by_net = sorted(candidates, key=lambda c: (-net(c), c.vm))
    groups: list[list[Candidate]] = []
    leader = 0.0
    for c in by_net:
        if groups and net(c) >= leader / (1.0 + tolerance):
            groups[-1].append(c)
        else:
            groups.append([c])
            leader = net(c)
    ordered: list[str] = []
    for g in groups:
        ordered.extend(c.vm for c in sorted(g, key=lambda c: (-io(c), c.vm)))
    return ordered


def io_filter(
    candidates: Sequence[Candidate],
    config: VFSchedulerConfig,
    boost: Mapping[str, float] | None = None,
    vf_count: int = 0,
) -> list[Candidate]:
    """Keep the I/O-bound VMs. A holder's score is boosted like in :func:`rank`, so a VF
    holder whose io_degree hovers at the threshold does not lose and regain its VF on noise.
    With ``top_senders`` the ``vf_count`` VMs with traffic and the highest (boosted) demand
    estimates pass whatever their I/O score. The result keeps the candidates' order
    (threshold) or the I/O order (top-q); the top senders the filter dropped follow, by
    name.
    """
    boost = boost or {}

    def io(c: Candidate) -> float:
        return c.io_score * boost.get(c.vm, 1.0)

    if config.io_filter == "threshold":
        kept = [c for c in candidates if io(c) >= config.io_threshold]
    else:
        q = config.top_q or len(candidates)
        kept = sorted(candidates, key=lambda c: (-io(c), c.vm))[:q]
    if not config.top_senders:
        return kept
    senders = [c for c in candidates if c.has_traffic]
    senders.sort(key=lambda c: (-(c.demand_bps * boost.get(c.vm, 1.0)), c.vm))
    names = {c.vm for c in kept}
    extra = sorted((c for c in senders[:vf_count] if c.vm not in names), key=lambda c: c.vm)
    return kept + extra


def gain(demand_bps: float, config: VFSchedulerConfig) -> float:
    """What a VF carries for a VM that virtio would not, bit/s."""
    return max(0.0, demand_bps - config.virtio_lossless)


def worth_it(gain_in: float, gain_out: float, blip_bps: float, config: VFSchedulerConfig) -> bool:
    """Whether a change of holder pays: the gain it adds over the horizon against the
    traffic its plugs interrupt (``blip_bps``: the demand of the VMs plugged or unplugged),
    by ``benefit_margin``."""
    benefit = config.horizon * (gain_in - gain_out)
    return benefit > (1.0 + config.benefit_margin) * (config.hotplug_blip * blip_bps)


def schedule(
    candidates: Sequence[Candidate],
    holders: Mapping[str, float],
    vf_count: int,
    now_s: float,
    config: VFSchedulerConfig,
) -> VFDecision:
    """One scheduling period.

    ``holders`` maps each current VF holder to the time it got its VF. The result names
    the holders after this period; the caller turns the difference into actions.
    """
    if vf_count < 0:
        raise ValueError(f"vf_count must be >= 0, got {vf_count}")
    reasons: dict[str, str] = {}
    names = {c.vm for c in candidates}
    for c in candidates:
        if not c.eligible:
            reasons[c.vm] = "ineligible (migrating or no failover backup)"
    boost = {vm: 1.0 + config.hysteresis for vm in holders}
    passed = io_filter([c for c in candidates if c.eligible], config, boost, vf_count)
    passed_names = {c.vm for c in passed}
    for c in candidates:
        if c.eligible and c.vm not in passed_names:
            reasons[c.vm] = f"filtered: {config.io_metric}={c.io_score:.2f}"
    active = [c for c in passed if c.has_traffic]
    for c in passed:
        if not c.has_traffic:
            reasons[c.vm] = "no traffic in window"
    if config.cost_benefit:
        # a holder stays ranked: unplugging it buys nothing unless an entrant pays for it
        served = [c for c in active if gain(c.demand_bps, config) <= 0.0 and c.vm not in holders]
        for c in sorted(served, key=lambda c: c.vm):
            reasons[c.vm] = "virtio serves it (demand at or below virtio_lossless)"
        active = [c for c in active if c not in served]

    ranking = rank(active, config.tolerance, boost)

    # A holder still eligible and inside its dwell time keeps its VF whatever its rank.
    eligible_now = set(ranking)
    protected = [
        vm
        for vm in ranking
        if vm in holders and now_s - holders[vm] < config.min_dwell_s and vm in eligible_now
    ]
    protected = protected[:vf_count]
    pq: list[str] = list(protected)
    for vm in ranking:
        if len(pq) >= vf_count:
            break
        if vm not in pq:
            pq.append(vm)
    kept_back: set[str] = set()
    if config.cost_benefit:
        demand = {c.vm: c.demand_bps for c in candidates}
        pq, kept_back = _pay_for_moves(pq, ranking, holders, vf_count, demand, config)
    pq.sort(key=ranking.index)
    for i, vm in enumerate(ranking):
        if vm in pq:
            reasons[vm] = f"rank {i + 1} of {len(ranking)}" + (
                " (dwell)" if vm in protected and i >= vf_count else ""
            )
            if vm in kept_back:
                reasons[vm] += " (a move would not pay)"
        elif vm in kept_back:
            reasons[vm] = f"rank {i + 1} of {len(ranking)}, a move would not pay"
        else:
            reasons[vm] = f"rank {i + 1} of {len(ranking)}, below the {vf_count} VFs"
    gq = tuple(sorted(names - set(pq)))
    return VFDecision(pq=tuple(pq), gq=gq, ranking=tuple(ranking), reasons=reasons)


def _pay_for_moves(
    pq: list[str],
    ranking: Sequence[str],
    holders: Mapping[str, float],
    vf_count: int,
    demand: Mapping[str, float],
    config: VFSchedulerConfig,
) -> tuple[list[str], set[str]]:
    """The PQ after the cost-benefit gate (docs/design.md#vf-cost-benefit), and the VMs
    whose place a move that did not pay decided (a holder kept, an entrant left out).

    Entrants (in the PQ, not holders) in rank order first take the VFs nobody holds, each
    if its own gain pays for its plug. The rest are paired in rank order with the ranked
    holders the PQ leaves out, lowest gain (then name) first: a pair swaps only if the
    entrant's gain over the leaver's pays for both blips; otherwise the leaver keeps its
    VF. Holders beyond the pool (it shrank) leave first, lowest gain first, unpaired.
    Unranked holders (ineligible, filtered, quiet) leave as before.
    """
    in_pq = set(pq)
    kept = [vm for vm in pq if vm in holders]
    entrants = [vm for vm in pq if vm not in holders]
    leavers = [vm for vm in ranking if vm in holders and vm not in in_pq]
    leavers.sort(key=lambda vm: (gain(demand[vm], config), vm))
    overflow = max(0, len(kept) + len(leavers) - vf_count)
    free = vf_count - len(kept) - (len(leavers) - overflow)
    out = list(kept)
    held_back: set[str] = set()
    for j, vm in enumerate(entrants):
        g, d = gain(demand[vm], config), demand[vm]
        if j < free:
            if worth_it(g, 0.0, d, config):
                out.append(vm)
            else:
                held_back.add(vm)
            continue
        # (k < len(leavers): the PQ is at most the pool, so entrants <= free + pairs)
        lv = leavers[overflow + j - free]
        if worth_it(g, gain(demand[lv], config), d + demand[lv], config):
            out.append(vm)
        else:
            out.append(lv)
            held_back |= {vm, lv}
    return out, held_back
