"""`cpp_compiler()`: the C++ compiler torch.compile would build CPU code with, or None where there is none."""

from __future__ import annotations

import functools


@functools.cache
def cpp_compiler() -> str | None:
    """The compiler inductor (torch.compile's backend) finds by its own search ($CXX, else g++), or None."""
    try:
        from torch._inductor.cpp_builder import get_cpp_compiler

        return get_cpp_compiler()
    except Exception:  # noqa: BLE001  (inductor raises its own InvalidCxxCompiler, or fails to import)
        return None
