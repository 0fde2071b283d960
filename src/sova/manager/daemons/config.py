"""Configuration of both daemons: a TOML file, then environment overrides, then validation.

Why this order: the file is what an operator reviews and commits; the environment is how
systemd, containers and CI inject secrets (``SOVA_TOKEN``) and per-host values
(``SOVA_HOST``) without editing it. Validation is strict (an unknown key is an error, not
a silent default) and every error names the field path, the value and where it came
from, e.g. ``controller.period = -1 (from SOVA_CONTROLLER__PERIOD): must be > 0``.

Environment variables: ``SOVA_<FIELD>`` for a top-level field and ``SOVA_<SECTION>__<FIELD>``
for a nested one (the manager reads ``SOVA_MANAGER_<...>`` the same way). Only names that
match a field are read, so the agent and the manager can share one environment.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Final, Literal, TypeVar

from pydantic import (
    AfterValidator,
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    model_validator,
)

from sova.agent.config import ControllerConfig, ManagerSpec
from sova.manager.daemons.conn_guard import ConnLimits
from sova.manager.daemons.drivers import DRIVERS
from sova.manager.daemons.webhook_settings import WebhookSettings
from sova.manager.decisions.placement import PlacementSpec
from sova.orchestrator.settings import OrchestratorSettings
from sova.units import Duration, Rate

M = TypeVar("M", bound=BaseModel)

AGENT_ENV_PREFIX = "SOVA_"
MIN_PLAN_TTL_S = 10.0
MANAGER_ENV_PREFIX = "SOVA_MANAGER_"


class ConfigError(ValueError):
    """A configuration that cannot be used; the message lists every bad field."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# --------------------------------------------------------------------------- agent


class ControllerSettings(ControllerConfig):
    """The agent's control loops: the controller schema of every world
    (:class:`sova.agent.config.ControllerConfig`), except that a deployed agent defaults to
    the full Sova policy."""

    vf_policy: str = "sova"


class LibvirtSettings(_Strict):
    """The libvirt driver's host settings (``[libvirt]``; docs/deployment.md §7).

    Mapped onto :class:`sova.driver.libvirt_driver.LibvirtDriverConfig` by
    :func:`sova.manager.daemons.agent.wiring.libvirt_options`; a key left out keeps the value of the file
    named by ``$SOVA_LIBVIRT_DRIVER`` (the lab's per-agent strategies), else the driver's
    default. Checked here, at start-up, so a bad value is one line naming it, not a
    traceback from the driver.
    """

    # A Linux netdev name: at most 15 bytes, no '/', ':' or whitespace.
    pf: str | None = Field(default=None, pattern=r"^[^/:\s]{1,15}$")
    vf_pool: int | None = Field(default=None, ge=0, le=4096)
    # Where the source libvirtd sends a VM: {host} becomes the target host's name.
    migration_uri_template: str | None = Field(
        default=None, pattern=r"^[a-z][a-z0-9+]*://[^\s]*\{host\}[^\s]*$"
    )
    hotplug_timeout_s: Duration | None = Field(default=None, gt=0, le=600)
    hotplug_attempts: int | None = Field(default=None, ge=1, le=20)
    retry_backoff_s: Duration | None = Field(default=None, le=60)
    migration_bandwidth_bps: Rate | None = Field(default=None, gt=0)
    migration_poll_s: Duration | None = Field(default=None, gt=0, le=60)
    migration_abort_grace_s: Duration | None = Field(default=None, gt=0, le=3600)
    migration_unsafe: bool | None = None
    sampling: Literal["host", "guest-agent"] | None = None
    guest_exec_timeout_s: Duration | None = Field(default=None, gt=0, le=600)
    host_side_shaping: Literal["auto", "bandwidth", "tap-htb"] | None = None
    fast_path: Literal["sriov-vf", "lab-nic"] | None = None
    failover: Literal["teaming", "guest-bond"] | None = None
    lab_nic_bridge: str | None = Field(default=None, pattern=r"^[^/:\s]{1,15}$")
    lab_nic_taps: list[Annotated[str, Field(pattern=r"^[^/:\s]{1,15}$")]] | None = None
    lab_nic_speed_mbit: int | None = Field(default=None, ge=1, le=10_000_000)
    host_name: str | None = Field(default=None, min_length=1, max_length=253)
    sysfs_root: str | None = Field(default=None, min_length=1)
    max_workers: int | None = Field(default=None, ge=1, le=64)
    keepalive: tuple[int, int] | None = None
    # Replacing a connection whose daemon restarted (docs/deployment.md, "When libvirtd
    # restarts"): opens tried, back-off before the second (doubling), bound on each open.
    reconnect_attempts: int | None = Field(default=None, ge=1, le=20)
    reconnect_backoff_s: Duration | None = Field(default=None, gt=0, le=60)
    connect_timeout_s: Duration | None = Field(default=None, gt=0, le=600)
    host_totals: Literal["node", "domains"] | None = None
    host_cpus: int | None = Field(default=None, ge=1, le=100_000)
    host_memory_mib: int | None = Field(default=None, ge=1, le=2**40)

    def driver_options(self) -> dict[str, Any]:
        """The keys an operator set, as :class:`LibvirtDriverConfig` keyword arguments."""
        out = {k: getattr(self, k) for k in sorted(self.model_fields_set)}
        if "lab_nic_taps" in out and out["lab_nic_taps"] is not None:
            out["lab_nic_taps"] = tuple(out["lab_nic_taps"])
        return {k: v for k, v in out.items() if v is not None}

    def hotplug_budget_s(self) -> float | None:
        """Longest a confirmed plug or unplug may take with the hot-plug keys set here
        (the driver's defaults for the others); None when none of them is set."""
        keys = {"hotplug_timeout_s", "hotplug_attempts", "retry_backoff_s"}
        if not keys & self.model_fields_set:
            return None
        timeout = self.hotplug_timeout_s if self.hotplug_timeout_s is not None else 8.0
        attempts = self.hotplug_attempts if self.hotplug_attempts is not None else 3
        backoff = self.retry_backoff_s if self.retry_backoff_s is not None else 1.0
        return float(timeout * attempts + backoff * attempts * (attempts - 1) / 2)


