"""The lazy mapping the per-host views of a simulated period share (sova.lazymap)."""

from __future__ import annotations

import pickle
from collections.abc import Callable
from typing import Any

import pytest

from sova.lazymap import LazyMapping


class Counted(LazyMapping[str, int]):
    """Builds {"a": 1, "b": 2} and counts how often it had to."""

    __slots__ = ("builds",)

    def __init__(self) -> None:
        self._built = None
        self.builds = 0

    def _build(self) -> dict[str, int]:
        self.builds += 1
        return {"a": 1, "b": 2}


class Sized(Counted):
    """Knows its size without building (as HostFactors, HostLoads and HostVMs do)."""

    __slots__ = ()

    def __len__(self) -> int:
        return 2


READS: list[tuple[str, Callable[[Counted], Any], Any]] = [
    ("getitem", lambda m: m["b"], 2),
    ("get missing", lambda m: m.get("z"), None),
    ("contains", lambda m: "a" in m, True),
    ("iter", lambda m: list(m), ["a", "b"]),
    ("items", lambda m: sorted(m.items()), [("a", 1), ("b", 2)]),
    ("len", len, 2),
    ("equals a dict", lambda m: m == {"a": 1, "b": 2}, True),
    ("differs from a dict", lambda m: m != {"a": 1}, True),
    ("repr", repr, "{'a': 1, 'b': 2}"),
    # pickles as the plain dict it stands for: a finished run travels as plain data
    ("pickle", lambda m: pickle.loads(pickle.dumps(m)), {"a": 1, "b": 2}),
    ("pickled type", lambda m: type(pickle.loads(pickle.dumps(m))), dict),
]


@pytest.mark.parametrize(("what", "read", "want"), READS, ids=[r[0] for r in READS])
def test_every_read_builds_once_and_answers_as_the_dict(
    what: str, read: Callable[[Counted], Any], want: Any
) -> None:
    m = Counted()
    assert m.builds == 0  # nothing built at construction
    assert read(m) == want
    assert read(m) == want  # the second read uses the cache
    assert m.builds == 1


def test_a_known_size_is_answered_without_building() -> None:
    m = Sized()
    assert len(m) == 2
    assert m.builds == 0
    assert m["a"] == 1 and m.builds == 1


def test_comparison_with_a_non_mapping_is_not_equal_and_it_is_unhashable() -> None:
    m = Counted()
    assert m != [("a", 1), ("b", 2)]
    with pytest.raises(TypeError):
        hash(m)
