"""``sova status``: who leads, at which epoch, and each manager's role, from every manager
URL given (docs/operations.md#active-and-standby-managers).

It asks each manager's ``/readyz`` (no token needed: the probes are open), in parallel and
within ``--timeout``, and reads the role and epoch each answers with; a standby names the
leader it follows. The verdict compares them: one leader; none; or several.

Exit codes: 0 one manager leads, it is ready, every standby follows it and every manager
given answered; 1 none leads, several claim to, a standby follows another epoch than the
leader's, the leader is not ready, a manager given is down, or a standby's safety-relevant
settings or credentials differ from the leader's (named); 2 bad input; 3 no manager
answered.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import Annotated, Any

import typer

from sova.cli_client import (
    DEFAULT_URL,
    ClientConfigError,
    load_client_config,
    tls_context,
    tls_hint,
)
from sova.cli_operator import CaCert, ClientConfigOpt, _check_url, _fail, _printable, _redact


@dataclass(frozen=True)
class ManagerReadiness:
    """What one manager said about itself (``role`` "down" when it did not answer)."""

    url: str
    role: str  # leader | standby | down | unknown
    epoch: int | None
    follows: str | None  # a standby's leader URL
    status: str  # its readiness line, or why it could not be asked
    ready: bool = True  # /readyz answered 200 (a leader that is not: 503, role leader)
    # A standby's safety-relevant settings unlike the leader's published digest (issue 37)
    differs: tuple[str, ...] = ()


def ask(url: str, shown: str, timeout_s: float, verify: Any = True) -> ManagerReadiness:
    """One manager's /readyz, as a :class:`ManagerReadiness`."""
    import httpx

    try:
        r = httpx.get(url + "/readyz", timeout=timeout_s, verify=verify)
    except httpx.HTTPError as exc:
        text = _redact(str(exc))
        return ManagerReadiness(
            shown, "down", None, None, f"not reachable: {text}{tls_hint(text, url)}"
        )
    try:
        body = r.json()
        role = str(body.get("role") or "unknown")
        epoch = body.get("epoch")
        follows = body.get("leader_url")
        status = str(body.get("status", ""))
        differs = body.get("config_differs") or []
        names = tuple(_printable(str(d))[:64] for d in differs if isinstance(differs, list))
    except (ValueError, AttributeError):
        return ManagerReadiness(shown, "unknown", None, None, f"answered {r.status_code}, not JSON")
    if role not in ("leader", "standby"):
        role = "unknown"
    return ManagerReadiness(
        shown,
        role,
        int(epoch) if isinstance(epoch, int) else None,
        str(follows) if follows else None,
        _printable(status)[:200],
        r.status_code == 200,
        names[:32],
    )


def verdict(states: list[ManagerReadiness]) -> tuple[int, str]:
    """(exit code, one line): who leads, or what is wrong."""
    if all(s.role == "down" for s in states):
        return 3, "no manager answered"
    leaders = [s for s in states if s.role == "leader"]
    if not leaders:
        return 1, "no manager leads"
    if len(leaders) > 1:
        named = ", ".join(f"{s.url} (epoch {s.epoch})" for s in leaders)
        return 1, f"{len(leaders)} managers claim to lead: {named}"
    (lead,) = leaders
    # A standby names the leader by its advertised URL, which need not be the one given
    # here; the epoch is what must agree (another epoch: another store, or a takeover
    # this leader has not noticed yet).
    astray = [s for s in states if s.role == "standby" and s.epoch != lead.epoch]
    if astray:
        return 1, (
            f"{lead.url} leads at epoch {lead.epoch} but "
            + ", ".join(f"{s.url} follows epoch {s.epoch} ({s.follows})" for s in astray)
        )
    epoch = f"epoch {lead.epoch}" if lead.epoch is not None else "one store, no epoch (SQLite)"
    return 0, f"{lead.url} leads ({epoch})"


def unhealthy(states: list[ManagerReadiness], code: int, line: str) -> tuple[int, str]:
    """The verdict, made 1 when a manager given is down or answers oddly, the leader is
    not ready (a pair with one manager down has no standby left, issue 38), or a standby's
    configuration differs from the leader's (a takeover would make it the cluster's,
    issue 37)."""
    bad = [
        s
        for s in states
        if s.role in ("down", "unknown") or (s.role == "leader" and not s.ready) or s.differs
    ]
    if code != 0 or not bad:
        return code, line

    def why(s: ManagerReadiness) -> str:
        if s.role == "leader":
            return "not ready"
        if s.differs:
            return "configuration differs from the leader's in: " + ", ".join(s.differs)
        return s.role

    named = ", ".join(f"{s.url} ({why(s)})" for s in bad)
    return 1, f"{line}; unhealthy: {named}"


def status(
    manager_url: Annotated[
        list[str] | None,
        typer.Option(
            "--manager-url",
            envvar="SOVA_MANAGER_URL",
            help="A manager's base URL; repeat it (or separate with commas) for each manager. "
            f"[default: the client config's managers, else {DEFAULT_URL}]",
        ),
    ] = None,
    timeout: Annotated[
        float, typer.Option("--timeout", min=0.1, max=600, help="Seconds per manager.")
    ] = 5.0,
    as_json: Annotated[bool, typer.Option("--json", help="Print the answers as JSON.")] = False,
    cacert: CaCert = None,
    client_config: ClientConfigOpt = None,
) -> None:
    """Who leads, the epoch, and each manager's role."""
    try:
        cfg, _ = load_client_config(client_config)
        verify = tls_context(cacert, "--cacert") if cacert else tls_context(cfg.cacert, "cacert")
    except ClientConfigError as exc:
        _fail(str(exc), 2)
    given = [u.strip() for value in manager_url or [] for u in value.split(",") if u.strip()]
    given = given or cfg.managers or [DEFAULT_URL]
    urls: dict[str, str] = {}
    for u in given:
        call, shown = _check_url(u)
        urls[shown] = call
    with ThreadPoolExecutor(max_workers=min(16, len(urls))) as pool:
        states = list(pool.map(lambda kv: ask(kv[1], kv[0], timeout, verify), urls.items()))
    code, line = unhealthy(states, *verdict(states))
    if as_json:
        out: dict[str, Any] = {"verdict": line, "managers": [asdict(s) for s in states]}
        typer.echo(json.dumps(out, indent=2, sort_keys=True))
    else:
        width = max(len(s.url) for s in states)
        typer.echo(f"{'MANAGER':<{width}}  {'ROLE':<8} {'EPOCH':>5}  STATUS")
        for s in states:
            epoch = "-" if s.epoch is None else str(s.epoch)
            typer.echo(f"{s.url:<{width}}  {s.role:<8} {epoch:>5}  {s.status}".rstrip())
        typer.echo(line)
    raise typer.Exit(code)


def register(app: typer.Typer) -> None:
    app.command(
        "status", help="Who leads, the epoch, and each manager's role (give every manager's URL)."
    )(status)
