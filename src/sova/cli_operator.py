"""``sova plans``, ``sova fence``, ``sova mode`` and ``sova audit``: operator control of a
running manager over its HTTP API (docs/operations.md#operator-control).

Every command reaches the manager at ``--manager-url`` (``SOVA_MANAGER_URL``) with the admin
token from ``SOVA_ADMIN_TOKEN`` or ``--token-file`` (a file holding the token, or the
manager's environment file with ``SOVA_MANAGER_ADMIN_TOKEN=...``), within ``--timeout``.
The audit log's "who" is the token's credential name (docs/operations.md#who-may-act);
``--by`` (``SOVA_OPERATOR``, default: the login name) annotates it.

Exit codes: 0 done; 1 the manager refused (plan not open, expired, or cannot run now; no such
plan or fence); 2 bad input; 3 the manager could not be reached or refused the token.
"""

from datetime import UTC, datetime
from typing import Annotated, Any

import typer

from sova.cli_fence import Name, fence_app

# The shared part lives in cli_operator_conn; the names other modules and tests import
# from here stay importable (``X as X``).
from sova.cli_operator_conn import FORGING_CHARS as FORGING_CHARS
from sova.cli_operator_conn import (
    After,
    AsJson,
    By,
    HostFilterOpt,
    Limit,
    ManagerUrl,
    OldestFirst,
    Output,
    Reason,
    Since,
    Timeout,
    TokenFile,
    Until,
    VMFilterOpt,
    _Conn,
    _conn,
    _connect,
    _out,
    _util,
    _who,
    check_name,
    connection,
    log_params,
)
from sova.cli_operator_conn import CaCert as CaCert
from sova.cli_operator_conn import ClientConfigOpt as ClientConfigOpt
from sova.cli_operator_conn import _check_url as _check_url
from sova.cli_operator_conn import _fail as _fail
from sova.cli_operator_conn import _printable as _printable
from sova.cli_operator_conn import _redact as _redact
from sova.cli_operator_conn import check_reason as check_reason

# --------------------------------------------------------------------------- plans

plans_app = typer.Typer(
    name="plans",
    help="Proposed plans (recommend mode): list, show, approve, reject.",
    no_args_is_help=True,
    add_completion=False,
)
plans_app.callback()(_connect)


def _plan_line(p: dict[str, Any]) -> str:
    a = p["actions"][0] if p["actions"] else {}
    who = f"  {p['decided_by']}" if p.get("decided_by") else ""
    return (
        f"{p['id']:>20}  {p['state']:<10}  migrate {a.get('vm', '?')} "
        f"{a.get('src', '?')} -> {a.get('dst', '?')}  expires t={p['expires_s']:.0f}{who}"
    )


@plans_app.command("list")
def plans_list(
    ctx: typer.Context,
    state: Annotated[
        str | None,
        typer.Option("--state", help="Only this state (proposed, approved, rejected, ...)."),
    ] = None,
    limit: Limit = 100,
    after: After = 0,
    oldest_first: OldestFirst = False,
    since: Since = None,
    until: Until = None,
    host: Annotated[
        str | None, typer.Option("--host", help="Only plans moving a VM off or onto it.")
    ] = None,
    vm: VMFilterOpt = None,
) -> None:
    """List plans, newest first."""
    c = _conn(ctx)
    params = log_params(limit, after, oldest_first, since, until, host, vm)
    if state:
        params["state"] = state
    page = c.call("GET", "/v1/plans", params=params)
    lines = [_plan_line(p) for p in page["plans"]] or ["(no plans)"]
    _out(c, page, "\n".join(lines))


@plans_app.command("show")
def plans_show(ctx: typer.Context, plan_id: Annotated[int, typer.Argument(min=1)]) -> None:
    """One plan: why, what, the expected effect, and its fate."""
    c = _conn(ctx)
    p = c.call("GET", f"/v1/plans/{plan_id}")
    lines = [_plan_line(p), f"reason: {p['reason']}"]
    exp = p.get("expected") or {}
    for role in ("src", "dst"):
        if role in exp:
            lines.append(f"{role}: {_util(exp[role]['before'])}  ->  {_util(exp[role]['after'])}")
    if p.get("detail"):
        lines.append(f"detail: {p['detail']}")
    _out(c, p, "\n".join(lines))


