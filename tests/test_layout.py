"""No folder under tests/ can stand in for a module the code imports.

pytest puts tests/ (and each test folder without ``__init__.py``) on ``sys.path``, so a folder
``tests/X`` turns ``import X`` into an empty namespace package wherever the real ``X`` is not
installed: ``pytest.importorskip("X")`` then succeeds and the test fails instead of skipping.
That is how ``tests/libvirt`` broke ``./test.sh`` on every machine without libvirt-python
(issue 24).
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"

# tests/openstack runs only in the OpenStack tier's own venvs (scripts/openstack-envs.sh),
# which install openstacksdk, so the real package is found there; in the main tier
# sova.orchestrator.openstack imports `openstack.exceptions`, which the folder does not
# have, so the ImportError it reports is the one it would report without the folder.
# Renaming it belongs to the OpenStack work (docs/openstack.md and the tier script name it).
ALLOWED = {"openstack"}

_IMPORTORSKIP = re.compile(r"importorskip\(\s*[\"']([A-Za-z_][\w.]*)[\"']")


def _top_level_imports(paths: list[Path]) -> set[str]:
    names: set[str] = set()
    for path in paths:
        text = path.read_text()
        for node in ast.walk(ast.parse(text, str(path))):
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
        names.update(m.split(".")[0] for m in _IMPORTORSKIP.findall(text))
    return names


# Scanned once for the module's three checks (the tree does not change during a run).
@functools.cache
def _code_imports() -> frozenset[str]:
    """Every top-level module the package imports, plus every module a test importorskips."""
    src = sorted((ROOT / "src" / "sova").rglob("*.py"))
    names = _top_level_imports(src)
    for path in TESTS.rglob("*.py"):
        names.update(m.split(".")[0] for m in _IMPORTORSKIP.findall(path.read_text()))
    return frozenset(names - {"sova", "__future__"} - set(sys.builtin_module_names))


def _test_folders() -> dict[str, Path]:
    return {
        p.name: p
        for p in TESTS.rglob("*")
        if p.is_dir() and p.name != "__pycache__" and not p.name.startswith(".")
    }


def test_the_scan_sees_the_optional_imports() -> None:
    # The guard is only as good as its list: the optional bindings must be in it.
    assert {"libvirt", "libvirt_qemu", "pyroute2", "openstack"} <= _code_imports()


def test_no_test_folder_is_named_like_a_module_the_code_imports() -> None:
    folders = _test_folders()
    clashes = {
        name: str(folders[name].relative_to(ROOT))
        for name in _code_imports() & folders.keys()
        if name not in ALLOWED
    }
    assert clashes == {}, f"rename these test folders, they shadow real modules: {clashes}"


def test_no_imported_module_resolves_to_a_test_folder() -> None:
    # With this process's sys.path (pytest's): what would `import NAME` load?
    shadowed = {}
    for name in sorted(_code_imports() - ALLOWED):
        spec = importlib.util.find_spec(name)
        if spec is None or spec.submodule_search_locations is None:
            continue
        inside = [loc for loc in spec.submodule_search_locations if Path(loc).is_relative_to(TESTS)]
        if inside:
            shadowed[name] = inside
    assert shadowed == {}, f"these imports would load a test folder: {shadowed}"
