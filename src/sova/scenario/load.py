"""Loading a scenario file: its YAML built with a bounded nesting depth, ``profile: NAME``
and trace paths resolved beside the file (never outside its folder), a sweep expanded into
one scenario per value, each validated against the schema."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from sova.scenario.files import _decode, _read_bytes
from sova.scenario.schema import (
    Scenario,
    ScenarioError,
    SweepSpec,
    _format_errors,
    parse_scenario,
)

MAX_NESTING = 64  # mapping/list depth of a scenario (the shipped ones use <= 6)


def _read(path: Path, what: str = "scenario") -> str:
    try:
        return _decode(_read_bytes(path, what), path, what)
    except ValueError as exc:
        raise ScenarioError(f"{path}: {exc}") from None


def _depth_error(data: Any, source: str) -> str | None:
    """Where ``data`` nests deeper than MAX_NESTING (walked without recursion), or None."""
    stack: list[tuple[Any, str, int]] = [(data, "", 0)]
    while stack:
        node, where, depth = stack.pop()
        if depth > MAX_NESTING:
            return f"{source}: {where or 'the document'}: nested deeper than {MAX_NESTING} levels"
        if isinstance(node, dict):
            stack.extend(
                (v, f"{where}.{k}" if where else str(k), depth + 1) for k, v in node.items()
            )
        elif isinstance(node, list):
            stack.extend((v, f"{where}[{i}]", depth + 1) for i, v in enumerate(node))
    return None


# libyaml's parser (PyYAML's C extension) where it was built: the same documents, a few
# times faster, and a 3,000-VM scenario's parse peaks ~20 MiB lower than the pure-Python
# reader, scanner and composer. The constructor is the safe one either way.
SAFE_LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


_TAG = "tag:yaml.org,2002:"
# scalar tags whose safe constructors read only the node's text (not collections, merge keys)
_SCALAR_TAGS = frozenset(
    _TAG + t for t in ("null", "bool", "int", "float", "str", "binary", "timestamp")
)


# scalars whose values are immutable, so one object may stand for every copy of the text
_SHARED_TAGS = frozenset(_TAG + t for t in ("null", "bool", "int", "float", "str"))

_NOT_BUILT = object()


class _NotPlain(Exception):
    """The document uses YAML the event builder leaves to PyYAML's whole-document loader."""


def _events_to_data(text: str) -> Any:
    """The single document of ``text`` as ``yaml.safe_load`` would build it (:func:`_build`)."""
    return _build(text).result


def _build(text: str) -> _Builder:
    """The single document of ``text`` built from the parser's events, as ``yaml.safe_load``
    would build it, without composing the whole node tree first.

    PyYAML composes every node of a document (a Python object with two position marks per
    scalar) before it constructs anything: a 3,000-VM scenario's ~80,000 nodes took ~40 MiB
    for an instant, and the pymalloc arenas they left half-used stayed with the process for
    the rest of the run. Here each event becomes its value at once (scalars through the
    safe constructor's own functions and the resolver's implicit tags; anchors and aliases
    share the object as PyYAML's do). Anything else -- merge keys, explicit collection tags
    (``!!set``, ``!!omap``), several documents, an error, nesting past MAX_NESTING -- raises
    :class:`_NotPlain` or the parser's error, and :func:`_yaml` loads the text with PyYAML's
    loader instead, so the result and every message stay PyYAML's. PyYAML has no event-
    driven constructor of its own (``yaml.load`` always composes), hence this builder.
    """
    loader: Any = SAFE_LOADER(text)  # types-PyYAML leaves the parser's methods untyped
    try:
        loader.get_event()  # StreamStart
        b = _Builder(loader)
        if loader.check_event(yaml.StreamEndEvent):
            return b  # no document: None
        loader.get_event()  # DocumentStart
        get_event, scalar, anchors = loader.get_event, b.scalar, b.anchors
        # dispatched on the event's exact class (libyaml's events are these classes, never
        # subclasses), the common scalar first: ~300,000 events in a 20,000-VM scenario
        scalar_event, alias_event = yaml.ScalarEvent, yaml.AliasEvent
        opens = (yaml.SequenceStartEvent, yaml.MappingStartEvent)
        ends = (yaml.SequenceEndEvent, yaml.MappingEndEvent)
        while True:
            event = get_event()
            kind = event.__class__
            if kind is alias_event:
                if event.anchor not in anchors:
                    raise _NotPlain("an undefined alias")
                b.aliased = True
                b.attach(anchors[event.anchor])
                continue
            anchor = getattr(event, "anchor", None)
            if anchor is not None and anchor in anchors:
                raise _NotPlain("a duplicate anchor")
            if kind is scalar_event:
                scalar(event, anchor)
            elif kind in opens:
                b.open(event, anchor)
            elif kind in ends:
                b.stack.pop()
            elif kind is yaml.DocumentEndEvent:
                break
            else:
                raise _NotPlain(f"an unexpected {kind.__name__}")
        if not loader.check_event(yaml.StreamEndEvent):
            raise _NotPlain("more than one document")
        return b
    finally:
        loader.dispose()


