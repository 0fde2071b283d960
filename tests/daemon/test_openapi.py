"""The published OpenAPI document, and a schemathesis run over it finding no 5xx.

schemathesis calls the app in-process (ASGI transport): no network. Every operation gets a
few dozen generated requests, authenticated as host h1 so they reach the handlers instead
of stopping at 401 (the 401 paths have their own tests).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings

from sova.manager.daemons.metrics import AgentMetrics, ManagerMetrics
from sova.manager.daemons.service.app import create_app, openapi_document
from sova.manager.daemons.service.store import Store

from .conftest import ADMIN, REPO, TOKENS, manager_settings

PUBLISHED = REPO / "docs" / "openapi.json"


def _app(tmp: Path):  # type: ignore[no-untyped-def]
    return create_app(manager_settings(admin_token=None), Store(f"sqlite:///{tmp / 'oa.db'}"))


def test_published_openapi_is_up_to_date(tmp_path: Path) -> None:
    doc = openapi_document(_app(tmp_path))
    assert PUBLISHED.exists(), "run: python -m sova.manager.daemons.service.app --openapi docs/openapi.json"
    assert json.loads(PUBLISHED.read_text()) == json.loads(doc), (
        "docs/openapi.json is stale; regenerate with "
        "python -m sova.manager.daemons.service.app --openapi docs/openapi.json"
    )
    spec = json.loads(doc)
    assert {
        "/v1/hosts/{host}/reports",
        "/v1/hosts/{host}/directive",
        "/v1/cluster",
        "/v1/decisions",
        "/v1/migrations/{vm}/done",
        "/healthz",
        "/metrics",
    } <= set(spec["paths"])
    assert "bearer" in json.dumps(spec["components"]["securitySchemes"]).lower()


def _checker(strategy, key: str, headers: dict[str, str], ran: dict[str, int], n: int):  # type: ignore[no-untyped-def]
    @settings(max_examples=n, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(strategy)
    def check(case) -> None:  # type: ignore[no-untyped-def]
        if case.query and "seq" in case.query:
            case.query["wait_s"] = 0  # a long-poll only makes the run slow
        response = case.call(headers=headers)
        assert response.status_code < 500, (key, response.status_code, response.text[:300])
        ran[key] = ran.get(key, 0) + 1

    return check


@pytest.mark.parametrize(("mode", "examples"), [("positive", 30), ("negative", 12)])
def test_no_server_errors(tmp_path: Path, mode: str, examples: int) -> None:
    from hypothesis.errors import Unsatisfiable
    from schemathesis import GenerationMode

    app = _app(tmp_path)
    api = schemathesis.openapi.from_asgi("/openapi.json", app)
    headers = {"authorization": f"Bearer {TOKENS['h1']}", "x-sova-host": "h1"}
    gen = GenerationMode.POSITIVE if mode == "positive" else GenerationMode.NEGATIVE
    ran: dict[str, int] = {}
    for result in api.get_all_operations():
        op = result.ok()
        key = f"{op.method.upper()} {op.path}"
        strategy = op.as_strategy(
            gen, path_parameters={"host": "h1"} if "{host}" in op.path else None
        )
        try:
            _checker(strategy, key, headers, ran, examples)()
        except Unsatisfiable:
            assert mode == "negative", key  # nothing to break in an operation without inputs
    assert len(ran) >= (7 if mode == "positive" else 4), ran


def _names(registry) -> set[str]:  # type: ignore[no-untyped-def]
    suffixes = {
        "counter": ("_total",),
        "histogram": ("_bucket", "_count", "_sum"),
        "gauge": ("",),
        "info": ("_info",),
    }
    return {m.name + sfx for m in registry.collect() for sfx in suffixes[m.type]}


def test_dashboard_uses_only_metrics_the_daemons_export() -> None:
    known = _names(AgentMetrics().registry) | _names(ManagerMetrics().registry)
    dash = (REPO / "deploy" / "grafana-sova.json").read_text()
    used = set(re.findall(r"\bsova_[a-z_]+", dash))
    assert used, "the dashboard queries no sova metric"
    assert used <= known, sorted(used - known)
    for name in known:
        # process_* / python_* are the client library's standard collectors.
        assert name.startswith(
            ("sova_agent_", "sova_manager_", "sova_build_info", "process_", "python_")
        ), name
    counters = [
        m.name
        for r in (AgentMetrics().registry, ManagerMetrics().registry)
        for m in r.collect()
        if m.type == "counter"
    ]
    assert counters and all(not c.endswith("_total") for c in counters)  # client adds _total
    assert ADMIN  # keep the import: read endpoints are open in this app (admin_token None)


# Client generators name their functions after operationIds; FastAPI's defaults are built
# from the Python function name, path and method, so renaming a handler would break them.
STABLE_OPERATION_IDS = {
    ("post", "/v1/hosts/{host}/reports"): "postReport",
    ("get", "/v1/hosts/{host}/directive"): "getDirective",
    ("post", "/v1/migrations/{vm}/done"): "postMigrationDone",
    ("get", "/v1/cluster"): "getCluster",
    ("get", "/v1/cluster/history"): "getClusterHistory",
    ("get", "/v1/decisions"): "getDecisions",
    ("get", "/v1/plans"): "listPlans",
    ("get", "/v1/plans/{plan_id}"): "getPlan",
    ("get", "/v1/plans/{plan_id}/watcher"): "getPlanAsWatcherActionPlan",
    ("post", "/v1/plans/{plan_id}/approve"): "approvePlan",
    ("post", "/v1/plans/{plan_id}/reject"): "rejectPlan",
    ("get", "/v1/fences"): "listFences",
    ("put", "/v1/fences/{kind}/{name}"): "setFence",
    ("delete", "/v1/fences/{kind}/{name}"): "clearFence",
    ("get", "/v1/mode"): "getMode",
    ("put", "/v1/mode"): "setMode",
    ("delete", "/v1/mode"): "resetMode",
    ("put", "/v1/hosts/{host}/mode"): "setHostMode",
    ("delete", "/v1/hosts/{host}/mode"): "resetHostMode",
    ("put", "/v1/hosts/{host}/drain"): "drainHost",
    ("delete", "/v1/hosts/{host}/drain"): "cancelDrain",
    ("get", "/v1/hosts/{host}/drain"): "getDrain",
    ("get", "/v1/hosts/{host}/drain/preview"): "previewDrain",
    ("delete", "/v1/hosts/{host}"): "forgetHost",
    ("get", "/v1/audit"): "getAudit",
    ("get", "/healthz"): "getLiveness",
    ("get", "/readyz"): "getReadiness",
    ("get", "/metrics"): "getMetrics",
    ("get", "/v1/credentials"): "listCredentials",
    ("post", "/v1/credentials/reload"): "reloadCredentials",
    ("get", "/v1/whoami"): "whoAmI",
}


def test_every_operation_has_its_stable_operation_id(tmp_path: Path) -> None:
    spec = json.loads(openapi_document(_app(tmp_path)))
    got = {
        (method, path): op.get("operationId")
        for path, ops in spec["paths"].items()
        for method, op in ops.items()
    }
    assert got == STABLE_OPERATION_IDS


def test_the_cluster_view_labels_each_resource(tmp_path: Path) -> None:
    # Reports keep their compact [cpu, mem, net] wire form; what operators read is labelled.
    spec = json.loads(openapi_document(_app(tmp_path)))
    schemas = spec["components"]["schemas"]
    host = schemas["HostView"]["properties"]
    assert host["utilisation"]["$ref"].endswith("/ResourceUse")
    assert host["vms"]["additionalProperties"]["$ref"].endswith("/ResourceUse")
    assert set(schemas["ResourceUse"]["properties"]) == {"cpu", "mem", "net"}
