"""The driver's operation table: ``submit`` never blocks, so each action runs on a daemon
worker thread, actions on the same VM are serialised, and ``poll`` reads the progress the
worker wrote. Every part that acts (hot-plug, shaping, migration) reports through it."""

from __future__ import annotations

import contextlib
import itertools
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from sova.driver.base import DriverError, OpState, OpStatus
from sova.model import Action


@dataclass
class DriverOp:
    op_id: str
    action: Action
    state: OpState = OpState.PENDING
    detail: str = "queued"


class OpFailed(Exception):
    """Ends an operation as FAILED with this message as the detail."""


class DriverOps:
    """Operations by id, their worker threads, and one lock per VM."""

    def __init__(self, max_workers: int) -> None:
        self._ops: dict[str, DriverOp] = {}
        self._lock = threading.Lock()
        self._seq = itertools.count(1)
        self._vm_locks: dict[str, threading.Lock] = {}
        self._workers = threading.BoundedSemaphore(max(1, max_workers))

    def submit(self, action: Action, run: Callable[[DriverOp], str], refuse: str = "") -> str:
        """Start ``run`` for ``action`` on a worker (or fail it at once with ``refuse``)."""
        op_id = f"{action.kind}:{action.vm}:{next(self._seq)}"
        op = DriverOp(op_id, action)
        with self._lock:
            self._ops[op_id] = op
        if refuse:
            self.finish(op, OpState.FAILED, refuse)
            return op_id
        threading.Thread(
            target=self._work, args=(op, run), name=f"sova-{op_id}", daemon=True
        ).start()
        return op_id

    def poll(self, op_id: str) -> OpStatus:
        with self._lock:
            op = self._ops.get(op_id)
            if op is None:
                return OpStatus(op_id, OpState.FAILED, "unknown operation id")
            return OpStatus(op.op_id, op.state, op.detail)

    def finish(self, op: DriverOp, state: OpState, detail: str) -> None:
        with self._lock:
            op.state, op.detail = state, detail

    def progress(self, op: DriverOp, detail: str) -> None:
        with self._lock:
            if op.state is OpState.PENDING:
                op.detail = detail

    @contextlib.contextmanager
    def _vm_lock(self, vm: str) -> Iterator[None]:
        with self._lock:
            lock = self._vm_locks.setdefault(vm, threading.Lock())
        with lock:
            yield

    def _work(self, op: DriverOp, run: Callable[[DriverOp], str]) -> None:
        try:
            with self._workers, self._vm_lock(op.action.vm):
                self.progress(op, "running")
                detail = run(op)
            self.finish(op, OpState.SUCCEEDED, detail)
        except (OpFailed, DriverError) as e:
            self.finish(op, OpState.FAILED, str(e))
        except Exception as e:  # never let a worker die silently: the caller polls
            self.finish(op, OpState.FAILED, f"{type(e).__name__}: {e}")
