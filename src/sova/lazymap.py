"""A read-only mapping computed on its first read.

A simulated world of thousands of hosts hands every agent its per-VM views each period
(factors, load shares, operation tables, VF reasons, inventories), and reads only those
of the few hosts where something happens. Each view therefore keeps the period's inputs
and builds its dict when first read. The base class holds what they all share: the
cache, the mapping protocol over it, equality and pickling as the plain dict it stands
for (a finished run travels between processes as plain data).
"""

from __future__ import annotations

from collections.abc import ItemsView, Iterator, KeysView, Mapping, ValuesView
from typing import Any, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class LazyMapping(Mapping[K, V]):
    """A mapping whose items :meth:`_build` computes once, on the first read that needs
    them. Subclasses keep their inputs in their own slots, set ``self._built = None`` in
    their ``__init__`` and may override ``__len__`` where the size is known without
    building.

    There is no ``__init__`` here to call: a world makes ~4 of these per host and period
    (~1.4 M in an hour of 1,000 hosts), and a ``super().__init__()`` costs ~130 ns each."""

    __slots__ = ("_built",)
    _built: dict[K, V] | None

    def _build(self) -> dict[K, V]:
        raise NotImplementedError

    def built(self) -> dict[K, V]:
        """The items as a dict, built now if no read has built them yet."""
        b = self._built
        if b is None:
            b = self._built = self._build()
        return b

    def __getitem__(self, key: K) -> V:
        return self.built()[key]

    def __iter__(self) -> Iterator[K]:
        return iter(self.built())

    def __len__(self) -> int:
        return len(self.built())

    # The dict's own views and membership: Mapping's look every key up through
    # __getitem__, and a manager's round walks the VMs of every hot host each period.
    def __contains__(self, key: object) -> bool:
        return key in self.built()

    def keys(self) -> KeysView[K]:
        return self.built().keys()

    def items(self) -> ItemsView[K, V]:
        return self.built().items()

    def values(self) -> ValuesView[V]:
        return self.built().values()

    def __eq__(self, other: object) -> bool:
        # the dict's own comparison: Mapping's would copy both sides into new dicts
        return self.built() == other if isinstance(other, Mapping) else NotImplemented

    __hash__ = None  # type: ignore[assignment]  # (a mapping, as dict)

    def __repr__(self) -> str:
        return repr(self.built())

    def __reduce__(self) -> tuple[type[dict[Any, Any]], tuple[dict[K, V]]]:
        return dict, (self.built(),)  # travels as the plain mapping it is
