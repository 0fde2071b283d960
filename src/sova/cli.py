"""The ``sova`` command line."""

from __future__ import annotations

import functools
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape

from sova import __version__

if TYPE_CHECKING:
    from sova.scenario import Scenario
    from sova.sim.runner import Interrupted

# The commands of this module (simulate, validate, scenarios). The other modules' commands
# join when the whole command line is asked for (`app`, full_app()): `sova simulate` does
# not import the operator client, the daemons or the demo (0.1-0.3 s each run).
_core = typer.Typer(
    name="sova",
    help=(
        "Sova: autonomic SR-IOV VF and bandwidth allocation for KVM clusters. "
        "Gives scarce VFs to the VMs that are network-intensive now, keeps everyone else "
        "on virtio, holds SLA bandwidth, and removes hotspots by live migration."
    ),
    epilog=(
        "Exit codes: 0 done; 1 the run failed (a host, a daemon or the kernel refused); "
        "2 bad input (a scenario, config or option, named in the one-line error); "
        "3 the manager could not be reached or refused the token (plans, fence, mode, audit; status: none answered); "
        "130 interrupted (Ctrl-C or SIGTERM; nothing half-written is left)."
    ),
    no_args_is_help=True,
    # Help strings carry literal "[default: ...]" text; rich markup would eat it as tags.
    rich_markup_mode=None,
)
err = Console(stderr=True, emoji=False)  # ":x:" in a value is text, not an emoji


def _version(value: bool) -> None:
    if value:
        typer.echo(f"sova {__version__}")
        raise typer.Exit()


@_core.callback()
def _root(
    version: Annotated[
        bool | None,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version."),
    ] = None,
) -> None:
    """Sova command line."""


# the timeline's resolution (docs/design.md#timeline-resolution)
TimelinePeriod = Annotated[
    str | None,
    typer.Option(
        help="Keep the timeline's rows every this long (60s, 10m; a multiple of "
        "controller.period) [default: the scenario's output.timeline_period, else "
        "every control period].",
    ),
]
TimelineVMs = Annotated[
    list[str] | None,
    typer.Option(help="Keep only these VMs' timeline rows (repeatable) [default: all]."),
]
TimelineFormat = Annotated[
    str,
    typer.Option(
        help="The timeline's file: csv (timeline.csv), columns (a timeline/ folder, a numpy "
        ".npy file per column) or auto (csv up to 200,000 rows, columns past that) "
        "[default: auto].",
        show_default=False,
    ),
]
Workers = Annotated[
    int | None,
    typer.Option(
        min=1, help="Local processes for a sweep's runs [default: the CPU count; 1 = serial]."
    ),
]
# the compiled core's threads (docs/design.md#threads)
Threads = Annotated[
    str,
    typer.Option(
        help="Threads each run's compiled core shares a tick's VMs and hosts among (a "
        "count >= 1, or auto: the CPU count); the outputs are the same for any number "
        "[default: 1].",
        show_default=False,
    ),
]


