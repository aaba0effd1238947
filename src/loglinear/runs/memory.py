"""Keeping freed memory in a training process (glibc's allocator), on by default in `loglinear train`.

glibc hands a freed block above its mmap threshold (at most 32 MB by default) back to the system, and the next
allocation of that size faults every page in again; it also trims the top of its heap once more than the trim
threshold lies free there. A training step at the paper's vocabulary frees and allocates logits-sized buffers (tens
of MB alone, GBs in a pack) every step, so it spent much of its time in page faults. Raising the mmap threshold to
its largest value (2^31 - 1 bytes: a single block above 2 GB is still handed back) and turning trimming off keeps
those blocks in the process for reuse: the same arithmetic on the same values, more resident memory (the largest
step's high-water mark stays held). LOGLINEAR_KEEP_FREED_MEMORY=0 turns it off.
"""

from __future__ import annotations

import ctypes
import os

from loglinear.runs.config import ConfigError

ENV = "LOGLINEAR_KEEP_FREED_MEMORY"
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters (malloc.h)
_NO_TRIM = -1  # mallopt(3): "Setting M_TRIM_THRESHOLD to -1 disables trimming completely"; a finite one trims a
# pack's step, whose freed top exceeds 2 GB at the paper's vocabulary, every step
_LARGEST = 2**31 - 1


def keep_freed_memory() -> bool:
    """Ask glibc to keep freed memory in the process (no trimming, the mmap threshold at 2^31 - 1) instead of
    handing it back to the system; False where glibc's mallopt is not available (another C library or system)."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        return bool(libc.mallopt(_M_TRIM_THRESHOLD, _NO_TRIM) and libc.mallopt(_M_MMAP_THRESHOLD, _LARGEST))
    except (OSError, AttributeError):
        return False


def keep_freed_memory_unless_off() -> bool:
    """`keep_freed_memory()` unless LOGLINEAR_KEEP_FREED_MEMORY is 0 (unset or empty: 1); whether it is kept.

    Raises ConfigError for any other value."""
    setting = os.environ.get(ENV) or "1"
    if setting not in ("0", "1"):
        raise ConfigError(f"{ENV}={setting!r}: must be 1 (keep freed memory, the default) or 0 (glibc's default)")
    return setting == "1" and keep_freed_memory()
