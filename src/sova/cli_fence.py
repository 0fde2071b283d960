"""``sova fence``: fences on a running manager (maintenance, pin, VF freezes), host lists,
the client config's groups, and fences that expire (docs/operations.md#fences).

Split from :mod:`sova.cli_operator` (issue 40's module size); registered by it."""

from datetime import UTC, datetime
from typing import Annotated, Any

import typer

# The shared part lives in cli_operator_conn; the names other modules and tests import
# from here stay importable (``X as X``).
from sova.cli_operator_conn import FORGING_CHARS as FORGING_CHARS
from sova.cli_operator_conn import (
    By,
    Reason,
    _Conn,
    _conn,
    _connect,
    _out,
    _who,
    check_name,
)
from sova.cli_operator_conn import CaCert as CaCert
from sova.cli_operator_conn import ClientConfigOpt as ClientConfigOpt
from sova.cli_operator_conn import _check_url as _check_url
from sova.cli_operator_conn import _fail as _fail
from sova.cli_operator_conn import _printable as _printable
from sova.cli_operator_conn import _redact as _redact
from sova.cli_operator_conn import check_reason as check_reason

# --------------------------------------------------------------------------- fences

fence_app = typer.Typer(
    name="fence",
    help=(
        "Fences: maintenance (a host is neither source nor target), pin (a VM never "
        "migrates), vf-freeze-host / vf-freeze-vm (VF assignments stay as they are)."
    ),
    no_args_is_help=True,
    add_completion=False,
)
fence_app.callback()(_connect)

Kind = Annotated[str, typer.Argument(help="maintenance | pin | vf-freeze-host | vf-freeze-vm")]
Name = Annotated[str, typer.Argument(help="The host or VM.")]
Names = Annotated[
    list[str],
    typer.Argument(help="The hosts or VMs (one or more); @NAME: the client config's group NAME."),
]
HOST_FENCES = ("maintenance", "vf-freeze-host")


@fence_app.command("list")
def fence_list(ctx: typer.Context) -> None:
    """Fences in force."""
    c = _conn(ctx)
    rows = c.call("GET", "/v1/fences")
    lines = [fence_line(f) for f in rows] or ["(no fences)"]
    _out(c, rows, "\n".join(lines))


def fence_line(f: dict[str, Any]) -> str:
    """One fence; free text escaped (a stored separator must not forge a line)."""
    until = f.get("until_s")
    return (
        f"{_printable(f['kind']):<15} {_printable(f['name']):<20} by {_printable(f['set_by'])} "
        f"at t={f['since_s']:.0f}"
        + (f"  until {_iso(until)}" if until is not None else "")
        + (f"  ({_printable(f['reason'])})" if f["reason"] else "")
    )


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


_DURATION = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_until(value: str) -> dict[str, float]:
    """``--until``: a duration (``90m``, ``2h``, ``1d``; from now on the manager's clock) or
    an ISO 8601 time (UTC unless it names an offset), as the fence API's ``for_s`` or
    ``until_s``; exit 2 naming the value otherwise."""
    v = value.strip()
    if v[:-1].replace(".", "", 1).isdigit() and v[-1:] in _DURATION:
        seconds = float(v[:-1]) * _DURATION[v[-1]]
        if seconds > 0:
            return {"for_s": seconds}
    else:
        try:
            t = datetime.fromisoformat(v)
        except ValueError:
            pass
        else:
            return {"until_s": (t if t.tzinfo else t.replace(tzinfo=UTC)).timestamp()}
    return dict(
        _fail(
            f"--until = {value!r}: a duration (90m, 2h, 1d) or an ISO time "
            "(2026-12-07T18:00, UTC unless it names an offset)",
            2,
        )
    )


def expand_groups(c: _Conn, names: list[str]) -> list[str]:
    """The names with each ``@GROUP`` replaced by the client config's group of that name
    (docs/operations.md#the-client-config), each name once, in order; exit 2 naming an
    unknown group."""
    out: list[str] = []
    for name in names:
        if name.startswith("@"):
            members = c.groups.get(name[1:])
            if members is None:
                known = ", ".join(sorted(c.groups)) or "none defined"
                _fail(
                    f"name = {name!r}: no group {name[1:]!r} in the client config (groups: {known})",
                    2,
                )
            out.extend(members or [])
        else:
            out.append(name)
    return list(dict.fromkeys(out))


def unreported(c: _Conn, kind: str, names: list[str]) -> list[str]:
    """The names no host's reports carry (a host for host fences, a VM for the others):
    a typo would fence nothing while the operator believes it in force."""
    view = c.call("GET", "/v1/cluster", params={"limit": 10_000})
    if kind in HOST_FENCES:
        known = {h["host"] for h in view["hosts"]}
    else:
        known = {vm for h in view["hosts"] for vm in h["vms"]}
    return [n for n in names if n not in known]


@fence_app.command("set")
def fence_set(
    ctx: typer.Context,
    kind: Kind,
    names: Names,
    reason: Reason = None,
    by: By = None,
    force: Annotated[
        bool,
        typer.Option("--force", help="Fence names no host has reported yet (a new host)."),
    ] = False,
    until: Annotated[
        str | None,
        typer.Option(
            "--until",
            help="The fence expires then: a duration (90m, 2h, 1d) or an ISO time (UTC "
            "unless it names an offset); the next planning round lifts it, audited.",
        ),
    ] = None,
) -> None:
    """Set a fence on each name (kept across manager restarts). A name no host has reported
    is refused unless --force."""
    end = parse_until(until) if until is not None else {}
    c = _conn(ctx)
    names = expand_groups(c, names)
    check_name("kind", kind)
    for name in names:
        check_name("name", name)
    check_reason(reason)
    if not force:
        unknown = unreported(c, kind, names)
        if unknown:
            what = "host" if kind in HOST_FENCES else "VM"
            _fail(
                f"name = {', '.join(map(repr, unknown))}: no {what} of that name has reported "
                "(a typo?); --force fences it anyway",
                2,
            )
    done = []
    for name in names:
        path = f"/v1/fences/{check_name('kind', kind)}/{check_name('name', name)}"
        body = {"by": _who(c, by), "reason": check_reason(reason), **end}
        done.append(c.call("PUT", path, json=body))
    _out(
        c,
        done if len(done) > 1 else done[0],
        "\n".join(
            f"{f['kind']} set on {f['name']} by {f['set_by']}"
            + (f" until {_iso(f['until_s'])}" if f.get("until_s") is not None else "")
            for f in done
        ),
    )


@fence_app.command("clear")
def fence_clear(
    ctx: typer.Context, kind: Kind, names: Names, reason: Reason = None, by: By = None
) -> None:
    """Lift the fence from each name."""
    c = _conn(ctx)
    names = expand_groups(c, names)
    done = []
    for name in names:
        path = f"/v1/fences/{check_name('kind', kind)}/{check_name('name', name)}"
        params = {"by": _who(c, by), "reason": check_reason(reason)}
        done.append({"kind": kind, "name": name, **c.call("DELETE", path, params=params)})
    _out(
        c,
        done if len(done) > 1 else done[0],
        "\n".join(f"{kind} lifted from {d['name']}" for d in done),
    )
