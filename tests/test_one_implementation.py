"""One implementation of the policy's arithmetic (issue 36, docs/design.md#compiled-core).

A piece of the policy that has moved into the compiled core (rust/sova-core) lives in one
Python place, its facade in ``sova.policy``: only the facades import the core, each of
their functions reaches it, the per-host and the fleet callers use the facade's very
objects, and the per-host forms that wrap it (``HotspotDetector.assess``, the AR(1)
helpers) do no arithmetic of their own. The former twins must not come back, and the
table of pieces still in two implementations in docs/design.md names exactly the pairs
that still exist, so it cannot claim less or more than the code.
"""

from __future__ import annotations

import ast
import importlib
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src"
DESIGN = (REPO / "docs" / "design.md").read_text()


@dataclass(frozen=True)
class Piece:
    name: str
    facade: str  # the module
    offers: tuple[str, ...]  # what its callers take from it
    users: tuple[tuple[str, str], ...]  # (module, name): per-host and fleet callers
    gone: tuple[str, ...]  # "module:function" twins that must not come back


MOVED = (
    Piece(
        "water-filling",
        "sova.policy.waterfill",
        ("grouped_waterfill", "links_waterfill", "floored_waterfill"),
        (),  # the simulator's fills run inside the core's sharing (below); tests call these
        (),
    ),
    Piece(
        "the world's sharing",
        "sova.policy.sharing",
        ("share_tick",),
        (("sova.sim.network", "share_tick"),),  # the simulator's tick, every VM
        ("sova.sim.network:_guest_need", "sova.sim.network:_host_cpu", "sova.sim.network:_paths",
         "sova.sim.network:_egress", "sova.sim.network:_scale_to", "sova.sim.engine:Engine._latency"),
    ),  # fmt: skip
    Piece(
        "exact per-host sums",
        "sova.policy.kernels",
        ("Groups",),
        (
            ("sova.agent.bandwidth", "Groups"),  # the agents' and the simulator's step
            ("sova.sim.fleet_bandwidth", "Groups"),
            ("sova.policy.bandwidth", "Groups"),  # the per-host allocators
        ),
        ("sova.policy.kernels:row_fsum", "sova.policy.kernels:_two_sum"),
    ),
    Piece(
        "the world's tick",
        "sova.policy.tick",
        ("count", "offer_load", "draws", "uniforms"),
        (
            ("sova.sim.engine", "count"),  # the simulator's tick, every VM
            ("sova.sim.workload", "offer_load"),  # duty cycles, draws, each VM's offer
            ("sova.sim.workload", "uniforms"),  # a workload change's new cycles
        ),
        ("sova.policy.tick:on_time", "sova.policy.tick:OnTime", "sova.sim.workload:_draws",
         "sova.sim.workload:_on_fraction"),  # fmt: skip
    ),
    Piece(
        "rate metering",
        "sova.policy.metering",
        ("measure", "RateMeter"),
        (("sova.testbed.runner", "RateMeter"),),
        ("sova.agent.bandwidth:measure",),
    ),
    Piece(
        "load shares",
        "sova.policy.loads",
        ("load_shares", "host_load", "vm_loads", "demand_load_arrays", "demand_loads"),
        (
            ("sova.sim.fleet_sensing", "load_shares"),  # the simulator, every host
            ("sova.sim.fleet_sensing", "demand_load_arrays"),
            ("sova.agent.loop", "host_load"),  # the daemons' agent, its host
            ("sova.agent.loop", "vm_loads"),
            ("sova.agent.loop", "demand_loads"),
            ("sova.lab.hotspot", "host_load"),
        ),
        ("sova.policy.kernels:load_shares", "sova.policy.sensing:host_load",
         "sova.policy.sensing:vm_loads", "sova.policy.sensing:demand_loads",
         "sova.policy.kernels:demand_load_arrays"),
    ),  # fmt: skip
    Piece(
        "hotspot verdicts",
        "sova.policy.verdicts",
        ("verdict_arrays",),
        (
            ("sova.manager.decisions.fastplan", "verdict_arrays"),  # the manager's round, every host
            ("sova.policy.hotspot", "verdict_arrays"),  # HotspotDetector.assess, one host
        ),
        ("sova.manager.decisions.fastplan:_verdict_arrays",),
    ),
    Piece(
        "sensing windows and factors",
        "sova.policy.sensing",
        ("SensorKernel", "HostSensor"),
        (
            ("sova.sim.fleet_sensing", "SensorKernel"),  # the simulator, every VM
            ("sova.agent.loop", "HostSensor"),  # the daemons', testbed's and lab's agent
        ),
        ("sova.policy.kernels:SensorKernel", "sova.policy.kernels:SensedFactors",
         "sova.policy.sensing:period_stats", "sova.policy.sensing:PeriodStats",
         "sova.policy.sensing:network_factors", "sova.policy.sensing:io_factor",
         "sova.policy.sensing:io_degree", "sova.policy.sensing:net_degree",
         "sova.policy.sensing:demand_estimate", "sova.policy.sensing:censored"),
    ),  # fmt: skip
    Piece(
        "the Sova allocator",
        "sova.policy.allocation",
        ("sova_allocate", "clamped_fill"),
        (
            ("sova.agent.bandwidth", "sova_allocate"),  # agents' and the simulator's step
            ("sova.policy.bandwidth", "sova_allocate"),  # SovaAllocator.allocate, one host
            ("sova.policy.bandwidth", "clamped_fill"),  # the other allocators' fill
        ),
        ("sova.policy.kernels:sova_allocate", "sova.policy.kernels:_sided_sums"),
    ),
    Piece(
        "the bandwidth period",
        "sova.policy.allocation",
        ("bandwidth_period", "bandwidth_demand", "bandwidth_limits"),
        (
            ("sova.agent.bandwidth", "bandwidth_period"),  # decide: agents' and simulator's
            ("sova.agent.bandwidth", "bandwidth_demand"),  # with a plug-in allocator
            ("sova.agent.bandwidth", "bandwidth_limits"),
        ),
        ("sova.agent.bandwidth:probe_demand", "sova.agent.bandwidth:open_link",
         "sova.agent.bandwidth:reserve_guarantees", "sova.agent.bandwidth:limits",
         "sova.sim.fleet_bandwidth:FleetBandwidth._reserve"),
    ),  # fmt: skip
    Piece(
        "VF scheduling",
        "sova.policy.vfkernel",
        ("schedule_hosts", "schedule_one"),
        (
            ("sova.sim.fleet_control", "schedule_hosts"),  # the simulator, every host
            ("sova.policy.operation", "schedule_one"),  # Alg. 1's Operation Table, one host
        ),
        ("sova.policy.vfsched:schedule", "sova.policy.vfsched:rank",
         "sova.policy.vfsched:io_filter", "sova.policy.vfsched:_pay_for_moves",
         "sova.policy.vfkernel:_pay_for_moves", "sova.policy.vfkernel:_segments"),
    ),  # fmt: skip
    Piece(
        "hotness (volume, skewness)",
        "sova.policy.hotness",
        ("hotness", "hotness_rows", "skewness", "volume"),
        (
            ("sova.policy.hotspot", "hotness"),  # the mover choice (MF), Watcher's plug-in
            ("sova.policy.cold_spots", "hotness_rows"),  # every round's ranking of cold spots
        ),
        ("sova.manager.decisions.fastplan:hotness_array",),
    ),
    Piece(
        "cold-spot screening",
        "sova.policy.cold_spots",
        ("screen_round", "screen_targets", "choose_target"),
        (
            ("sova.policy.hotspot", "screen_round"),  # coordinate and the manager's round
            ("sova.manager.decisions.fleet", "choose_target"),  # one VM: fleet controls
            ("sova.manager.daemons.service.plan_run", "choose_target"),  # an operator's move
        ),
        ("sova.policy.hotspot:_Round",),
    ),
)

