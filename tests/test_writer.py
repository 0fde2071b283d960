"""The one writer every world's files go through."""

from __future__ import annotations

import contextlib
import math
import os
import time
from pathlib import Path

import pytest

from sova import writer
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


def test_the_report_is_drawn_by_a_forked_process_beside_the_tables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The report runs in a child while the tables are written here; its files land with
    the tables', and its error comes back as the same exception, nothing written."""
    monkeypatch.setattr(writer, "FORK", hasattr(os, "fork"))  # SOVA_REPORT_FORK=1's setting
    if not writer.can_fork():
        pytest.skip("no fork here (not POSIX, or threads running)")
    out = tmp_path / "run"
    me = os.getpid()

    def report(tmp: Path) -> None:
        (tmp / "report.md").write_text(f"drawn by {'this' if os.getpid() == me else 'a child'}\n")

    write_outputs(out, {"a.csv": (["x"], [[1.5]])}, {"k": 1}, report)
    assert (out / "report.md").read_text() == "drawn by a child\n"
    assert (out / "a.csv").read_text() == "x\n1.5\n"

    def broken(tmp: Path) -> None:
        raise ValueError("bad plot: x")

    with pytest.raises(ValueError) as err:
        write_outputs(out, {"a.csv": (["x"], [[9.0]])}, {"k": 2}, broken)
    assert str(err.value) == "bad plot: x"  # the one line the CLI prints, unchanged
    assert "forked writer" in "".join(err.value.__notes__)
    assert (out / "a.csv").read_text() == "x\n1.5\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]  # no staging left


def test_a_table_error_ends_the_report_process_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C (or any error) while the tables are written: the drawing child is ended and
    reaped before the staging directory goes, and the error is the table's."""
    monkeypatch.setattr(writer, "FORK", hasattr(os, "fork"))  # SOVA_REPORT_FORK=1's setting
    if not writer.can_fork():
        pytest.skip("no fork here (not POSIX, or threads running)")
    children: list[int] = []

    def report(tmp: Path) -> None:
        time.sleep(60)  # would outlive the test if it were not ended

    def table(path: Path) -> None:
        children.extend(p for p in _children() if p != os.getpid())
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_outputs(tmp_path / "run", {"a.csv": table}, {"k": 1}, report)
    assert children, "the report ran in a child process"
    assert not set(children) & set(_children()), "the child was ended and reaped"
    assert list(tmp_path.iterdir()) == []


def _children() -> list[int]:
    """This process's live (or unreaped) children."""
    me = os.getpid()
    text = Path(f"/proc/{me}/task/{me}/children").read_text()
    return [int(p) for p in text.split()]


def test_forked_and_serial_writes_are_the_same_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def report(tmp: Path) -> None:
        (tmp / "report.md").write_text("r\n")

    tables = {"a.csv": (["x", "y"], [[1.5, None], [2.0, math.inf]])}
    monkeypatch.setattr(writer, "FORK", hasattr(os, "fork"))
    write_outputs(tmp_path / "forked", tables, {"k": 1}, report)
    monkeypatch.setattr(writer, "FORK", False)
    write_outputs(tmp_path / "serial", tables, {"k": 1}, report)
    files = {p.name: p.read_bytes() for p in (tmp_path / "forked").iterdir()}
    assert files == {p.name: p.read_bytes() for p in (tmp_path / "serial").iterdir()}
    assert set(files) == {"a.csv", "summary.json", "report.md"}


@pytest.mark.parametrize(("value", "forks"), [(None, False), ("0", False), ("1", True)])
def test_the_report_forks_only_when_asked(value: str | None, forks: bool) -> None:
    """The forked report is off by default: both processes together hold ~60 MiB more at
    their peak on a 1,000-host hour, and the simulator's peak memory is a target."""
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "SOVA_REPORT_FORK"}
    if value is not None:
        env["SOVA_REPORT_FORK"] = value
    out = subprocess.run(
        [sys.executable, "-c", "import sova.writer as w; print(w.FORK)"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert out == str(forks and hasattr(os, "fork"))
