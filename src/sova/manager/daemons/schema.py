"""The wire format between agents and the manager, shared by both sides.

Why so terse: the Sova paper's Table 5a budgets 304 bytes per host per report interval,
and a manager of 10,000 hosts parses a thousand of these a second. A report therefore
carries only what Algorithm 2 consumes — the host's current utilisation triple and the
loads of a few candidate VMs — with one-letter keys. Each field's ``description`` (and
the published OpenAPI) gives its long name, and validation errors name both.

Why a few VMs are enough: by default the manager moves a VM that relieves the overload
(:func:`sova.policy.hotspot.rank_movers`), and each resource's largest carrier relieves
it most, so :func:`select_candidates` puts those first. Under the papers' rule it runs
:func:`sova.policy.hotspot.choose_vm` with the host's hot resources as a filter, i.e. it
wants the largest-MF VM with a positive share of *some* hot resource; the report also
includes, for each resource, the largest-MF VM with a positive share of it, so that
choice over the reduced set is exactly the choice over all VMs; the remaining slots are
filled by MF.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Mapping
from typing import Annotated, Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from sova.model import MIB
from sova.policy.hotspot import (
    RESOURCES,
    UTILISATION_SLACK,
    HostCapacity,
    HotnessMetric,
    Utilisation,
    VMLoad,
    migration_factor,
)

REPORT_BUDGET_BYTES: Final = 304  # Sova Table 5a
DEFAULT_TOP_K: Final = 4
MAX_VMS_PER_REPORT: Final = 16
NAME_PATTERN: Final = r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,63}$"
NAME_MAX: Final = 64

# Long names for error messages: "u[2]" alone tells an operator nothing.
FIELD_NAMES: Final[Mapping[str, str]] = {
    "s": "sequence number",
    "t": "agent clock (s)",
    "d": "last directive applied",
    "u": "host utilisation [cpu, mem, net]",
    "v": "candidate VM loads",
    "n": "VM name",
    "m": "VM memory (MiB)",
    "x": "VM is migrating",
    "b": "agent boot id",
    "c": "host capacity [cores, memory MiB, link Mbit/s]",
    "p": "wire protocol version",
    "y": "VF-freeze list version held",
    "g": "a migration leaves this host now",
}

# The wire's version, raised with every change to a report or a directive. A message says
# which version wrote it (``p``; absent = 0, the unversioned wire of Sova 0.1). Readers
# ignore fields they do not know, so one version newer on either side still parses; a
# manager serves agents one protocol version older and newer (docs/operations.md,
# "Upgrades"). It answers an agent that sent no version in that agent's own terms: such
# an agent refuses any field it does not know.
# 2: the VF-freeze list is versioned (``y``) and sent only to an agent that lacks it.
# 3: a report says whether a migration leaves the host (``g``).
PROTOCOL: Final = 3
FREEZE_VERSIONED: Final = 2  # the first protocol whose agents acknowledge ``y``
PROTOCOL_WINDOW: Final = 1

# Characters that can forge, hide or reorder a line for a reader of free text (a "by", a
# reason, an audit detail): the C0 and C1 controls and DEL (newline, escape, the 8-bit CSI
# U+009B, NEL U+0085), the Unicode line and paragraph separators, and the bidirectional
# controls (marks, embeddings, overrides, isolates). Refused on input, escaped on output.
# One pattern for Python's re and pydantic's (Rust) regex alike.
FORGING_CHARS: Final = (
    r"\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069"
)
FREE_TEXT_PATTERN: Final = rf"^[^{FORGING_CHARS}]*$"
_FORGING_RE: Final = re.compile(f"[{FORGING_CHARS}]")


def forging(text: str) -> str | None:
    """The first character of ``text`` that could forge a line, escaped (None: none)."""
    m = _FORGING_RE.search(text)
    return None if m is None else f"U+{ord(m.group()):04X}"


def escaped(text: str) -> str:
    """``text`` with every forging character shown as its escape (one line, as typed)."""
    return _FORGING_RE.sub(lambda m: ascii(m.group())[1:-1], text)


Fraction = Annotated[float, Field(ge=0.0, le=1.0 + UTILISATION_SLACK, allow_inf_nan=False)]
Triple = Annotated[list[Fraction], Field(min_length=3, max_length=3)]
Name = Annotated[str, Field(min_length=1, max_length=NAME_MAX, pattern=NAME_PATTERN)]


class _Wire(BaseModel):
    # The wire keeps one-letter keys (the byte budget); code reads the long names. Aliases
    # are the wire form, both are accepted on input, and encode() writes the aliases.
    # (validation_alias/serialization_alias rather than alias: mypy then types __init__
    # by the long names.)
    # Unknown fields are ignored (a newer peer's additions), known fields stay strictly
    # validated; the request body limit bounds what an unknown field can cost.
    model_config = ConfigDict(
        extra="ignore", frozen=True, validate_by_name=True, serialize_by_alias=True
    )


class _Strict(_Wire):
    # An operator's request: a misspelt field must be an error, not silently dropped.
    model_config = ConfigDict(
        extra="forbid", frozen=True, validate_by_name=True, serialize_by_alias=True
    )


class VMEntry(_Wire):
    """One candidate VM: its share of the host per resource and its memory size."""

    name: Name = Field(validation_alias="n", serialization_alias="n", description="VM name")
    util: Triple = Field(
        validation_alias="u",
        serialization_alias="u",
        description="VM's share of the host [cpu, mem, net], each in [0, 1.05]",
    )
    memory_mib: int = Field(
        validation_alias="m",
        serialization_alias="m",
        ge=1,
        le=64 * 1024 * 1024,
        strict=True,
        description="VM memory in MiB (what migration copies)",
    )
    migrating: bool = Field(
        default=False,
        validation_alias="x",
        serialization_alias="x",
        strict=True,
        description="VM is migrating (never a candidate)",
    )


class Report(_Wire):
    """One host report (Sova Fig. 3: Sensor -> Monitor), sent once per period."""

    seq: int = Field(
        validation_alias="s",
        serialization_alias="s",
        ge=0,
        le=2**53,
        strict=True,  # "7" and true are not numbers (issue 37)
        description="report sequence number, increasing per agent run",
    )
    time_s: float = Field(
        validation_alias="t",
        serialization_alias="t",
        ge=0.0,
        le=1e11,
        allow_inf_nan=False,
        description="agent clock in seconds",
    )
    ack: int = Field(
        default=0,
        validation_alias="d",
        serialization_alias="d",
        ge=0,
        le=2**53,
        strict=True,
        description="id of the last directive applied",
    )
    util: Triple = Field(
        validation_alias="u",
        serialization_alias="u",
        description="host utilisation [cpu, mem, net], each in [0, 1.05]",
    )
    boot: str = Field(
        default="",
        validation_alias="b",
        serialization_alias="b",
        pattern=r"^[0-9a-f]{0,16}$",
        description="agent boot id: new on every agent start; s restarts only with it",
    )
    vms: list[VMEntry] = Field(
        default_factory=list,
        validation_alias="v",
        serialization_alias="v",
        max_length=MAX_VMS_PER_REPORT,
        description="candidate VM loads (top-K by migration factor; see select_candidates)",
    )
    capacity: list[Annotated[float, Field(gt=0, le=1e9, allow_inf_nan=False)]] | None = Field(
        default=None,
        validation_alias="c",
        serialization_alias="c",
        min_length=3,
        max_length=3,
        description="host capacity [cores, memory MiB, link Mbit/s]: the whole of which the "
        "shares in u and v are parts (heterogeneous hosts)",
    )
    protocol: int = Field(
        default=0,
        validation_alias="p",
        serialization_alias="p",
        ge=0,
        le=PROTOCOL + PROTOCOL_WINDOW,
        strict=True,  # true was read as protocol 1, "2" as 2
        description="wire protocol version of the agent (absent: 0, an unversioned agent); "
        f"this manager serves up to {PROTOCOL + PROTOCOL_WINDOW}",
    )
    vf_freeze_version: int = Field(
        default=0,
        validation_alias="y",
        serialization_alias="y",
        ge=0,
        le=2**32,
        strict=True,
        description="version of the VF-freeze list the agent holds (0: none); the response "
        "leaves the list out when it is the current one",
    )
    migrating: bool = Field(
        default=False,
        validation_alias="g",
        serialization_alias="g",
        strict=True,
        description="a migration leaves this host now (the agent's own account: a manager "
        "that lost or never had its lease sends no other migration from here meanwhile)",
    )

    @field_validator("vms")
    @classmethod
    def _one_entry_per_vm(cls, vms: list[VMEntry]) -> list[VMEntry]:
        # The second entry would silently replace the first (vm_loads is by name).
        seen: set[str] = set()
        for e in vms:
            if e.name in seen:
                raise ValueError(f"VM {e.name} appears twice")
            seen.add(e.name)
        return vms

    def utilisation(self) -> Utilisation:
        return Utilisation(*self.util)

    def host_capacity(self) -> HostCapacity | None:
        if self.capacity is None:
            return None
        return HostCapacity(*self.capacity)

    def vm_loads(self) -> dict[str, VMLoad]:
        return {
            e.name: VMLoad(Utilisation(*e.util), e.memory_mib * int(MIB), migrating=e.migrating)
            for e in self.vms
        }


class Directive(_Wire):
    """The manager's migration signal ``<flag, target>`` for one host (Alg. 2 line 13).

    ``i`` identifies the directive; the manager repeats a flagged directive in every
    response until the agent acknowledges it with ``d >= i``, and the agent applies each
    id at most once, so a lost response neither loses nor duplicates a migration.
    """

    id: int = Field(
        validation_alias="i",
        serialization_alias="i",
        ge=0,
        description="directive id (0 = none yet)",
    )
    flag: bool = Field(
        validation_alias="f",
        serialization_alias="f",
        description="flag: migrate a VM off this host",
    )
    target: str | None = Field(
        default=None, validation_alias="t", serialization_alias="t", description="target host"
    )
    vm: str | None = Field(
        default=None,
        validation_alias="v",
        serialization_alias="v",
        description="VM the target was checked for",
    )
    vf_freeze_host: bool = Field(
        default=False,
        validation_alias="z",
        serialization_alias="z",
        description="operator fence: keep every VF assignment on this host as it is",
    )
    vf_freeze_vms: list[Name] = Field(
        default_factory=list,
        validation_alias="k",
        serialization_alias="k",
        max_length=4096,
        description="operator fence: these VMs keep their VF assignment as it is (absent: "
        "the agent holds the current list, version y)",
    )
    vf_freeze_version: int = Field(
        default=0,
        validation_alias="y",
        serialization_alias="y",
        ge=0,
        description="version of the VF-freeze list (protocol 2 on); the agent reports the one "
        "it holds",
    )
    protocol: int = Field(
        default=0,
        validation_alias="p",
        serialization_alias="p",
        ge=0,
        description="wire protocol version of the manager (sent only to agents that sent one)",
    )


def freeze_version(vms: list[str]) -> int:
    """The version of a VF-freeze list: a digest of its names, so that it changes with the
    list and a restarted manager gives the same list the same version (an agent's
    acknowledgement stays true across a manager restart). Never 0 (0 = no list held);
    32 bits keep a report's acknowledgement at 15 bytes of its 304. The price: a new list
    whose digest equals the old one's (one change in 4·10⁹) reaches no agent that holds
    the old one until the next change."""
    digest = hashlib.blake2b("\n".join(vms).encode(), digest_size=4).digest()
    return int.from_bytes(digest) or 1


def for_agent(d: Directive, agent_protocol: int, held_version: int = 0) -> dict[str, Any]:
    """``d`` as the agent that speaks ``agent_protocol`` can read it: an unversioned agent
    (0) refuses unknown fields, so it gets only the fields of its own wire. An agent that
    holds the current VF-freeze list (``held_version``) is not sent it again: 4,096 frozen
    VMs are ~70 KB in every response otherwise."""
    exclude: set[str] = set()
    if agent_protocol < FREEZE_VERSIONED:
        exclude.add("vf_freeze_version")  # it would neither read nor acknowledge it
    elif held_version and held_version == d.vf_freeze_version:
        exclude.add("vf_freeze_vms")
    body = d.model_dump(mode="json", by_alias=True, exclude=exclude)
    if agent_protocol >= 1:
        body["p"] = PROTOCOL
    else:
        body.pop("p", None)
    return body


# Decision (= directive) ids carry the store epoch in their high bits: the wall-clock second
# the manager started, and at least one more than any epoch in its store. A manager whose
# store was deleted or restored from a backup therefore never re-issues an id an agent has
# already applied (it would ignore the new directive as done); 2**21 ids per start.
EPOCH_SHIFT: Final = 21


def epoch_of(decision_id: int) -> int:
    return decision_id >> EPOCH_SHIFT


def epoch_note(applied: int, new: int) -> str | None:
    """What an agent should log when a directive's store epoch differs from the last one."""
    if not applied or not new or epoch_of(applied) == epoch_of(new):
        return None
    if new < applied:
        return (
            f"directive {new} is from an older store epoch ({epoch_of(new)} < "
            f"{epoch_of(applied)}): ignored (the manager's store was restored from a backup?)"
        )
    return f"manager store epoch changed ({epoch_of(applied)} -> {epoch_of(new)})"