# Per-host forms outside the facades that must only hand their input to a facade.
DELEGATES = (
    ("sova.policy.hotspot", "HotspotDetector.assess", "verdict_arrays"),
    ("sova.policy.hotspot", "_series_verdict", "verdict_arrays"),
    ("sova.policy.hotspot", "ar1_coefficient", "_series_verdict"),
    ("sova.policy.hotspot", "ar1_forecast", "_series_verdict"),
    ("sova.policy.sensing", "HostSensor.observe", "observe"),
    ("sova.policy.sensing", "HostSensor.factors", "factors"),
    ("sova.policy.bandwidth", "SovaAllocator.allocate", "sova_allocate"),
    # the hotness facade's own functions: checks and the call, the arithmetic in the core
    ("sova.policy.hotness", "hotness", "hotness_one"),
    ("sova.policy.hotness", "volume", "hotness_one"),
    ("sova.policy.hotness", "skewness", "hotness_one"),
    ("sova.policy.hotness", "hotness_rows", "hotness_rows"),
)

ARITHMETIC = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow, ast.MatMult)


def _path(module: str) -> Path:
    return SRC / (module.replace(".", "/") + ".py")


def _tree(module: str) -> ast.Module:
    return ast.parse(_path(module).read_text())


def _defs(tree: ast.Module) -> dict[str, ast.FunctionDef | ast.ClassDef]:
    """Top-level functions and classes, and methods as Class.method."""
    out: dict[str, ast.FunctionDef | ast.ClassDef] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            out[node.name] = node
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef):
                    out[f"{node.name}.{item.name}"] = item
    return out


