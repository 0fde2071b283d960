"""The scenarios shipped with Sova, found by name from any directory.

The repository keeps them in the top-level ``scenarios/`` (documentation and other tools
point there); the wheel carries a copy as ``sova/_scenarios`` (``setup.py`` copies the tree
at build time), so an installed ``sova simulate sova-fig5`` or ``sova demo`` does not depend
on the working directory. In a source checkout (editable install) the tree itself is used.
"""

from __future__ import annotations

import importlib.resources
from pathlib import Path

import yaml

# Subfolders holding inputs of scenarios rather than scenarios.
_NOT_SCENARIOS = {"profiles", "traces"}


def shipped_root() -> Path | None:
    """The folder of shipped scenarios, or None if this install carries none."""
    packaged = importlib.resources.files("sova") / "_scenarios"
    if packaged.is_dir():
        return Path(str(packaged))
    checkout = Path(__file__).resolve().parents[2] / "scenarios"
    return checkout if checkout.is_dir() else None


def resolve_scenario(arg: Path) -> Path:
    """``arg`` if it names an existing file, else the shipped scenario of that name.

    Accepts ``sova-fig5``, ``sova-fig5.yaml``, ``testbed/dba-vm`` and the repository-relative
    ``scenarios/sova-fig5.yaml``. Returns ``arg`` unchanged when nothing matches, so the
    loader reports the path the user gave.
    """
    if arg.exists():
        return arg
    root = shipped_root()
    if root is None or arg.is_absolute():
        return arg
    parts = arg.parts[1:] if arg.parts[:1] == ("scenarios",) else arg.parts
    if not parts:
        return arg
    rel = Path(*parts)
    for candidate in (rel, rel.with_name(rel.name + ".yaml")):
        path = root / candidate
        if path.is_file() and path.suffix == ".yaml":
            return path
    return arg


def list_shipped() -> list[tuple[str, str]]:
    """(name to pass to ``sova simulate``/``sova testbed``, first sentence of its description)."""
    root = shipped_root()
    if root is None:
        return []
    found: list[tuple[str, str]] = []
    for path in sorted(root.rglob("*.yaml")):
        rel = path.relative_to(root)
        if rel.parts[0] in _NOT_SCENARIOS:
            continue
        try:
            data = yaml.safe_load(path.read_text())
        except (OSError, yaml.YAMLError):
            data = None
        text = str(data.get("description", "")) if isinstance(data, dict) else ""
        first = text.strip().split(". ")[0].replace("\n", " ")
        found.append((rel.with_suffix("").as_posix(), first))
    return found