@_core.command()
def simulate(
    scenario: Annotated[
        Path, typer.Argument(help="Scenario YAML file or shipped name (see `sova scenarios`).")
    ],
    out: Annotated[
        Path | None,
        typer.Option("--out", "-o", help="Output directory [default: out/<scenario name>]."),
    ] = None,
    seed: Annotated[
        int | None,
        typer.Option(help="Override the scenario's seed."),
    ] = None,
    policy: Annotated[
        list[str] | None,
        typer.Option("--policy", "-p", help="Run only these policies (repeatable)."),
    ] = None,
    progress: Annotated[
        bool,
        typer.Option(help="Show a progress bar (simulated time, rate, ETA) on a terminal."),
    ] = True,
    workers: Workers = None,
    dask: Annotated[
        str | None,
        typer.Option(
            help="Run a sweep's runs on Dask distributed: a scheduler address "
            "(tcp://host:8786) or 'local' for a local cluster of --workers processes.",
        ),
    ] = None,
    timeline_period: TimelinePeriod = None,
    timeline_vm: TimelineVMs = None,
    timeline_format: TimelineFormat = "auto",
    threads: Threads = "1",
) -> None:
    """Run a scenario in the built-in simulated cluster and write its report.

    Writes timeline.csv (or timeline/, see --timeline-format), events.csv, summary.json,
    report.md and PNG plots into --out.
    A scenario with a bad value is refused before anything is written. A sweep's points
    run in parallel (local processes, or Dask with --dask) with the serial run's outputs.
    Ctrl-C writes the outputs of the policies (sweep points) already completed, then exits
    130.
    """
    import os

    from sova.shipped import resolve_scenario
    from sova.sim.output import write_outputs
    from sova.sim.runner import Interrupted, run_points

    _check_format(timeline_format)
    n_threads = _threads(threads)
    points, known = _sim_points(resolve_scenario(scenario), policy, seed)
    points = _with_output(points, timeline_period, timeline_vm)
    out_dir = out or Path("out") / points[0].name
    if out_dir.exists() and not out_dir.is_dir():
        _option_error(f"--out: {out_dir} exists and is not a folder")
    chosen = [p for p in known if not policy or p in policy]
    # quiet when the output goes to a file or a pipe: a bar there is noise in a log
    show = progress and sys.stdout.isatty() and sys.stderr.isatty()
    try:
        with _SimProgress(points, chosen, show) as bar:
            results = run_points(
                points,
                chosen,
                workers=workers or os.cpu_count() or 1,
                dask=dask,
                on_tick=bar.advance,
                on_start=bar.start,
                threads=n_threads,
            )
    except Interrupted as stop:
        _write_interrupted(out_dir, points, stop, timeline_format)
        raise typer.Exit(130) from None
    _print_summary(write_outputs(out_dir, results, timeline_format), points, chosen)
    typer.echo(f"report: {out_dir / 'report.md'}")