def _names_used(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} | {
        n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)
    }


def _calls_core(node: ast.AST) -> bool:
    return any(
        isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "_core"
        for n in ast.walk(node)
    )


def _modules() -> list[str]:
    return sorted(
        ".".join(p.relative_to(SRC).with_suffix("").parts)
        for p in (SRC / "sova").rglob("*.py")
    )


def _imports_core(tree: ast.Module) -> bool:
    for n in ast.walk(tree):
        if (
            isinstance(n, ast.ImportFrom)
            and n.module == "sova.policy"
            and any(a.name == "_core" for a in n.names)
        ):
            return True
        if isinstance(n, ast.ImportFrom) and n.module == "sova.policy._core":
            return True
        if isinstance(n, ast.Import) and any(a.name == "sova.policy._core" for a in n.names):
            return True
    return False


def test_only_the_facades_import_the_core() -> None:
    importers = {m for m in _modules() if _imports_core(_tree(m))}
    assert importers == {p.facade for p in MOVED}


@pytest.mark.parametrize("piece", MOVED, ids=lambda p: p.name)
def test_every_function_of_a_facade_reaches_the_core(piece: Piece) -> None:
    # a function or class reaches the core by calling it or another function or class of
    # the facade that does (a class by name: its methods are what its users call)
    defs = _defs(_tree(piece.facade))
    functions = {n: d for n, d in defs.items() if "." not in n}
    reach = {n for n, d in functions.items() if _calls_core(d)}
    grew = True
    while grew:
        more = {n for n, d in functions.items() if _names_used(d) & reach} - reach
        reach |= more
        grew = bool(more)
    for name in piece.offers:
        assert name in reach, f"{piece.facade}.{name} never calls the core"


@pytest.mark.parametrize("piece", MOVED, ids=lambda p: p.name)
def test_per_host_and_fleet_callers_use_the_facades_objects(piece: Piece) -> None:
    facade = importlib.import_module(piece.facade)
    for module, name in piece.users:
        used = getattr(importlib.import_module(module), name)
        assert used is getattr(facade, name), f"{module}.{name} is not {piece.facade}.{name}"


@pytest.mark.parametrize("piece", MOVED, ids=lambda p: p.name)
def test_no_piece_is_defined_outside_its_facade(piece: Piece) -> None:
    # by name, anywhere in src/: a second function of the same name is a second form
    for module in _modules():
        if module == piece.facade:
            continue
        defs = _defs(_tree(module))
        again = [n for n in piece.offers if n in defs]
        assert not again, f"{module} defines {again}, which {piece.facade} implements"
    for twin in piece.gone:
        module, name = twin.split(":")
        assert name not in _defs(_tree(module)), f"{twin} is back beside {piece.facade}"


