"""What a standby manager answers itself: operator reads of facts the store holds.

A standby has none of the leader's memory (detector windows, verdicts, leases in flight),
but every fact the leader *publishes* to operators — fences, modes, plans, the audit log,
the decision log — is in the store before anyone sees it (persist, then publish:
:mod:`sova.manager.daemons.service.service`). So those reads are answered from the store, exactly
as the leader answers them; the rest (the cluster view, a drain's progress: memory-only
facts) and every write and agent report stay 503 with the leader's URL
(:mod:`sova.manager.daemons.service.standby`). Why each route is on which side: docs/design.md,
"Active and standby managers".

The reads go through sessions PostgreSQL itself keeps read-only
(``default_transaction_read_only``, SQLite's ``query_only``) with a statement timeout:
a standby cannot write, whatever a future route does, and a slow store cannot hold a
request for ever.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Annotated, Any, TypeVar

import sqlalchemy as sa
from fastapi import Depends, FastAPI, HTTPException, Request

from sova.manager.daemons.config import ConfigError, ManagerSettings
from sova.manager.daemons.credentials import Credential, OperatorCredentials
from sova.manager.daemons.schema import (
    AuditPage,
    DecisionPage,
    FenceView,
    ModeView,
    PlanPage,
    PlanView,
)
from sova.manager.daemons.security import TokenBook
from sova.manager.daemons.service.control import OperatorControls
from sova.manager.daemons.service.guard import _bearer, authorize
from sova.manager.daemons.service.http_errors import (
    AuditAction,
    DecisionAfter,
    HostFilter,
    LogWindow,
    PageLimit,
    PlanId,
    PlanState,
    RowAfter,
    VMFilter,
)
from sova.manager.daemons.service.store import Store
from sova.manager.daemons.service.views import (
    audit_view,
    decision_view,
    fence_view,
    mode_view,
    page_bounds,
    plan_view,
)

T = TypeVar("T")
log = logging.getLogger("sova.manager")

READ_TIMEOUT_MS = 5000  # a page is at most 1,000 rows: slower means the store is in trouble

# Operator routes a standby answers from the store (GET only; the rest are the leader's).
STANDBY_READS = (
    "/v1/fences",
    "/v1/mode",
    "/v1/plans",
    "/v1/plans/{plan_id}",
    "/v1/plans/{plan_id}/watcher",
    "/v1/audit",
    "/v1/decisions",
    "/v1/whoami",
    "/v1/credentials",
)


def read_only_store(url: str) -> Store:
    """A second store on ``url`` whose every session refuses writes (and long reads)."""
    reader = Store(url)

    def on_connect(dbapi_conn: Any, _record: Any) -> None:
        cur = dbapi_conn.cursor()
        if url.startswith("sqlite"):
            cur.execute("PRAGMA query_only = ON")
        else:
            cur.execute("SET default_transaction_read_only = on")
            cur.execute(f"SET statement_timeout = {READ_TIMEOUT_MS}")
            dbapi_conn.commit()
        cur.close()

    sa.event.listen(reader.engine, "connect", on_connect)
    return reader


def stored_modes(store: Store, settings: ManagerSettings) -> ModeView:
    """The leader's mode view from the stored modes and the configured ones."""
    rows = store.mode_rows()
    return mode_view(OperatorControls.restore(settings.mode, settings.host_modes, rows, [], []))


@dataclass
class StandbyAuth:
    """What :func:`sova.manager.daemons.service.guard.authorize` needs: the standby's credentials.

    ``own`` is what its own files hold (reloaded on SIGHUP, compared with the leader's
    digest); operators are authorized with the leader's published book once there is one
    (``published``): a credential the leader revoked is refused here too
    (:mod:`sova.manager.daemons.service.peers`)."""

    settings: ManagerSettings
    own: TokenBook
    published: OperatorCredentials | None = None

    @property
    def tokens(self) -> TokenBook:
        if self.published is None:
            return self.own
        return TokenBook(self.own.hosts, self.published, self.own.admin)

    def reload(self) -> bool:
        """SIGHUP, as the leader does it: a file that does not load changes nothing."""
        try:
            self.own = TokenBook.load(self.settings)
        except ConfigError as exc:
            log.error("standby: tokens not reloaded, the old ones stay in force: %s", exc)
            return False
        log.info("standby: reloaded tokens: %d host(s)", len(self.own.hosts))
        return True


