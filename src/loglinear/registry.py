"""`Registry`: name -> entry lookups (mixers, lambda parameterisations, tasks), failing with the valid names; an
entry outside the registry is named by its import path, `package.module:Name`."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Iterator
from typing import Generic, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    """Maps names to entries, in the order they were added: given at construction as (name, entry)
    pairs, or added with the `register(name)` decorator.

    `registry[name]` raises a ValueError naming `kind`, the missing name and every valid name. In a registry of
    classes given a `base`, a name with a colon is an import path, `package.module:Name`: the class is imported
    from there and must subclass `base`, so a user's own class needs no registration.
    """

    def __init__(self, kind: str, entries: Iterable[tuple[str, T]] = (), *, base: type | None = None) -> None:
        self.kind = kind
        self.base = base
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
        if name in self._entries:
            return self._entries[name]
        if self.base is not None and isinstance(name, str) and ":" in name:
            return self._imported(name)
        paths = " or an import path (package.module:Name)" if self.base is not None else ""
        raise ValueError(f"unknown {self.kind} {name!r}; valid: {', '.join(self.names())}{paths}")

    def _imported(self, path: str) -> T:
        module, _, attribute = path.partition(":")
        try:
            entry = getattr(importlib.import_module(module), attribute)
        except (Exception, SystemExit) as e:  # whatever the module does when imported (sys.exit included)
            reason = (str(e).splitlines() or [""])[0]
            raise ValueError(f"{self.kind} {path!r}: cannot import it ({type(e).__name__}: {reason})") from None
        if not (isinstance(entry, type) and issubclass(entry, self.base)):  # type: ignore[arg-type]
            raise ValueError(f"{self.kind} {path!r} is not a subclass of {self.base.__name__}")
        return entry

    def __contains__(self, name: object) -> bool:
        """Registered, or an import path that imports."""
        if name in self._entries:
            return True
        try:
            self[name]  # type: ignore[index]
        except ValueError:
            return False
        return True

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
