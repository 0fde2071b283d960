"""``sova scenario generate``: a fleet workload with the statistics of real cluster traces,
written as a trace-replay scenario (YAML + CSV) that ``sova simulate`` runs.

Exit codes: 0 done; 2 bad input (an option, named in the one-line error).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

scenario_app = typer.Typer(
    name="scenario",
    help="Make scenarios: generate a fleet workload like real clusters'.",
    no_args_is_help=True,
)


def _fail(msg: str) -> typer.Exit:
    print(f"error: {msg}", file=sys.stderr, flush=True)
    return typer.Exit(2)


@scenario_app.command("generate")
def generate(
    out_dir: Annotated[Path, typer.Argument(help="Folder for the scenario YAML and its CSV.")],
    hosts: Annotated[int, typer.Option(help="Hosts (10 GbE, --vfs VFs each).")] = 8,
    vms: Annotated[int, typer.Option(help="VMs, placed evenly on the hosts.")] = 200,
    duration: Annotated[str, typer.Option(help="Length of the trace, e.g. 24h, 90min.")] = "24h",
    sample: Annotated[str, typer.Option(help="Time between trace samples.")] = "5min",
    seed: Annotated[int, typer.Option(help="Random seed: the same seed, the same fleet.")] = 0,
    vfs: Annotated[int, typer.Option(help="VF pool per host.")] = 2,
    net_scale: Annotated[float, typer.Option(help="Multiply every VM's network rate.")] = 1.0,
    name: Annotated[
        str | None, typer.Option(help="File name stem [default: fleet-h<H>-v<N>-s<seed>].")
    ] = None,
) -> None:
    """Write a fleet workload: heavy-tailed per-VM volume (most VMs under 10 Mbit/s, a few
    carrying most bytes), diurnal cycles, bursts, CPU-and-network hybrids, an idle
    majority; seeded and deterministic (sova.sim.fleetgen)."""
    from sova.sim.fleetgen import FleetShape, write
    from sova.sim.fleetgen import generate as make
    from sova.units import parse_duration

    try:
        dur, smp = parse_duration(duration), parse_duration(sample)
    except ValueError as exc:
        raise _fail(f"--duration/--sample: {exc}") from None
    try:
        shape = FleetShape(
            hosts=hosts,
            vms=vms,
            duration_s=dur,
            sample_s=smp,
            seed=seed,
            vf_pool=vfs,
            net_scale=net_scale,
            tick_s=min(5.0, smp),
        )
    except ValueError as exc:
        raise _fail(str(exc)) from None
    path = write(make(shape), out_dir, name)
    typer.echo(f"{path} ({hosts} hosts, {vms} VMs, {duration}; trace {path.with_suffix('.csv')})")


def register(app: typer.Typer) -> None:
    """Add ``sova scenario`` to the ``sova`` CLI."""
    app.add_typer(scenario_app)