# How long an agent waits for a manager's answer before it tries the next URL (its
# ``report_timeout_s`` by default): what a frozen manager costs each agent before it finds
# another; the managers' timers allow for it (docs/design.md, "Timers across a takeover").
AGENT_REPORT_TIMEOUT_S: Final = 2.0


class AgentSettings(_Strict, OrchestratorSettings):
    host: str | None = Field(
        default=None,
        # the manager's NAME_PATTERN: a name it would reject must stop the agent at start
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,63}$",
        description="this host's name at the manager; default: the driver's",
    )
    # a name in the drivers' registry (sova.manager.daemons.drivers; plug-ins add theirs)
    driver: Annotated[str, AfterValidator(DRIVERS.check)] = "libvirt"
    connect: str | None = Field(
        default=None,
        description="libvirt URI (libvirt), scenario file (sim), world URL (remote)",
    )
    manager_url: str | list[str] | None = Field(
        default=None,
        description="the manager's base URL, or several (a list, or one string with commas): "
        "active/standby managers, the agent follows the leader; None = standalone",
    )
    manager_urls: list[str] = Field(
        default_factory=list, description="the managers' base URLs (instead of manager_url)"
    )
    token: SecretStr | None = Field(default=None, min_length=16)
    token_file: Path | None = None
    ca_file: Path | None = Field(default=None, description="CA bundle to verify the manager")
    report_timeout_s: float = Field(default=AGENT_REPORT_TIMEOUT_S, gt=0, le=60)
    report_retries: int = Field(default=2, ge=0, le=10)
    report_patience_s: float | None = Field(
        default=None,
        ge=0,
        le=600,
        description="a report no manager takes is sent again for this long (a takeover "
        "leaves no leader for a few seconds), while the managers were answering until then; "
        "default: half the controller period (the next period's work starts on time)",
    )
    report_top_k: int = Field(default=4, ge=3, le=16)
    report_decimals: int = Field(default=4, ge=2, le=17)
    record_to_world: bool = Field(
        default=False, description="sova demo: send step records and events to the world"
    )
    poll_interval_s: float = Field(default=0.5, gt=0, le=60)
    dry_run: bool = False
    metrics_port: int | None = Field(default=None, ge=0, le=65535)
    metrics_addr: str = "127.0.0.1"
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    controller: ControllerSettings = Field(default_factory=ControllerSettings)
    libvirt: LibvirtSettings = Field(default_factory=LibvirtSettings)

    @model_validator(mode="after")
    def _manager_urls(self) -> AgentSettings:
        if self.manager_url is not None and self.manager_urls:
            raise ValueError("give manager_url or manager_urls, not both")
        urls = self.manager_url_list()
        field = "manager_urls" if self.manager_urls else "manager_url"
        for u in urls:
            if not re.match(r"^https?://[^\s/?#,]+(/[^\s?#,]*)?$", u):
                raise ValueError(f"{field}: {u!r} is not an http:// or https:// base URL")
        if len({u.rstrip("/") for u in urls}) != len(urls):
            raise ValueError(f"{field}: {urls!r} names one manager twice")
        if self.manager_url is not None and not urls:
            raise ValueError(f"{field}: {self.manager_url!r} names no manager")
        return self

    def manager_url_list(self) -> list[str]:
        """Every manager URL configured, in order ([] = standalone)."""
        raw = self.manager_urls or self.manager_url or []
        items = raw.split(",") if isinstance(raw, str) else raw
        return [u.strip() for u in items if u.strip()]

    @model_validator(mode="after")
    def _token_source(self) -> AgentSettings:
        if self.token is not None and self.token_file is not None:
            raise ValueError("give token or token_file, not both")
        return self

    @model_validator(mode="after")
    def _hotplug_fits_op_timeout(self) -> AgentSettings:
        # The executor gives up on a plug after controller.op_timeout; retries the driver
        # would still make after that are work nobody waits for, and a VF held meanwhile.
        budget = self.libvirt.hotplug_budget_s()
        if budget is not None and budget > self.controller.op_timeout:
            raise ValueError(
                f"libvirt.hotplug_timeout_s x hotplug_attempts (+ back-off) = {budget:g}s "
                f"exceeds controller.op_timeout = {self.controller.op_timeout:g}s; "
                "lower them or raise op_timeout"
            )
        return self

    def resolved_token(self) -> str | None:
        if self.token is not None:
            return self.token.get_secret_value()
        if self.token_file is not None:
            try:
                token = self.token_file.read_bytes().decode("utf-8").strip()
            except OSError as exc:
                raise ConfigError(
                    f"token_file: cannot read {self.token_file}: {exc.strerror}"
                ) from None
            except UnicodeDecodeError as exc:
                raise ConfigError(
                    f"token_file {self.token_file}: not UTF-8 text (byte at offset {exc.start})"
                ) from None
            if len(token) < 16 or any(c.isspace() for c in token):
                raise ConfigError(
                    f"token_file {self.token_file}: holds no token of >= 16 characters "
                    "(one line, no spaces)"
                )
            return token
        return None


