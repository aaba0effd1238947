"""The live progress line of a sweep: `[name] done 3, diverged 0, failed 1, running 2, pending 4 / total 10, ETA 3m10s`.

On a terminal the line is rewritten in place (and its ETA refreshed every few seconds); otherwise a
plain line is printed whenever a count changes, so logs stay short.
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from typing import TextIO

from loglinear.runs.folder import FINISHED

CATEGORIES = ("done", "diverged", "failed", "running", "pending")
REFRESH_S = 5.0
ELSEWHERE = "running elsewhere"
"""The runner's status of a run whose folder another process holds (counted as running)."""
REFUSED = "refused"
"""The runner's status of a run that its `loglinear train` refused, exit status 2 (counted as failed)."""


def category(status: str) -> str:
    """The progress category of a run status (`early_stopped`/`max_steps` are `done`)."""
    if status in FINISHED:
        return "diverged" if status == "diverged" else "done"
    return {ELSEWHERE: "running", REFUSED: "failed"}.get(status, status if status in CATEGORIES else "pending")


def format_duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


class Progress:
    """Prints the sweep's counts; `update` with the current statuses, `close` at the end."""

    def __init__(self, name: str, stream: TextIO | None = None, enabled: bool = True) -> None:
        self.name = name
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.tty = self.stream.isatty()
        self._last_counts: tuple[int, ...] | None = None
        self._last_print = 0.0

    def line(self, counts: Counter, eta_s: float | None) -> str:
        total = sum(counts.values())
        parts = ", ".join(f"{c} {counts.get(c, 0)}" for c in CATEGORIES)
        eta = "-" if eta_s is None else format_duration(eta_s)
        return f"[{self.name}] {parts} / total {total}, ETA {eta}"

    def update(self, statuses: list[str], eta_s: float | None = None) -> None:
        """Show the counts of `statuses` (each a run status, `running` or `pending`)."""
        if not self.enabled:
            return
        counts = Counter(category(s) for s in statuses)
        key = tuple(counts.get(c, 0) for c in CATEGORIES)
        now = time.monotonic()
        changed = key != self._last_counts
        if not changed and not (self.tty and now - self._last_print >= REFRESH_S):
            return
        self._last_counts, self._last_print = key, now
        text = self.line(counts, eta_s)
        self.stream.write(f"\r{text}\x1b[K" if self.tty else f"{text}\n")
        self.stream.flush()

    def close(self) -> None:
        if self.enabled and self.tty and self._last_counts is not None:
            self.stream.write("\n")
            self.stream.flush()


def progress_line(name: str, statuses: list[str]) -> str:
    """The counts of `statuses` as the progress line shows them, without an ETA."""
    return Progress(name, enabled=False).line(Counter(category(s) for s in statuses), None)


def eta_seconds(durations: list[float], pending: int, running_elapsed: list[float], workers: int) -> float | None:
    """Time left: the mean duration of the runs finished so far for each pending run and for the rest
    of each running one, shared among the workers; None before any run has finished. `durations` are whole
    runs': a resumed run's time covers only its rest, so the runner leaves it out."""
    if not durations:
        return None
    mean = sum(durations) / len(durations)
    left = pending * mean + sum(max(0.0, mean - e) for e in running_elapsed)
    return left / max(1, workers)
