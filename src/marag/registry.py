"""Name -> object registries, one per kind of plug-in.

Built-ins register with the decorator; third-party packages register through the
entry-point group ``marag.<kind>`` (e.g. ``marag.strategies``), loaded lazily the first
time a name is looked up, so importing marag stays cheap.
"""

from __future__ import annotations

from importlib.metadata import entry_points
from typing import Callable, Generic, Iterator, TypeVar

from marag.errors import UnknownNameError

T = TypeVar("T")


class Registry(Generic[T]):
    def __init__(self, kind: str):
        self.kind = kind
        self._items: dict[str, T] = {}
        self._plugins_loaded = False

    def register(self, name: str) -> Callable[[T], T]:
        def decorator(obj: T) -> T:
            if name in self._items and self._items[name] is not obj:
                raise ValueError(f"{self.kind} {name!r} is registered twice")
            self._items[name] = obj
            return obj

        return decorator

    def _load_plugins(self) -> None:
        if self._plugins_loaded:
            return
        self._plugins_loaded = True
        for ep in entry_points(group=f"marag.{self.kind}"):
            if ep.name not in self._items:
                self._items[ep.name] = ep.load()

    def get(self, name: str) -> T:
        if name not in self._items:
            self._load_plugins()
        try:
            return self._items[name]
        except KeyError:
            known = ", ".join(self.names()) or "(none)"
            raise UnknownNameError(
                f"unknown {self.kind} {name!r}", hint=f"choose one of: {known}"
            ) from None

    def names(self) -> list[str]:
        self._load_plugins()
        return sorted(self._items)

    def __contains__(self, name: str) -> bool:
        self._load_plugins()
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())
