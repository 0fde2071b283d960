"""``sova testbed up|run|down``: the namespace testbed from the command line (root only).

Kept out of ``sova.cli`` so that the main command line does not import pyroute2 or touch
namespaces unless asked; ``sova.cli`` calls :func:`register` to add the sub-app. Until
then it also runs on its own: ``python -m sova.cli_testbed run SCENARIO``.
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

err = Console(stderr=True, emoji=False)  # ":x:" in a value is text, not an emoji

testbed_app = typer.Typer(
    name="testbed",
    help=(
        "Real packets: build the scenario's host, sink and VMs as Linux network namespaces, "
        "run the agent with the netns driver against real iperf3 traffic, and write the "
        "standard report. Needs root, iproute2, iperf3 and ping."
    ),
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,  # help strings carry literal "[default: ...]" text
)

PrefixOpt = Annotated[
    str,
    typer.Option("--prefix", help="Name prefix of every namespace this testbed owns (e.g. 'sv-')."),
]


def _load(scenario: Path):  # type: ignore[no-untyped-def]
    from sova.shipped import resolve_scenario
    from sova.testbed.scenario import TestbedScenarioError, load_testbed_scenario

    try:
        return load_testbed_scenario(resolve_scenario(scenario))
    except TestbedScenarioError as exc:
        err.print(f"[red]error:[/red] {exc}", highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None


def _require_root(*tools: str) -> None:
    from sova.testbed.topology import require_root

    why = require_root(tools) if tools else require_root()
    if why is not None:
        err.print(f"[red]error:[/red] the testbed {why}", highlight=False)
        raise typer.Exit(2)


def _sigterm_as_interrupt() -> None:
    """`kill` of a run must clean up like Ctrl-C does: both unwind through ``finally``."""

    import os

    main_pid = os.getpid()

    def handler(signum: int, frame: object) -> None:
        if os.getpid() != main_pid:
            os._exit(1)  # a forked helper must never run the parent's cleanup
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)


@testbed_app.command()
def up(
    scenario: Annotated[Path, typer.Argument(help="Testbed scenario (scenarios/testbed/).")],
    prefix: PrefixOpt = "sv-",
) -> None:
    """Build the scenario's namespaces and leave them up for exploring (no traffic, no agent)."""
    scn = _load(scenario)
    _require_root()
    from sova.testbed.netns_driver import NetnsDriver
    from sova.testbed.topology import SINK_IP, TestbedError, Topology, exclusive

    try:
        with exclusive(prefix):
            topo = Topology(scn, prefix)
            topo.up()
            driver = NetnsDriver(topo, scn.model_vms(), scn.model_host())
            try:
                for v in scn.vms:
                    if v.vf:
                        driver.attach_now(v.name)
            finally:
                driver.close()
    except TestbedError as exc:
        err.print(f"[red]error:[/red] {exc}", highlight=False, soft_wrap=True)
        raise typer.Exit(1) from None
    n = topo.names
    typer.echo(
        f"testbed {scn.name!r} is up: namespaces {n.host_ns}, {n.sink_ns}, "
        + ", ".join(p.ns for p in topo.vms.values())
    )
    first = next(iter(topo.vms.values()))
    typer.echo(f"  try: ip netns exec {first.ns} ping -c3 {SINK_IP}")
    typer.echo(f"  tc -n {n.host_ns} -s class show dev {n.uplink}")
    typer.echo(f"remove with: sova testbed down --prefix {prefix}")


@testbed_app.command()
def run(
    scenario: Annotated[Path, typer.Argument(help="Testbed scenario (scenarios/testbed/).")],
    out: Annotated[
        Path | None,
        typer.Option("--out", "-o", help="Output directory [default: out/testbed/<name>]."),
    ] = None,
    policy: Annotated[
        list[str] | None,
        typer.Option("--policy", "-p", help="Run only these compared policies (repeatable)."),
    ] = None,
    duration: Annotated[
        float | None,
        typer.Option(help="Override the scenario's duration per run, in seconds."),
    ] = None,
    check: Annotated[
        bool, typer.Option("--check", help="Exit 1 when an acceptance check fails.")
    ] = False,
    prefix: PrefixOpt = "sv-",
) -> None:
    """Run every compared policy on real traffic, one after the other, and write the report.

    Each run builds the testbed afresh and removes it afterwards, also on Ctrl-C or kill.
    Writes timeline.csv, events.csv, testbed.csv, switches.csv, summary.json, report.md
    and plots into --out.
    """
    scn = _load(scenario)
    if policy:
        bad = [p for p in policy if p not in scn.compare.policies]
        if bad:
            err.print(
                f"[red]error:[/red] --policy: {bad[0]!r} is not compared in this scenario "
                f"(compare.policies: {', '.join(scn.compare.policies)})",
                highlight=False,
            )
            raise typer.Exit(2)
    if duration is not None:
        if duration <= 0:
            err.print("[red]error:[/red] --duration must be > 0", highlight=False)
            raise typer.Exit(2)
        scn = scn.model_copy(update={"duration": duration})
    _require_root()
    _sigterm_as_interrupt()
    from sova.testbed.report import write_outputs
    from sova.testbed.runner import run_scenario
    from sova.testbed.topology import TestbedError

    out_dir = out or Path("out") / "testbed" / scn.name
    try:
        runs = run_scenario(
            scn,
            prefix,
            out_dir / "logs",
            progress=lambda line: err.print(line, highlight=False, markup=False, soft_wrap=True),
            only=policy,
        )
    except TestbedError as exc:
        err.print(f"[red]error:[/red] {exc}", highlight=False, soft_wrap=True)
        raise typer.Exit(1) from None
    except KeyboardInterrupt:
        err.print("interrupted: testbed removed, nothing written", highlight=False)
        raise typer.Exit(130) from None
    summary = write_outputs(out_dir, scn, runs)
    for label, m in summary["policies"].items():
        held = m["guarantee_held_fraction"]
        vs = m.get("vs_baseline")
        typer.echo(
            f"{label:>24}: {m['throughput_mbps']:7.1f} Mbit/s"
            + (f"  x{vs:.3f} of {scn.acceptance.baseline}" if vs is not None else "")
            + (f"  guarantee held {held:.1%}" if held is not None else "")
            + (f"  {m['vf_changes']} VF changes" if m["vf_changes"] else "")
        )
    for c in summary["acceptance"]["checks"]:
        typer.echo(f"  [{'ok' if c['holds'] else 'FAIL'}] {c['check']}: {c['value']}")
    typer.echo(f"report: {out_dir / 'report.md'}")
    if check and not summary["acceptance"]["all_hold"]:
        raise typer.Exit(1)


@testbed_app.command()
def down(
    scenario: Annotated[
        Path | None,
        typer.Argument(help="Ignored: everything with the prefix is removed."),
    ] = None,
    prefix: PrefixOpt = "sv-",
) -> None:
    """Remove every namespace, link, qdisc and process of the testbed, also after a crash."""
    _require_root("ip")
    from sova.testbed.topology import TestbedError, teardown

    try:
        removed = teardown(prefix)
    except (TestbedError, ValueError) as exc:
        err.print(f"[red]error:[/red] {exc}", highlight=False)
        raise typer.Exit(1) from None
    typer.echo(
        f"removed {len(removed)} namespace(s)" + (f": {', '.join(removed)}" if removed else "")
    )


def register(app: typer.Typer) -> None:
    """Add ``testbed`` to the main ``sova`` command line."""
    app.add_typer(testbed_app, name="testbed")


def main() -> None:
    testbed_app()


if __name__ == "__main__":
    main()