def _decide(
    ctx: typer.Context, plan_id: int, verb: str, reason: str | None, by: str | None
) -> None:
    c = _conn(ctx)
    p = c.call(
        "POST",
        f"/v1/plans/{plan_id}/{verb}",
        json={"by": _who(c, by), "reason": check_reason(reason)},
    )
    _out(c, p, _plan_line(p) + (f"\n{p['detail']}" if p.get("detail") else ""))


@plans_app.command("approve")
def plans_approve(
    ctx: typer.Context,
    plan_ids: Annotated[list[int] | None, typer.Argument(min=1, help="Plan ids.")] = None,
    host: Annotated[
        str | None,
        typer.Option("--host", help="Every proposed plan moving a VM off this host."),
    ] = None,
    reason: Reason = None,
    by: By = None,
) -> None:
    """Approve open plans (one or more ids, or every one off --host): each migration is
    carried out now, pre-conditions re-checked. Stops at the first refused (exit 1)."""
    c = _conn(ctx)
    ids = list(plan_ids or [])
    if host is not None:
        params = {"state": "proposed", "host": host, "limit": 1000, "order": "oldest"}
        check_name("--host", host)
        page = c.call("GET", "/v1/plans", params=params)
        ids += [p["id"] for p in page["plans"] if p["actions"] and p["actions"][0]["src"] == host]
        if not ids:
            _fail(f"--host {host}: no proposed plan moves a VM off it", 1)
    if not ids:
        _fail("plans approve: give plan ids or --host HOST", 2)
    for plan_id in ids:
        _decide(ctx, plan_id, "approve", reason, by)


@plans_app.command("reject")
def plans_reject(
    ctx: typer.Context,
    plan_id: Annotated[int, typer.Argument(min=1)],
    reason: Reason = None,
    by: By = None,
) -> None:
    """Reject an open plan: nothing moves."""
    _decide(ctx, plan_id, "reject", reason, by)


# --------------------------------------------------------------------------- hosts

host_app = typer.Typer(
    name="host",
    help="Fleet controls: drain a host (evacuate it and keep it in maintenance), follow the "
    "drain, forget (decommission) a host.",
    no_args_is_help=True,
    add_completion=False,
)
host_app.callback()(_connect)


def drain_text(s: dict[str, Any]) -> str:
    """A drain's progress as the operator reads it."""
    if s["state"] == "not draining":
        return f"{s['host']}: not draining"
    flight = ", ".join(f"{m['vm']} -> {m['dst']}" for m in s["in_flight"]) or "none"
    return "\n".join(
        [
            f"{s['host']}: {s['state']} (set by {s['set_by']})",
            f"  remaining: {len(s['remaining'])} VM(s)"
            + (f" ({', '.join(s['remaining'])})" if s["remaining"] else ""),
            f"  in flight: {flight}",
            f"  moves done: {s['moves_done']}, failed: {s['moves_failed']}",
            f"  last round: {s['why']}",
        ]
    )


def preview_text(p: dict[str, Any]) -> str:
    """A drain preview as a table: the moves in the order the rounds would make them."""
    rows = [(m["vm"] or "-", m["target"] or "-", m["why"]) for m in p["moves"]]
    w_vm = max([2, *(len(r[0]) for r in rows)])
    w_dst = max([6, *(len(r[1]) for r in rows)])
    head = f"{p['host']}: a drain would make {sum(1 for m in p['moves'] if m['target'])} move(s)"
    if p["draining"]:
        head += " (the host is draining already)"
    lines = [head, f"{'VM':<{w_vm}}  {'TARGET':<{w_dst}}  WHY"]
    lines += [f"{vm:<{w_vm}}  {dst:<{w_dst}}  {why}" for vm, dst, why in rows]
    return "\n".join(lines)


