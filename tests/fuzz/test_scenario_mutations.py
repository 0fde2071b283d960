"""Validate passing means simulate runs: every shipped scenario, mutated at random.

Each example takes one scenario from scenarios/, changes one thing in it (a value
replaced by a number, an extreme, a string, null, a list or a mapping; a key deleted; an
unknown key added; a number scaled) and runs ``sova validate`` on it. It must either
refuse it (exit 2, one message naming the changed field or one it refers to) or accept
it, and then every policy of it (first sweep point) must simulate 60 s of it without an
exception and within a time limit (issue 10, finding 9).

Tiers (measured on the shared 2-core machine, see the report of issue 10):
* default: ``DEFAULT_EXAMPLES`` mutations per scenario, derandomised (the same ones every
  run, so CI cannot flake on a newly drawn case);
* ``-m full_fuzz``: 500 per scenario, random.
"""

from __future__ import annotations

import math
import re
import shutil
import signal
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from sova.cli import app
from sova.scenario import Scenario, load_sweep
from sova.sim.runner import run_policy

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = sorted((ROOT / "scenarios").glob("*.yaml"))
FIELDS = set(Scenario.model_fields)
DEFAULT_EXAMPLES = 10
FULL_EXAMPLES = 500
SIM_SECONDS = 60.0
# A 60-s run of any shipped scenario takes < 2 s here; a mutation may make it much bigger
# (ten times the VMs, a tenth of the tick) and still be a scenario simulate must run.
TIME_LIMIT_S = 120

Path_ = tuple[str | int, ...]

ODD_VALUES = st.one_of(
    st.integers(min_value=-(10**20), max_value=10**20),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0, -1, 1, 1e12, 1e-9, -5, 2**63, 0.5, 100_000]),
    st.sampled_from(
        ["", "x", "1e12", "-1", "1Gbit", "10ms", "1TiB", ".inf", "nan", "0s", "${x}"]
        + ["../../../../etc/passwd", "/dev/zero", "VM1", "h1", "sova", "none", "\u00e9\u0000"]
    ),
    st.text(max_size=12),
    st.none(),
    st.booleans(),
    st.lists(st.integers(min_value=-3, max_value=3), max_size=3),
    st.dictionaries(st.sampled_from(["a", "name", "min"]), st.integers(0, 3), max_size=2),
)


