"""A run folder's contract: the names of its files, the statuses a run ends with, how its result is read,
how its files are written, and the lock that keeps one process at a time in it.

Every write goes to a temporary file beside the target, is flushed to disk, and is renamed over the
target: a reader sees the old file or the new one, never half of one (every file of the suite is
written so: reports, plots, tables, configs, manifests; logs are appended to, `append_text`). A failed
write removes its temporary file. A full disk raises `DiskFull`, whose message names the file and the
disk; any other OSError names the file too. The lock is `fcntl.flock`, released by the kernel when the
holder dies, so a killed process never leaves a stale lock; `holder` tells whether another process
holds it (the runner, `sweep status`).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import shutil
import tempfile
import time
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
TAKE_S = 0.2
"""How long a lock is tried before its holder is taken to be another process's."""


class DiskFull(OSError):
    """No space left for a run's file; the message names it and what is left on its disk."""


def fault_line(e: OSError) -> str:
    """One line for a fault of the machine (a full disk, a read-only folder, no permission) naming the path."""
    if isinstance(e, DiskFull) or not e.filename:
        return f"{e.strerror or e}; free space or fix the folder, then rerun the same command"
    return f"cannot write {e.filename}: {e.strerror}"


def write_atomic(path: str | Path, write: Callable[[IO[bytes]], Any]) -> None:
    """Call `write(f)` on a temporary file beside `path`, then rename it to `path` (mode 0644 less the umask).
    Every file of the suite is written so. An OSError names `path` (a full disk: `DiskFull`)."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as e:
        raise _named(e, path) from e
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
        if isinstance(e, OSError):
            raise _named(e, path) from e
        raise


def append_text(path: str | Path, text: str) -> None:
    """Append `text` to the log `path` (a log grows: it is appended to, never replaced); errors as `write_atomic`'s."""
    path = Path(path)
    try:
        with open(path, "a") as f:
            f.write(text)
    except OSError as e:
        raise _named(e, path) from e


def _named(error: OSError, path: Path) -> OSError:
    """`error` naming `path`, the file being written: `DiskFull` for a full disk, else the same kind of OSError."""
    if error.errno is None:
        return error
    if error.errno == errno.ENOSPC:
        return DiskFull(errno.ENOSPC, f"disk full writing {path} ({free_space(path.parent)} free on its disk)")
    return type(error)(error.errno, error.strerror, str(path))


def write_json_atomic(path: str | Path, payload: dict[str, Any], default: Callable[[Any], Any] | None = None) -> None:
    text = json.dumps(payload, indent=2, default=default)
    write_atomic(path, lambda f: f.write(text.encode()))


def write_text_atomic(path: str | Path, text: str) -> None:
    write_atomic(path, lambda f: f.write(text.encode()))


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def free_space(directory: Path) -> str:
    """The space left on the disk of `directory`, as text ("1.2 GB")."""
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
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        lock = open(path, "a+")
    except OSError as e:
        raise _named(e, path) from e
    with lock:
        if not _take(lock):
            lock.seek(0)
            holder = lock.read().strip()
            raise Busy(f"{busy}{f' (pid {holder})' if holder else ''}") from None
        try:  # unbuffered: on a full disk nothing is left to flush when the file is closed
            os.ftruncate(lock.fileno(), 0)
            os.write(lock.fileno(), str(os.getpid()).encode())
        except OSError as e:
            raise _named(e, path) from e
        yield


def holder(path: Path) -> str | None:
    """Whether another process holds the lock file `path`: its pid as written there ("" if unknown), or None
    when nobody does (or there is no lock file). A look takes the lock for an instant, shared, which a
    process taking it then waits out (`_take`); it never changes the file."""
    try:
        lock = open(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    with lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return lock.read().strip()
        fcntl.flock(lock, fcntl.LOCK_UN)
        return None


def _take(lock: IO[str]) -> bool:
    """Take `lock` exclusively; False when another process holds it. Tries for TAKE_S, so that a look by
    `holder` at that instant is not taken for a holder."""
    deadline = time.monotonic() + TAKE_S
    while True:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.01)