@host_app.command("drain")
def host_drain(
    ctx: typer.Context,
    host: Name,
    status: Annotated[bool, typer.Option("--status", help="Show the drain's progress.")] = False,
    cancel: Annotated[
        bool, typer.Option("--cancel", help="Stop draining (the host leaves maintenance).")
    ] = False,
    reason: Reason = None,
    by: By = None,
    wait: Annotated[
        bool,
        typer.Option("--wait", help="Then follow the drain until the host is empty (exit 0)."),
    ] = False,
    wait_timeout: Annotated[
        float,
        typer.Option("--wait-timeout", min=1, max=7 * 86400, help="Give up after (s; exit 1)."),
    ] = 3600.0,
    preview: Annotated[
        bool,
        typer.Option(
            "--preview",
            help="Only show the moves a drain would make (VM, target, why); nothing is "
            "drained, proposed or recorded.",
        ),
    ] = False,
) -> None:
    """Drain HOST: no VM moves onto it, and the planner moves its VMs off, one a round, to
    the cold spots it picks (limits, anti-thrash, placement rules and the mode apply)."""
    c = _conn(ctx)
    path = f"/v1/hosts/{check_name('host', host)}/drain"
    if status and cancel:
        _fail("--status and --cancel: choose one", 2)
    if wait and cancel:
        _fail("--wait and --cancel: choose one", 2)
    if preview and (status or cancel or wait):
        _fail("--preview changes nothing: give it without --status, --cancel or --wait", 2)
    if preview:
        p = c.call("GET", path + "/preview")
        _out(c, p, preview_text(p))
        return
    if status:
        s = c.call("GET", path)
    elif cancel:
        s = c.call("DELETE", path, params={"by": _who(c, by), "reason": check_reason(reason)})
    else:
        s = c.call("PUT", path, json={"by": _who(c, by), "reason": check_reason(reason)})
    if wait:
        s = follow_drain(c, path, s, wait_timeout)
    _out(c, s, drain_text(s))


def follow_drain(c: _Conn, path: str, s: dict[str, Any], timeout_s: float) -> dict[str, Any]:
    """Ask for the drain's progress every 2 s until the host is empty; each change printed
    (not with -o json). Ends in exit 1 when the drain was cancelled or ``timeout_s`` passed."""
    import time

    deadline = time.monotonic() + timeout_s
    shown = ""
    while s["state"] == "draining":
        text = drain_text(s)
        if text != shown and not c.as_json:
            typer.echo(text)
            shown = text
        if time.monotonic() >= deadline:
            left = ", ".join(s["remaining"]) or "migrations in flight"
            _fail(f"{s['host']}: still draining after {timeout_s:.0f} s ({left})", 1)
        time.sleep(min(2.0, max(0.0, deadline - time.monotonic())))
        s = c.call("GET", path)
    if s["state"] != "drained":
        _fail(f"{s['host']}: {s['state']} (the drain was cancelled)", 1)
    return s


@host_app.command("forget")
def host_forget(ctx: typer.Context, host: Name, reason: Reason = None, by: By = None) -> None:
    """Forget a decommissioned HOST: its windows, reports and state leave the manager and
    its store. Refused while it migrates, an open plan names it, or it still reports
    (stop its agent and wait until it is stale first)."""
    c = _conn(ctx)
    path = f"/v1/hosts/{check_name('host', host)}"
    r = c.call("DELETE", path, params={"by": _who(c, by), "reason": check_reason(reason)})
    _out(c, r, f"{host} forgotten")


# --------------------------------------------------------------------------- mode

mode_app = typer.Typer(
    name="mode",
    help="autonomic (decisions are carried out) or recommend (they become plans to approve).",
    no_args_is_help=True,
    add_completion=False,
)
mode_app.callback()(_connect)

HostOpt = Annotated[
    str | None,
    typer.Option("--host", help="One host instead of the whole cluster."),
]


def _mode_text(m: dict[str, Any]) -> str:
    who = f" (set by {m['cluster_set_by']})" if m.get("cluster_set_by") else " (config file)"
    lines = [f"cluster: {m['cluster']}{who}"]
    lines += [f"{h}: {mode}" for h, mode in sorted(m.get("hosts", {}).items())]
    return "\n".join(lines)


@mode_app.command("show")
def mode_show(ctx: typer.Context) -> None:
    """The cluster's mode and hosts whose mode differs."""
    c = _conn(ctx)
    m = c.call("GET", "/v1/mode")
    _out(c, m, _mode_text(m))