def _sim_points(
    scenario: Path, policy: list[str] | None, seed: int | None
) -> tuple[list[Scenario], list[str]]:
    """The scenario's points (one, or a sweep's), with --seed applied, and the policies it
    compares; a bad scenario or an unknown --policy exits 2 with one line."""
    from sova.scenario import ScenarioError, load_sweep

    try:
        points = load_sweep(scenario)
    except ScenarioError as exc:
        err.print(f"[red]error:[/red] {escape(str(exc))}", highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None
    known = points[0].policies
    if policy:
        bad = [p for p in policy if p not in known]
        if bad:
            err.print(
                f"[red]error:[/red] --policy: unknown policy {bad[0]!r}; "
                f"this scenario compares {', '.join(known)}",
                highlight=False,
            )
            raise typer.Exit(2)
    updates: dict[str, object] = {} if seed is None else {"seed": seed}
    return [p.model_copy(update=updates) for p in points], known


def _with_output(
    points: list[Scenario], period: str | None, vms: list[str] | None
) -> list[Scenario]:
    """--timeline-period and --timeline-vm over the scenario's ``output:``, checked as the
    scenario's own fields are (one line naming the option, exit 2)."""
    if period is None and not vms:
        return points
    from pydantic import ValidationError

    from sova.scenario import OutputSpec

    out: list[Scenario] = []
    for p in points:
        update: dict[str, object] = {}
        if period is not None:
            update["timeline_period"] = period
        if vms:
            update["timeline_vms"] = vms
        try:
            spec = OutputSpec.model_validate({**p.output.model_dump(), **update})
            q = p.model_copy(update={"output": spec})
            q.check_output()
        except ValidationError as exc:
            e = exc.errors()[0]
            field = str(e["loc"][0]) if e["loc"] else ""
            option = "--timeline-vm" if field == "timeline_vms" else "--timeline-period"
            msg = str(e["msg"]).removeprefix("Value error, ")
            _option_error(f"{option}: {msg} (got {e.get('input')!r})")
        except ValueError as exc:
            option = "--timeline-period" if "period" in str(exc) else "--timeline-vm"
            _option_error(f"{option}: {exc}")
        out.append(q)
    return out


def _check_format(timeline_format: str) -> None:
    from sova.sim.output import TIMELINE_FORMATS

    if timeline_format not in TIMELINE_FORMATS:
        _option_error(
            f"--timeline-format: {timeline_format!r} is none of {', '.join(TIMELINE_FORMATS)}"
        )


def _threads(value: str) -> int:
    """--threads: a count >= 1, or auto (the CPU count); else one line, exit 2."""
    import os

    if value.strip().lower() == "auto":
        return os.cpu_count() or 1
    try:
        n = int(value)
    except ValueError:
        n = 0
    if n < 1:
        _option_error(f"--threads: {value!r} is not a count of threads >= 1 or auto")
    return n


def _option_error(line: str) -> NoReturn:
    err.print(f"[red]error:[/red] {escape(line)}", highlight=False, soft_wrap=True)
    raise typer.Exit(2)


def _write_interrupted(
    out_dir: Path, points: list[Scenario], stop: Interrupted, timeline_format: str
) -> None:
    """Ctrl-C: the outputs of what completed, and a line saying what that was."""
    from sova.sim.output import write_outputs

    if stop.completed:
        write_outputs(out_dir, stop.completed, timeline_format)
        what = (
            f"{len(stop.completed)} completed sweep point(s)"
            if points[0].sweep is not None
            else "completed policies " + ", ".join(r.policy for r in stop.completed[0][1])
        )
        err.print(f"interrupted: wrote the outputs of {what} to {out_dir}", highlight=False)
    else:
        err.print("interrupted: no policy completed, nothing written", highlight=False)


def _print_summary(summary: dict[str, Any], points: list[Scenario], chosen: list[str]) -> None:
    """One line per policy (or the sweep's size)."""
    if "policies" in summary:
        from sova.sim.report import holder_verdict

        specs = {p.name: p for p in points[0].policy_specs}
        for name, s in summary["policies"].items():
            match = s.get("paper_vf_holders_match")
            tag = ""
            if match is not None:
                tag = "  paper VF holders: " + holder_verdict(specs.get(name), match)
            resp = s.get("mean_response_ms")
            extra = f", mean response {resp:.2f} ms" if resp is not None else ""
            typer.echo(
                f"{name:>14}: {s['throughput_mbps']:9.1f} Mbit/s, {s['vf_changes']:3d} VF changes, "
                f"{s['migrations']} migrations{extra}{tag}"
            )
    else:
        typer.echo(f"{len(summary['sweep']['points'])} sweep points x {len(chosen)} policies")


class _SimProgress:
    """The progress bar of ``sova simulate``: simulated time, its rate and the ETA."""

    def __init__(self, points: list[Any], policies: list[str], show: bool) -> None:
        from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

        self.tick = points[0].tick
        self.duration = points[0].duration
        self.total = sum(int(round(p.duration / p.tick)) for p in points) * len(policies)
        self.show = show
        self.bar = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            TextColumn("{task.fields[sim]}"),
            TextColumn("{task.fields[rate]}"),
            TimeRemainingColumn(),
            console=err,
            disable=not show,
            transient=True,
        )
        self.task = self.bar.add_task(points[0].name, total=self.total, sim="", rate="")
        self.done = 0
        self.in_run = 0
        self.t0 = 0.0
        # Ctrl-C is raised at once, except while the bar's own code runs: a KeyboardInterrupt
        # raised inside rich's update can leave its lock held, and the bar's refresh thread
        # then waits for it while the exit joins that thread (a fresh-clone CI run hung
        # 60 s after its Ctrl-C). There it is taken as soon as the update returns.
        self._in_bar = False
        self._asked = False
        self._previous: Any = None

    def _on_sigint(self, signum: int, frame: Any) -> None:
        if self._in_bar:
            self._asked = True
            return
        raise KeyboardInterrupt

    def _update(self, **fields: Any) -> None:
        self._in_bar = True
        try:
            self.bar.update(self.task, **fields)
        finally:
            self._in_bar = False
        if self._asked:
            raise KeyboardInterrupt

    def __enter__(self) -> _SimProgress:
        import signal
        import threading
        import time

        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._on_sigint)
        self.t0 = time.monotonic()
        self._in_bar = True
        try:
            self.bar.__enter__()
        finally:
            self._in_bar = False
        return self

    def __exit__(self, *exc: object) -> None:
        import signal

        self._in_bar = True  # a Ctrl-C now changes nothing: the run is over either way
        try:
            self.bar.__exit__(None, None, None)
        finally:
            if self._previous is not None:
                signal.signal(signal.SIGINT, self._previous)
            self._in_bar = False

    def start(self, scn: Any, policy: str) -> None:
        what = f"{scn.name} [{policy}]"
        if scn.sweep:
            what += f" {scn.sweep.variable}={scn.sweep_value}"
        self.in_run = 0
        # escaped: rich would take "[sova]" for a style tag and drop it
        self._update(description=escape(what))

    def advance(self, n: int) -> None:
        import time

        self.done += n
        self.in_run += n
        if not self.show:
            return
        wall = max(time.monotonic() - self.t0, 1e-9)
        sim_s = self.done * self.tick
        self._update(
            advance=n,
            sim=f"t = {min(self.in_run * self.tick, self.duration):,.0f}/{self.duration:,.0f} s",
            rate=f"{sim_s / wall:,.0f} sim-s/s",
        )