class _Builder:
    """The document :func:`_events_to_data` is building: the values anchored so far, the
    open collections (the list or dict, the pending key of a dict, whether it has one)."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader
        self.anchors: dict[str, Any] = {}
        self.stack: list[list[Any]] = []
        self.result: Any = None
        # (tag, text, implicit) -> the value of an immutable scalar: a scenario repeats its
        # keys and many of its values, and the resolver's regular expressions and the
        # constructor cost more than a lookup
        self.seen: dict[tuple[Any, str, Any], Any] = {}
        self.aliased = False  # an alias shares a collection: nesting is then unbounded here

    def attach(self, value: Any) -> None:
        stack = self.stack
        if not stack:
            self.result = value
            return
        top = stack[-1]
        if isinstance(top[0], list):
            top[0].append(value)
        elif top[2]:
            hash(top[1])  # an unhashable key: PyYAML's error, through the fallback
            top[0][top[1]] = value
            top[2] = False
        else:
            if isinstance(value, list | dict):
                raise _NotPlain("a collection as a mapping key")
            top[1], top[2] = value, True

    def scalar(self, event: yaml.ScalarEvent, anchor: str | None) -> None:
        """The scalar's value through the safe constructor, under its resolved tag."""
        key = (event.tag, event.value, event.implicit)
        value = self.seen.get(key, _NOT_BUILT)
        if value is _NOT_BUILT:
            loader = self.loader
            tag = event.tag
            if tag is None or tag == "!":
                tag = loader.resolve(yaml.ScalarNode, event.value, event.implicit)
            if tag not in _SCALAR_TAGS:
                raise _NotPlain(f"a scalar tagged {tag}")
            node = yaml.ScalarNode(tag, event.value, None, None, event.style)
            value = loader.yaml_constructors[tag](loader, node)
            if tag in _SHARED_TAGS:
                self.seen[key] = value
        if anchor is not None:
            self.anchors[anchor] = value
        self.attach(value)

    def open(
        self, event: yaml.SequenceStartEvent | yaml.MappingStartEvent, anchor: str | None
    ) -> None:
        """A new list or dict, attached now and filled by the events up to its end."""
        kind = yaml.SequenceNode if isinstance(event, yaml.SequenceStartEvent) else yaml.MappingNode
        tag = event.tag
        if tag is None or tag == "!":
            tag = self.loader.resolve(kind, None, event.implicit)
        want = _TAG + ("seq" if kind is yaml.SequenceNode else "map")
        if tag != want or len(self.stack) >= MAX_NESTING:
            raise _NotPlain(f"a collection tagged {tag} or nested deep")
        coll: list[Any] | dict[Any, Any] = [] if kind is yaml.SequenceNode else {}
        if anchor is not None:
            self.anchors[anchor] = coll
        self.attach(coll)
        self.stack.append([coll, None, False])


def _yaml(text: str, source: str) -> Any:
    try:
        built: _Builder | None = _build(text)
    except Exception:  # PyYAML's loader below gives the result, or its own error
        built = None
    data = _NOT_BUILT if built is None else built.result
    try:
        if data is _NOT_BUILT:
            data = yaml.load(text, Loader=SAFE_LOADER)
    except yaml.YAMLError as exc:
        raise ScenarioError(f"{source}: not valid YAML: {exc}") from None
    except RecursionError:
        raise ScenarioError(
            f"{source}: not a scenario: nested deeper than the YAML parser can follow "
            f"(a scenario nests at most {MAX_NESTING} levels)"
        ) from None
    # the builder opens no collection past MAX_NESTING, so only an alias (which may share a
    # collection deeper down) or PyYAML's loader can give a document the walk would refuse
    if built is None or built.aliased:
        error = _depth_error(data, source)
        if error is not None:
            raise ScenarioError(error)
    return data


_PROFILE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")


