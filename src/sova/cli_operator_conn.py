"""What every operator command shares: the connection to a running manager (URLs, TLS
trust, the admin token, failover to the leader), the connection options, the checks on
names and free text sent to it, and the time filters of the log reads.

``sova.cli_operator`` (the command groups) and ``sova.cli_status`` build on it.
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

from sova.cli_client import (
    CONFIG_ENV,
    DEFAULT_URL,
    ClientConfigError,
    default_config_path,
    load_client_config,
    tls_context,
    tls_hint,
    url_problem,
    with_scheme,
)

# The manager's name pattern (sova.manager.daemons.schema.NAME_PATTERN), without importing the
# daemon's schema into every CLI start.
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,63}$")

# The characters the manager refuses in free text (sova.manager.daemons.schema.FORGING_CHARS, the
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
    """(the URL to call, the URL to show): http(s) only (none given: https);
    user:password never echoed."""
    url = with_scheme(url)
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


# A standby manager's 503 names the leader here (sova.manager.daemons.agent.client.LEADER_HEADER;
# not imported: the daemon's modules stay out of every CLI start).
LEADER_HEADER = "x-sova-leader"


class _Conn:
    """The managers to ask, in order, and how: a manager that cannot be reached passes the
    request to the next; a standby's 503 naming the leader sends it there."""

    def __init__(
        self,
        urls: list[str],
        token: str | None,
        by: str,
        timeout_s: float,
        as_json: bool,
        verify: Any = True,
        groups: dict[str, list[str]] | None = None,
    ):
        checked = [_check_url(u) for u in urls]
        self.groups = groups or {}
        self.urls = [call for call, _ in checked]
        self.url, self.shown = checked[0]
        self.token = token
        self.by = by
        self.timeout_s = timeout_s
        self.as_json = as_json
        self.verify = verify

    def _send(self, method: str, url: str, path: str, **kw: Any) -> Any:
        import httpx

        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        return httpx.request(
            method, url + path, headers=headers, timeout=self.timeout_s, verify=self.verify, **kw
        )

    def _leader(self, r: Any, came_from: str) -> str | None:
        """The leader a standby's 503 names, if the request may follow it there: a URL, and
        no step down from https to http (the token would travel in clear)."""
        named = str(r.headers.get(LEADER_HEADER, "")).strip().rstrip("/")
        if not named or url_problem(named):
            return None
        if came_from.startswith("https:") and not named.startswith("https:"):
            return None
        return named

    def call(self, method: str, path: str, **kw: Any) -> Any:
        import httpx

        queue = list(self.urls)
        tried: set[str] = set()
        last: Any = None  # the last answer that was not followed elsewhere
        unreachable: list[str] = []
        while queue:
            url = queue.pop(0)
            if url in tried:
                continue
            tried.add(url)
            shown = _check_url(url)[1]
            try:
                r = self._send(method, url, path, **kw)
            except httpx.InvalidURL as exc:
                _fail(f"--manager-url {_redact(url)!r}: {exc}", 2)
            except httpx.HTTPError as exc:
                text = _redact(str(exc))
                unreachable.append(f"{shown}: {text}{tls_hint(text, url)}")
                continue
            if r.status_code == 503:
                leader = self._leader(r, url)
                if leader is not None and leader not in tried:
                    queue.insert(0, leader)
                    last = (r, shown)
                    continue
                if queue:  # a standby that knows no leader yet, or a manager not ready
                    last = (r, shown)
                    continue
            self.url, self.shown = url, shown
            return self._answer(r)
        if last is not None:
            self.url, self.shown = _check_url(last[1])[0], last[1]
            return self._answer(last[0])
        where = "; ".join(unreachable)
        return _fail(f"manager not reachable: {where}", 3)

    def _answer(self, r: Any) -> Any:
        if r.status_code == 401:
            _fail(f"manager at {self.shown} refused the token (401): {_detail(r)}", 3)
        if r.status_code == 403:
            _fail(f"manager at {self.shown} refused: {_detail(r)} (403)", 3)
        if r.status_code in (404, 409):
            _fail(_detail(r), 1)
        if r.status_code == 422:
            _fail(_detail(r), 2)
        if r.status_code >= 400:
            _fail(f"manager at {self.shown} answered {r.status_code}: {_detail(r)}", 1)
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


ManagerUrl = Annotated[
    str | None,
    typer.Option(
        "--manager-url",
        envvar="SOVA_MANAGER_URL",
        help="Manager base URL(s), comma-separated; without a scheme https. "
        f"[default: the client config's managers, else {DEFAULT_URL}]",
    ),
]
CaCert = Annotated[
    Path | None,
    typer.Option(
        "--cacert",
        envvar="SOVA_CACERT",
        help="CA certificate (PEM) the manager's TLS certificate is checked against. "
        "[default: the client config's cacert, else the system's CAs]",
    ),
]
ClientConfigOpt = Annotated[
    Path | None,
    typer.Option(
        "--client-config",
        help=f"Client config file. [default: ${CONFIG_ENV}, else {default_config_path()}]",
    ),
]
TokenFile = Annotated[
    Path | None,
    typer.Option(
        "--token-file",
        help="File with the admin token (or the manager's env file). "
        "[default: $SOVA_ADMIN_TOKEN, else the client config's token_file]",
    ),
]
Timeout = Annotated[
    float | None,
    typer.Option("--timeout", min=0.1, max=600, help="Seconds per request. [default: 10]"),
]
AsJson = Annotated[bool, typer.Option("--json", help="Print the manager's JSON (as -o json).")]
Output = Annotated[
    str, typer.Option("--output", "-o", help="table (for people) or json (the API's answer).")
]


