"""``sova scenario``: trace-replay scenarios (YAML + CSV) that ``sova simulate`` runs.

* ``generate``: a fleet workload with the statistics of real cluster traces;
* ``import`` and ``capture``: measured per-VM series — a public trace archive's files, or
  the operator's own Prometheus (docs/operations.md#replay-your-cluster). Both write
  SCENARIO.yaml and SCENARIO.csv beside it, check the result as ``sova validate`` does, and
  print one line saying what they wrote.

Exit codes: 0 done; 2 bad input (a file, a cell, an option, named in the one-line error);
3 Prometheus could not be reached or refused.
"""

from __future__ import annotations

import math
import os
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from sova.traces.inventory import Inventory
    from sova.traces.prometheus import Captured, Connection, Metrics
    from sova.traces.replay import VMSeries, Written

scenario_app = typer.Typer(
    name="scenario",
    help=(
        "Make trace-replay scenarios: generate a fleet workload like real clusters', or "
        "import / capture measured per-VM series (trace archives, Prometheus)."
    ),
    no_args_is_help=True,
)

OutOpt = Annotated[
    Path, typer.Option("--out", "-o", help="The scenario YAML to write (its CSV goes beside it).")
]
InventoryOpt = Annotated[
    Path | None,
    typer.Option(help="YAML of hosts: NIC capacity, VF pool, cores, memory per host."),
]
VfPoolOpt = Annotated[
    int | None, typer.Option(min=0, help="VFs per host [default: the inventory's, else 2].")
]
NicOpt = Annotated[
    str | None, typer.Option(help="NIC line rate per host, e.g. 25Gbit [default: 10Gbit].")
]
CoresOpt = Annotated[int | None, typer.Option(min=1, help="Cores per host [default: 64].")]
MemoryOpt = Annotated[
    str | None, typer.Option(help="Memory per host, e.g. 256GiB [default: 512GiB].")
]
TickOpt = Annotated[
    str | None, typer.Option(help="The simulator's tick [default: 5s, or the step if shorter].")
]
PeriodOpt = Annotated[str, typer.Option(help="The controller's period in the scenario.")]
CompareOpt = Annotated[str, typer.Option(help="Policies the scenario compares, comma-separated.")]
DirectionOpt = Annotated[str, typer.Option(help="A VM's network demand: sum (rx + tx), rx or tx.")]
NameOpt = Annotated[str | None, typer.Option(help="Scenario name [default: the file's stem].")]

# `sova scenario import`'s options.
SourcesArg = Annotated[
    list[Path], typer.Argument(help="Trace files, or folders of them (every *.csv inside).")
]
FormatOpt = Annotated[
    str,
    typer.Option(
        "--format",
        help="bitbrains (GWA-T-12 per-VM files) or long (timestamp,vm,rx,tx[,cpu][,host]).",
    ),
]
HostsOpt = Annotated[
    int | None, typer.Option(min=1, help="Hosts named host1..N, VMs dealt round robin.")
]
PlacementOpt = Annotated[
    Path | None,
    typer.Option(help="CSV of vm,host lines: where each VM runs (instead of --hosts)."),
]
ImportStepOpt = Annotated[
    str | None, typer.Option(help="Row interval [default: the samples' median interval].")
]
SkipOpt = Annotated[
    str | None, typer.Option(help="Start this long after the first sample, e.g. 48h.")
]
DurationOpt = Annotated[
    str | None, typer.Option(help="Keep this much of the trace, e.g. 24h [default: all].")
]
TimeUnitOpt = Annotated[str, typer.Option(help="long: timestamp unit: s, ms or iso8601.")]
RateUnitOpt = Annotated[
    str,
    typer.Option(
        help="long: rx/tx unit: bit/s, kbit/s, Mbit/s, Gbit/s, B/s, kB/s, KiB/s, MB/s, MiB/s."
    ),
]
CpuUnitOpt = Annotated[
    str, typer.Option(help="long: cpu unit: fraction (of the VM's vCPUs, 0..1) or percent.")
]