@pytest.mark.parametrize(("module", "qualname", "callee"), DELEGATES)
def test_per_host_forms_only_delegate(module: str, qualname: str, callee: str) -> None:
    node = _defs(_tree(module))[qualname]
    assert callee in _names_used(node), f"{module}.{qualname} does not call {callee}"
    arithmetic = [
        ast.unparse(n)
        for n in ast.walk(node)
        if isinstance(n, ast.BinOp | ast.AugAssign) and isinstance(n.op, ARITHMETIC)
    ]
    assert not arithmetic, f"{module}.{qualname} computes {arithmetic} itself"


def _twins_table() -> list[tuple[str, str, str]]:
    """docs/design.md's table of the pieces still in two implementations: (piece, the
    readable form, the array twin), each form as module:name."""
    block = DESIGN.split('<a id="twins"></a>', 1)[1].split("<a id=", 1)[0]
    rows = re.findall(r"^ *\| ([^|]+?) \| `([^`]+)` \| `([^`]+)` \|", block, re.M)
    return [(p.strip(), a, b) for p, a, b in rows]


def test_the_documented_twins_are_the_ones_in_the_code() -> None:
    table = _twins_table()
    block = DESIGN.split('<a id="twins"></a>', 1)[1].split("<a id=", 1)[0]
    if not table:
        # hotness was the last pair (issue 36): the text after the anchor must say so
        assert block.lstrip().startswith("No piece of the policy is left in two"), (
            "docs/design.md has neither a table of remaining twins nor says there is none"
        )
    moved = {p.name for p in MOVED}
    for piece, *forms in table:
        assert piece not in moved, f"{piece} is documented as two forms but has moved"
        for form in forms:
            module, name = form.split(":")
            assert name in _defs(_tree(module)), (
                f"docs/design.md lists {form} for {piece}, but the code has no such form: "
                "move the row out of the table if the piece now has one implementation"
            )


def test_hotness_arithmetic_is_nowhere_else() -> None:
    # Volume clamps each load to VOLUME_CLAMP and skewness divides by the mean: a second
    # form of either (as the manager's round had, issue 36) reads the clamp, or takes a
    # square root, or both. The facade hands the clamp to the core; no other module reads
    # it but to re-export it, and none outside the facades and the report takes a root.
    for module in _modules():
        if module == "sova.policy.hotness":
            continue
        tree = _tree(module)
        reads = [
            n.lineno for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id == "VOLUME_CLAMP"
        ]
        assert not reads, f"{module} computes with VOLUME_CLAMP (lines {reads}): hotness again?"
        for fn in ast.walk(tree):
            if isinstance(fn, ast.FunctionDef) and "hot" in fn.name.lower():
                roots = [
                    ast.unparse(n)
                    for n in ast.walk(fn)
                    if isinstance(n, ast.Call) and ast.unparse(n.func).endswith("sqrt")
                ]
                assert not roots, f"{module}.{fn.name} takes {roots}: hotness again?"



def test_the_agent_and_the_simulator_run_the_same_bandwidth_period() -> None:
    # the agent's host is a fleet of one: its bandwidth step and the simulator's step for
    # every host both decide through sova.agent.bandwidth.decide, and nothing else there
    # computes a demand or a cap
    for module, qualname in (
        ("sova.agent.bandwidth_loop", "BandwidthLoop.bandwidth_step"),
        ("sova.sim.fleet_bandwidth", "FleetBandwidth.step"),
    ):
        node = _defs(_tree(module))[qualname]
        assert "decide" in _names_used(node), f"{module}.{qualname} does not call decide"
        arithmetic = [
            ast.unparse(n)
            for n in ast.walk(node)
            if isinstance(n, ast.BinOp | ast.AugAssign) and isinstance(n.op, ARITHMETIC)
        ]
        # the agent measures between two readings (their time apart) and nothing more
        assert all("time_s" in a or "prev[3]" in a for a in arithmetic), arithmetic
