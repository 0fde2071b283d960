"""Scenario files someone else wrote: what `sova validate` must refuse, in one clear error.

Issue 10, finding 9: a trace or profile path must not reach outside the scenario's folder,
special files must not hang or exhaust `validate`, bad encodings and absurd nesting get a
message instead of a traceback, and `validate` refuses every value `simulate` cannot run,
with the bound it broke. Each case runs the `sova` CLI in-process (exit code, stderr).
"""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from sova.cli import app

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = ROOT / "scenarios"


def cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.output


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A copy of scenarios/ (profiles and traces beside the scenarios) to write into."""
    shutil.copytree(SCENARIOS / "profiles", tmp_path / "profiles")
    shutil.copytree(SCENARIOS / "traces", tmp_path / "traces")
    return tmp_path


def write(folder: Path, data: dict[str, Any], name: str = "s.yaml") -> Path:
    path = folder / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def trace_scenario() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((SCENARIOS / "trace-replay.yaml").read_text())
    return data


def refused(path: Path, *needles: str) -> str:
    code, out = cli("validate", str(path))
    assert code == 2, out
    assert "Traceback" not in out
    for n in needles:
        assert n in out, (n, out)
    return out


def test_a_trace_outside_the_scenario_folder_is_refused_and_not_read(folder: Path) -> None:
    secret = folder.parent / "secret.csv"
    secret.write_text("time_s,web\nTOP-SECRET-LINE,1\n")
    data = trace_scenario()
    for bad in ("../secret.csv", str(secret), "traces/../../secret.csv", "../../../../etc/passwd"):
        data["workload"][0]["vms"]["web"]["trace"] = bad
        out = refused(write(folder, data), "workload[0].vms.web.trace", repr(bad))
        assert "TOP-SECRET" not in out and "root:" not in out


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_a_fifo_or_a_device_is_refused_without_blocking(folder: Path, kind: str) -> None:
    data = trace_scenario()
    target = folder / "traces" / "special.csv"
    if kind == "fifo":
        os.mkfifo(target)
    else:
        target.symlink_to("/dev/zero")  # a link the folder's owner placed: still no device
    data["workload"][0]["vms"]["web"]["trace"] = "traces/special.csv"
    path = write(folder, data)
    done: list[str] = []
    worker = threading.Thread(target=lambda: done.append(refused(path, "not a regular file")))
    worker.start()
    worker.join(timeout=20)
    assert done, "validate blocked on a special file"


def test_the_scenario_file_itself_may_not_be_a_fifo(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "s.yaml")
    done: list[str] = []
    t = threading.Thread(target=lambda: done.append(refused(tmp_path / "s.yaml", "regular file")))
    t.start()
    t.join(timeout=20)
    assert done, "validate blocked on a FIFO"


def test_a_profile_name_cannot_leave_profiles(folder: Path) -> None:
    (folder.parent / "evil.yaml").write_text("hotplug_attach: 1s\n")
    data: dict[str, Any] = yaml.safe_load((SCENARIOS / "sova-fig5.yaml").read_text())
    for bad in ("../../evil", "../evil", "/etc/passwd", "sub/../../evil"):
        data["profile"] = bad
        refused(write(folder, data), "profile", repr(bad))


def test_non_utf8_scenario_names_the_byte(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_bytes(b"name: caf\xe9\nduration: 10\n")
    refused(path, "not UTF-8", "0xe9", "offset 9")


def test_5000_deep_nesting_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("name: deep\nduration: 10\nmetrics: " + "[" * 5000 + "]" * 5000 + "\n")
    refused(path, "nested deeper")
    path.write_text("name: deep\nduration: 10\nmetrics: " + "[" * 200 + "]" * 200 + "\n")
    refused(path, "metrics", "nested deeper than 64")


def test_nesting_reached_through_an_alias_is_refused(tmp_path: Path) -> None:
    """The event builder opens no collection past 64 levels, so the loader skips the walk
    that measures the depth of what it built; an alias can still put a 40-deep list inside
    another 40-deep one (80 levels, no collection opened past 41): walked and refused."""
    path = tmp_path / "s.yaml"
    deep = "[" * 40 + "1" + "]" * 40
    path.write_text(
        f"name: deep\nduration: 10\nx: &d {deep}\nmetrics: " + "[" * 40 + "*d" + "]" * 40 + "\n"
    )
    refused(path, "metrics", "nested deeper than 64")


@pytest.mark.parametrize(
    ("where", "value", "needles"),
    [
        (("duration",), 1e12, ("duration", "604800")),
        (("tick",), 1e-9, ("tick", "0.001")),
        (("seed",), -5, ("seed", "greater than or equal to 0")),
        (("workload", 0, "vms", "VM1", "requests_per_s"), float("inf"), ("requests_per_s",)),
        (("workload", 0, "vms", "VM1", "requests_per_s"), 1e30, ("requests_per_s", "1000000000")),
        (("vms", 0, "memory"), "1TiB", ("VM1", "memory")),
        (("controller", "scheduler", "hysteresis"), float("inf"), ("hysteresis",)),
        (("duration",), float("nan"), ("duration",)),
    ],
)
def test_validate_refuses_what_simulate_cannot_run(
    folder: Path, where: tuple[str | int, ...], value: Any, needles: tuple[str, ...]
) -> None:
    data: dict[str, Any] = yaml.safe_load((SCENARIOS / "sova-fig5.yaml").read_text())
    if where[-1] == "requests_per_s":
        data["workload"][0]["vms"]["VM1"] = {"kind": "requests", "requests_per_s": 1.0}
    node: Any = data
    for key in where[:-1]:
        node = node[key] if isinstance(key, int) else node.setdefault(key, {})
    node[where[-1]] = value
    refused(write(folder, data), *needles)


def test_too_many_steps_is_refused_with_the_bound(folder: Path) -> None:
    data: dict[str, Any] = yaml.safe_load((SCENARIOS / "sova-fig5.yaml").read_text())
    data["duration"], data["tick"] = "100h", "10ms"
    refused(write(folder, data), "duration / tick", "10,000,000")


def test_a_trace_with_garbage_rows_is_refused_by_validate(folder: Path) -> None:
    (folder / "traces" / "bad.csv").write_text("time_s,web\n0,1\n1,lots\n")
    data = trace_scenario()
    data["workload"][0]["vms"]["web"]["trace"] = "traces/bad.csv"
    refused(write(folder, data), "line 3")


def test_every_shipped_scenario_still_validates() -> None:
    for path in sorted(SCENARIOS.glob("*.yaml")):
        code, out = cli("validate", str(path))
        assert code == 0, out


def test_scenarios_load_with_libyaml_and_parse_as_the_pure_python_loader() -> None:
    """The scenario loader uses libyaml's parser where PyYAML has it (a 3,000-VM scenario's
    parse peaks ~20 MiB lower), and every shipped scenario and profile, and the YAML forms
    a scenario may use, parse to the same data as with the pure-Python loader."""
    from sova import scenario

    if not yaml.__with_libyaml__:
        pytest.skip("PyYAML was built without libyaml here")
    assert scenario.SAFE_LOADER is yaml.CSafeLoader
    texts = [p.read_text() for p in sorted(SCENARIOS.rglob("*.yaml"))]
    texts.append(
        "a: 0x1F\nb: 1_000\nc: 2026-01-01\nd: .inf\ne: ~\nf: 1e3\ng: yes\nh: &x [1, {i: 2}]\n"
        "j: *x\nk: !!str 5\nl: |\n  two\n  lines\nm: 'q''uote'\nn: 1.5e+3\no: -.5\n"
    )
    assert len(texts) > 20
    for text in texts:
        assert yaml.load(text, Loader=yaml.CSafeLoader) == yaml.safe_load(text)


# YAML forms beyond plain mappings, lists and scalars, which the event builder hands to
# PyYAML's whole-document loader (merge keys, collection tags, several documents, errors)
_OTHER_YAML = [
    "a: &a {x: 1}\nb:\n  <<: *a\n  y: 2\n",
    "a: !!set {x}\n",
    "a: !!omap [{x: 1}]\n",
    "? [1]\n: 2\n",
    "a: 1\n---\nb: 2\n",
    "a: *nope\n",
    "a: &x 1\nb: &x 2\n",
    "a: !!binary not*base64\n",
    "a: !!python/name:os.system\n",
    "a: [1\n",
    "=: 1\n",
]


def _same_as_pyyaml(text: str) -> None:
    from sova import scenario

    try:
        want: Any = yaml.safe_load(text)
    except yaml.YAMLError:
        with pytest.raises(scenario.ScenarioError, match="not valid YAML"):
            scenario._yaml(text, "t")
        return
    got = scenario._yaml(text, "t")
    assert got == want and repr(got) == repr(want)  # repr: 1 == 1.0 == True would pass ==


def test_the_event_builder_loads_every_shipped_file_as_pyyaml_does() -> None:
    """``scenario._yaml`` builds plain documents from the parser's events (a 3,000-VM
    scenario's parse peaked ~40 MiB higher through PyYAML's node tree): every shipped
    scenario and profile goes through the builder itself (no fallback) and gives
    ``yaml.safe_load``'s data, types included; other YAML gives PyYAML's data or error."""
    from sova import scenario

    texts = [p.read_text() for p in sorted(SCENARIOS.rglob("*.yaml"))]
    assert len(texts) > 20
    for text in texts:
        built = scenario._events_to_data(text)
        assert built == yaml.safe_load(text) and repr(built) == repr(yaml.safe_load(text))
    # one text in several tags and quotings: each its own value (the builder reuses a
    # scalar's value by tag, text and quoting)
    mixed = 'a: 1\nb: "1"\nc: 1\nd: !!str 1\ne: [yes, "yes", yes, 1.0, "1.0", 1.0, ~, "~", ~]\n'
    built = scenario._events_to_data(mixed)
    assert built == yaml.safe_load(mixed) and repr(built) == repr(yaml.safe_load(mixed))
    # anchors share the object, as PyYAML's do
    shared = scenario._events_to_data("a: &x [1, {i: 2}]\nb: *x\n")
    assert shared["a"] is shared["b"]
    for text in _OTHER_YAML:
        with pytest.raises(Exception):  # noqa: B017 -- any: the fallback takes them all
            scenario._events_to_data(text)
        _same_as_pyyaml(text)


_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False),
    st.text(max_size=12),
    st.dates(),
)
_docs = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            st.one_of(st.text(max_size=8), st.integers(), st.booleans()), inner, max_size=4
        )
    ),
    max_leaves=30,
)


@settings(max_examples=300, deadline=None)
@given(
    doc=_docs, flow=st.sampled_from([None, True, False]), style=st.sampled_from([None, "'", '"'])
)
def test_the_event_builder_matches_pyyaml_on_random_documents(
    doc: Any, flow: bool | None, style: str | None
) -> None:
    """Random documents in block, flow and quoted styles load as ``yaml.safe_load``'s."""
    _same_as_pyyaml(yaml.safe_dump(doc, default_flow_style=flow, default_style=style))
    _same_as_pyyaml(yaml.safe_dump({"merged": doc, "<<": {"k": 1}}))
