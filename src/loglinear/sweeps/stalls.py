"""Whether a sweep stopped by its time limit made progress: a time limit too short for any run to reach a
checkpoint would make `sweep run --time-limit` say "not finished, run it again" forever.

Progress is a checkpoint or a result written or rewritten in the sweep's run folders during the command. The
sweep folder keeps the count of its time-limited commands in a row that made none (`STALLS`); a command that
makes progress, or ends without its time limit, clears it.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from loglinear.runs.folder import INTERRUPTED, LAST, RESULT, write_text_atomic
from loglinear.sweeps.manifest import RUNS

STALLS = ".time_limit_stalls"
"""The sweep folder's count of time-limited commands in a row without progress."""
ALLOWED = 1
"""Stops without progress that are taken for a slow start (a loaded machine): one more ends the retries."""


def marks(out: Path) -> dict[str, int]:
    """Every checkpoint and result in the run folders of the sweep folder `out`, with the time it was written."""
    found = {}
    for name in (LAST, INTERRUPTED, RESULT):
        for path in (out / RUNS).glob(f"*/{name}"):
            with contextlib.suppress(OSError):
                found[str(path.relative_to(out))] = path.stat().st_mtime_ns
    return found


def count_stall(out: Path, before: dict[str, int], timed_out: bool) -> int:
    """Record how the command that found `before` (`marks`) ended: stopped by its time limit (`timed_out`) without
    progress adds a stall, anything else clears them; the stalls in a row, this one included."""
    path = out / STALLS
    if not timed_out or marks(out) != before:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        return 0
    try:
        stalls = int(path.read_text()) + 1
    except (OSError, ValueError):
        stalls = 1
    write_text_atomic(path, f"{stalls}\n")
    return stalls