def directive_refusal(d: Directive, host: str) -> str | None:
    """Why an agent must not act on the flagged directive ``d`` (a field no manager of
    this protocol sends: the same patterns its routes apply to names), or None. The value
    is shown escaped: it came from the network and goes to logs and the audit."""
    if d.target is None:
        return "it names no target"
    if re.fullmatch(NAME_PATTERN, d.target) is None:
        return f"target {ascii(d.target)[:80]} is not a host name"
    if d.target == host:
        return f"target {d.target} is this host"
    if d.vm is not None and re.fullmatch(NAME_PATTERN, d.vm) is None:
        return f"VM {ascii(d.vm)[:80]} is not a VM name"
    return None


class MigrationDone(_Wire):
    """The source agent's account of a migration the manager signalled."""

    result: str = Field(
        pattern=r"^(succeeded|failed|timeout|declined)$",
        description="succeeded | failed | timeout (rolled back at the source) | declined",
    )
    dst: Name | None = Field(default=None, description="target host the VM was sent to")
    detail: str = Field(default="", max_length=500)


class MigrationDoneAck(_Wire):
    released: bool = Field(description="a lease existed and is now released")


class ResourceUse(_Wire):
    """Utilisation of one host or VM, each a share of the host's capacity (0..1)."""

    cpu: float
    mem: float
    net: float


