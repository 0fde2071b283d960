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

from __future__ import annotations

import getpass
import json
import os
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote, urlsplit, urlunsplit

import typer

# The manager's name pattern (sova.daemon.schema.NAME_PATTERN), without importing the
# daemon's schema into every CLI start.
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,63}$")

# The characters the manager refuses in free text (sova.daemon.schema.FORGING_CHARS, the
# same string; tests/daemon/test_free_text.py keeps them equal): refused in a reason here,
# escaped in everything printed.
FORGING_CHARS = r"\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069"
_FORGING_RE = re.compile(f"[{FORGING_CHARS}]")


def forging(text: str) -> str | None:
    """The first character of ``text`` that could forge a line, as U+XXXX (None: none)."""
    m = _FORGING_RE.search(text)
    return None if m is None else f"U+{ord(m.group()):04X}"


def escaped(text: str) -> str:
    """``text`` with every forging character shown as its escape."""
    return _FORGING_RE.sub(lambda m: ascii(m.group())[1:-1], text)


ENV_TOKEN_KEYS = ("SOVA_ADMIN_TOKEN", "SOVA_MANAGER_ADMIN_TOKEN")


def _check_url(url: str) -> tuple[str, str]:
    """(the URL to call, the URL to show): http(s) only; user:password never echoed."""
    try:
        parts = urlsplit(url)
        port = parts.port  # raises on a bad port
        host = parts.hostname
    except ValueError as exc:
        return _fail(f"--manager-url {_redact(url)!r}: not a URL ({exc})", 2)  # type: ignore[no-any-return]
    if parts.scheme not in ("http", "https") or not host:
        _fail(f"--manager-url {_redact(url)!r}: must be http://HOST[:PORT] or https://…", 2)
    shown = urlunsplit(
        (
            parts.scheme,
            (f"[{host}]" if ":" in str(host) else str(host)) + (f":{port}" if port else ""),
            parts.path,
            "",
            "",
        )
    )
    return url.rstrip("/"), shown.rstrip("/")


def _redact(url: str) -> str:
    """``url`` without anything between ``//`` and ``@`` (credentials)."""
    head, sep, rest = url.partition("//")
    if sep and "@" in rest.split("/", 1)[0]:
        rest = "***@" + rest.split("@", 1)[1]
    return head + sep + rest


def check_name(what: str, value: str) -> str:
    """A host or VM name as the manager accepts it, percent-encoded as one path segment:
    ``..`` or ``a/b`` must never become another route (``--host ..`` reset the cluster)."""
    if not NAME_RE.match(value):
        _fail(
            f"{what} = {value!r}: a name is 1-64 letters, digits, '.', '_', ':', '@', '-' "
            "starting with a letter or digit",
            2,
        )
    return quote(value, safe="")


def check_reason(value: str | None) -> str:
    text = value or ""
    if (bad := forging(text)) is not None:
        _fail(
            f"--reason: {bad} is not allowed (control characters, line separators and "
            "bidi controls could forge an audit line)",
            2,
        )
    return text


def _printable(value: Any) -> str:
    """A value from the manager as one line: control characters, line separators and
    bidi controls shown escaped."""
    return escaped(str(value))


class _Conn:
    def __init__(self, url: str, token: str | None, by: str, timeout_s: float, as_json: bool):
        self.url, self.shown = _check_url(url)
        self.token = token
        self.by = by
        self.timeout_s = timeout_s
        self.as_json = as_json

    def call(self, method: str, path: str, **kw: Any) -> Any:
        import httpx

        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        try:
            r = httpx.request(
                method, self.url + path, headers=headers, timeout=self.timeout_s, **kw
            )
        except httpx.InvalidURL as exc:
            _fail(f"--manager-url {_redact(self.url)!r}: {exc}", 2)
        except httpx.HTTPError as exc:
            _fail(f"manager at {self.shown} not reachable: {_redact(str(exc))}", 3)
        if r.status_code == 401:
            _fail(f"manager at {self.shown} refused the token (401): {_detail(r)}", 3)
        if r.status_code == 403:
            _fail(f"manager at {self.shown} refused: {_detail(r)} (403)", 3)
        if r.status_code in (404, 409):
            _fail(_detail(r), 1)
        if r.status_code == 422:
            _fail(_detail(r), 2)
        if r.status_code >= 400:
            _fail(f"manager answered {r.status_code}: {_detail(r)}", 1)
        try:
            return r.json()
        except ValueError:
            return _fail(
                f"manager at {self.shown} answered {r.status_code} but not with JSON "
                f"(is it a Sova manager?): {_printable(r.text[:80])!r}",
                1,
            )


