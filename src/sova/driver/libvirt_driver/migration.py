"""Live migration as a bounded job: run, watch progress, abort past the deadline."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sova.driver.libvirt_driver.connection import require_libvirt


def job_progress(dom: Any) -> str:
    try:
        js = dom.jobStats(0)
    except Exception:
        return "progress unknown"
    total = int(js.get("memory_total", 0) or js.get("data_total", 0))
    left = int(js.get("memory_remaining", 0) or js.get("data_remaining", 0))
    if total <= 0:
        return "progress unknown"
    return f"{100.0 * (total - left) / total:.0f}% of memory copied"


@dataclass(frozen=True)
class MigrationResult:
    ok: bool
    error: str = ""  # libvirt's error, or why the job was aborted
    timed_out: bool = False
    progress: str = ""  # the last progress seen
    abort_state: str = ""  # "aborted" | "abort requested, job still running" on timeout


def run_migration(
    dom: Any,
    uri: str,
    params: dict[str, Any],
    flags: int,
    *,
    timeout_s: float,
    poll_s: float,
    abort_grace_s: float,
    progress: Callable[[str], None] = lambda _p: None,
) -> MigrationResult:
    """``migrateToURI3`` on a worker thread, so the deadline holds even if libvirt hangs."""
    lv = require_libvirt()
    result: dict[str, BaseException | None] = {}

    def run() -> None:
        try:
            dom.migrateToURI3(uri, params, flags)
            result["error"] = None
        except BaseException as e:  # reported through the result, never lost
            result["error"] = e

    worker = threading.Thread(target=run, name=f"migrate-{dom.name()}", daemon=True)
    worker.start()
    deadline = time.monotonic() + timeout_s
    seen = "progress unknown"
    while worker.is_alive():
        worker.join(poll_s)
        if not worker.is_alive():
            break
        seen = job_progress(dom)
        progress(seen)
        if time.monotonic() >= deadline:
            with contextlib.suppress(lv.libvirtError):
                dom.abortJob()
            worker.join(abort_grace_s)
            state = "aborted" if not worker.is_alive() else "abort requested, job still running"
            return MigrationResult(False, timed_out=True, progress=seen, abort_state=state)
    err = result.get("error")
    if err is not None:
        return MigrationResult(False, error=str(err), progress=seen)
    return MigrationResult(True, progress=seen)