class HostView(_Wire):
    host: str
    last_seen_s: float
    age_s: float = Field(description="seconds since the host's last report")
    state: str = Field(description="fresh | stale (silent for longer than stale_after)")
    seq: int
    utilisation: ResourceUse
    hot: bool
    reason: str
    vms: dict[str, ResourceUse]
    directive: Directive | None = None
    mode: str = Field(default="autonomic", description="autonomic | recommend (this host's)")
    maintenance: str | None = Field(
        default=None, description="why the host is in maintenance (None = it is not)"
    )
    vf_frozen: bool = Field(default=False, description="the host's VF assignments are frozen")
    pinned_vms: list[str] = Field(default_factory=list, description="its VMs that never move")
    vf_frozen_vms: list[str] = Field(
        default_factory=list, description="its VMs whose VF assignment is frozen"
    )


class LeaseView(_Wire):
    vm: str
    src: str
    dst: str
    since_s: float


class FenceView(_Wire):
    kind: str = Field(description="maintenance | pin | vf-freeze-host | vf-freeze-vm")
    name: str = Field(description="the host or VM it applies to")
    set_by: str
    since_s: float
    reason: str
    until_s: float | None = Field(
        default=None,
        description="when it expires (the manager's clock, as since_s): the first planning "
        "round at or after it lifts it; null: until lifted",
    )


