"""The one writer every world's files go through."""

from __future__ import annotations

import contextlib
import math
from pathlib import Path

from sova.writer import fmt, write_outputs


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
