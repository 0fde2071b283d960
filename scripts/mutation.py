"""Mutation testing of one module against the tests that exercise it, one forked child per mutant.

    python scripts/mutation.py MODULE -- PYTEST-ARGS...      (run with the interpreter the tests need)

e.g. ``.venv/bin/python scripts/mutation.py sova.orchestrator.openstack -- tests/openstack/test_seam.py``.
Prints each surviving mutant (line, what changed) and the kill rate; exit 1 when one survives.

Why not mutmut: mutmut 2 starts a fresh pytest per mutant, which on the project's shared 2-core
machine costs ~30 s of imports each (400 mutants of orchestrator/openstack.py: over three hours),
and it cannot run the Watcher strategy's tests, which need the watcher environment's interpreter
and not the one mutmut lives in. Here the parent imports pytest and the heavy dependencies once;
each child (``os.fork``) puts one mutant of MODULE into ``sys.modules`` before pytest imports the
tests, so a mutant costs about the tests' own run time, and any interpreter with pytest will do.

The mutations are mutmut's usual operators on the module's AST: comparison and boolean operators
swapped, ``not`` dropped, arithmetic operators swapped, numbers changed by one, booleans flipped,
string constants (not docstrings) changed, ``return X`` made ``return None``, a call's keyword
argument dropped. A child that outlives ``--timeout`` counts as killed (a mutant that hangs the
tests is caught by them).
"""

from __future__ import annotations

import argparse
import ast
import copy
import importlib.util
import os
import signal
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass

_COMPARE = {
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.Lt: ast.LtE,
    ast.LtE: ast.Lt,
    ast.Gt: ast.GtE,
    ast.GtE: ast.Gt,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
}
_BINOP = {
    ast.Add: ast.Sub,
    ast.Sub: ast.Add,
    ast.Mult: ast.Div,
    ast.Div: ast.Mult,
    ast.FloorDiv: ast.Mult,
    ast.Mod: ast.Mult,
}


@dataclass(frozen=True)
class Mutant:
    index: int  # the site's position in the walk, so a mutant can be rebuilt in a child
    line: int
    what: str
    message: bool = False  # text of a message (f-string part, raised or logged text)


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                out.add(id(body[0].value))
    return out


def _messages(tree: ast.AST) -> set[int]:
    """String constants that are only text for people: parts of f-strings, anything inside a
    ``raise`` statement, and arguments of ``.append(...)`` (the notes lists)."""
    out: set[int] = set()
    for node in ast.walk(tree):
        inside: list[ast.AST] = []
        if isinstance(node, ast.JoinedStr | ast.Raise):
            inside = [node]
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("append", "_progress")
        ):
            inside = list(node.args)
        for sub in inside:
            out.update(id(n) for n in ast.walk(sub) if isinstance(n, ast.Constant))
    return out


