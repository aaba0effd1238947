"""`Registry`: name -> entry lookups (mixers, lambda parameterisations, tasks), failing with the valid names."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Generic, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    """Maps names to entries, in the order they were added: given at construction as (name, entry)
    pairs, or added with the `register(name)` decorator.

    `registry[name]` raises a ValueError naming `kind`, the missing name and every valid name.
    """

    def __init__(self, kind: str, entries: Iterable[tuple[str, T]] = ()) -> None:
        self.kind = kind
        self._entries: dict[str, T] = {}
        for name, entry in entries:
            self.register(name)(entry)

    def register(self, name: str) -> Callable[[T], T]:
        def add(entry: T) -> T:
            if name in self._entries:
                raise ValueError(f"{self.kind} {name!r} is already registered")
            self._entries[name] = entry
            return entry

        return add

    def __getitem__(self, name: str) -> T:
        if name not in self._entries:
            raise ValueError(f"unknown {self.kind} {name!r}; valid: {', '.join(self.names())}")
        return self._entries[name]

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def names(self) -> list[str]:
        return list(self._entries)

    def items(self) -> list[tuple[str, T]]:
        return list(self._entries.items())

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {self.names()})"