def paths(node: Any, here: Path_ = ()) -> Iterator[Path_]:
    """Every node's path in the document (the root excluded)."""
    if isinstance(node, dict):
        for k, v in node.items():
            yield (*here, k)
            yield from paths(v, (*here, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield (*here, i)
            yield from paths(v, (*here, i))


def get(doc: Any, path: Path_) -> Any:
    for key in path:
        doc = doc[key]
    return doc


@st.composite
def mutation(draw: st.DrawFn, doc: dict[str, Any]) -> tuple[dict[str, Any], Path_, str]:
    """(mutated copy of ``doc``, the path changed, what was done)."""
    data: dict[str, Any] = yaml.safe_load(yaml.safe_dump(doc))  # a deep copy
    where: Path_ = draw(st.sampled_from(list(paths(data))))
    parent = get(data, where[:-1])
    key = where[-1]
    old = parent[key]
    ops = ["replace", "delete", "add-key"]
    if isinstance(old, int | float) and not isinstance(old, bool):
        ops.append("scale")
    op = draw(st.sampled_from(ops))
    if op == "replace":
        parent[key] = draw(ODD_VALUES)
    elif op == "delete":
        del parent[key]
    elif op == "scale":
        parent[key] = old * draw(st.sampled_from([0, -1, 10, 1e6, 1e-6, 1e300]))
    else:
        target = old if isinstance(old, dict) else parent if isinstance(parent, dict) else data
        target["no_such_field"] = draw(ODD_VALUES)
    return data, where, op


class Hang(Exception):
    pass


def _alarm(_sig: int, _frame: FrameType | None) -> None:
    raise Hang(f"no answer within {TIME_LIMIT_S} s")


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of scenarios/ to write mutated scenarios into (profiles, traces beside)."""
    base = tmp_path_factory.mktemp("scenarios")
    shutil.copytree(ROOT / "scenarios" / "profiles", base / "profiles")
    shutil.copytree(ROOT / "scenarios" / "traces", base / "traces")
    return base


def names(path: Path_, data: dict[str, Any]) -> set[str]:
    """Words an error about ``path`` may name: its keys (an item: its list's key).

    A sweep value is substituted into the text; its error names the point (``n=0``).
    """
    out = {str(k) for k in path if isinstance(k, str)} | {"no_such_field"}
    sweep = data.get("sweep")
    if path[:1] == ("sweep",) and isinstance(sweep, dict):
        out.add(f"({sweep.get('variable')}=")
    return out


FIELD_LINE = re.compile(r"^\s+([A-Za-z_]\w*)(?:\[\d+\]|\.[\w-]+)*: ", re.MULTILINE)


def names_a_field(out: str, where: Path_, data: dict[str, Any]) -> bool:
    """The error names the changed field, or a field of the scenario it made wrong.

    Changing one field can make another one wrong (a deleted sweep leaves ``${n}`` in
    ``vm_groups[0].count``; a renamed VM is unknown in ``hosts[0].vms``): the error then
    names that one.
    """
    if any(n in out for n in names(where, data)):
        return True
    return any(m.group(1) in FIELDS for m in FIELD_LINE.finditer(out))


def check(folder: Path, source: Path, data: dict[str, Any], where: Path_, op: str) -> None:
    path = folder / source.name
    path.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
    what = f"{source.name}: {op} at {where!r}"
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(TIME_LIMIT_S)
    try:
        result = CliRunner().invoke(app, ["validate", str(path)])
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            raise AssertionError(f"{what}: validate raised") from result.exception
        if result.exit_code == 2:
            out = result.output
            assert out.startswith("error:") and "Traceback" not in out, (what, out)
            assert names_a_field(out, where, data), (what, out)
            return
        assert result.exit_code == 0, (what, result.output)
        scn = load_sweep(path)[0]
        # shortened, but never below a control period (validate holds duration >= period:
        # the full tier's 60-s cut of a 354-s period "found" an empty timeline of its own)
        short = max(SIM_SECONDS, scn.tick, scn.controller.period)
        scn = scn.model_copy(update={"duration": min(scn.duration, short)})
        for policy in scn.policies:
            try:
                run = run_policy(scn, policy)
            except Hang:
                raise
            except Exception as exc:
                raise AssertionError(
                    f"{what}: validate passed, simulate [{policy}] raised"
                ) from exc
            assert run.timeline, what
            for row in run.timeline[-10:]:
                for value in vars(row).values():
                    if isinstance(value, float):
                        assert not math.isnan(value), (what, policy, row)
    except Hang as exc:
        raise AssertionError(f"{what}: {exc}") from None
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _run(folder: Path, source: Path, examples: int, derandomize: bool) -> None:
    doc: dict[str, Any] = yaml.safe_load(source.read_text())

    @settings(
        max_examples=examples,
        deadline=None,
        derandomize=derandomize,
        database=None,
        # Shrinking a 60-s simulation can take many minutes; the failure message already
        # says which scenario, which field and which change.
        phases=[Phase.explicit, Phase.reuse, Phase.generate],
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(mutation(doc))
    def prop(m: tuple[dict[str, Any], Path_, str]) -> None:
        check(folder, source, *m)

    prop()


@pytest.mark.parametrize("source", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_mutated_scenarios_are_refused_or_run(folder: Path, source: Path) -> None:
    _run(folder, source, DEFAULT_EXAMPLES, derandomize=True)


@pytest.mark.full_fuzz
@pytest.mark.parametrize("source", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_500_mutations_per_scenario(folder: Path, source: Path) -> None:
    _run(folder, source, FULL_EXAMPLES, derandomize=False)


# Mutations the random tier found (or the issue lists) that the code before the fix
# answered with a traceback, a hang or a simulation that crashed after validate passed.
FOUND: list[tuple[str, Path_, Any]] = [
    ("sova-fig5", ("hosts", 2, "nic", "vf_pool"), 10**20),  # simulate hung
    ("sova-fig5", ("vms", 2, "memory"), 0),  # simulate raised
    ("native-vs-driver-domain", ("workload",), 1.5),  # validate raised TypeError
    ("sova-fig5", ("duration",), 1e12),
    ("sova-fig5", ("tick",), 1e-9),
    ("sova-fig5", ("seed",), -5),
    ("sova-fig5", ("hosts", 0, "memory"), 0),
    ("sova-fig5", ("hosts", 0, "nic", "capacity"), 0),
    ("sova-fig5", ("vms", 0, "sla", "weight"), float("inf")),
    ("sova-fig5", ("profile",), "../../../../etc/passwd"),
    # full_fuzz (issue 21): validate passed, simulate wrote an empty timeline
    ("dba-vm", ("duration",), 1),
    ("trace-replay", ("duration",), 1),
    # full_fuzz (2026-11-27): validate passed, simulate raised converting it to a float
    ("daqs-fig3", ("metrics", "guarantee_tolerance"), "\u00e9\u0000"),
    ("daqs-fig4", ("metrics", "guarantee_tolerance"), ""),
    # full_fuzz (2026-12-07): a control period longer than the harness's 60-s cut
    ("classification", ("controller", "period"), "354s"),
    # full_fuzz (2026-12-07, second run): validate passed, every run ended in NaN
    ("native-vs-driver-domain", ("workload", 0, "vms", "VM1", "ns_per_byte"), 6.6e301),
]


@pytest.mark.parametrize(("name", "where", "value"), FOUND, ids=[f"{n}:{w}" for n, w, _ in FOUND])
def test_found_mutations(folder: Path, name: str, where: Path_, value: Any) -> None:
    source = ROOT / "scenarios" / f"{name}.yaml"
    data: dict[str, Any] = yaml.safe_load(source.read_text())
    node: Any = data
    for key in where[:-1]:
        node = node[key] if isinstance(key, int) else node.setdefault(key, {})
    node[where[-1]] = value
    check(folder, source, data, where, "replace")