class ModeView(_Wire):
    cluster: str = Field(description="the cluster's mode: autonomic | recommend")
    cluster_set_by: str | None = Field(
        default=None, description="operator who set it (None = the config file's mode)"
    )
    hosts: dict[str, str] = Field(
        default_factory=dict, description="hosts whose mode differs from the cluster's setting"
    )


class ClusterView(_Wire):
    now_s: float
    rounds: int
    hosts: list[HostView]
    leases: list[LeaseView]
    mode: str = Field(default="autonomic", description="the cluster's mode")
    fences: list[FenceView] = Field(default_factory=list)
    open_plans: int = Field(default=0, description="proposed plans awaiting a decision")


class OperatorAction(_Strict):
    """Who does it, and why (kept in the audit log)."""

    by: str = Field(
        default="admin",
        min_length=1,
        max_length=128,
        pattern=rf"^[^{FORGING_CHARS}]+$",
        description="the operator's name for the audit log (the admin token is shared)",
    )
    reason: str = Field(default="", max_length=500)


class FenceAction(OperatorAction):
    """Who sets a fence, why, and for how long: ``until_s`` (the manager's clock, as the
    fences' ``since_s``) or ``for_s`` (seconds from now, on the manager's clock), not both;
    neither: until lifted."""

    until_s: float | None = Field(
        default=None, gt=0, le=1e11, description="when the fence expires (before the year 5000)"
    )
    for_s: float | None = Field(
        default=None, gt=0, le=366 * 86400, description="the fence expires this long from now"
    )

    @model_validator(mode="after")
    def _one_end(self) -> FenceAction:
        if self.until_s is not None and self.for_s is not None:
            raise ValueError("give until_s or for_s, not both")
        return self


