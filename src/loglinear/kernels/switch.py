"""`Switch`: a process-wide on/off setting with a default, changed only inside a `with` block."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


class Switch:
    """A boolean setting (`bool(switch)`) that `with switch.set(value):` changes for the block only."""

    def __init__(self, default: bool) -> None:
        self._on = default

    def __bool__(self) -> bool:
        return self._on

    @contextlib.contextmanager
    def set(self, on: bool) -> Iterator[None]:
        previous, self._on = self._on, on
        try:
            yield
        finally:
            self._on = previous