def _detail(r: Any) -> str:
    try:
        body = r.json()
    except ValueError:
        return str(r.text)[:300]
    if isinstance(body, dict):
        if "error" in body:
            return str(body["error"])
        d = body.get("detail")
        if isinstance(d, str):
            return d
        if isinstance(d, list) and d:
            return "; ".join(f"{x.get('field', x.get('loc'))}: {x.get('msg')}" for x in d[:3])
    return str(body)[:300]


def _fail(msg: str, code: int) -> Any:
    typer.echo(f"error: {_printable(msg)}", err=True)
    raise typer.Exit(code)


def _read_token(path: Path) -> str:
    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as exc:
        return str(_fail(f"--token-file {path}: cannot read it: {exc.strerror}", 2))
    except UnicodeDecodeError as exc:
        return str(_fail(f"--token-file {path}: not UTF-8 text (byte at offset {exc.start})", 2))
    for line in text.splitlines():
        key, sep, value = line.strip().partition("=")
        if sep and key.strip() in ENV_TOKEN_KEYS:
            return value.strip().strip("'\"")
    token = text.strip()
    if not token or "\n" in token or "=" in token:
        _fail(f"--token-file {path}: holds neither a token nor SOVA_MANAGER_ADMIN_TOKEN=", 2)
    return token


def _login() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "admin"


def _connect(
    ctx: typer.Context,
    manager_url: Annotated[
        str,
        typer.Option(
            "--manager-url", envvar="SOVA_MANAGER_URL", help="Manager base URL.", show_default=True
        ),
    ] = "http://127.0.0.1:8700",
    token_file: Annotated[
        Path | None,
        typer.Option(
            "--token-file",
            help="File with the admin token (or the manager's env file). "
            "[default: $SOVA_ADMIN_TOKEN]",
        ),
    ] = None,
    by: Annotated[
        str | None,
        typer.Option(
            "--by",
            envvar="SOVA_OPERATOR",
            help="Your name in the audit log. [default: your login name]",
        ),
    ] = None,
    timeout: Annotated[
        float, typer.Option("--timeout", min=0.1, max=600, help="Seconds per request.")
    ] = 10.0,
    as_json: Annotated[bool, typer.Option("--json", help="Print the manager's JSON.")] = False,
) -> None:
    token = _read_token(token_file) if token_file is not None else None
    if token is None:
        token = next((os.environ[k] for k in ENV_TOKEN_KEYS if os.environ.get(k)), None)
    ctx.obj = _Conn(manager_url, token, by or _login(), timeout, as_json)


def _conn(ctx: typer.Context) -> _Conn:
    c = ctx.find_object(_Conn)
    assert c is not None
    return c


def _out(c: _Conn, data: Any, text: str) -> None:
    typer.echo(json.dumps(data, indent=2, sort_keys=True) if c.as_json else text)


def _util(d: dict[str, Any]) -> str:
    return " ".join(f"{k} {float(v):.2f}" for k, v in d.items())


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
    limit: Annotated[int, typer.Option("--limit", min=1, max=1000)] = 100,
) -> None:
    """List plans, oldest first."""
    c = _conn(ctx)
    params: dict[str, Any] = {"limit": limit}
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


Reason = Annotated[
    str | None,
    typer.Option("--reason", "-m", help="Why (kept in the audit log)."),
]
By = Annotated[
    str | None,
    typer.Option("--by", help="Your name in the audit log (over the group's --by)."),
]


def _who(c: _Conn, by: str | None) -> str:
    return by or c.by