class ModeChange(OperatorAction):
    mode: str = Field(pattern=r"^(autonomic|recommend)$", description="autonomic | recommend")


class PlanAction(_Wire):
    action: str = Field(description="migrate")
    vm: str
    src: str
    dst: str


class PlanView(_Wire):
    id: int = Field(description="the id of the decision that proposed it")
    state: str = Field(
        description="proposed | approved | executed | rejected | expired | superseded | failed"
    )
    created_s: float
    expires_s: float
    host: str = Field(description="the source host")
    reason: str = Field(description="the decision's reason")
    actions: list[PlanAction]
    inputs: dict[str, Any] = Field(description="the decision's inputs (utilisation, window)")
    expected: dict[str, Any] = Field(description="expected utilisation of both hosts after")
    decided_by: str | None = None
    decided_s: float | None = None
    detail: str = ""


class PlanPage(_Wire):
    plans: list[PlanView]
    next_after: int = Field(description="pass as ?after= to get the following page")
    next_before: int | None = Field(
        default=None, description="newest first: pass as ?before= to get the older page"
    )


class AuditView(_Wire):
    id: int
    time_s: float
    who: str
    action: str
    subject: str
    detail: str


class AuditPage(_Wire):
    entries: list[AuditView]
    next_after: int = Field(description="pass as ?after= to get the following page")
    next_before: int | None = Field(
        default=None, description="newest first: pass as ?before= to get the older page"
    )


class DecisionView(_Wire):
    id: int
    time_s: float
    host: str
    flag: bool
    target: str | None
    vm: str | None
    reason: str
    hot_resources: list[str]
    inputs: dict[str, Any]


class DecisionPage(_Wire):
    decisions: list[DecisionView]
    next_after: int = Field(description="pass as ?after= to get the following page")
    next_before: int | None = Field(
        default=None, description="newest first: pass as ?before= to get the older page"
    )


class Health(_Wire):
    status: str
    hosts: int
    store: str


class Readiness(Health):
    # The planner's health (readiness): when the last round completed (wall clock, for
    # display), how long it took, and how many rounds in a row have failed since.
    last_round_s: float | None = None
    last_round_duration_s: float | None = None
    round_failures: int = 0
    # Active/standby managers (PostgreSQL): this manager's role and the store's leadership
    # epoch it leads (a standby answers 503 with role "standby" and the leader's URL).
    role: Literal["leader", "standby"] = "leader"
    epoch: int | None = None


