"""Exclusive locks on folders (a run's, a sweep's): `fcntl.flock`, released by the kernel when the holder
dies, so a killed process never leaves a stale lock."""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from loglinear.sweeps.config import ConfigError


class Busy(ConfigError):
    """Another process holds the lock; the message says which and what to do."""


@contextlib.contextmanager
def exclusive(path: Path, busy: str) -> Iterator[None]:
    """Hold the lock file `path` (its content: the holder's pid) or raise `Busy(busy + holder)`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.seek(0)
            holder = lock.read().strip()
            raise Busy(f"{busy}{f' (pid {holder})' if holder else ''}") from None
        lock.seek(0)
        lock.truncate()
        lock.write(str(os.getpid()))
        lock.flush()
        yield