@mode_app.command("set")
def mode_set(
    ctx: typer.Context,
    mode: Annotated[str, typer.Argument(help="autonomic | recommend")],
    host: HostOpt = None,
    reason: Reason = None,
    by: By = None,
) -> None:
    """Set the mode of the cluster (or of one host); kept across manager restarts."""
    if mode not in ("autonomic", "recommend"):
        _fail(f"mode = {mode!r}: one of autonomic, recommend", 2)
    c = _conn(ctx)
    path = f"/v1/hosts/{check_name('--host', host)}/mode" if host is not None else "/v1/mode"
    m = c.call("PUT", path, json={"mode": mode, "by": _who(c, by), "reason": check_reason(reason)})
    _out(c, m, _mode_text(m))


@mode_app.command("reset")
def mode_reset(
    ctx: typer.Context, host: HostOpt = None, reason: Reason = None, by: By = None
) -> None:
    """Back to the config file's mode (or a host back to the cluster's)."""
    c = _conn(ctx)
    path = f"/v1/hosts/{check_name('--host', host)}/mode" if host is not None else "/v1/mode"
    m = c.call("DELETE", path, params={"by": _who(c, by), "reason": check_reason(reason)})
    _out(c, m, _mode_text(m))


# --------------------------------------------------------------------------- audit


def audit(
    manager_url: ManagerUrl = None,
    token_file: TokenFile = None,
    timeout: Timeout = None,
    as_json: AsJson = False,
    cacert: CaCert = None,
    client_config: ClientConfigOpt = None,
    output: Output = "table",
    after: After = 0,
    limit: Limit = 100,
    oldest_first: OldestFirst = False,
    since: Since = None,
    until: Until = None,
    host: HostFilterOpt = None,
    vm: VMFilterOpt = None,
    action: Annotated[
        str | None,
        typer.Option("--action", help="Only this action (approve, forget, fence, mode, ...)."),
    ] = None,
) -> None:
    """Print the audit log, newest first."""
    c = connection(manager_url, token_file, None, timeout, as_json, cacert, client_config, output)
    params = log_params(limit, after, oldest_first, since, until, host, vm)
    if action is not None:
        params["action"] = action
    page = c.call("GET", "/v1/audit", params=params)
    lines = [audit_line(e) for e in page["entries"]] or ["(empty)"]
    _out(c, page, "\n".join(lines))


def decisions(
    manager_url: ManagerUrl = None,
    token_file: TokenFile = None,
    timeout: Timeout = None,
    as_json: AsJson = False,
    cacert: CaCert = None,
    client_config: ClientConfigOpt = None,
    output: Output = "table",
    after: After = 0,
    limit: Limit = 20,
    oldest_first: OldestFirst = False,
    since: Since = None,
    until: Until = None,
    host: HostFilterOpt = None,
    vm: VMFilterOpt = None,
) -> None:
    """Print the decision log (what the planner decided and why), newest first."""
    c = connection(manager_url, token_file, None, timeout, as_json, cacert, client_config, output)
    params = log_params(limit, after, oldest_first, since, until, host, vm)
    page = c.call("GET", "/v1/decisions", params=params)
    lines = [decision_line(d) for d in page["decisions"]] or ["(empty)"]
    _out(c, page, "\n".join(lines))


