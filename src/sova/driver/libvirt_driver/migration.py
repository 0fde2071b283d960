"""Live migration as a bounded job: run, watch progress, abort past the deadline."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sova.driver.libvirt_driver.connection import require_libvirt
from sova.driver.libvirt_driver.context import DriverContext
from sova.driver.libvirt_driver.operations import DriverOp, DriverOps, OpFailed
from sova.driver.libvirt_driver.plug import HotPlug
from sova.model import Migrate


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


class Migrator:
    """Live-migrates a VM: its fast NIC out first (backup confirmed), then one bounded job."""

    def __init__(self, ctx: DriverContext, plug: HotPlug, ops: DriverOps) -> None:
        self._ctx = ctx
        self._plug = plug
        self._ops = ops

    def migrate(self, op: DriverOp, a: Migrate) -> str:
        lv = require_libvirt()
        cfg = self._ctx.config
        dom = self._ctx.dom(a.vm)
        if not dom.isActive():
            raise OpFailed(f"{a.vm} is not running: nothing to live-migrate")
        self._ctx.migrating.add(a.vm)
        try:
            info = self._ctx.live(dom)
            blocker = self._ctx.fast.migration_blocker(info, self._ctx.pf_view())
            if blocker:
                raise OpFailed(blocker)
            if self._ctx.fast.nic(info) is not None:
                try:
                    self._plug.detach(op, a.vm)
                except OpFailed as e:
                    raise OpFailed(
                        f"not migrating {a.vm}: VF could not be unplugged first: {e}"
                    ) from e
            uri = cfg.migration_uri_template.format(host=a.dst_host)
            params: dict[str, Any] = {}
            bw = a.bandwidth_cap_bps or cfg.migration_bandwidth_bps
            if bw:
                # libvirt's migration bandwidth is in MiB/s.
                params[lv.VIR_MIGRATE_PARAM_BANDWIDTH] = max(1, int(bw / 8 / (1024 * 1024)))
            flags = (
                lv.VIR_MIGRATE_LIVE
                | lv.VIR_MIGRATE_PEER2PEER
                | lv.VIR_MIGRATE_PERSIST_DEST
                | lv.VIR_MIGRATE_UNDEFINE_SOURCE
            )
            if cfg.migration_unsafe:
                flags |= lv.VIR_MIGRATE_UNSAFE
            res = run_migration(
                dom,
                uri,
                params,
                flags,
                timeout_s=cfg.migration_timeout_s,
                poll_s=cfg.migration_poll_s,
                abort_grace_s=cfg.migration_abort_grace_s,
                progress=lambda p: self._ops.progress(op, f"migrating {a.vm} to {a.dst_host}: {p}"),
            )
            if res.timed_out:
                raise OpFailed(
                    f"migration of {a.vm} to {a.dst_host} timed out after "
                    f"{cfg.migration_timeout_s:g}s ({res.progress}): {res.abort_state}; "
                    "VM stays on this host on virtio"
                )
            if not res.ok:
                raise OpFailed(
                    f"migration of {a.vm} to {a.dst_host} failed: {res.error}; "
                    "VM stays on this host on virtio"
                )
            return f"{a.vm} migrated to {a.dst_host} ({uri})"
        finally:
            self._ctx.migrating.discard(a.vm)
