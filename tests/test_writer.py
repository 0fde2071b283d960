"""The one writer every world's files go through."""

from __future__ import annotations

import contextlib
import json
import math
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from sova.writer import fmt, json_text, write_outputs


def test_fmt_tells_infinity_from_unknown() -> None:
    # The testbed's own formatter wrote an unbounded limit as "nan"; one writer, one answer.
    assert fmt(math.inf) == "inf"
    assert fmt(-math.inf) == "-inf"
    assert fmt(math.nan) == "nan"
    assert fmt(None) == ""
    assert fmt(1.23456789) == "1.2346"
    assert fmt(2.0) == "2"


def test_write_outputs_leaves_the_directory_as_it_was_on_failure(tmp_path: Path) -> None:
    out = tmp_path / "run"
    write_outputs(out, {"a.csv": (["x"], [[1.5]])}, {"k": 1}, lambda tmp: None)
    assert (out / "a.csv").read_text() == "x\n1.5\n"

    def broken(tmp: Path) -> None:
        raise RuntimeError("report failed")

    with contextlib.suppress(RuntimeError):
        write_outputs(out, {"a.csv": (["x"], [[9.0]])}, {"k": 2}, broken)
    assert (out / "a.csv").read_text() == "x\n1.5\n"
    assert (out / "summary.json").read_text() == '{\n  "k": 1\n}\n'


def _json_values() -> Any:
    leaves = (
        st.none()
        | st.booleans()
        | st.integers(min_value=-(2**70), max_value=2**70)
        | st.floats(allow_nan=True, allow_infinity=True)
        | st.text(max_size=6)
    )
    keys = (
        st.text(max_size=4)
        | st.integers(-5, 5)
        | st.floats(allow_nan=False, width=16)
        | st.booleans()
        | st.none()
    )

    def sortable(d: dict[Any, Any]) -> bool:  # sort_keys needs keys of one kind
        kinds = {bool if isinstance(k, bool) else type(k) for k in d}
        return len(kinds) <= 1 or kinds <= {int, float, bool}

    return st.recursive(
        leaves,
        lambda inner: (
            st.lists(inner, max_size=4)
            | st.tuples(inner, inner)
            | st.dictionaries(keys, inner, max_size=4).filter(sortable)
        ),
        max_leaves=30,
    )


@settings(max_examples=400, deadline=None)
@given(data=st.data(), indent=st.sampled_from([0, 1, 2, 4]), sort_keys=st.booleans())
def test_json_text_is_json_dumps(data: st.DataObject, indent: int, sort_keys: bool) -> None:
    # summary.json, plots.json and columns.json are written by json_text: the same bytes
    # as the standard encoder's (the golden hashes cover summary.json)
    obj = data.draw(_json_values())
    if sort_keys and not _sortable_deep(obj):
        return
    assert json_text(obj, indent, sort_keys) == json.dumps(obj, indent=indent, sort_keys=sort_keys)


def _sortable_deep(o: Any) -> bool:
    try:
        json.dumps(o, sort_keys=True)
    except TypeError:
        return False
    return True


def test_json_text_subclasses_and_refusals() -> None:
    import enum

    import numpy as np
    import pytest

    class Level(enum.IntEnum):
        HIGH = 3

    class Name(str):
        pass

    obj = {"f": np.float64(0.1), "e": Level.HIGH, Name("n"): Name("v"), "t": (1, [2.5, {}])}
    assert json_text(obj, 2, sort_keys=True) == json.dumps(obj, indent=2, sort_keys=True)
    for bad in ({"x": np.int64(1)}, {(1, 2): 3}, {"s": {1, 2}}):
        with pytest.raises(TypeError):
            json.dumps(bad, indent=1)
        with pytest.raises(TypeError):
            json_text(bad, 1)