# `sova scenario capture`'s options (declared here so the command reads as its steps).
PrometheusOpt = Annotated[
    str,
    typer.Option(envvar="SOVA_PROMETHEUS_URL", help="Prometheus base URL, http(s)://HOST:PORT."),
]
StartOpt = Annotated[
    str | None,
    typer.Option(
        help="Window start: epoch seconds or ISO 8601 (UTC unless it says) [default: end - window]."
    ),
]
EndOpt = Annotated[
    str | None, typer.Option(help="Window end: epoch seconds or ISO 8601 [default: now].")
]
WindowOpt = Annotated[str, typer.Option(help="Window length when --start is not given.")]
CaptureStepOpt = Annotated[
    str, typer.Option(help="Row interval; rates are means over each step (>= 2 scrapes).")
]
RateWindowOpt = Annotated[
    str | None,
    typer.Option(
        help="Range rate() averages over, for a scrape interval above half the step "
        "[default: the step]."
    ),
]
TokenFileOpt = Annotated[
    Path | None,
    typer.Option(help="File holding a bearer token for Prometheus (or SOVA_PROMETHEUS_TOKEN)."),
]
CaFileOpt = Annotated[
    Path | None, typer.Option(help="CA bundle that signed Prometheus's TLS certificate.")
]
ClientCertOpt = Annotated[
    Path | None, typer.Option(help="Client certificate (PEM) for mutual TLS.")
]
ClientKeyOpt = Annotated[
    Path | None, typer.Option(help="Its key (PEM) [default: in the certificate file].")
]
TimeoutOpt = Annotated[float, typer.Option(min=0.1, help="Seconds per request to Prometheus.")]
TxMetricOpt = Annotated[str, typer.Option(help="Counter of bytes a VM sent.")]
RxMetricOpt = Annotated[str, typer.Option(help="Counter of bytes a VM received.")]
CpuMetricOpt = Annotated[str, typer.Option(help="Counter of a VM's CPU seconds ('' = no CPU).")]
VcpusMetricOpt = Annotated[str, typer.Option(help="Gauge of a VM's vCPU count ('' = none).")]
MemoryMetricOpt = Annotated[str, typer.Option(help="Gauge of a VM's memory in bytes ('' = none).")]
VmLabelOpt = Annotated[str, typer.Option(help="Label naming the VM.")]
HostLabelOpt = Annotated[str, typer.Option(help="Label naming the host (its :port is dropped).")]
SelectorOpt = Annotated[
    str, typer.Option(help='Extra label matchers for every series, e.g. job="libvirt".')
]


def _fail(msg: str, code: int = 2) -> typer.Exit:
    print(f"error: {msg}", file=sys.stderr, flush=True)
    return typer.Exit(code)


def _duration(option: str, value: str) -> float:
    from sova.units import parse_duration

    try:
        d = parse_duration(value)
    except ValueError as exc:
        raise _fail(f"{option}: {exc}") from None
    if not math.isfinite(d) or d <= 0:
        raise _fail(f"{option}: must be > 0 (got {value!r})")
    return d