def _connect(
    ctx: typer.Context,
    manager_url: ManagerUrl = None,
    token_file: TokenFile = None,
    by: Annotated[
        str | None,
        typer.Option(
            "--by",
            envvar="SOVA_OPERATOR",
            help="Your name in the audit log. [default: the client config's operator, "
            "else your login name]",
        ),
    ] = None,
    timeout: Timeout = None,
    as_json: AsJson = False,
    cacert: CaCert = None,
    client_config: ClientConfigOpt = None,
    output: Output = "table",
) -> None:
    ctx.obj = connection(
        manager_url, token_file, by, timeout, as_json, cacert, client_config, output
    )


def connection(
    manager_url: str | None,
    token_file: Path | None,
    by: str | None,
    timeout: float | None,
    as_json: bool,
    cacert: Path | None,
    client_config: Path | None,
    output: str,
) -> _Conn:
    """The options, over the environment, over the client config file."""
    if output not in ("table", "json"):
        _fail(f"--output = {output!r}: one of table, json", 2)
    try:
        cfg, _ = load_client_config(client_config)
        verify = (
            tls_context(cacert, "--cacert")
            if cacert is not None
            else tls_context(cfg.cacert, "client config cacert")
        )
    except ClientConfigError as exc:
        return _fail(str(exc), 2)  # type: ignore[no-any-return]
    urls = [u.strip() for u in (manager_url or "").split(",") if u.strip()]
    urls = urls or cfg.managers or [DEFAULT_URL]
    token = _read_token(token_file) if token_file is not None else None
    if token is None:
        token = next((os.environ[k] for k in ENV_TOKEN_KEYS if os.environ.get(k)), None)
    if token is None and cfg.token_file is not None:
        token = _read_token(cfg.token_file)
    return _Conn(
        urls,
        token,
        by or cfg.operator or _login(),
        timeout if timeout is not None else cfg.timeout_s,
        as_json or output == "json",
        verify,
        cfg.groups,
    )


def _conn(ctx: typer.Context) -> _Conn:
    c = ctx.find_object(_Conn)
    assert c is not None
    return c


def _out(c: _Conn, data: Any, text: str) -> None:
    typer.echo(json.dumps(data, indent=2, sort_keys=True) if c.as_json else text)


def _util(d: dict[str, Any]) -> str:
    return " ".join(f"{k} {float(v):.2f}" for k, v in d.items())


Limit = Annotated[int, typer.Option("--limit", min=1, max=1000, help="At most this many.")]
After = Annotated[
    int,
    typer.Option("--after", min=0, help="Only ids after this one, oldest first (to page on)."),
]
OldestFirst = Annotated[bool, typer.Option("--oldest-first", help="Oldest first.")]
Since = Annotated[
    str | None,
    typer.Option(
        "--since", help="Only from this time: ISO 8601 (2025-11-23T12:00Z) or an age (90s, 2h, 3d)."
    ),
]
Until = Annotated[str | None, typer.Option("--until", help="Only until this time (as --since).")]
HostFilterOpt = Annotated[str | None, typer.Option("--host", help="Only about this host.")]
VMFilterOpt = Annotated[str | None, typer.Option("--vm", help="Only about this VM.")]

_AGE = re.compile(r"^(\d+(?:\.\d+)?)\s*(s|m|min|h|d)$")
_UNIT_S = {"s": 1, "m": 60, "min": 60, "h": 3600, "d": 86400}


def parse_time(option: str, value: str, now_s: float) -> float:
    """``value`` as epoch seconds: an ISO 8601 time (UTC if it names no zone), or an age
    before ``now_s``."""
    m = _AGE.match(value.strip())
    if m:
        return now_s - float(m.group(1)) * _UNIT_S[m.group(2)]
    try:
        when = datetime.fromisoformat(value.strip())
    except ValueError:
        return float(
            _fail(f"{option} = {value!r}: an ISO 8601 time (2025-11-23T12:00Z) or an age (2h)", 2)
        )
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.timestamp()


def log_params(
    limit: int,
    after: int,
    oldest_first: bool,
    since: str | None,
    until: str | None,
    host: str | None = None,
    vm: str | None = None,
) -> dict[str, Any]:
    """The query of a log read: newest first unless paging on with ``--after``."""
    import time

    now = time.time()
    params: dict[str, Any] = {"limit": limit, "after": after}
    params["order"] = "oldest" if (oldest_first or after) else "newest"
    if since is not None:
        params["since_s"] = max(0.0, parse_time("--since", since, now))
    if until is not None:
        params["until_s"] = max(0.0, parse_time("--until", until, now))
    if host is not None:
        check_name("--host", host)
        params["host"] = host
    if vm is not None:
        check_name("--vm", vm)
        params["vm"] = vm
    return params


Reason = Annotated[
    str | None,
    typer.Option("--reason", "-m", help="Why (kept in the audit log)."),
]
By = Annotated[
    str | None,
    typer.Option("--by", help="Your name in the audit log (over the group's --by)."),
]


def _who(c: _Conn, by: str | None) -> str:
    """The audit log's annotation: ``--by``, else the client config's or the login name."""
    return by or c.by
