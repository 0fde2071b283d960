"""Issue 37, Medium 3: a standby whose wall clock is an hour off took over and ended the
in-flight lease at once ("lease timed out"); cool-downs, the return tabu and the hourly
budget were an hour off too. Now a manager measures its clock against the store's
(PostgreSQL ``clock_timestamp()``) while it waits, and does not take the lead while they
differ by more than 60 s: one error line, ``sova_manager_clock_offset_seconds``; once the
clock is fixed it takes its turn. (+-120 s was measured harmless; the bound is half that.)"""

from __future__ import annotations

import time

import pytest
from fastapi.testclient import TestClient

from sova.manager.daemons.service.leadership import Leadership, clock_offset, clock_refusal
from sova.manager.daemons.service.standby import standby_app
from sova.manager.daemons.service.store import Store

from .conftest import wait_until
from .test_leadership import needs_pg, pg_schema


@pytest.mark.parametrize(
    ("offset", "refused"),
    [(0.0, False), (59.0, False), (-59.0, False), (61.0, True), (-3600.0, True), (3600.0, True)],
)
def test_the_bound(offset: float, refused: bool) -> None:
    why = clock_refusal(offset)
    assert (why is not None) == refused
    if why is not None:
        assert why.startswith("refusing to lead") and "\n" not in why
        assert ("ahead of" if offset > 0 else "behind") in why


@needs_pg
def test_a_standby_an_hour_ahead_does_not_take_the_lead_until_its_clock_is_fixed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    skew = [3600.0]
    with pg_schema("clock") as (url, _schema, _admin):
        store = Store(url)
        lead = Leadership(store, "http://me:1")
        won: list[bool] = []
        try:
            store.migrate()
            assert abs(clock_offset(store)) < 5.0  # this host and the server agree
            app, sb = standby_app(
                store,
                lead,
                lambda: won.append(True),
                poll_s=0.05,
                wall=lambda: time.time() + skew[0],
            )
            with TestClient(app) as client:
                time.sleep(1.0)  # 20 polls: the lock is free, but not for this clock
                assert won == [] and not sb.won
                text = client.get("/metrics").text
                (line,) = [
                    x
                    for x in text.splitlines()
                    if x.startswith("sova_manager_clock_offset_seconds ")
                ]
                assert abs(float(line.split()[1]) - 3600.0) < 5.0, line
                errors = [r.message for r in caplog.records if "refusing to lead" in r.message]
                assert len(errors) == 1, errors  # one line, not one per poll
                skew[0] = 0.0  # NTP fixed it
                wait_until(lambda: won, 10, "the standby to take the lead")
        finally:
            lead.close()
            store.close()