# --------------------------------------------------------------------------- agent side


def _mf_key(name: str, load: VMLoad, metric: HotnessMetric | str) -> tuple[float, str]:
    return (-migration_factor(load, metric), name)


def select_candidates(
    vms: Mapping[str, VMLoad],
    k: int = DEFAULT_TOP_K,
    metric: HotnessMetric | str = HotnessMetric.VOLUME,
) -> list[str]:
    """The VMs a report carries, most important first (see the module docstring)."""
    live = {n: v for n, v in vms.items() if not v.migrating}
    ranked = sorted(live, key=lambda n: _mf_key(n, live[n], metric))
    # Forced picks first, in MF order: they keep the manager's choice exact, so a report
    # trimmed to its byte budget loses the filler from the tail, never these.
    forced: list[str] = []
    for i, _ in enumerate(RESOURCES):
        best = next((n for n in ranked if live[n].util.as_tuple()[i] > 0.0), None)
        if best is not None and best not in forced:
            forced.append(best)
    forced.sort(key=lambda n: _mf_key(n, live[n], metric))
    # The manager's default rule moves a VM that relieves the overload (docs/design.md#relief):
    # each resource's largest carrier goes first, so a trimmed report keeps the heat's cause.
    carriers: list[str] = []
    for i, _ in enumerate(RESOURCES):
        top = min(live, key=lambda n: (-live[n].util.as_tuple()[i], n), default=None)
        if top is not None and live[top].util.as_tuple()[i] > 0.0 and top not in carriers:
            carriers.append(top)
    forced = carriers + [n for n in forced if n not in carriers]
    filler = [n for n in ranked if n not in forced][: max(0, k - len(forced))]
    return forced + filler


def _r(x: float, decimals: int = 4) -> float:
    # 4 decimals = 0.01 % of a host: far below any threshold, and it halves the payload.
    return round(min(max(x, 0.0), 1.0 + UTILISATION_SLACK), decimals)


def build_report(
    seq: int,
    time_s: float,
    util: Utilisation,
    vms: Mapping[str, VMLoad],
    *,
    ack: int = 0,
    boot: str = "",
    k: int = DEFAULT_TOP_K,
    metric: HotnessMetric | str = HotnessMetric.VOLUME,
    budget_bytes: int = REPORT_BUDGET_BYTES,
    decimals: int = 4,
    capacity: HostCapacity | None = None,
    vf_freeze_version: int = 0,
    migrating: bool = False,
) -> Report:
    """A report within ``budget_bytes``; lowest-MF candidates are dropped to fit.

    ``capacity`` in the driver's units (cores, bytes, bit/s) goes on the wire as whole
    cores, MiB and Mbit/s (the manager only compares hosts' capacities with each other).
    """
    names = select_candidates(vms, k, metric)
    entries = [
        VMEntry(
            name=n,
            util=[_r(x, decimals) for x in vms[n].util.as_tuple()],
            memory_mib=max(1, math.ceil(vms[n].memory_bytes / MIB)),
        )
        for n in names
    ]
    t = round(time_s, 1) if math.isfinite(time_s) else 0.0
    report = Report(
        seq=seq,
        time_s=t,
        ack=ack,
        util=[_r(x, decimals) for x in util.as_tuple()],
        boot=boot,
        vms=entries,
        protocol=PROTOCOL,
        vf_freeze_version=vf_freeze_version,
        migrating=migrating,
        capacity=None
        if capacity is None
        else [
            round(capacity.cpu, 2),
            max(1, round(capacity.mem / MIB)),
            max(1, round(capacity.net / 1e6)),
        ],
    )
    while entries and len(encode(report)) > budget_bytes:
        entries = entries[:-1]
        report = report.model_copy(update={"vms": entries})
    return report


def encode(model: BaseModel) -> bytes:
    """Compact JSON: no spaces, defaults omitted."""
    data = model.model_dump(mode="json", exclude_defaults=True, by_alias=True)
    return json.dumps(data, separators=(",", ":")).encode()