@plans_app.command("approve")
def plans_approve(
    ctx: typer.Context,
    plan_id: Annotated[int, typer.Argument(min=1)],
    reason: Reason = None,
    by: By = None,
) -> None:
    """Approve an open plan: its migration is carried out now (pre-conditions re-checked)."""
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


@fence_app.command("list")
def fence_list(ctx: typer.Context) -> None:
    """Fences in force."""
    c = _conn(ctx)
    rows = c.call("GET", "/v1/fences")
    lines = [fence_line(f) for f in rows] or ["(no fences)"]
    _out(c, rows, "\n".join(lines))


def fence_line(f: dict[str, Any]) -> str:
    """One fence; free text escaped (a stored separator must not forge a line)."""
    return (
        f"{_printable(f['kind']):<15} {_printable(f['name']):<20} by {_printable(f['set_by'])} "
        f"at t={f['since_s']:.0f}" + (f"  ({_printable(f['reason'])})" if f["reason"] else "")
    )


@fence_app.command("set")
def fence_set(
    ctx: typer.Context, kind: Kind, name: Name, reason: Reason = None, by: By = None
) -> None:
    """Set a fence (kept across manager restarts)."""
    c = _conn(ctx)
    path = f"/v1/fences/{check_name('kind', kind)}/{check_name('name', name)}"
    f = c.call("PUT", path, json={"by": _who(c, by), "reason": check_reason(reason)})
    _out(c, f, f"{f['kind']} set on {f['name']} by {f['set_by']}")


@fence_app.command("clear")
def fence_clear(
    ctx: typer.Context, kind: Kind, name: Name, reason: Reason = None, by: By = None
) -> None:
    """Lift a fence."""
    c = _conn(ctx)
    path = f"/v1/fences/{check_name('kind', kind)}/{check_name('name', name)}"
    r = c.call("DELETE", path, params={"by": _who(c, by), "reason": check_reason(reason)})
    _out(c, r, f"{kind} lifted from {name}")


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
) -> None:
    """Drain HOST: no VM moves onto it, and the planner moves its VMs off, one a round, to
    the cold spots it picks (limits, anti-thrash, placement rules and the mode apply)."""
    c = _conn(ctx)
    path = f"/v1/hosts/{check_name('host', host)}/drain"
    if status and cancel:
        _fail("--status and --cancel: choose one", 2)
    if status:
        s = c.call("GET", path)
    elif cancel:
        s = c.call("DELETE", path, params={"by": _who(c, by), "reason": check_reason(reason)})
    else:
        s = c.call("PUT", path, json={"by": _who(c, by), "reason": check_reason(reason)})
    _out(c, s, drain_text(s))


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
    ctx: typer.Context,
    manager_url: Annotated[
        str, typer.Option("--manager-url", envvar="SOVA_MANAGER_URL", help="Manager base URL.")
    ] = "http://127.0.0.1:8700",
    token_file: Annotated[
        Path | None,
        typer.Option(
            "--token-file",
            help="File with the admin token (or the manager's env file). "
            "[default: $SOVA_ADMIN_TOKEN]",
        ),
    ] = None,
    timeout: Annotated[
        float, typer.Option("--timeout", min=0.1, max=600, help="Seconds per request.")
    ] = 10.0,
    as_json: Annotated[bool, typer.Option("--json", help="Print the manager's JSON.")] = False,
    after: Annotated[int, typer.Option("--after", min=0, help="Entries after this id.")] = 0,
    limit: Annotated[int, typer.Option("--limit", min=1, max=1000)] = 100,
) -> None:
    """Print the audit log, oldest first."""
    _connect(ctx, manager_url, token_file, None, timeout, as_json)
    c = _conn(ctx)
    page = c.call("GET", "/v1/audit", params={"after": after, "limit": limit})
    lines = [audit_line(e) for e in page["entries"]] or ["(empty)"]
    _out(c, page, "\n".join(lines))


def audit_line(e: dict[str, Any]) -> str:
    """One audit entry; the time in ISO 8601 UTC (the API keeps epoch seconds)."""
    when = datetime.fromtimestamp(e["time_s"], UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
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
