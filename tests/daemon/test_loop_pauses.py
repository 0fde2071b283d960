"""What paused the manager's event loop around a planning round (issue 37, build point 7),
each kept off it: measured at 10,000 hosts and 1,000 reports/s, a young garbage
collection over a whole period of reports (100-240 ms, sova.manager.daemons.gc_pacing) and
the first round's 10,000 ``sova_manager_host_hot`` labels (~90 ms). The tests assert the
work, not the time: how many objects generation 0 holds, how many labels a round makes."""

from __future__ import annotations

import asyncio
import gc
import secrets
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from sova.manager.daemons.gc_pacing import thresholds, young_collections
from sova.manager.daemons.service.app import create_app
from sova.manager.daemons.service.store import Store

from .conftest import Api, manager_settings, report

LIVE = 20_000  # objects a "host state" holds, each replaced in turn (as reports do)
BATCH = 500  # replacements between two turns of the event loop


@pytest.fixture
def paced_thresholds() -> Iterator[None]:
    """The manager's collector settings, restored afterwards."""
    old = gc.get_threshold()
    gc.collect()
    gc.set_threshold(*thresholds())
    try:
        yield
    finally:
        gc.set_threshold(*old)


async def _churn(paced: bool) -> int:
    """Replace each of LIVE objects in turn, three times; the most generation 0 held
    in the last two."""
    pacer = asyncio.create_task(young_collections(0.005)) if paced else None
    state = [[i] for i in range(LIVE)]
    most = 0
    try:
        for turn in range(3):
            for i in range(LIVE):
                state[i] = [i]  # one allocated, the one it replaces freed
                if i % BATCH == BATCH - 1:
                    if turn:
                        most = max(most, len(gc.get_objects(0)))
                    await asyncio.sleep(0.002)
    finally:
        if pacer is not None:
            pacer.cancel()
    return most


def test_paced_young_collections_keep_a_steady_churn_out_of_generation_0(
    paced_thresholds: None,
) -> None:
    # CPython's own trigger counts allocations minus frees: a churn that frees what it
    # allocates never reaches it, so every live object stays in generation 0 until a burst
    # sets a collection off, which then walks them all (the manager's 100-240 ms pauses).
    unpaced = asyncio.run(_churn(paced=False))
    assert unpaced >= LIVE
    # Paced, a pass walks only what was made since the last one.
    paced = asyncio.run(_churn(paced=True))
    assert paced < LIVE // 4, (unpaced, paced)


def test_the_app_collects_young_objects_on_its_pace_while_serving(
    tmp_path: Path, paced_thresholds: None
) -> None:
    gc.set_threshold(10**9, 50, 10**9)  # CPython's own trigger out of the way
    store = Store(f"sqlite:///{tmp_path / 'manager.db'}")
    app = create_app(manager_settings(), store, gc_pace_s=0.01)
    try:
        with TestClient(app):
            young = [object()]  # a container: tracked, born in generation 0
            deadline = time.monotonic() + 10
            while any(o is young for g in (0, 1) for o in gc.get_objects(g)):
                assert time.monotonic() < deadline, "never collected while serving"
                time.sleep(0.02)
            assert any(o is young for o in gc.get_objects(2))
    finally:
        store.close()


HOSTS = [f"hv{i:02d}" for i in range(20)]


def test_a_round_labels_only_the_hosts_whose_verdict_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tokens = {h: secrets.token_urlsafe(24) for h in HOSTS}
    store = Store(f"sqlite:///{tmp_path / 'manager.db'}")
    api = Api(
        manager_settings(
            hosts={h: {"token": t} for h, t in tokens.items()},
            planner={"alpha": 0.75, "k": 1, "n": 1},
        ),
        store,
    )
    try:
        for h in HOSTS:
            net = 0.97 if h == "hv00" else 0.2  # one hot host, nineteen quiet
            r = api.post(
                f"/v1/hosts/{h}/reports",
                content=report(1, 10.0, (0.3, 0.3, net)),
                headers={"authorization": f"Bearer {tokens[h]}"} | _JSON,
            )
            assert r.status_code == 200, r.text
        gauge = api.svc.metrics.host_hot
        # Every host that reported is exported as not hot before any round.
        assert {h: gauge.labels(h)._value.get() for h in HOSTS} == dict.fromkeys(HOSTS, 0.0)
        labelled: list[str] = []
        real = gauge.labels

        def counted(*values: str) -> object:
            labelled.append(values[0])
            return real(*values)

        monkeypatch.setattr(gauge, "labels", counted)
        api.tick(25.0)
        # The round's work on the loop: the one host whose verdict changed, not every host.
        assert labelled == ["hv00"]
        assert real("hv00")._value.get() == 1.0 and real("hv01")._value.get() == 0.0
    finally:
        api.close()
        store.close()


_JSON = {"content-type": "application/json"}
