"""docs/architecture.md's module map and layer table against the tree and the
import-linter contracts: a module added, moved or removed without its line in the map
(or without a layer) fails here."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src" / "sova"
DOC = (REPO / "docs" / "architecture.md").read_text()
ENTRY = re.compile(r"^( {2}| {4}| {6}| {8})([a-z_][a-z0-9_]*(?:\.py|/)(?:, [a-z_][a-z0-9_]*\.py)*)(?:\s|$)")


def _map_block() -> list[str]:
    block = DOC.split("```text\nsrc/sova/\n", 1)[1].split("```", 1)[0]
    return block.splitlines()


def _documented() -> dict[str, set[str]]:
    """package ("" = sova itself, "a/b" nested) -> the names the map gives under it."""
    out: dict[str, set[str]] = {"": set()}
    # the packages the entry at each depth is in ("manager/daemons/service" at depth 4)
    within: list[str] = []
    for line in _map_block():
        m = ENTRY.match(line)
        if m is None:
            continue
        depth = len(m.group(1)) // 2
        names = m.group(2).split(", ")
        del within[depth - 1 :]
        if len(within) < depth - 1:
            continue  # inside a package the map describes as a whole
        package = "/".join(within)
        out.setdefault(package, set()).update(names)
        if names[0].endswith("/"):
            within.append(names[0].rstrip("/"))
            out.setdefault("/".join(within), set())
    return out


def _tree(path: Path) -> set[str]:
    return {
        p.name + ("/" if p.is_dir() else "")
        for p in path.iterdir()
        # _version.py is written by the build (setuptools-scm), not kept in the tree
        if (p.suffix == ".py" and not p.name.startswith("_"))
        or (p.is_dir() and (p / "__init__.py").exists())
    }


def test_the_module_map_names_every_module_and_nothing_that_is_gone() -> None:
    doc = _documented()
    assert doc[""] == _tree(SRC), "src/sova/ (top level)"
    # A package the map lists module by module must list them all; one it describes as a
    # whole (lab/, orchestrator/, a driver's package) is not expanded.
    for package, names in doc.items():
        if package and names:
            assert names == _tree(SRC / package), f"src/sova/{package}/"


def _layer_modules() -> list[set[str]]:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    contracts = config["tool"]["importlinter"]["contracts"]
    layers = next(c for c in contracts if c["type"] == "layers")
    assert "ignore_imports" not in layers, "the layers have no written exceptions"
    return [
        {m.strip().removeprefix("sova.") for m in re.split(r"[|:]", layer)}
        for layer in layers["layers"]
    ]


def test_every_module_is_in_an_import_linter_layer() -> None:
    in_layers = set().union(*_layer_modules())
    top = {n.removesuffix("/").removesuffix(".py") for n in _tree(SRC)} | {"__main__"}
    # a package whose parts sit in different layers (manager: its decisions below the
    # records, its daemons among the worlds) is in the layers by those parts
    split = {m.split(".")[0] for m in in_layers if "." in m}
    for package in split:
        top.remove(package)
        top |= {f"{package}.{n.removesuffix('/')}" for n in _tree(SRC / package) if n.endswith("/")}
    assert top == in_layers


def test_the_documented_layers_are_the_enforced_ones() -> None:
    block = DOC.split("## Layers", 1)[1].split("```text\n", 1)[1].split("```", 1)[0]
    rows = [line.split("  ", 1)[0].strip() for line in block.splitlines() if line.strip()]
    documented = [{n.strip() for n in re.split(r"[|,]", row)} for row in rows]
    assert documented == _layer_modules()


def test_the_base_modules_are_forbidden_every_other_module() -> None:
    """A forbidden contract on the root package catches nothing (import-linter checks the
    modules named); so every other module is named, and a new one must join the list."""
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    contracts = config["tool"]["importlinter"]["contracts"]
    base = next(c for c in contracts if c["name"].startswith("the base modules"))
    sources = {m.removeprefix("sova.") for m in base["source_modules"]}
    forbidden = {m.removeprefix("sova.") for m in base["forbidden_modules"]}
    assert sources == _layer_modules()[-1]
    assert forbidden == set().union(*_layer_modules()) - sources
