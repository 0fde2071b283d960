"""Issue 38, Build 6: JSON log lines name their subjects as fields of their own (host, VM,
plan, decision, directive, lease, epoch) with an ISO 8601 time, so a fleet's logs are
searched by ``host="h1"`` instead of a regular expression over free text. Before, a line
carried only ts (epoch seconds), level, logger and msg.

The lines come from the manager's real code paths (in-process API): a drain in recommend
mode proposes a plan, an operator approves it, a fence is set.
"""

from __future__ import annotations

import io
import json
import logging
import re
from collections.abc import Iterator
from typing import Any

import pytest

from sova.manager.daemons.logs import JsonFormatter, fields

from .test_fleet_controls import Cluster, _start
from .test_operator_control import ADMIN_H, make

ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


@pytest.fixture
def json_log() -> Iterator[io.StringIO]:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(JsonFormatter())
    lg = logging.getLogger("sova")
    lg.addHandler(handler)
    old = lg.level
    lg.setLevel(logging.INFO)
    try:
        yield out
    finally:
        lg.removeHandler(handler)
        lg.setLevel(old)


def _lines(out: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_plans_and_fences_log_their_subjects_as_fields(
    api_factory: Any, json_log: io.StringIO
) -> None:
    api = make(
        api_factory, mode="recommend", planner={"alpha": 0.75, "k": 3, "n": 5, "vm_cooldown": 0}
    )
    c = Cluster(api)
    c.round()
    _start(api)
    c.round()
    [plan] = api.get("/v1/plans?state=proposed", headers=ADMIN_H).json()["plans"]
    r = api.post(f"/v1/plans/{plan['id']}/approve", json={"by": "ops"}, headers=ADMIN_H)
    assert r.status_code == 200, r.text
    lines = _lines(json_log)
    assert lines and all(ISO.match(e["time"]) for e in lines), lines[:2]
    proposed = next(e for e in lines if e["msg"].startswith("proposed plan"))
    assert {k: proposed.get(k) for k in ("plan", "decision", "vm", "host")} == {
        "plan": plan["id"],
        "decision": plan["id"],
        "vm": "b",
        "host": "h1",
    }, proposed
    approved = next(e for e in lines if " approved by " in e["msg"])
    assert (approved["plan"], approved["vm"], approved["host"]) == (plan["id"], "b", "h1")
    drain = next(e for e in lines if e["msg"].startswith("admin (ops) set drain"))
    assert drain["host"] == "h1", drain


def test_a_field_outside_the_list_is_refused() -> None:
    """A misspelt subject would silently make a field nobody searches for."""
    with pytest.raises(ValueError, match="hostname"):
        fields(hostname="h1")


def test_a_daemon_prints_its_threads_stacks_on_sigusr1_and_keeps_running() -> None:
    """``kill -USR1`` on a hung daemon says where each thread is, without stopping it
    (how the CI's takeover test reports a hang): the child registers the dump, blocks a
    named thread in a function, gets SIGUSR1 from this test, and exits 0 afterwards."""
    import signal
    import subprocess
    import sys
    import time

    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import threading, time\n"
            "from sova.manager.daemons.logs import dump_stacks_on_signal\n"
            "assert dump_stacks_on_signal()\n"
            "def waiting_for_the_store():\n"
            "    time.sleep(3)\n"
            "t = threading.Thread(target=waiting_for_the_store)\n"
            "t.start()\n"
            "print('ready', flush=True)\n"
            "t.join()\n",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert child.stdout is not None
    assert child.stdout.readline().strip() == b"ready"
    time.sleep(0.3)
    child.send_signal(signal.SIGUSR1)
    _, err = child.communicate(timeout=20)
    assert child.returncode == 0, err.decode()
    text = err.decode()
    assert "Thread 0x" in text, text  # every thread's stack, not only the main one
    assert "waiting_for_the_store" in text, text
