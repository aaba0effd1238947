"""`TimeLimit`: a benchmark measuring items one after another starts the next only if it should end in time.

A machine that allows a command a fixed time (a job slot) kills a benchmark that overruns and
loses the item in flight; with a limit the benchmark stops between items instead, and says which it left.
"""

from __future__ import annotations

import time


class TimeLimit:
    """`fits()` right before an item: whether it ends within `seconds` of the limit's creation if it takes
    as long as the last item did (always true without a limit, and for the first item); `done()` after it."""

    def __init__(self, seconds: float | None) -> None:
        self.seconds = seconds
        self.start = time.monotonic()
        self.last: float | None = None
        self._item_start = self.start

    def fits(self) -> bool:
        self._item_start = time.monotonic()
        if self.seconds is None or self.last is None:
            return True
        return self._item_start - self.start + self.last <= self.seconds

    def done(self) -> None:
        self.last = time.monotonic() - self._item_start
