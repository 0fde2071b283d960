"""The manager's 422: every validation error names the field (its long name for a
report's one-letter fields) and the value, in one line (``error``) and in detail.

Shared by the leader's routes (:mod:`sova.daemon.manager_app`) and a standby's reads
(:mod:`sova.daemon.standby_reads`).
"""

from __future__ import annotations

import math
from typing import Any

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from sova.daemon.schema import FIELD_NAMES


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