# --------------------------------------------------------------------------- manager


class HostAuth(_Strict):
    token: SecretStr = Field(min_length=16, description="this host's bearer token")


class PlannerSettings(ManagerSpec):
    """The manager daemon's ``[planner]``: the one manager schema
    (:class:`sova.agent.config.ManagerSpec`: detection, planning, leases, anti-thrash) plus
    what only a daemon has — directives to deliver and hosts that may fall silent."""

    # A flagged directive the source never acknowledges is withdrawn (and its lease
    # released) after this many planning periods: a dead agent must not pin a target.
    directive_ttl_periods: int = Field(default=3, ge=1, le=1000)
    # A host silent for longer than this many planning periods is stale: never a source or
    # a target, its directive withdrawn, its window restarted when it reports again.
    stale_after_periods: float = Field(default=3.0, gt=0, le=1000)

    @model_validator(mode="after")
    def _agent_only(self) -> PlannerSettings:
        if self.migration_bandwidth is not None:
            raise ValueError(
                "migration_bandwidth is read by the agents, not the manager: set it in "
                "each agent's [controller.manager]"
            )
        return self


class ManagerSettings(_Strict, OrchestratorSettings):
    listen: str = "127.0.0.1"
    port: int = Field(default=8700, ge=0, le=65535)
    database_url: str = "sqlite:///sova-manager.db"
    tls_certfile: Path | None = None
    tls_keyfile: Path | None = None
    admin_token: SecretStr | None = Field(
        default=None,
        min_length=16,
        description="the secret of the operator credential named admin (role admin)",
    )
    operators_file: Path | None = Field(
        default=None,
        description="TOML of named operator credentials with roles (re-read on SIGHUP)",
    )
    insecure: bool = Field(
        default=False,
        description="allow operator routes without a credential, and a non-loopback "
        "listen without one and TLS",
    )
    hosts: dict[str, HostAuth] = Field(default_factory=dict)
    tokens_file: Path | None = Field(
        default=None, description='TOML of host = "token" (or ["token", "next"]) lines'
    )
    plan_period_s: float = Field(default=10.0, ge=0, description="0 = only explicit ticks")
    plan_trigger: Literal["timer", "round"] = Field(
        default="timer",
        description='"round": plan as soon as every known host has reported (sova demo)',
    )
    clock: Literal["wall", "agent"] = Field(
        default="wall", description='"agent": the newest agent clock (simulated time)'
    )
    planner: PlannerSettings = Field(default_factory=PlannerSettings)
    # Placement rules every planned move obeys (docs/operations.md#placement-rules).
    placement: PlacementSpec = Field(default_factory=PlacementSpec)
    # Operator control (docs/operations.md#modes-and-plans). The mode an operator sets
    # through the API is kept in the store and wins over these until reset.
    mode: Literal["autonomic", "recommend"] = Field(
        default="autonomic",
        description='"recommend": decisions become plans an operator approves or rejects',
    )
    host_modes: dict[str, Literal["autonomic", "recommend"]] = Field(
        default_factory=dict, description="per-host mode, over the cluster's"
    )
    plan_ttl_s: Duration = Field(
        default=600.0,
        # 0 made every plan born expired (and two audit rows per hot host each round);
        # an operator needs time to read a plan before approving it.
        ge=MIN_PLAN_TTL_S,
        description="a proposed plan not approved within this expires",
    )
    max_report_bytes: int = Field(default=1024, ge=128, le=65536)
    # Every fence is in /v1/cluster and the freeze lists in every report's answer: bounded.
    max_fences_per_kind: int = Field(default=4096, ge=1, le=100_000)
    # How far an agent's clock may drift from the manager's pace within one agent boot
    # (wall clock), or run ahead of the newest report (agent clock); beyond it: 422.
    max_clock_skew_s: float = Field(default=60.0, gt=0, le=86400)
    http: ConnLimits = Field(default_factory=ConnLimits, description="connection limits")
    report_retention_s: float = Field(default=3600.0, gt=0)
    flush_interval_s: float = Field(default=1.0, gt=0, le=60)
    # Active/standby managers on PostgreSQL (docs/operations.md#active-and-standby-managers)
    advertise_url: str | None = Field(
        default=None,
        pattern=r"^https?://[^\s/?#]+$",
        description="this manager's base URL as agents reach it (standbys send agents "
        "there while it leads); default: the scheme, this host's name and port",
    )
    leader_lease_s: float = Field(
        default=10.0,
        ge=2,
        le=300,
        description="a leader silent (frozen, cut off) this long loses the leadership",
    )
    # Events POSTed to the operator's receivers (docs/operations.md#webhooks).
    webhooks: WebhookSettings = Field(default_factory=WebhookSettings)
    host_metrics: bool = Field(default=True, description="per-host utilisation gauges")
    log_level: Literal["debug", "info", "warning", "error"] = "info"

    @model_validator(mode="after")
    def _plan_outlives_a_round(self) -> ManagerSettings:
        if self.plan_period_s > 0 and self.plan_ttl_s < self.plan_period_s:
            raise ValueError(
                f"plan_ttl_s = {self.plan_ttl_s:g} s is shorter than plan_period_s = "
                f"{self.plan_period_s:g} s: every plan would expire before an operator sees it"
            )
        return self

    @model_validator(mode="after")
    def _tls_pair(self) -> ManagerSettings:
        if (self.tls_certfile is None) != (self.tls_keyfile is None):
            raise ValueError("tls_certfile and tls_keyfile go together")
        return self

    def tokens(self) -> dict[str, list[str]]:
        """Each host's accepted tokens (several while one is rotated)."""
        out = {h: [a.token.get_secret_value()] for h, a in self.hosts.items()}
        if self.tokens_file is not None:
            data = _read_toml(self.tokens_file, "tokens_file")
            if not data:
                # An emptied file (a failed deploy, a truncating editor) would lock every
                # agent out at the next SIGHUP: refuse it, the old tokens stay in force.
                raise ConfigError(f"tokens_file {self.tokens_file}: holds no host tokens")
            for h, tok in data.items():
                toks = tok if isinstance(tok, list) else [tok]
                if not toks or not all(isinstance(t, str) and len(t) >= 16 for t in toks):
                    raise ConfigError(
                        f"tokens_file {self.tokens_file}: {h}: token must be a string of "
                        ">= 16 characters (or a non-empty list of them)"
                    )
                out[h] = list(toks)
        return out


