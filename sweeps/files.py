"""Files a run relies on later, written so that a crash or a full disk never leaves one that is trusted.

Every write goes to a temporary file beside the target, is flushed to disk, and is renamed over the
target: a reader sees the old file or the new one, never half of one. A failed write removes its
temporary file. A full disk raises `DiskFull`, whose message names the file and the disk.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any


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