def _resolve_profile(data: Any, path: Path) -> Any:
    """``profile: NAME`` refers to ``profiles/NAME.yaml`` beside the scenario (or one up).

    One hardware profile per paper, calibrated once and shared by all of that paper's
    experiments (docs/design.md#profiles), so scenarios name it instead of copying its numbers.
    A name is a file name, never a path: ``profile:`` cannot reach outside ``profiles/``.
    """
    if not isinstance(data, dict) or not isinstance(data.get("profile"), str):
        return data
    name = data["profile"]
    if not _PROFILE_NAME.match(name) or ".." in name:
        raise ScenarioError(
            f"{path}: profile: a profile name is a file name in profiles/ (letters, digits, "
            f"'.', '_', '-'), not a path (got {name!r})"
        )
    for folder in (path.parent / "profiles", path.parent.parent / "profiles"):
        candidate = folder / f"{name}.yaml"
        if candidate.is_file():
            loaded = _yaml(_read(candidate, "profile"), str(candidate))
            if not isinstance(loaded, dict):
                raise ScenarioError(f"{candidate}: a profile is a YAML mapping")
            return {**data, "profile": {"name": name, **loaded}}
    raise ScenarioError(
        f"{path}: profile: no profiles/{name}.yaml beside the scenario (got {name!r})"
    )


def _resolve_traces(data: Any, path: Path) -> Any:
    """Trace CSV paths are relative to the scenario file, wherever sova is run from.

    A trace must lie in the scenario's folder or below it: a scenario someone sent must
    not make ``validate`` read (and print the first line of) any file on the machine.
    Checked on the path as written (``..`` and absolute paths); links the folder's owner
    placed in it are theirs to place.
    """
    if not isinstance(data, dict):
        return data
    workloads: list[tuple[str, Any]] = []
    phases, groups = data.get("workload"), data.get("vm_groups")
    # Anything but lists is left for validation to report with its field path.
    for i, phase in enumerate(phases if isinstance(phases, list) else []):
        if isinstance(phase, dict) and isinstance(phase.get("vms"), dict):
            workloads.extend((f"workload[{i}].vms.{vm}", w) for vm, w in phase["vms"].items())
    for i, group in enumerate(groups if isinstance(groups, list) else []):
        if isinstance(group, dict):
            workloads.append((f"vm_groups[{i}].workload", group.get("workload")))
    base = os.path.normpath(os.path.abspath(path.parent))
    for where, w in workloads:
        if isinstance(w, dict) and "trace" in w and not isinstance(w["trace"], str | None):
            # ``!!binary`` and friends: a path that is not text would be coerced to one
            # after this check, unresolved (an absolute path anywhere on the machine).
            raise ScenarioError(
                f"{path}: {where}.trace: must be a relative path written as text "
                f"(got a {type(w['trace']).__name__})"
            )
        if isinstance(w, dict) and isinstance(w.get("trace"), str):
            full = os.path.normpath(os.path.join(base, w["trace"]))
            if os.path.commonpath([base, full]) != base:
                raise ScenarioError(
                    f"{path}: {where}.trace: must be a file in the scenario's folder "
                    f"{base!r} or below it (got {w['trace']!r})"
                )
            w["trace"] = full
    return data


def load_sweep(path: str | Path) -> list[Scenario]:
    """One scenario per sweep value (a single one when the file has no ``sweep``).

    ``${variable}`` is substituted in the text before parsing, so any field can depend on
    the swept value (the number of VMs, a request rate, a guarantee).
    """
    p = Path(path)
    text = _read(p)
    data = _resolve_traces(_resolve_profile(_yaml(text, str(p)), p), p)
    if not isinstance(data, dict) or "sweep" not in data:
        return [parse_scenario(data, str(p))]
    try:
        sweep = SweepSpec.model_validate(data["sweep"])
    except ValidationError as err:
        raise ScenarioError(_format_errors(err, str(p)).replace("  ", "  sweep.", 1)) from None
    out = []
    for i, value in enumerate(sweep.values):
        subs = value if isinstance(value, dict) else {sweep.variable: value}
        if sweep.variable not in subs:
            raise ScenarioError(f"{p}: sweep.values[{i}]: no entry for {sweep.variable!r}")
        point_text = text
        for key, sub in subs.items():
            point_text = point_text.replace("${" + key + "}", str(sub))
        x = subs[sweep.variable]
        where = f"{p} ({sweep.variable}={x})"
        point = _resolve_traces(_resolve_profile(_yaml(point_text, where), p), p)
        if isinstance(point, dict):
            point["sweep_value"] = x
        out.append(parse_scenario(point, f"{p} ({sweep.variable}={x})"))
    return out


def load_scenario(path: str | Path) -> Scenario:
    """The scenario in ``path``; for a sweep, its first point."""
    return load_sweep(path)[0]
