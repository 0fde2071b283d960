"""Human units in config files: ``10Gbit``, ``150Mbit/s``, ``512MiB``, ``200ms``.

Operators write rates the way ``tc`` and ``ip link`` print them; a bare number is taken in
the base unit (bit/s, bytes, seconds) so that machine-written files stay unambiguous.
"""

from __future__ import annotations

import math
import re
from typing import Annotated

from pydantic import BeforeValidator, Field

_RATE = {
    "": 1.0,
    "bit": 1.0,
    "kbit": 1e3,
    "mbit": 1e6,
    "gbit": 1e9,
}
# tc reads "mbps" as megabytes per second, most people write it meaning megabits: either
# guess is off by 8x for someone, so these are refused with the two unambiguous spellings.
_AMBIGUOUS_RATE = {"bps": "", "kbps": "k", "mbps": "M", "gbps": "G"}
_SIZE = {
    "": 1,
    "b": 1,
    "kb": 1000,
    "mb": 1000**2,
    "gb": 1000**3,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
    "tib": 1024**4,
}
_SIZE_FLOAT = {k: float(v) for k, v in _SIZE.items()}  # the table _parse reads, built once
_TIME = {"": 1.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "min": 60.0, "m": 60.0, "h": 3600.0}
_NUM = re.compile(r"^\s*([-+]?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)\s*([A-Za-z]*)(?:/s)?\s*$")


def _parse(value: object, table: dict[str, float], what: str) -> float:
    if isinstance(value, bool):
        raise ValueError(f"expected a {what}, got {value!r}")
    if isinstance(value, int | float):
        number, unit = float(value), ""
    elif isinstance(value, str):
        m = _NUM.match(value)
        if not m:
            raise ValueError(f"expected a {what} such as {_example(what)}, got {value!r}")
        number, unit = float(m.group(1)), m.group(2).lower()
    else:
        raise ValueError(f"expected a {what}, got {value!r}")
    if table is _RATE and unit in _AMBIGUOUS_RATE:
        p = _AMBIGUOUS_RATE[unit]
        raise ValueError(
            f"ambiguous unit in {value!r}: tc reads {unit!r} as bytes/s, many people as bits/s;"
            f" write '{number:g}{p}bit' for bits/s"
            f" or '{number * 8:g}{p}bit' for {p}bytes/s"
        )
    if unit not in table:
        raise ValueError(
            f"unknown unit {unit!r} in {value!r}; use one of {sorted(k for k in table if k)}"
        )
    result = number * table[unit]
    if not math.isfinite(result):
        raise ValueError(f"{what} must be finite, got {value!r}")
    return result


def _example(what: str) -> str:
    return {"rate": "'10Gbit'", "size": "'512MiB'", "duration": "'200ms'"}[what]


def parse_rate(value: object) -> float:
    """bit/s"""
    return _parse(value, _RATE, "rate")


def parse_size(value: object) -> int:
    """bytes"""
    return int(_parse(value, _SIZE_FLOAT, "size"))


def parse_duration(value: object) -> float:
    """seconds"""
    return _parse(value, _TIME, "duration")


# Field types for the pydantic schemas (scenarios, the controller, the daemons' TOML): a
# value is parsed from its human form, then bounded.
# Explicit bounds, so that a file `validate` accepts is one the simulator and the agent can
# run: far above any real link, memory or run, far below where the arithmetic breaks.
MAX_RATE = 1e15  # bit/s (1 Pbit/s)
MAX_SIZE = 2**50  # bytes (1 PiB)
MAX_TIME = 30 * 86400.0  # s: any duration, delay or period

Rate = Annotated[float, BeforeValidator(parse_rate), Field(ge=0, le=MAX_RATE)]
Size = Annotated[int, BeforeValidator(parse_size), Field(ge=0, le=MAX_SIZE)]
Duration = Annotated[float, BeforeValidator(parse_duration), Field(ge=0, le=MAX_TIME)]
Fraction = Annotated[float, Field(ge=0, le=1)]
