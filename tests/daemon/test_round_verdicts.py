"""A round's verdicts are read from its signals when asked (issue 37, build point 7): the
round itself formats no quiet host's "not hot" reason on the event loop (at 10,000 hosts
that was ~0.35 s after every round, a stall every report arriving then waited for), and
what operators read is the same."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import sova.manager.decisions.fastplan as fastplan
from sova.manager.daemons.service.store import Store

from .conftest import Api, manager_settings, report

HOSTS = [f"hv{i:03d}" for i in range(fastplan.FAST_MIN_HOSTS + 44)]  # the vectorised round


def test_a_round_formats_no_quiet_reason_and_the_views_still_give_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tokens = {h: secrets.token_urlsafe(24) for h in HOSTS}
    store = Store(f"sqlite:///{tmp_path / 'manager.db'}")
    api = Api(manager_settings(hosts={h: {"token": t} for h, t in tokens.items()}), store)
    formatted: list[str] = []
    real = fastplan._reason

    def counted(over: np.ndarray, n_obs: int, forecast: np.ndarray, alpha: float) -> str:
        out = real(over, n_obs, forecast, alpha)
        formatted.append(out)
        return out

    monkeypatch.setattr(fastplan, "_reason", counted)
    try:
        for seq in (1, 2):
            for h in HOSTS:
                # One host in 100 runs hot on the network, the rest are quiet.
                net = 0.97 if HOSTS.index(h) % 100 == 0 else 0.2
                r = api.post(
                    f"/v1/hosts/{h}/reports",
                    content=report(seq, 10.0 * seq, (0.3, 0.3, net)),
                    headers={"authorization": f"Bearer {tokens[h]}"} | _JSON,
                )
                assert r.status_code == 200, r.text
        api.tick(25.0)
        assert formatted == []  # the round read no quiet host's verdict
        verdicts: Any = api.svc.planner.verdicts
        assert len(verdicts) == len(HOSTS)
        hot, why = verdicts["hv001"]
        assert not hot and why.startswith("not hot: cpu "), why
        assert len(formatted) == 1  # read once asked, that host's alone
        assert verdicts.hot() <= {h for i, h in enumerate(HOSTS) if i % 100 == 0}
        # A forgotten host's verdict goes (manager_fleet pops it); the others stay.
        assert verdicts.pop("hv002") is not None and "hv002" not in verdicts
        assert len(verdicts) == len(HOSTS) - 1 and verdicts.pop("hv002", None) is None
    finally:
        api.close()
        store.close()


_JSON = {"content-type": "application/json"}