def operator_credential(request: Request) -> Credential:
    """The caller's credential, checked as the leader's guard checks it (401/403)."""
    guard: StandbyAuth = request.app.state.standby_auth
    token = _bearer(list(request.scope["headers"]))
    status, cred = authorize(guard, token, request.method, request.url.path)
    if isinstance(cred, str):
        headers = {"www-authenticate": 'Bearer realm="sova"'} if status == 401 else None
        raise HTTPException(status, cred, headers=headers)
    return cred


Who = Annotated[Credential, Depends(operator_credential)]


# A route table (the standby's read routes, a few lines each): long by nature, capped in
# tests/test_function_sizes.py rather than split.
def add_standby_reads(app: FastAPI, reader: Store, settings: ManagerSettings) -> StandbyAuth:
    """Register the standby's read routes on ``app`` (before its catch-all 503 route)."""
    guard = StandbyAuth(settings, TokenBook.load(settings))
    app.state.standby_auth = guard

    async def read(fn: Callable[..., T], *args: Any) -> T:
        try:
            return await asyncio.get_running_loop().run_in_executor(None, fn, *args)
        except sa.exc.SQLAlchemyError as exc:
            raise HTTPException(
                503, f"standby: the knowledge store cannot be read ({type(exc).__name__})"
            ) from None

    @app.get("/v1/fences")
    async def list_fences(_: Who) -> list[FenceView]:
        return [fence_view(f) for f in await read(reader.fence_rows)]

    @app.get("/v1/mode")
    async def get_mode(_: Who) -> ModeView:
        return await read(stored_modes, reader, settings)

    @app.get("/v1/plans")
    async def list_plans(
        _: Who,
        window: LogWindow,
        state: PlanState = None,
        after: RowAfter = 0,
        limit: PageLimit = 100,
        host: HostFilter = None,
        vm: VMFilter = None,
    ) -> PlanPage:
        sl = replace(window, after=after, limit=limit, kind=state, host=host, vm=vm)
        views = [plan_view(r) for r in await read(reader.plan_slice, sl)]
        return PlanPage(plans=views, **page_bounds([v.id for v in views], sl))

    async def one_plan(plan_id: int) -> PlanView:
        row = await read(reader.plan, plan_id)
        if row is None:
            raise HTTPException(404, f"no plan {plan_id}")
        return plan_view(row)

    @app.get("/v1/plans/{plan_id}")
    async def get_plan(_: Who, plan_id: PlanId) -> PlanView:
        return await one_plan(plan_id)

    @app.get("/v1/plans/{plan_id}/watcher")
    async def get_plan_watcher(_: Who, plan_id: PlanId) -> dict[str, Any]:
        from sova.orchestrator.recommend import Proposal, to_watcher_action_plan

        p = await one_plan(plan_id)
        return to_watcher_action_plan(
            [Proposal(a.vm, a.src, a.dst, p.reason, a.vm) for a in p.actions],
            audit_uuid=str(p.id),
        )

    @app.get("/v1/audit")
    async def get_audit(
        _: Who,
        window: LogWindow,
        after: RowAfter = 0,
        limit: PageLimit = 100,
        host: HostFilter = None,
        vm: VMFilter = None,
        action: AuditAction = None,
    ) -> AuditPage:
        sl = replace(window, after=after, limit=limit, host=host, vm=vm, kind=action)
        views = [audit_view(r) for r in await read(reader.audit_slice, sl)]
        return AuditPage(entries=views, **page_bounds([v.id for v in views], sl))

    @app.get("/v1/decisions")
    async def get_decisions(
        _: Who,
        window: LogWindow,
        after: DecisionAfter = 0,
        limit: PageLimit = 100,
        host: HostFilter = None,
        vm: VMFilter = None,
    ) -> DecisionPage:
        sl = replace(window, after=after, limit=limit, host=host, vm=vm)
        views = [decision_view(r) for r in await read(reader.decision_slice, sl)]
        return DecisionPage(decisions=views, **page_bounds([v.id for v in views], sl))

    @app.get("/v1/whoami")
    async def whoami(cred: Who) -> dict[str, str]:
        return {"name": cred.name, "role": cred.role}

    @app.get("/v1/credentials")
    async def list_credentials(_: Who) -> dict[str, str]:
        return guard.tokens.operators.names()

    return guard
