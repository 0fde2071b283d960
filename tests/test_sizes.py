"""The size limits of issue 40, so they cannot come back: no module of src/sova over 900
lines and no class over 600 at all; over 700 / 400 only with a reason at the module's top,
and at most three modules with one. (The 80 lines per function are
tests/test_function_sizes.py's.)

A reason is a paragraph of the module's docstring that starts with ``Size:`` and says why
the module (or its large class) is one piece; :func:`_size_reason` finds it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "sova"

MAX_MODULE_LINES = 900
MAX_CLASS_LINES = 600
SOFT_MODULE_LINES = 700
SOFT_CLASS_LINES = 400
MAX_WITH_REASON = 3  # modules over a soft limit, each with its reason


def _class_spans(source: str) -> list[tuple[str, int]]:
    """(qualified name, lines from its first decorator to its last line) of every class,
    nested ones included."""
    out: list[tuple[str, int]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            name = prefix
            if isinstance(child, ast.ClassDef):
                name = f"{prefix}{child.name}"
                first = min([d.lineno for d in child.decorator_list] + [child.lineno])
                assert child.end_lineno is not None
                out.append((name, child.end_lineno - first + 1))
                name += "."
            elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                name = f"{prefix}{child.name}."
            visit(child, name)

    visit(ast.parse(source), "")
    return out


def _size_reason(source: str) -> str | None:
    """The module docstring's paragraph that starts with ``Size:`` (its text after the
    mark), or None: no docstring, no such paragraph, or one with nothing after the mark."""
    doc = ast.get_docstring(ast.parse(source))
    for paragraph in (doc or "").split("\n\n"):
        text = " ".join(paragraph.split())
        if text.startswith("Size:") and text.removeprefix("Size:").strip():
            return text.removeprefix("Size:").strip()
    return None


def _over_soft_limits(path: str, text: str) -> list[str]:
    """What of the module at ``path`` is over a soft limit (empty: nothing)."""
    over = []
    if (n := len(text.splitlines())) > SOFT_MODULE_LINES:
        over.append(f"{path}: {n} lines")
    over += [f"{path}: {name} {n} lines" for name, n in _class_spans(text) if n > SOFT_CLASS_LINES]
    return over


def _modules() -> list[tuple[str, str]]:
    return [
        (str(p.relative_to(SRC.parent)), p.read_text(encoding="utf-8"))
        for p in sorted(SRC.rglob("*.py"))
    ]


def test_the_measure_counts_decorators_bodies_and_nested_classes() -> None:
    source = (
        "import dataclasses\n"  # 1
        "\n"  # 2
        "@dataclasses.dataclass\n"  # 3: the outer class starts at its decorator
        "class Outer:\n"  # 4
        "    x: int = 0\n"  # 5
        "\n"  # 6
        "    class Inner:\n"  # 7: Inner is lines 7-8, 2 lines
        "        y = 1\n"  # 8
        "\n"  # 9
        "    def f(self) -> None:\n"  # 10
        "        class Local:\n"  # 11: one line
        "            pass\n"  # 12: two lines
        "        return None\n"  # 13: Outer is lines 3-13, 11 lines
    )
    assert _class_spans(source) == [("Outer", 11), ("Outer.Inner", 2), ("Outer.f.Local", 2)]


def test_no_module_is_over_the_hard_limit() -> None:
    modules = _modules()
    assert len(modules) > 100, "the walk found src/sova's modules"
    over = [
        f"{path}: {n} lines"
        for path, text in modules
        if (n := len(text.splitlines())) > MAX_MODULE_LINES
    ]
    assert over == [], f"modules over {MAX_MODULE_LINES} lines (split them): {over}"


def test_no_class_is_over_the_hard_limit() -> None:
    over = [
        f"{path}: {name} {n} lines"
        for path, text in _modules()
        for name, n in _class_spans(text)
        if n > MAX_CLASS_LINES
    ]
    assert over == [], f"classes over {MAX_CLASS_LINES} lines (split them): {over}"


@pytest.mark.parametrize(
    ("docstring", "reason"),
    [
        (
            '"""A module.\n\nSize: one algorithm read top to bottom."""',
            "one algorithm read top to bottom.",
        ),
        # the mark opens a paragraph, wrapped over lines
        ('"""A module.\n\nSize: one piece\nbecause X."""', "one piece because X."),
        # in the middle of a paragraph it is prose, not the mark
        ('"""A module whose Size: is not a reason."""', None),
        ('"""A module.\n\nSize:"""', None),  # a mark with no reason
        ('"""A module without one."""', None),
        ("x = 1  # no docstring at all", None),
    ],
)
def test_a_reason_is_a_docstring_paragraph_starting_with_size(
    docstring: str, reason: str | None
) -> None:
    assert _size_reason(docstring + "\n") == reason


def test_the_soft_limits_count_the_module_and_each_class() -> None:
    # 701 lines, one class of 402 (its line and 401 body lines): both over; a module of
    # 700 lines with a class of 400 is at the limits, not over them
    big = "class Big:\n" + "    x = 1\n" * 401 + "\n" * 299
    assert len(big.splitlines()) == 701
    assert _over_soft_limits("m.py", big) == ["m.py: 701 lines", "m.py: Big 402 lines"]
    at = "class Big:\n" + "    x = 1\n" * 399 + "\n" * 300
    assert _over_soft_limits("m.py", at) == []


def test_over_the_soft_limits_only_with_a_reason_and_at_most_three() -> None:
    over = {}
    unexplained = []
    for path, text in _modules():
        found = _over_soft_limits(path, text)
        if found:
            over[path] = found
            if _size_reason(text) is None:
                unexplained += found
    assert unexplained == [], (
        f"over {SOFT_MODULE_LINES} lines per module or {SOFT_CLASS_LINES} per class without a "
        f"'Size:' paragraph in the module's docstring saying why it is one piece: {unexplained}"
    )
    assert len(over) <= MAX_WITH_REASON, (
        f"at most {MAX_WITH_REASON} modules over the soft limits, even with a reason: "
        f"{sorted(over)}"
    )
