"""A small disk of its own for a test: a tmpfs mounted in the test's folder (root only), to fill up or make
read-only, so that a full disk or a read-only folder is real rather than simulated."""

from __future__ import annotations

import errno
import os
import subprocess
from pathlib import Path

CHUNKS = (1 << 16, 1 << 12, 1)


class SmallDisk:
    """A tmpfs of `size` at `path`; `fill` leaves `free` bytes, `make_room` frees them all again."""

    def __init__(self, path: Path, size: str = "16m") -> None:
        self.path = path
        self.filler = path / ".filler"
        path.mkdir(parents=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], check=True,
                       capture_output=True)

    def fill(self, free: int = 0) -> None:
        """Write a filler file until the disk is full, then give back `free` bytes of it."""
        with open(self.filler, "ab", buffering=0) as f:
            for chunk in CHUNKS:
                try:
                    while True:
                        f.write(b"\0" * chunk)
                except OSError as e:
                    assert e.errno == errno.ENOSPC, e
        if free:
            os.truncate(self.filler, max(0, self.filler.stat().st_size - free))

    def make_room(self) -> None:
        self.filler.unlink(missing_ok=True)

    def read_only(self, on: bool = True) -> None:
        subprocess.run(["mount", "-o", f"remount,{'ro' if on else 'rw'}", str(self.path)], check=True,
                       capture_output=True)

    def unmount(self) -> None:
        subprocess.run(["umount", "-l", str(self.path)], check=False, capture_output=True)
