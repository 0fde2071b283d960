"""A :class:`~sova.driver.base.Driver` whose host lives in another process, over HTTP.

Why: ``sova demo`` runs the simulated cluster in one "world" process and each agent in its
own process, like real hypervisors, so the demo exercises the same daemons, HTTP paths,
crash and restart behaviour as production. The agent cannot tell a :class:`RemoteDriver`
from libvirt: same protocol, same cumulative counters, same asynchronous operations.

The codec turns the model's frozen dataclasses into JSON and back generically, from their
type hints, so a field added to ``sova.model`` travels without touching this file.

Every call has a timeout and a network failure is a :class:`DriverError`, which the
executor already treats as "unreachable host: retry, let the deadline decide".

Only the Driver protocol travels here. What is the demo's alone (its lockstep turns, the
controller configuration and the records the agents send to the world) is spoken by
:class:`sova.sim.world_server.WorldClient`, beside the server that answers it.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import types
import typing
from collections.abc import Mapping
from typing import Any

import httpx

from sova import model
from sova.driver.base import Capabilities, DriverError, OpState, OpStatus
from sova.model import Action, HostSample, Inventory

ACTIONS: dict[str, type[Any]] = {
    cls.kind: cls
    for cls in (
        model.AttachVF,
        model.DetachVF,
        model.SetVFRate,
        model.SetGuestRateLimit,
        model.Migrate,
    )
}


# --------------------------------------------------------------------------- codec


def encode(obj: Any) -> Any:
    """JSON-ready value of a model dataclass (actions carry their ``kind``)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        out = {f.name: encode(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
        if type(obj) in ACTIONS.values():
            out["kind"] = obj.kind  # type: ignore[attr-defined]
        return out
    if isinstance(obj, enum.Enum):
        return obj.value
    if isinstance(obj, Mapping):
        return {str(k): encode(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple | frozenset | set):
        return [encode(v) for v in obj]
    if isinstance(obj, float) and obj in (float("inf"), float("-inf")):
        return None  # JSON has no infinity; every such field in the model means "no limit"
    return obj


@functools.cache
def _hints(cls: type[Any]) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def decode(tp: Any, data: Any) -> Any:
    """Inverse of :func:`encode` for type ``tp``."""
    origin = typing.get_origin(tp)
    if tp is Any:
        return data
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if data is None and type(None) in args:
            return None
        for a in args:
            if a is type(None):
                continue
            try:
                return decode(a, data)
            except (TypeError, ValueError, KeyError):
                continue
        raise ValueError(f"{data!r} matches none of {tp}")
    if origin in (dict, Mapping):
        _, vt = typing.get_args(tp)
        return {k: decode(vt, v) for k, v in data.items()}
    if origin in (tuple,):
        args = typing.get_args(tp)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(decode(args[0], v) for v in data)
        return tuple(decode(a, v) for a, v in zip(args, data, strict=True))
    if origin in (list,):
        (a,) = typing.get_args(tp)
        return [decode(a, v) for v in data]
    if origin in (frozenset,):
        (a,) = typing.get_args(tp)
        return frozenset(decode(a, v) for v in data)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        if not isinstance(data, Mapping):
            raise TypeError(f"{tp.__name__} expects an object, got {type(data).__name__}")
        hints = _hints(tp)
        kw = {
            f.name: decode(hints[f.name], data[f.name])
            for f in dataclasses.fields(tp)
            if f.init and f.name in data
        }
        return tp(**kw)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return tp(data)
    if tp is float:
        if isinstance(data, bool) or not isinstance(data, int | float):
            raise TypeError(f"expected a number, got {data!r}")
        return float(data)
    if tp is int:
        if isinstance(data, bool) or not isinstance(data, int):
            raise TypeError(f"expected an integer, got {data!r}")
        return data
    if tp is str:
        if not isinstance(data, str):
            raise TypeError(f"expected a string, got {data!r}")
        return data
    if tp is bool:
        if not isinstance(data, bool):
            raise TypeError(f"expected a boolean, got {data!r}")
        return data
    return data


def decode_action(data: Mapping[str, Any]) -> Action:
    kind = data.get("kind")
    cls = ACTIONS.get(str(kind))
    if cls is None:
        raise ValueError(f"unknown action kind {kind!r}")
    action: Action = decode(cls, {k: v for k, v in data.items() if k != "kind"})
    return action


def decode_capabilities(data: Mapping[str, Any]) -> Capabilities:
    nic = decode(model.NICCapabilities, data["nic"])
    return Capabilities(
        host=str(data["host"]),
        vf_total=int(data["vf_total"]),
        vf_pool=int(data["vf_pool"]),
        nic=nic,
        can_migrate=bool(data.get("can_migrate", True)),
        guest_agent=bool(data.get("guest_agent", False)),
        notes=tuple(data.get("notes", ())),
    )


# --------------------------------------------------------------------------- driver


class RemoteDriver:
    """One host of a world server, e.g. ``RemoteDriver("http://127.0.0.1:8710", "HM1")``."""

    def __init__(
        self,
        base_url: str,
        host: str,
        *,
        timeout_s: float = 5.0,
        client: httpx.Client | None = None,
    ) -> None:
        self.host = host
        self.base = f"/v1/world/hosts/{host}"
        self._client = client or httpx.Client(
            base_url=base_url.rstrip("/"),
            timeout=httpx.Timeout(timeout_s, connect=min(2.0, timeout_s)),
        )

    def close(self) -> None:
        self._client.close()

    def _get(self, path: str) -> Any:
        return self._call("GET", path)

    def _call(self, method: str, path: str, json: Any = None, timeout: float | None = None) -> Any:
        try:
            kw: dict[str, Any] = {}
            if timeout is not None:
                kw["timeout"] = httpx.Timeout(timeout, connect=2.0)
            r = self._client.request(method, self.base + path, json=json, **kw)
        except httpx.HTTPError as exc:
            raise DriverError(f"world unreachable ({type(exc).__name__}: {exc})") from None
        if r.status_code >= 400:
            raise DriverError(f"world refused {method} {path}: {r.status_code} {r.text[:200]}")
        return r.json()

    def now(self) -> float:
        return float(self._get("/now")["now"])

    def capabilities(self) -> Capabilities:
        return decode_capabilities(self._get("/capabilities"))

    def inventory(self) -> Inventory:
        inv: Inventory = decode(Inventory, self._get("/inventory"))
        return inv

    def sample(self) -> HostSample:
        s: HostSample = decode(HostSample, self._get("/sample"))
        return s

    def submit(self, action: Action) -> str:
        return str(self._call("POST", "/ops", json=encode(action))["op_id"])

    def poll(self, op_id: str) -> OpStatus:
        d = self._get(f"/ops/{op_id}")
        return OpStatus(str(d["op_id"]), OpState(d["state"]), str(d.get("detail", "")))