def _sites(tree: ast.AST) -> Iterator[tuple[ast.AST, str, int]]:
    """(node, kind, arg) for every mutation of ``tree``, in a fixed order."""
    docs = _docstrings(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            for i, op in enumerate(node.ops):
                if type(op) in _COMPARE:
                    yield node, "compare", i
        elif isinstance(node, ast.BoolOp):
            yield node, "boolop", 0
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            yield node, "not", 0
        elif isinstance(node, ast.BinOp) and type(node.op) in _BINOP:
            yield node, "binop", 0
        elif isinstance(node, ast.Constant) and id(node) not in docs:
            if isinstance(node.value, bool):
                yield node, "bool", 0
            elif isinstance(node.value, int | float):
                yield node, "number", 0
            elif isinstance(node.value, str) and node.value:
                yield node, "string", 0
        elif isinstance(node, ast.Return) and node.value is not None:
            if not (isinstance(node.value, ast.Constant) and node.value.value is None):
                yield node, "return", 0
        elif isinstance(node, ast.Call):
            for i, _ in enumerate(node.keywords):
                yield node, "keyword", i


def _apply(node: ast.AST, kind: str, arg: int) -> str:
    """Mutate ``node`` in place; say what changed."""
    if kind == "compare":
        assert isinstance(node, ast.Compare)
        old = node.ops[arg]
        node.ops[arg] = _COMPARE[type(old)]()
        return f"{type(old).__name__} -> {type(node.ops[arg]).__name__}"
    if kind == "boolop":
        assert isinstance(node, ast.BoolOp)
        node.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
        return f"boolean operator -> {type(node.op).__name__}"
    if kind == "binop":
        assert isinstance(node, ast.BinOp)
        old_op = node.op
        node.op = _BINOP[type(old_op)]()
        return f"{type(old_op).__name__} -> {type(node.op).__name__}"
    if kind in ("bool", "number", "string"):
        assert isinstance(node, ast.Constant)
        old_value = node.value
        if kind == "bool":
            node.value = not old_value
        elif kind == "number":
            assert isinstance(old_value, int | float)
            node.value = old_value + 1
        else:
            node.value = f"XX{old_value!s}XX"
        return f"{old_value!r} -> {node.value!r}"
    if kind == "return":
        assert isinstance(node, ast.Return)
        node.value = ast.Constant(None)
        return "return value -> None"
    if kind == "keyword":
        assert isinstance(node, ast.Call)
        kw = node.keywords.pop(arg)
        return f"keyword {kw.arg or '**'} dropped"
    raise AssertionError(kind)  # pragma: no cover


def _not(tree: ast.AST, target: ast.UnaryOp) -> None:
    """``not x`` -> ``x``: the node is replaced in its parent."""
    for parent in ast.walk(tree):
        for field, value in ast.iter_fields(parent):
            if value is target:
                setattr(parent, field, target.operand)
                return
            if isinstance(value, list):
                for i, item in enumerate(value):
                    if item is target:
                        value[i] = target.operand
                        return


def mutants(source: str) -> list[Mutant]:
    tree = ast.parse(source)
    texts = _messages(tree)
    out = []
    for index, (node, kind, arg) in enumerate(_sites(tree)):
        what = "not dropped" if kind == "not" else _apply(copy.deepcopy(node), kind, arg)
        message = kind == "string" and id(node) in texts
        out.append(Mutant(index, getattr(node, "lineno", 0), f"{kind}: {what}", message))
    return out


def mutated(source: str, index: int) -> ast.Module:
    tree = ast.parse(source)
    node, kind, arg = list(_sites(tree))[index]
    if kind == "not":
        assert isinstance(node, ast.UnaryOp)
        _not(tree, node)
    else:
        _apply(node, kind, arg)
    return ast.fix_missing_locations(tree)


def _child(module: str, path: str, source: str, index: int, pytest_args: list[str]) -> int:
    import types

    import pytest

    tree = mutated(source, index) if index >= 0 else ast.parse(source)  # -1: the module as is
    mod = types.ModuleType(module)
    mod.__file__ = path
    mod.__package__ = module.rpartition(".")[0]
    sys.modules[module] = mod
    exec(compile(tree, path, "exec"), mod.__dict__)
    parent, _, name = module.rpartition(".")
    if parent in sys.modules:
        setattr(sys.modules[parent], name, mod)
    return int(pytest.main([*pytest_args, "-x", "-q", "-p", "no:cacheprovider", "--no-header"]))


def _start(module: str, path: str, source: str, index: int, args: list[str]) -> int:
    pid = os.fork()
    if pid == 0:  # the child: its output would drown the report
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        try:
            code = _child(module, path, source, index, args)
        except BaseException:
            code = 1  # a mutant that cannot even be imported is killed
        os._exit(code)
    return pid


def _outcome(status: int) -> str:
    code = os.waitstatus_to_exitcode(status)
    # pytest: 0 all passed, 1 a test failed; 2-4 interrupted, internal or usage error
    return "survived" if code == 0 else ("error" if code in (2, 3, 4) else "killed")


def _run_all(
    module: str,
    path: str,
    source: str,
    indexes: list[int],
    args: list[str],
    timeout: float,
    jobs: int,
) -> Iterator[tuple[int, str]]:
    """(index, outcome) per mutant, ``jobs`` children at a time."""
    todo = list(indexes)
    running: dict[int, tuple[int, float]] = {}  # pid -> (index, deadline)
    while todo or running:
        while todo and len(running) < jobs:
            index = todo.pop(0)
            running[_start(module, path, source, index, args)] = (index, time.monotonic() + timeout)
        for pid, (index, deadline) in list(running.items()):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                del running[pid]
                yield index, _outcome(status)
            elif time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                del running[pid]
                yield index, "timeout"
        time.sleep(0.02)


def main() -> int:
    argv = sys.argv[1:]
    split = argv.index("--") if "--" in argv else len(argv)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("module")
    ap.add_argument("--preload", action="append", default=[], help="import once in the parent")
    ap.add_argument("--timeout", type=float, default=120.0)
    ap.add_argument("--only", type=int, nargs="*", help="mutant indexes to run")
    ap.add_argument("--jobs", type=int, default=1, help="children at a time")
    ap.add_argument(
        "--skip-messages", action="store_true", help="leave the wording of messages alone"
    )
    ap.add_argument("--sample", type=int, help="run this many mutants, drawn at random")
    ap.add_argument("--seed", type=int, default=0)
    opts = ap.parse_args(argv[:split])
    pytest_args = argv[split + 1 :]
    spec = importlib.util.find_spec(opts.module)
    if spec is None or spec.origin is None:
        print(f"module = {opts.module!r}: not importable", file=sys.stderr)
        return 2
    path = spec.origin
    with open(path, encoding="utf-8") as f:
        source = f.read()
    import pytest  # noqa: F401 - imported once, shared by every child

    for name in opts.preload:
        __import__(name)
    if opts.module in sys.modules:
        print(
            f"--preload imported {opts.module} itself: the children would test it", file=sys.stderr
        )
        return 2
    # The unmutated module must pass, or every mutant would look killed.
    [(_, base)] = _run_all(opts.module, path, source, [-1], pytest_args, opts.timeout * 3, 1)
    if base != "survived":
        print(f"the tests do not pass on {opts.module} unmutated ({base})", file=sys.stderr)
        return 2
    all_mutants = mutants(source)
    chosen = [m for m in all_mutants if opts.only is None or m.index in opts.only]
    if opts.skip_messages:
        chosen = [m for m in chosen if not m.message]
    if opts.sample is not None and opts.sample < len(chosen):
        import random

        chosen = sorted(random.Random(opts.seed).sample(chosen, opts.sample), key=lambda m: m.index)
    print(f"{opts.module}: {len(chosen)} mutants; tests: {' '.join(pytest_args)}", flush=True)
    outcomes: dict[int, str] = {}
    t0 = time.monotonic()
    by_index = {m.index: m for m in chosen}
    runs = _run_all(opts.module, path, source, list(by_index), pytest_args, opts.timeout, opts.jobs)
    for index, outcome in runs:
        outcomes[index] = outcome
        if len(outcomes) % 20 == 0:
            done = list(outcomes.values())
            print(
                f"  ... {len(done)}/{len(chosen)} run, {done.count('survived')} survived, "
                f"{time.monotonic() - t0:.0f} s",
                flush=True,
            )
        m = by_index[index]
        if outcome in ("survived", "error"):
            tag = " (message text)" if m.message else ""
            print(
                f"  {outcomes[m.index].upper()} #{m.index} line {m.line}: {m.what}{tag}", flush=True
            )
    for label, group in (
        ("all mutants", chosen),
        ("without message text", [m for m in chosen if not m.message]),
    ):
        got = [outcomes[m.index] for m in group]
        killed = sum(1 for o in got if o in ("killed", "timeout"))
        rate = killed / len(got) if got else 1.0
        print(
            f"{opts.module}, {label}: {killed}/{len(got)} killed ({rate:.1%}); "
            f"{got.count('survived')} survived, {got.count('timeout')} by timeout, "
            f"{got.count('error')} test errors",
            flush=True,
        )
    print(f"{time.monotonic() - t0:.0f} s", flush=True)
    return 0 if "survived" not in outcomes.values() else 1


if __name__ == "__main__":
    sys.exit(main())