# --------------------------------------------------------------------------- loading


def read_toml(path: Path, what: str) -> dict[str, Any]:
    """A TOML file as a dict; ConfigError (one line naming the file) if it cannot be."""
    try:
        with path.open("rb") as f:
            return tomllib.load(f)
    except OSError as exc:
        raise ConfigError(f"{what}: cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:  # tomllib decodes UTF-8 itself and lets this through
        raise ConfigError(f"{path}: not UTF-8 text (byte at offset {exc.start})") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None


_read_toml = read_toml


def _fields_of(model: type[BaseModel]) -> dict[str, type[BaseModel] | None]:
    """Every name a field is read under (its own and its alias spellings) -> its section
    model, or None for a plain value."""
    out: dict[str, type[BaseModel] | None] = {}
    for name, info in model.model_fields.items():
        ann = info.annotation
        section = ann if isinstance(ann, type) and issubclass(ann, BaseModel) else None
        for spelling in _spellings(model, name):
            out[spelling] = section
    return out


def _spellings(model: type[BaseModel], key: str) -> set[str]:
    """Every name of the field ``key`` names (e.g. ``return_tabu`` and ``return_tabu_s``)."""
    for name, info in model.model_fields.items():
        alias = info.validation_alias
        names = {name} | (
            {c for c in alias.choices if isinstance(c, str)}
            if isinstance(alias, AliasChoices)
            else set()
        )
        if key in names:
            return names
    return {key}


def env_overrides(
    model: type[BaseModel], prefix: str, environ: Mapping[str, str]
) -> tuple[dict[str, Any], dict[tuple[str, ...], str]]:
    """Nested dict of overrides from ``environ`` and, per path, the variable it came from."""
    data: dict[str, Any] = {}
    origin: dict[tuple[str, ...], str] = {}
    for var, value in sorted(environ.items()):
        if not var.startswith(prefix):
            continue
        parts = var[len(prefix) :].lower().split("__")
        cls: type[BaseModel] | None = model
        ok = True
        for i, p in enumerate(parts):
            fields = _fields_of(cls) if cls is not None else {}
            if p not in fields or (i < len(parts) - 1 and fields[p] is None):
                ok = False
                break
            cls = fields[p]
        if not ok or cls is not None:
            continue  # not one of ours (or a whole section): leave it to the other daemon
        node = data
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        node[parts[-1]] = value
        origin[tuple(parts)] = var
    return data, origin


def _without_other_spellings(
    data: dict[str, Any], over: Mapping[str, Any], model: type[BaseModel]
) -> dict[str, Any]:
    """``data`` less the keys ``over`` sets under another spelling of the same field, so
    that an override wins over the file whichever name each used."""
    out = dict(data)
    fields = _fields_of(model)
    for k, v in over.items():
        section = fields.get(k)
        if isinstance(v, Mapping) and section is not None and isinstance(out.get(k), dict):
            out[k] = _without_other_spellings(out[k], v, section)
        else:
            for other in _spellings(model, k) - {k}:
                out.pop(other, None)
    return out


def _merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        if isinstance(v, Mapping) and isinstance(out.get(k), Mapping):
            out[k] = _merge(dict(out[k]), v)
        else:
            out[k] = v
    return out


def format_errors(err: ValidationError, source: str, origin: Mapping[tuple[str, ...], str]) -> str:
    lines = [f"{source}: invalid configuration ({err.error_count()} error(s))"]
    for e in err.errors():
        loc = tuple(str(p) for p in e["loc"])
        path = ".".join(loc)
        msg = e["msg"].removeprefix("Value error, ")
        value = e.get("input")
        where = f" (from {origin[loc]})" if loc in origin else ""
        if e["type"] == "extra_forbidden":
            msg = "unknown setting"
        shown = "" if isinstance(value, dict | list) else f" = {value!r}"
        if "token" in path or "secret" in path:
            shown = " = ***"
        lines.append(f"  {path}{shown}{where}: {msg}" if path else f"  {msg}")
    return "\n".join(lines)


def load_settings(
    model: type[M],
    path: Path | None,
    prefix: str,
    environ: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> M:
    """File, then environment, then explicit (command-line) overrides; then validate."""
    environ = os.environ if environ is None else environ
    data: dict[str, Any] = _read_toml(path, "config") if path is not None else {}
    env, origin = env_overrides(model, prefix, environ)
    data = _merge(_without_other_spellings(data, env, model), env)
    if overrides:
        data = _merge(data, {k: v for k, v in overrides.items() if v is not None})
    try:
        return model.model_validate(data)
    except ValidationError as err:
        raise ConfigError(format_errors(err, str(path) if path else "<config>", origin)) from None


def load_agent_settings(
    path: Path | None,
    environ: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> AgentSettings:
    return load_settings(AgentSettings, path, AGENT_ENV_PREFIX, environ, overrides)


def load_manager_settings(
    path: Path | None,
    environ: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> ManagerSettings:
    return load_settings(ManagerSettings, path, MANAGER_ENV_PREFIX, environ, overrides)
