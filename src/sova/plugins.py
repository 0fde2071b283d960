"""Plug-ins of one kind by name (the generic part of every plug-in point: the agent's VF
policies, allocators and drivers in :mod:`sova.agent.registry`, the manager's planning stages
in :mod:`sova.manager.decisions.pipeline`).

As in the Kubernetes scheduler framework, each extension point is a small named registry: a
plug-in is registered once under its name (a second registration of the name is an error
naming both: nothing is silently replaced), and out-of-tree plug-ins come from installed
packages' entry points in the registry's group, read the first time the registry is.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping
from importlib.metadata import entry_points
from typing import Any, Generic, TypeVar

__all__ = ["Registry", "RegistryError"]

T = TypeVar("T")


class RegistryError(ValueError):
    """A plug-in registered twice, or one that cannot be loaded."""


class Registry(Mapping[str, T], Generic[T]):
    """Plug-ins of one kind by name: built-ins, registered ones and entry points.

    ``adapt`` turns what an entry point loads into a ``T`` (and refuses what is not one);
    ``lazy`` built-ins are ``"module:attribute"`` references loaded when first used, so a
    name can be validated without importing what it names (the libvirt driver).
    """

    def __init__(
        self,
        kind: str,
        group: str,
        adapt: Callable[[str, Any], T],
        *,
        lazy: Mapping[str, str] | None = None,
    ) -> None:
        self.kind, self.group = kind, group
        self._adapt = adapt
        self._items: dict[str, T] = {}
        self._origin: dict[str, str] = {}
        self._refs: dict[str, str] = {}
        self._plugins_loaded = False
        for name, ref in (lazy or {}).items():
            self._claim(name, f"built-in {ref}")
            self._refs[name] = ref

    def _claim(self, name: str, origin: str) -> None:
        if name in self._origin:
            raise RegistryError(
                f"{self.kind} {name!r} is already registered ({self._origin[name]}); "
                f"refusing a second one ({origin}): choose another name"
            )
        self._origin[name] = origin

    def register(self, name: str, item: T, origin: str = "") -> T:
        """Add ``item`` under ``name``; a name already taken is refused."""
        self._claim(name, origin or _describe(item))
        self._items[name] = item
        return item

    def unregister(self, name: str) -> None:
        """Remove a registered plug-in (tests, or a site package replacing its own)."""
        self._origin.pop(name, None)
        self._items.pop(name, None)
        self._refs.pop(name, None)

    def _load_plugins(self) -> None:
        if self._plugins_loaded:
            return
        self._plugins_loaded = True
        for ep in entry_points(group=self.group):
            where = f"entry point {ep.value!r} in group {self.group!r}"
            if self._origin.get(ep.name) == where:
                continue  # read before rescan()
            self._claim(ep.name, where)
            self._refs[ep.name] = ep.value

    def rescan(self) -> None:
        """Read the entry points again on the next read (a package installed since the
        first one). An entry point already claimed from the same reference is kept once."""
        self._plugins_loaded = False

    def _load(self, name: str) -> T:
        ref = self._refs.pop(name)
        module, _, attr = ref.partition(":")
        try:
            obj: Any = importlib.import_module(module)
            for part in attr.split(".") if attr else ():
                obj = getattr(obj, part)
        except (ImportError, AttributeError) as exc:
            self._refs[name] = ref
            raise RegistryError(f"{self.kind} {name!r}: cannot load {ref!r}: {exc}") from None
        item = self._adapt(name, obj)
        self._items[name] = item
        return item

    def __getitem__(self, name: str) -> T:
        self._load_plugins()
        if name in self._items:
            return self._items[name]
        if name in self._refs:
            return self._load(name)
        raise KeyError(name)

    def __contains__(self, name: object) -> bool:
        self._load_plugins()
        return name in self._origin

    def __iter__(self) -> Iterator[str]:
        self._load_plugins()
        return iter(list(self._origin))

    def __len__(self) -> int:
        self._load_plugins()
        return len(self._origin)

    def check(self, name: str) -> str:
        """``name`` if registered, else a one-line error listing the known names."""
        if name not in self:
            raise ValueError(f"unknown {self.kind} {name!r}; choose from {', '.join(self)}")
        return name


def _describe(item: object) -> str:
    module = getattr(item, "__module__", None) or type(item).__module__
    qual = getattr(item, "__qualname__", None) or type(item).__qualname__
    return f"{module}.{qual}"
