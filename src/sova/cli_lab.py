"""``sova lab up|run|down``: the hypervisor lab from the command line (root only).

Kept out of ``sova.cli`` so the main command line imports neither libvirt nor the lab
unless asked; ``sova.cli`` calls :func:`register`.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

err = Console(stderr=True, emoji=False)  # ":x:" in a value is text, not an emoji

lab_app = typer.Typer(
    name="lab",
    help=(
        "Real hypervisors: two libvirt daemons (HV1, HV2) on this machine, QEMU guests with "
        "a guest agent, and Sova's LibvirtDriver acting on them (docs/lab.md). Needs root, "
        "libvirt's daemon and QEMU (scripts/ci-setup-lab.sh)."
    ),
    no_args_is_help=True,
    add_completion=False,
)

REPO = Path(__file__).resolve().parents[2]


def _say(line: str) -> None:
    err.print(line, highlight=False, markup=False, soft_wrap=True)


def _require_root() -> None:
    if os.geteuid() != 0:
        err.print(
            "[red]error:[/red] the lab needs root (libvirt daemons, bridges)", highlight=False
        )
        raise typer.Exit(2)


def _settings(guests: int | None = None, qemu: str | None = None):  # type: ignore[no-untyped-def]
    import dataclasses

    from sova.lab.settings import LabSettings

    s = LabSettings()
    if guests is not None:
        if not 1 <= guests <= 8:
            err.print(f"[red]error:[/red] --guests: {guests} is not in 1..8", highlight=False)
            raise typer.Exit(2)
        s = dataclasses.replace(s, guests=guests)
    if qemu is not None:
        s = dataclasses.replace(s, qemu=qemu)
    return s


def _sigterm_as_interrupt() -> None:
    """`kill` of `lab up`/`lab run` unwinds through ``finally`` like Ctrl-C does."""

    def handler(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)


@lab_app.command()
def up(
    guests: Annotated[int, typer.Option(help="Guests to boot on HV1 (two at a time).")] = 4,
    slow_mbit: Annotated[
        float, typer.Option(help="Host-side rate of every virtio backup path, Mbit/s.")
    ] = 100.0,
    sriov: Annotated[
        bool,
        typer.Option(
            "--sriov",
            help="The nested SR-IOV lab instead: L1 hypervisors (QEMU 10, emulated VT-d and "
            "igb with VFs) whose libvirt the production driver drives over TCP.",
        ),
    ] = False,
    l1s: Annotated[int, typer.Option(help="--sriov: L1 hypervisors (1 or 2).")] = 1,
    qemu: Annotated[
        str | None,
        typer.Option(
            help="The QEMU HV1 and HV2 run: 'system' (the machine's), 'backports' (QEMU 10 "
            "from bookworm-backports, fetched once and cached) or the path of a "
            "qemu-system-x86_64 under an unpacked prefix. Default: $SOVA_LAB_QEMU or system.",
        ),
    ] = None,
) -> None:
    """Start HV1 and HV2, the lab network and the guests; leave them up."""
    s = _settings(guests, qemu)
    if slow_mbit <= 0:
        err.print(f"[red]error:[/red] --slow-mbit: {slow_mbit} must be > 0", highlight=False)
        raise typer.Exit(2)
    if not 1 <= l1s <= 2:
        err.print(f"[red]error:[/red] --l1s: {l1s} is not 1 or 2", highlight=False)
        raise typer.Exit(2)
    _require_root()
    _sigterm_as_interrupt()
    if sriov:
        _up_sriov(l1s)
        return
    from sova.lab import lab
    from sova.lab.daemons import LabError

    try:
        st = lab.up(s, REPO, slow_rate_bps=slow_mbit * 1e6, say=_say)
    except LabError as exc:
        err.print(f"[red]error:[/red] {exc}", highlight=False, soft_wrap=True)
        raise typer.Exit(1) from None
    typer.echo(
        f"lab up in {st.up_s} s: {', '.join(sorted(st.guests))} on {s.hosts[0]}, "
        f"QEMU {st.qemu_version}"
    )
    for host in s.hosts:
        typer.echo(f"  virsh -c '{s.uri(host)}' list")
    typer.echo(f"  ip netns exec {s.peer_ns} ping {s.guest_ip(1)}")
    typer.echo("remove with: sova lab down")


def _up_sriov(l1s: int) -> None:
    from sova.lab import nested
    from sova.lab.daemons import LabError

    ns = nested.NestedSettings(l1s=l1s)
    try:
        st = nested.up(ns, REPO, say=_say)
    except LabError as exc:
        err.print(f"[red]error:[/red] {exc}", highlight=False, soft_wrap=True)
        err.print("remove what was started with: sova lab down --sriov", highlight=False)
        raise typer.Exit(1) from None
    typer.echo(f"nested lab up in {st['up_s']} s")
    for n in range(1, l1s + 1):
        typer.echo(f"  virsh -c '{ns.l1_uri(n)}' nodedev-list --cap net")
    typer.echo("remove with: sova lab down --sriov")


@lab_app.command()
def run(
    scenario: Annotated[Path, typer.Argument(help="Lab scenario (scenarios/lab/).")],
    out: Annotated[
        Path | None,
        typer.Option("--out", "-o", help="Output directory [default: out/lab/<name>]."),
    ] = None,
    check: Annotated[
        bool, typer.Option("--check", help="Exit 1 when an acceptance check fails.")
    ] = False,
) -> None:
    """Run a lab scenario on the lab `sova lab up` left running; write the standard outputs."""
    from sova.lab.scenario import LabScenarioError, load_lab_scenario

    try:
        scn = load_lab_scenario(scenario)
    except LabScenarioError as exc:
        err.print(f"[red]error:[/red] {exc}", highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None
    _require_root()
    _sigterm_as_interrupt()
    from sova.lab.report import write_outputs
    from sova.lab.runner import LabRunError, run_scenario

    out_dir = out or Path("out") / "lab" / scn.name
    try:
        if scn.experiment == "hotspot-migration":
            from sova.lab.hotspot import run_hotspot

            result = run_hotspot(_settings(), scn, out_dir / "logs", say=_say)
        elif scn.experiment == "guarantee":
            from sova.lab.guarantee import run_guarantee

            result = run_guarantee(_settings(), scn, out_dir / "logs", say=_say)
        else:
            # the same policy on the same phases in the simulator: composed here, where
            # the worlds meet (sova.lab does not import sova.sim)
            from sova.lab_simulated import simulated_holders

            result = run_scenario(
                _settings(), scn, out_dir / "logs", say=_say, simulated=simulated_holders(scn)
            )
    except LabRunError as exc:
        err.print(f"[red]error:[/red] {exc}", highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None
    summary = write_outputs(out_dir, scn, result)
    for k, v in summary["checks"].items():
        typer.echo(f"{'ok  ' if v else 'FAIL'} {k}")
    typer.echo(f"report: {out_dir / 'report.md'}")
    if check and not summary["passed"]:
        raise typer.Exit(1)


@lab_app.command()
def down(
    sriov: Annotated[
        bool, typer.Option("--sriov", help="Remove the nested SR-IOV lab instead.")
    ] = False,
) -> None:
    """Remove every guest, daemon, bridge, qdisc and file of the lab (also after a crash)."""
    _require_root()
    from sova.lab import lab, nested

    if sriov:
        removed = nested.down(nested.NestedSettings())
        for r in removed:
            _say(f"removed {r}")
    else:
        removed = lab.down(_settings(), say=_say)
    typer.echo(
        f"lab down: {len(removed)} item(s) removed" if removed else "lab down: nothing to remove"
    )


def register(app: typer.Typer) -> None:
    app.add_typer(lab_app)


def main() -> None:
    lab_app()


if __name__ == "__main__":
    main()
