"""Report rows into PostgreSQL in one round trip (:meth:`Store.add_reports`, issue 37).

A report is answered once its row is committed, so the report's latency holds the whole
write. Through SQLAlchemy a write was five round trips to the server: the pool's pre-ping
of the connection checked out, ``BEGIN``, the fence's ``SELECT ... FOR SHARE``, the rows
and ``COMMIT``. Each one makes the store's thread sleep and then wait, on a loaded
machine, for a core and for the GIL the event loop holds; the WAL flush itself is a tenth
of a millisecond on this class of disk. The attribution, with figures, is in
benchmarks/manager_load.py's docstring.

Here the rows go in psycopg's pipeline mode on one connection kept for the purpose:
``BEGIN``, the rows and ``COMMIT`` leave in one batch and their answers come back in one.
The fence moves into each row's ``INSERT`` (the row is inserted only where the leader row
still carries this manager's epoch, taking the same share lock the separate ``SELECT``
took, so a takeover's epoch update still waits for the write), and the count of rows
inserted says whether it held: a deposed leader's transaction commits nothing and the
write raises :class:`Deposed` as before. The share lock is still taken before any row's
id is drawn (the ``EXISTS`` is evaluated once, before the ``SELECT`` yields its row, and
the id's default after), which :meth:`Store.report_mark` relies on. Durability is unchanged: the answer still waits
for ``COMMIT``'s, with ``synchronous_commit`` as the server has it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from sova.manager.daemons.service.store_rows import ReportRow

_NAMES = ("host", "seq", "agent_t", "received_s", "cpu", "mem", "net", "vms", "capacity", "boot")
_JSON = ("vms", "capacity")
_COLUMNS = ", ".join(_NAMES)
_VALUES = ", ".join("%s::json" if c in _JSON else "%s" for c in _NAMES)
PLAIN_INSERT = f"INSERT INTO host_reports ({_COLUMNS}) VALUES ({_VALUES})"
FENCED_INSERT = (
    f"INSERT INTO host_reports ({_COLUMNS}) SELECT {_VALUES} "
    "WHERE EXISTS (SELECT 1 FROM leader WHERE id = 1 AND epoch = %s FOR SHARE)"
)


def report_values(r: ReportRow) -> dict[str, Any]:
    """A report row as ``host_reports`` stores it."""
    return {
        "host": r.host,
        "seq": r.seq,
        "agent_t": r.agent_t,
        "received_s": r.received_s,
        "cpu": r.util[0],
        "mem": r.util[1],
        "net": r.util[2],
        "vms": dict(r.vms),
        "capacity": list(r.capacity) if r.capacity is not None else None,
        "boot": r.boot,
    }


def report_params(r: ReportRow) -> tuple[Any, ...]:
    """:func:`report_values` in column order, its JSON columns as SQLAlchemy's JSON type
    writes them (a missing capacity is JSON ``null``, as before)."""
    v = report_values(r)
    return tuple(json.dumps(v[c]) if c in _JSON else v[c] for c in _NAMES)


def pipelined_insert(dbapi_conn: Any, rows: Sequence[ReportRow], fence: int | None) -> int:
    """Insert ``rows`` and commit, one round trip; returns how many rows were inserted
    (fewer than ``len(rows)``: none, the fence did not hold). ``dbapi_conn``: a psycopg 3
    connection kept for this (it is left in autocommit mode). On an error the transaction
    is rolled back (the caller throws a broken connection away)."""
    from psycopg import pq

    if fence is None:
        sql, params = PLAIN_INSERT, [report_params(r) for r in rows]
    else:
        sql, params = FENCED_INSERT, [(*report_params(r), fence) for r in rows]
    # Spelled out: psycopg's own BEGIN would wait for its answer before the rows are sent.
    dbapi_conn.set_autocommit(True)
    try:
        with dbapi_conn.pipeline():
            ctl, ins = dbapi_conn.cursor(), dbapi_conn.cursor()
            ctl.execute("BEGIN")
            ins.executemany(sql, params)
            ctl.execute("COMMIT")
    except Exception:
        # An error skips the rest of the batch, COMMIT too: the transaction is left open.
        if (
            not dbapi_conn.broken
            and dbapi_conn.info.transaction_status != pq.TransactionStatus.IDLE
        ):
            dbapi_conn.execute("ROLLBACK")
        raise
    return int(ins.rowcount)


def not_stored(dbapi_conn: Any, rows: Sequence[ReportRow]) -> list[ReportRow]:
    """The rows of ``rows`` the table does not hold, for a write retried on a fresh
    connection: the dead one's COMMIT may have landed with its answer lost. Host, boot and
    seq name a report (within one agent boot the intake takes only a growing seq)."""
    dbapi_conn.set_autocommit(True)  # as pipelined_insert leaves it: no transaction open
    found = dbapi_conn.execute(
        "SELECT host, boot, seq FROM host_reports WHERE host = ANY(%s) AND seq = ANY(%s)",
        (sorted({r.host for r in rows}), sorted({r.seq for r in rows})),
    ).fetchall()
    stored = {(h, b, int(s)) for h, b, s in found}
    return [r for r in rows if (r.host, r.boot, r.seq) not in stored]


def store_epoch(dbapi_conn: Any) -> int | None:
    """The leader row's epoch now (for a deposed writer's message)."""
    row = dbapi_conn.execute("SELECT epoch FROM leader WHERE id = 1").fetchone()
    return None if row is None else int(row[0])
