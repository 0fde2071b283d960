"""The timeline as columns (``sova simulate --timeline-format``, docs/design.md#timeline-resolution):
a fleet's timeline is a folder of numpy ``.npy`` files, one per column, with the same rows
and values as timeline.csv; CSV is kept where the run is small."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from sova import writer
from sova.cli import app
from sova.record import NONE_BITS, TEXT_COLUMNS, TIMELINE_COLUMNS
from sova.scenario import load_sweep
from sova.sim import output
from sova.sim.runner import run_points

ROOT = Path(__file__).resolve().parents[1]


def _csv_cells(path: Path) -> tuple[list[str], list[list[str]]]:
    with path.open(newline="") as fh:
        rows = list(csv.reader(fh))
    return rows[0], rows[1:]


def _column_cells(folder: Path) -> tuple[list[str], list[list[str]]]:
    """The folder's rows as the CSV writer formats cells: texts by their codes, numbers by
    writer.fmt (an empty cell is the NaN with NONE_BITS)."""
    cols, texts = writer.read_npy_columns(folder)
    head = list(cols)
    cells: list[list[str]] = []
    for name in head:
        a = np.asarray(cols[name])
        if name in texts:
            cells.append([writer.fmt(texts[name][int(k)]) for k in a])
        else:
            empty = a.view(np.uint64) == NONE_BITS
            cells.append(
                [writer.fmt(None if e else float(v)) for v, e in zip(a, empty, strict=True)]
            )
    return head, [list(r) for r in zip(*cells, strict=True)]


def test_columns_hold_the_csvs_rows_and_values(tmp_path: Path) -> None:
    runner = CliRunner()
    for form in ("csv", "columns"):
        args = ["simulate", "sova-fig5", "-o", str(tmp_path / form), "--no-progress"]
        r = runner.invoke(app, [*args, "--timeline-format", form])
        assert r.exit_code == 0, r.output
    head, rows = _csv_cells(tmp_path / "csv" / "timeline.csv")
    got_head, got = _column_cells(tmp_path / "columns" / "timeline")
    assert got_head == head == TIMELINE_COLUMNS
    assert len(rows) == 900 and got == rows  # 3 policies x 5 VMs x 60 periods
    assert not (tmp_path / "columns" / "timeline.csv").exists()
    # codes are as narrow as the names allow; numbers are float64
    cols, texts = writer.read_npy_columns(tmp_path / "columns" / "timeline")
    assert {c: cols[c].dtype for c in TEXT_COLUMNS} == {c: np.dtype(np.uint8) for c in TEXT_COLUMNS}
    assert cols["tx_mbps"].dtype == np.float64
    assert "`timeline/`" in (tmp_path / "columns" / "report.md").read_text()
    # the same files otherwise
    for name in ("events.csv", "summary.json"):
        assert (tmp_path / "csv" / name).read_bytes() == (tmp_path / "columns" / name).read_bytes()


def test_auto_writes_columns_past_the_csv_line_and_replaces_the_other_form(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    scn = load_sweep(ROOT / "scenarios" / "sova-fig5.yaml")[0]
    scn = scn.model_copy(update={"duration": 60.0})
    points = run_points([scn], ["sova"], workers=1)
    rows = len(points[0][1][0].timeline)
    out = tmp_path / "out"
    output.write_outputs(out, points)  # a few rows: CSV
    assert (out / "timeline.csv").exists() and not (out / "timeline").exists()
    monkeypatch.setattr(output, "CSV_ROWS", rows - 1)
    output.write_outputs(out, points)
    assert (out / "timeline").is_dir() and not (out / "timeline.csv").exists()
    output.write_outputs(out, points)  # again into the same folder: replaced, not refused
    cols, _ = writer.read_npy_columns(out / "timeline")
    assert cols["time_s"].shape == (rows,)
    monkeypatch.setattr(output, "CSV_ROWS", rows)
    output.write_outputs(out, points)
    assert (out / "timeline.csv").exists() and not (out / "timeline").exists()


def test_a_sweeps_columns_carry_each_points_value(tmp_path: Path) -> None:
    base = load_sweep(ROOT / "scenarios" / "sova-fig5.yaml")[0].model_copy(
        update={"duration": 30.0}
    )
    points = []
    for value in (0.5, "x,y"):  # a number and a text the CSV quotes
        scn = base.model_copy(update={"sweep_value": value})
        points += run_points([scn], ["sova"], workers=1)
    output.write_timeline_columns(tmp_path / "t", points, sweep=True)
    cols, texts = writer.read_npy_columns(tmp_path / "t")
    assert list(cols) == ["sweep_value", *TIMELINE_COLUMNS]
    assert texts["sweep_value"] == ["0.5", "x,y"]
    n = [len(runs[0].timeline) for _, runs in points]
    assert np.asarray(cols["sweep_value"]).tolist() == [0] * n[0] + [1] * n[1]


def test_a_bad_timeline_format_is_refused_in_one_line(tmp_path: Path) -> None:
    out = tmp_path / "out"
    r = CliRunner().invoke(
        app, ["simulate", "sova-fig5", "-o", str(out), "--timeline-format", "parquet"]
    )
    assert r.exit_code == 2, r.output
    assert "--timeline-format: 'parquet' is none of auto, csv, columns" in " ".join(
        r.output.split()
    )
    assert len(r.output.strip().splitlines()) == 1
    assert not out.exists()


def test_write_npy_columns_refuses_a_row_count_it_did_not_write(tmp_path: Path) -> None:
    blocks = [{"a": np.arange(3.0)}]
    with pytest.raises(ValueError, match="rows: 4 announced, 3 written"):
        writer.write_npy_columns(tmp_path / "t", 4, {"a": np.dtype(np.float64)}, {}, blocks)
