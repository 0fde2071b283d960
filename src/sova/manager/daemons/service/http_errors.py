"""What the leader's routes (:mod:`sova.manager.daemons.service.routes_operators`) and a standby's reads
(:mod:`sova.manager.daemons.service.standby_reads`) share: the parameter types of the read routes both
serve (one declaration, so the two cannot accept different bounds), and the manager's 422,
where every validation error names the field (its long name for a report's one-letter
fields) and the value, in one line (``error``) and in detail.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from fastapi import Depends, Query, Request
from fastapi import Path as PathParam
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from sova.manager.daemons.schema import FIELD_NAMES, NAME_MAX, NAME_PATTERN
from sova.manager.daemons.service.control import PLAN_STATES
from sova.manager.daemons.service.store_rows import LogSlice

PlanId = Annotated[int, PathParam(ge=1, le=2**62)]
PlanState = Annotated[str | None, Query(pattern="^(" + "|".join(PLAN_STATES) + ")$")]
RowAfter = Annotated[int, Query(ge=0, le=2**62)]  # plans and audit entries
DecisionAfter = Annotated[int, Query(ge=0, le=2**53)]
PageLimit = Annotated[int, Query(ge=1, le=1000)]
HostFilter = Annotated[str | None, Query(min_length=1, max_length=NAME_MAX, pattern=NAME_PATTERN)]
VMFilter = Annotated[str | None, Query(min_length=1, max_length=NAME_MAX, pattern=NAME_PATTERN)]
AuditAction = Annotated[
    str | None,
    Query(
        pattern=r"^[a-z][a-z0-9_-]{0,15}(:[a-z0-9_-]{1,16})?$",
        description="one action (approve, forget, mode, ...); fence / unfence match every kind",
    ),
]
# Epoch seconds, as every time the API gives; 1e11 is the year 5138.
_Time = Query(ge=0, le=1e11)


def log_window(
    order: Annotated[
        Literal["oldest", "newest"],
        Query(description="oldest first (page on with after) or newest first (with before)"),
    ] = "oldest",
    before: Annotated[
        int | None, Query(ge=1, le=2**62, description="only ids below it (a next_before)")
    ] = None,
    since_s: Annotated[float | None, _Time] = None,
    until_s: Annotated[float | None, _Time] = None,
) -> LogSlice:
    """The order and bounds every log read (plans, audit, decisions) takes."""
    return LogSlice(before=before, since_s=since_s, until_s=until_s, newest_first=order == "newest")


LogWindow = Annotated[LogSlice, Depends(log_window)]


def field_name(loc: tuple[Any, ...]) -> str:
    parts = [p for p in loc if p != "body"] if loc and loc[0] == "body" else list(loc)
    if loc and loc[0] in ("path", "query", "header"):
        parts = list(loc[1:])
    name = ""
    for p in parts:
        name += f"[{p}]" if isinstance(p, int) else ("." if name else "") + str(p)
    if not name:
        return "body"
    last = next((p for p in reversed(parts) if isinstance(p, str)), None)
    long = FIELD_NAMES.get(last) if loc and loc[0] == "body" and last else None
    return f"{name} ({long})" if long else name


async def validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    out = []
    for e in exc.errors():
        loc = tuple(e.get("loc", ()))
        item: dict[str, Any] = {
            "loc": list(loc),
            "msg": str(e.get("msg", "")),
            "type": str(e.get("type", "")),
            "field": "body" if e.get("type") == "json_invalid" else field_name(loc),
        }
        value = e.get("input")
        if isinstance(value, float) and not math.isfinite(value):
            item["input"] = str(value)  # JSON has no inf/nan: show it, do not crash on it
        elif isinstance(value, bool | int | float | str) or value is None:
            item["input"] = value if not isinstance(value, str) else value[:100]
        out.append(item)
    summary = "; ".join(f"{x['field']}: {x['msg']}" for x in out[:5])
    if request.url.path.endswith("/reports"):
        request.app.state.service.metrics.reports.labels("rejected").inc()
    return JSONResponse(status_code=422, content={"detail": out, "error": summary})
