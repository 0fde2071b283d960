"""GET /v1/cluster/history: each host's reports the planner holds (its hot-spot window,
n = 5 here), as the agents posted them through their report route; what the web console
draws its link-use sparklines from (docs/operations.md, "The web console")."""

from __future__ import annotations

from .conftest import Api, auth, report


def _post(api: Api, host: str, seq: int, t: float, util: tuple[float, float, float]) -> None:
    r = api.post(f"/v1/hosts/{host}/reports", content=report(seq, t, util), headers=auth(host))
    assert r.status_code == 200, r.text


def test_history_holds_each_hosts_last_n_reports_oldest_first(api: Api) -> None:
    # h1 reports 7 times, link use 0.11, 0.22, ... 0.77: the window keeps the last 5
    # (0.33 .. 0.77); h2 reports twice; h3 never did and is not listed.
    for i in range(1, 8):
        _post(api, "h1", i, 10.0 * i, (0.05 * i, 0.3, round(0.11 * i, 2)))
        if i <= 2:
            _post(api, "h2", i, 10.0 * i, (0.1, 0.2, 0.4 + 0.1 * i))
        api.tick(10.0 * i)  # a planning round reads the windows meanwhile
    body = api.get("/v1/cluster/history").json()
    assert body["n"] == 5
    by_host = {h["host"]: h for h in body["hosts"]}
    assert list(by_host) == ["h1", "h2"]
    assert by_host["h1"]["net"] == [0.33, 0.44, 0.55, 0.66, 0.77]
    assert by_host["h1"]["cpu"] == [0.15, 0.2, 0.25, 0.3, 0.35]
    assert by_host["h1"]["mem"] == [0.3] * 5
    assert by_host["h2"]["net"] == [0.5, 0.6]
    # The same newest value as the cluster view's last report.
    view = {h["host"]: h for h in api.get("/v1/cluster").json()["hosts"]}
    assert view["h1"]["utilisation"]["net"] == by_host["h1"]["net"][-1]
    # Paged like /v1/cluster, by host name.
    page = api.get("/v1/cluster/history?offset=1&limit=1").json()["hosts"]
    assert [h["host"] for h in page] == ["h2"]


def test_history_reads_a_report_not_yet_written_into_the_arrays(api: Api) -> None:
    # A report taken between two rounds waits as a pending value until a round reads the
    # arrays; the history must show it without writing it there (a round may be running).
    for i in range(1, 4):
        _post(api, "h1", i, 10.0 * i, (0.1, 0.1, 0.1 * i))
    api.tick(30.0)
    _post(api, "h1", 4, 40.0, (0.1, 0.1, 0.9))
    arrays = api.svc.core.windows()
    assert arrays.pending  # the newest report is not in the arrays yet
    (h1,) = api.get("/v1/cluster/history").json()["hosts"]
    assert h1["net"] == [0.1, 0.2, 0.3, 0.9]
    assert arrays.pending  # and still is not: the read wrote nothing
