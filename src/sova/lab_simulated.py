"""The same phases in the simulator: what the same policy decides there, per phase.

A vf-scheduling lab scenario becomes a simulator scenario with one host like HV1 (its
fast slots as the VF pool, their capacity as the NIC's), one 1-vCPU guest per lab guest,
and each phase's loads as the guests' workloads from the phase's start: ``net`` sends at
the scenario's ``net_mbit`` all the time, ``cpu`` keeps the vCPU busy, ``idle`` does
neither. The controller section is the lab scenario's own (the one schema of every world).
The fast-path holders at each phase's end in the simulated run are the expected holders
the lab run is checked against, beside the ones the scenario states.

Outside ``sova.lab`` on purpose: it composes two worlds (the lab's scenario, the
simulator), which only the composition point may (the import-linter layers).
"""

from __future__ import annotations

from typing import Any

from sova.lab.scenario import LabScenario

HOST = "HV1"
POLICY = "lab"


def sim_scenario_data(scn: LabScenario, memory_mib: int = 320) -> dict[str, Any]:
    guests = [f"g{n}" for n in range(1, scn.guests + 1)]

    def workload(load: str) -> dict[str, Any]:
        parts = set(load.split("+"))
        w: dict[str, Any] = {}
        if "net" in parts:
            w |= {"kind": "bulk", "rate": f"{scn.net_mbit:g}Mbit"}
        if "cpu" in parts:
            w["cpu"] = 1.0
        return w

    phases, at = [], 0.0
    for ph in scn.phases:
        phases.append(
            {"at": f"{at:g}s", "vms": {g: workload(ph.loads.get(g, "idle")) for g in guests}}
        )
        at += ph.duration_s
    controller = scn.controller.model_dump(mode="json", exclude_none=True)
    vf_policy = controller.pop("vf_policy", "dsr-iov")
    return {
        "name": f"{scn.name}-simulated",
        "description": f"The phases of lab scenario {scn.name} in the simulator.",
        "seed": 1,
        "duration": f"{scn.duration_s:g}s",
        "tick": "1s",
        "hosts": [
            {
                "name": HOST,
                "cores": scn.hosts.cpus,
                "memory": f"{scn.hosts.memory_mib}MiB",
                "nic": {
                    "name": "lab-fast",
                    "capacity": f"{scn.tier_mbit * scn.fast_slots:g}Mbit",
                    "vf_pool": scn.fast_slots,
                },
                "vms": guests,
            }
        ],
        "vms": [{"name": g, "vcpus": 1, "memory": f"{memory_mib}MiB"} for g in guests],
        "workload": phases,
        "controller": controller,
        "compare": [{"name": POLICY, "vf": vf_policy}],
    }


def simulated_holders(scn: LabScenario) -> list[list[str]]:
    """Per phase, the guests holding a VF at its last simulated second."""
    from sova.scenario import parse_scenario
    from sova.sim.runner import run_policy

    sim = parse_scenario(sim_scenario_data(scn), f"{scn.name} (simulated)")
    run = run_policy(sim, POLICY)
    out: list[list[str]] = []
    end = 0.0
    for ph in scn.phases:
        end += ph.duration_s
        last = max((r.time_s for r in run.timeline if r.time_s < end), default=None)
        out.append(
            sorted(r.vm for r in run.timeline if r.time_s == last and r.nic == "vf")
            if last is not None
            else []
        )
    return out