@_core.command()
def validate(
    scenario: Annotated[Path, typer.Argument(help="Scenario YAML file or shipped name.")],
) -> None:
    """Check a scenario file and report every bad field, without running it."""
    from sova.scenario import ScenarioError, load_scenario
    from sova.shipped import resolve_scenario

    scenario = resolve_scenario(scenario)

    try:
        scn = load_scenario(scenario)
    except ScenarioError as exc:
        err.print(f"[red]error:[/red] {escape(str(exc))}", highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None
    typer.echo(
        f"{scenario}: ok ({len(scn.hosts)} host(s), {len(scn.vms)} VM(s), "
        f"policies {', '.join(scn.policies)})"
    )


@_core.command()
def scenarios() -> None:
    """List the scenarios shipped with Sova (pass the name to simulate, demo or testbed)."""
    from sova.shipped import list_shipped, shipped_root

    found = list_shipped()
    if not found:
        err.print("[red]error:[/red] this install carries no scenarios", highlight=False)
        raise typer.Exit(1)
    width = max(len(name) for name, _ in found)
    for name, about in found:
        typer.echo(f"{name:<{width}}  {about}".rstrip())
    typer.echo(f"({shipped_root()})")


CORE_COMMANDS = ("simulate", "validate", "scenarios")


@functools.cache  # the other modules' commands are registered once
def full_app() -> typer.Typer:
    """The whole ``sova`` command line: this module's commands and every other module's."""
    _register_subcommands()
    return _core


def __getattr__(name: str) -> typer.Typer:
    # `from sova.cli import app` (the tests, scripts/manpages.py) gets the whole CLI.
    if name == "app":
        return full_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _register_subcommands() -> None:
    # The daemon and testbed commands import their heavy dependencies lazily, inside the
    # commands, so `sova --help` stays fast.
    from sova.cli_daemons import register as register_daemons
    from sova.cli_lab import register as register_lab
    from sova.cli_operator import register as register_operator
    from sova.cli_scenario import register as register_scenario
    from sova.cli_status import register as register_status
    from sova.cli_store import register as register_store
    from sova.cli_testbed import register as register_testbed

    register_daemons(_core)
    register_testbed(_core)
    register_lab(_core)
    register_operator(_core)
    register_status(_core)
    register_store(_core)
    register_scenario(_core)


def main() -> None:
    import typer.main

    argv = sys.argv[1:]
    try:
        if argv[:1] and argv[0] in CORE_COMMANDS:
            # this module's command alone: its help, options and errors are the same
            # with or without the other commands beside it
            _core(args=argv, prog_name="sova")
            return
        from sova.cli_operator import hoist_group_options

        app = full_app()
        # Operators type --token-file and the other connection options after the
        # subcommand too (sova plans list --token-file F).
        argv = hoist_group_options(argv, typer.main.get_command(app))
        app(args=argv, prog_name="sova")
    except ModuleNotFoundError as exc:
        # A role's extra is not installed (e.g. `sova simulate` on an agent-only host):
        # one line that says what to install, not a traceback.
        from sova.install import MissingExtra, missing_module_hint

        if isinstance(exc, MissingExtra):  # its message names the extra already
            err.print(f"[red]error:[/red] {escape(str(exc))}", highlight=False, soft_wrap=True)
            sys.exit(2)
        hint = missing_module_hint(exc.name)
        if hint is None:
            raise
        err.print(
            f"[red]error:[/red] {escape(str(exc))}; {escape(hint)}", highlight=False, soft_wrap=True
        )
        sys.exit(2)


if __name__ == "__main__":
    main()
