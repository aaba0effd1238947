"""A run folder's contract: the names of its files, the statuses a run ends with, how its result is read,
how its files are written, and the lock that keeps one process at a time in it.

Every write goes to a temporary file beside the target, is flushed to disk, and is renamed over the
target: a reader sees the old file or the new one, never half of one. A failed write removes its
temporary file. A full disk raises `DiskFull`, whose message names the file and the disk. The lock is
`fcntl.flock`, released by the kernel when the holder dies, so a killed process never leaves a stale lock.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from loglinear.runs.config import ConfigError

FINISHED = ("early_stopped", "max_steps", "diverged")
STATUSES = (*FINISHED, "failed")
RESULT = "result.json"
CONFIG = "config.yaml"
LOCK = ".lock"
LAST = "last.ckpt"
INTERRUPTED = "interrupted.ckpt"


class DiskFull(OSError):
    """No space left for a run's file; the message names it and what is left on its disk."""


def write_atomic(path: str | Path, write: Callable[[IO[bytes]], Any]) -> None:
    """Call `write(f)` on a temporary file beside `path`, then rename it to `path` (mode 0644 less the umask)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException as e:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if isinstance(e, OSError) and e.errno == errno.ENOSPC:
            raise DiskFull(errno.ENOSPC, f"disk full writing {path} ({_free(path.parent)} free on its disk)") from e
        raise


def write_json_atomic(path: str | Path, payload: dict[str, Any], default: Callable[[Any], Any] | None = None) -> None:
    text = json.dumps(payload, indent=2, default=default)
    write_atomic(path, lambda f: f.write(text.encode()))


def write_text_atomic(path: str | Path, text: str) -> None:
    write_atomic(path, lambda f: f.write(text.encode()))


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _free(directory: Path) -> str:
    try:
        free = shutil.disk_usage(directory).free
    except OSError:
        return "unknown"
    for unit in ("B", "KB", "MB", "GB"):
        if free < 1024:
            return f"{free:.0f} {unit}"
        free /= 1024
    return f"{free:.1f} TB"

def read_result(out_dir: str | Path) -> dict[str, Any] | None:
    """The run's result.json, or None when it has none; an unreadable one is a ValueError naming it."""
    path = Path(out_dir) / RESULT
    if not path.is_file():
        return None
    try:
        result = json.loads(path.read_text())
    except ValueError as e:
        raise ValueError(f"{path} is not valid JSON ({e})") from None
    if not isinstance(result, dict):
        raise ValueError(f"{path} does not hold a result (a JSON object)")
    return result


def status_of(directory: Path) -> str:
    """A run's status: its result's (early_stopped, max_steps, diverged, failed), else `pending`."""
    result = result_of(directory)
    return result.get("status", "failed") if result else "pending"


def is_finished(directory: Path) -> bool:
    return status_of(directory) in FINISHED


def result_of(directory: Path) -> dict[str, Any]:
    """The run's result.json, or {} when it has none (an unreadable file counts as none: the run is redone)."""
    try:
        return read_result(directory) or {}
    except (OSError, ValueError):
        return {}


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