def _when(time_s: float) -> str:
    return datetime.fromtimestamp(time_s, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def decision_line(d: dict[str, Any]) -> str:
    move = f"migrate {d['vm']} -> {d['target']}" if d["flag"] else "stay"
    return (
        f"{d['id']:>14}  {_when(d['time_s'])}  {_printable(d['host']):<12} {move:<28} "
        f"{_printable(d['reason'])}"
    )


def hosts(
    manager_url: ManagerUrl = None,
    token_file: TokenFile = None,
    timeout: Timeout = None,
    as_json: AsJson = False,
    cacert: CaCert = None,
    client_config: ClientConfigOpt = None,
    output: Output = "table",
    host: HostFilterOpt = None,
) -> None:
    """Every host: its last report, link and CPU use, VMs, verdict, mode and fences."""
    c = connection(manager_url, token_file, None, timeout, as_json, cacert, client_config, output)
    if host is not None:
        check_name("--host", host)
    view = c.call("GET", "/v1/cluster", params={"limit": 10_000})
    rows = [h for h in view["hosts"] if host is None or h["host"] == host]
    lines = [
        f"{'HOST':<14} {'STATE':<6} {'AGE':>6}  {'CPU':>4} {'MEM':>4} {'NET':>4}  "
        f"{'VMS':>3}  {'HOT':<3}  {'MODE':<9}  FENCES"
    ]
    for h in rows:
        u = h["utilisation"]
        fences = [f"maintenance ({h['maintenance']})"] if h.get("maintenance") else []
        fences += ["vf-freeze"] if h.get("vf_frozen") else []
        fences += [f"pin {v}" for v in h.get("pinned_vms", [])]
        fences += [f"vf-freeze {v}" for v in h.get("vf_frozen_vms", [])]
        lines.append(
            f"{_printable(h['host']):<14} {h['state']:<6} {h['age_s']:>5.0f}s  "
            f"{u['cpu']:>4.2f} {u['mem']:>4.2f} {u['net']:>4.2f}  {len(h['vms']):>3}  "
            f"{'yes' if h['hot'] else 'no':<3}  {h.get('mode', ''):<9}  "
            + (_printable(", ".join(fences)) or "-")
        )
    leases = view.get("leases", [])
    lines.append(
        f"{len(rows)} host(s); cluster mode {view.get('mode')}; "
        f"{view.get('open_plans', 0)} open plan(s); {len(leases)} migration(s) in flight"
    )
    _out(c, view if host is None else {**view, "hosts": rows}, "\n".join(lines))


def audit_line(e: dict[str, Any]) -> str:
    """One audit entry; the time in ISO 8601 UTC (the API keeps epoch seconds)."""
    when = _when(e["time_s"])
    # control characters escaped: a newline in a value must not forge an audit line
    return (
        f"{e['id']:>6}  {when}  {_printable(e['who']):<12} {_printable(e['action']):<22} "
        f"{_printable(e['subject'])}" + (f"  {_printable(e['detail'])}" if e["detail"] else "")
    )


OPERATOR_GROUPS = ("plans", "fence", "mode", "host")


def hoist_group_options(argv: list[str], root: Any) -> list[str]:
    """``sova plans list --token-file F`` as ``sova plans --token-file F list``.

    The connection options belong to the group's callback, so click accepts them only
    before the subcommand; operators type them anywhere. An option the subcommand has
    itself stays where it is, and nothing after ``--`` moves. ``root`` is the click group
    of the ``sova`` command.
    """
    if not argv or argv[0] not in OPERATOR_GROUPS or argv[0] not in root.commands:
        return argv
    group = root.commands[argv[0]]
    takes_value = {o: not p.is_flag for p in group.params for o in p.opts}
    i = 1
    while i < len(argv) and argv[i].startswith("-") and argv[i] != "--":
        name = argv[i].split("=", 1)[0]
        i += 2 if takes_value.get(name) and "=" not in argv[i] else 1
    if i >= len(argv) or argv[i] not in group.commands:
        return argv
    own = {o for p in group.commands[argv[i]].params for o in p.opts}
    hoisted: list[str] = []
    rest: list[str] = []
    j = i + 1
    while j < len(argv):
        tok = argv[j]
        if tok == "--":
            rest.extend(argv[j:])
            break
        name = tok.split("=", 1)[0]
        if name in takes_value and name not in own:
            n = 2 if takes_value[name] and "=" not in tok else 1
            hoisted.extend(argv[j : j + n])
            j += n
            continue
        rest.append(tok)
        j += 1
    return argv[:i] + hoisted + [argv[i]] + rest


def register(app: typer.Typer) -> None:
    """Add the operator commands to the ``sova`` CLI."""
    app.add_typer(plans_app)
    app.add_typer(fence_app)
    app.add_typer(mode_app)
    app.add_typer(host_app)
    app.command("audit", help="The audit log: every operator action and plan fate, who and when.")(
        audit
    )
    app.command("decisions", help="The decision log: what the planner decided, and why.")(decisions)
    app.command("hosts", help="Every host: last report, use, VMs, verdict, mode, fences.")(hosts)