def _check_choice(option: str, value: str, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise _fail(f"{option}: {value!r} is not one of {', '.join(choices)}")
    return value


def _inventory(
    path: Path | None,
    vf_pool: int | None,
    nic_capacity: str | None,
    cores: int | None,
    memory: str | None,
) -> Inventory:
    from sova.traces.inventory import load_inventory
    from sova.traces.replay import TraceError

    try:
        return load_inventory(
            path,
            {"vf_pool": vf_pool, "nic_capacity": nic_capacity, "cores": cores, "memory": memory},
        )
    except TraceError as exc:
        raise _fail(str(exc)) from None


def _write(
    out: Path,
    series: list[VMSeries],
    inv: Inventory,
    host_names: list[str],
    placement: dict[str, str],
    *,
    step: float,
    start: float | None,
    end: float | None,
    tick: float | None,
    period: float,
    compare: list[str],
    name: str | None,
    description: str,
) -> Written:
    """Write the scenario and check it as ``sova validate`` would; a refused one is removed."""
    from sova.scenario import ScenarioError, load_scenario
    from sova.traces.replay import TraceError, write_replay

    try:
        written = write_replay(
            out,
            series,
            [inv.plan(h) for h in host_names],
            placement,
            step=step,
            start=start,
            end=end,
            tick=tick,
            period=period,
            compare=compare,
            name=name,
            description=description,
        )
    except (TraceError, OSError) as exc:
        raise _fail(str(exc)) from None
    try:
        load_scenario(out)
    except ScenarioError as exc:
        out.unlink(missing_ok=True)
        written.trace.unlink(missing_ok=True)
        raise _fail(f"the written scenario was refused, nothing kept: {exc}") from None
    return written


def _run_options(
    tick: str | None, period: str, compare: str
) -> tuple[float | None, float, list[str]]:
    """The scenario's tick, controller period and policies, checked before any reading."""
    policies = [p.strip() for p in compare.split(",") if p.strip()]
    if not policies:
        raise _fail("--compare: name at least one policy")
    return (
        (None if tick is None else _duration("--tick", tick)),
        _duration("--period", period),
        policies,
    )


def _report(w: Written) -> None:
    typer.echo(
        f"wrote {w.scenario} and {w.trace.name}: {w.vms} VM(s) on {w.hosts} host(s), "
        f"{w.rows} steps of {w.step:g} s, mean offered {w.offered_mbps:,.1f} Mbit/s"
    )


@scenario_app.command("import")
def import_(
    sources: SourcesArg,
    out: OutOpt,
    fmt: FormatOpt,
    hosts: HostsOpt = None,
    placement: PlacementOpt = None,
    inventory: InventoryOpt = None,
    vf_pool: VfPoolOpt = None,
    nic_capacity: NicOpt = None,
    cores: CoresOpt = None,
    memory: MemoryOpt = None,
    step: ImportStepOpt = None,
    skip: SkipOpt = None,
    duration: DurationOpt = None,
    time_unit: TimeUnitOpt = "s",
    rate_unit: RateUnitOpt = "Mbit/s",
    cpu_unit: CpuUnitOpt = "fraction",
    direction: DirectionOpt = "sum",
    tick: TickOpt = None,
    period: PeriodOpt = "10s",
    compare: CompareOpt = "default,dsr-iov,sova",
    name: NameOpt = None,
) -> None:
    """A trace-replay scenario from a public trace archive's per-VM files."""
    from sova.traces.archive import DIRECTIONS, LongUnits, read_bitbrains, read_long
    from sova.traces.replay import TraceError, median_step, read_placement

    _check_choice("--format", fmt, ("bitbrains", "long"))
    _check_choice("--direction", direction, DIRECTIONS)
    # every option is checked before the files are read (an archive takes a while)
    run = _run_options(tick, period, compare)
    skip_s = _duration("--skip", skip) if skip else 0.0
    keep_s = _duration("--duration", duration) if duration else None
    step_s = _duration("--step", step) if step else None
    try:
        units = LongUnits(time=time_unit, rate=rate_unit, cpu=cpu_unit) if fmt == "long" else None
    except TraceError as exc:
        raise _fail(str(exc)) from None
    files = _trace_files(sources)
    inv = _inventory(inventory, vf_pool, nic_capacity, cores, memory)
    if fmt == "bitbrains" and hosts is None and placement is None and not inv.hosts:
        raise _fail("say where the VMs run: --hosts N, --placement FILE or --inventory with hosts")
    try:
        where = read_placement(placement) if placement is not None else None
        if units is None:
            series = read_bitbrains(files, direction)
        else:
            series = [s for f in files for s in read_long(f, units, direction)]
        s_step = step_s or median_step(series)
    except TraceError as exc:
        raise _fail(str(exc)) from None
    host_names, where = _imported_placement(series, where, hosts, inv)
    start = min(s.t[0] for s in series) + skip_s
    end = start + keep_s if keep_s is not None else None
    if skip and end is None:
        end = max(s.t[-1] for s in series) + s_step
    written = _write(
        out,
        series,
        inv,
        host_names,
        where,
        step=s_step,
        start=start,
        end=end,
        tick=run[0],
        period=run[1],
        compare=run[2],
        name=name,
        description=f"Imported from {len(files)} {fmt} file(s) by `sova scenario import`.",
    )
    _report(written)


def _trace_files(sources: list[Path]) -> list[Path]:
    """The files named, and every *.csv in the folders named."""
    files: list[Path] = []
    for src in sources:
        if src.is_dir():
            found = sorted(src.glob("*.csv"))
            if not found:
                raise _fail(f"{src}: a folder with no *.csv file")
            files.extend(found)
        elif src.is_file():
            files.append(src)
        else:
            raise _fail(f"{src}: no such file or folder")
    return files


def _imported_placement(
    series: list[VMSeries], where: dict[str, str] | None, hosts: int | None, inv: Inventory
) -> tuple[list[str], dict[str, str]]:
    """The hosts and each VM's host: from --placement, else the series' own host column,
    else dealt round robin on --hosts N or the inventory's hosts."""
    from sova.traces.archive import placement_from_series
    from sova.traces.replay import place_round_robin

    vms = [s.name for s in series]
    if where is None and hosts is None:
        where = placement_from_series(series)
    if where is not None:
        unplaced = [vm for vm in vms if vm not in where]
        if unplaced:
            raise _fail(
                f"--placement: VM {unplaced[0]!r} is on no host ({len(unplaced)} VM(s) unplaced)"
            )
        return list(dict.fromkeys([h.name for h in inv.hosts] + [where[v] for v in vms])), where
    if hosts is not None:
        host_names = [f"host{i + 1}" for i in range(hosts)]
    elif inv.hosts:
        host_names = [h.name for h in inv.hosts]
    else:
        raise _fail("say where the VMs run: --hosts N, --placement FILE or --inventory with hosts")
    return host_names, place_round_robin(vms, [inv.plan(h) for h in host_names])


def _instant(option: str, value: str) -> float:
    """Epoch seconds from epoch seconds or an ISO 8601 date-time (UTC unless it says)."""
    try:
        return float(value)
    except ValueError:
        pass
    try:
        dt = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise _fail(
            f"{option}: {value!r} is neither epoch seconds nor an ISO 8601 date-time"
        ) from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.timestamp()


@scenario_app.command("capture")
def capture(
    out: OutOpt,
    prometheus: PrometheusOpt,
    start: StartOpt = None,
    end: EndOpt = None,
    window: WindowOpt = "1h",
    step: CaptureStepOpt = "60s",
    rate_window: RateWindowOpt = None,
    inventory: InventoryOpt = None,
    vf_pool: VfPoolOpt = None,
    nic_capacity: NicOpt = None,
    cores: CoresOpt = None,
    memory: MemoryOpt = None,
    token_file: TokenFileOpt = None,
    ca_file: CaFileOpt = None,
    client_cert: ClientCertOpt = None,
    client_key: ClientKeyOpt = None,
    timeout: TimeoutOpt = 30.0,
    tx_metric: TxMetricOpt = "libvirt_domain_interface_stats_transmit_bytes_total",
    rx_metric: RxMetricOpt = "libvirt_domain_interface_stats_receive_bytes_total",
    cpu_metric: CpuMetricOpt = "libvirt_domain_info_cpu_time_seconds_total",
    vcpus_metric: VcpusMetricOpt = "libvirt_domain_info_virtual_cpus",
    memory_metric: MemoryMetricOpt = "libvirt_domain_info_maximum_memory_bytes",
    vm_label: VmLabelOpt = "domain",
    host_label: HostLabelOpt = "instance",
    selector: SelectorOpt = "",
    direction: DirectionOpt = "sum",
    tick: TickOpt = None,
    period: PeriodOpt = "10s",
    compare: CompareOpt = "default,dsr-iov,sova",
    name: NameOpt = None,
) -> None:
    """A trace-replay scenario of your own cluster, from Prometheus: each VM's network and
    CPU over a window, on the hosts it ran on, with VF pools from the inventory."""
    from sova.traces.archive import DIRECTIONS
    from sova.traces.prometheus import Metrics

    _check_choice("--direction", direction, DIRECTIONS)
    if not prometheus.startswith(("http://", "https://")):
        raise _fail(f"--prometheus: {prometheus!r} must be http://HOST:PORT or https://…")
    run = _run_options(tick, period, compare)
    t_end = _instant("--end", end) if end else time.time()
    t_start = _instant("--start", start) if start else t_end - _duration("--window", window)
    s_step = _duration("--step", step)
    conn = _prometheus(prometheus, token_file, ca_file, client_cert, client_key, timeout)
    inv = _inventory(inventory, vf_pool, nic_capacity, cores, memory)
    metrics = Metrics(
        tx=tx_metric,
        rx=rx_metric,
        cpu=cpu_metric or None,
        vcpus=vcpus_metric or None,
        memory=memory_metric or None,
        vm_label=vm_label,
        host_label=host_label,
        selector=selector,
    )
    rate_s = _duration("--rate-window", rate_window) if rate_window else None
    got = _fetch(conn, t_start, t_end, s_step, metrics, direction, rate_s)
    host_names, placement = _captured_placement(inv, got)
    written = _write(
        out,
        got.series,
        inv,
        host_names,
        placement,
        step=got.step,
        start=got.start,
        end=got.end,
        tick=run[0],
        period=run[1],
        compare=run[2],
        name=name,
        description=_captured_description(conn, got),
    )
    for note in got.notes:
        print(f"note: {note}", file=sys.stderr)
    _report(written)


def _fetch(
    conn: Connection,
    t_start: float,
    t_end: float,
    step_s: float,
    metrics: Metrics,
    direction: str,
    rate_s: float | None,
) -> Captured:
    """The series from Prometheus; exit 3 when it cannot be reached or refuses, 2 on what
    it answered that makes no trace."""
    from sova.traces.prometheus import CaptureError
    from sova.traces.prometheus import capture as run_capture
    from sova.traces.replay import TraceError

    try:
        return run_capture(conn, t_start, t_end, step_s, metrics, direction, rate_s)
    except CaptureError as exc:
        raise _fail(str(exc), 3) from None
    except TraceError as exc:
        raise _fail(str(exc)) from None


def _captured_description(conn: Connection, got: Captured) -> str:
    return (
        f"Captured from {_shown(conn.url)} by `sova scenario capture`: "
        f"{datetime.fromtimestamp(got.start, UTC).isoformat(timespec='seconds')} "
        f"+ {got.end - got.start:g} s every {got.step:g} s."
    )


def _prometheus(
    url: str,
    token_file: Path | None,
    ca_file: Path | None,
    client_cert: Path | None,
    client_key: Path | None,
    timeout: float,
) -> Connection:
    """The connection to Prometheus, its credentials read and its files checked first."""
    from sova.traces.prometheus import Connection

    token = os.environ.get("SOVA_PROMETHEUS_TOKEN")
    if token_file is not None:
        try:
            token = token_file.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise _fail(f"--token-file: cannot read {token_file}: {exc}") from None
    for opt, p in (
        ("--ca-file", ca_file),
        ("--client-cert", client_cert),
        ("--client-key", client_key),
    ):
        if p is not None and not p.is_file():
            raise _fail(f"{opt}: {p} is not a file")
    return Connection(url, token or None, ca_file, client_cert, client_key, timeout)


def _captured_placement(inv: Inventory, got: Captured) -> tuple[list[str], dict[str, str]]:
    """The hosts (the inventory's, then those the series ran on) and each VM's host, the
    series' host labels renamed to the inventory's names where it lists them."""
    from sova.traces.prometheus import host_name

    listed = {h.instance for h in inv.hosts if h.instance} | {h.name for h in inv.hosts}

    def named(label: str) -> str:
        return inv.name_of(label) if label in listed else host_name(label)

    for s in got.series:
        s.host = named(s.host or "host")
    host_names = list(dict.fromkeys([h.name for h in inv.hosts] + [named(h) for h in got.hosts]))
    return host_names, {s.name: s.host or host_names[0] for s in got.series}


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


def _shown(url: str) -> str:
    """``url`` without user:password (the scenario's description is shared)."""
    from urllib.parse import urlsplit, urlunsplit

    p = urlsplit(url)
    return urlunsplit((p.scheme, p.netloc.rpartition("@")[2], p.path, "", ""))


def register(app: typer.Typer) -> None:
    app.add_typer(scenario_app)
