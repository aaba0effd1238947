"""Memory bounds for the fused kernels in Triton's interpreter: every load and store a launch makes (where its
mask is on) must fall inside the storage of one of that launch's tensor arguments.

A GPU reports an access outside them as an illegal memory access, or not at all (the address happens to
belong to another allocation); the interpreter reads and writes raw host addresses without a check. Here
each launch's tensor arguments (their host copies) are recorded, and InterpreterBuilder's masked load and
store check every active address against them before the access.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pytest
import torch


class OutOfBounds(AssertionError):
    pass


@contextmanager
def checked_bounds(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    interpreter = pytest.importorskip("triton.runtime.interpreter")
    ranges: list[tuple[int, int]] = []
    launch: list[str] = [""]

    init_args = interpreter.GridExecutor._init_args_hst

    def record_args(self, args_dev, kwargs):
        args_hst, kwargs_hst = init_args(self, args_dev, kwargs)
        ranges.clear()
        for arg in [*args_hst, *kwargs_hst.values()]:
            if isinstance(arg, torch.Tensor):
                storage = arg.untyped_storage()
                ranges.append((storage.data_ptr(), storage.data_ptr() + storage.nbytes()))
        launch[0] = getattr(self.fn, "__name__", str(self.fn))
        return args_hst, kwargs_hst

    def check(ptrs, mask, what: str) -> None:
        itemsize = np.dtype(interpreter._get_np_dtype(ptrs.get_element_ty())).itemsize
        addresses = np.broadcast_to(ptrs.data, np.shape(mask.data))[np.asarray(mask.data, dtype=bool)]
        addresses = addresses.astype(np.uint64).ravel()
        inside = np.zeros(addresses.shape, dtype=bool)
        for lo, hi in ranges:
            inside |= (addresses >= lo) & (addresses + itemsize <= hi)
        if not inside.all():
            bad = addresses[~inside]
            spans = [(hex(lo), hi - lo) for lo, hi in ranges]
            raise OutOfBounds(f"{launch[0]}: {what} of {bad.size} element(s) outside every tensor argument "
                              f"(first address {int(bad[0]):#x}; arguments {spans})")

    load, store = interpreter.InterpreterBuilder.create_masked_load, interpreter.InterpreterBuilder.create_masked_store

    def checked_load(self, ptrs, mask, other, cache_policy, is_volatile):
        check(ptrs, mask, "a load")
        return load(self, ptrs, mask, other, cache_policy, is_volatile)

    def checked_store(self, ptrs, value, mask, cache_policy):
        check(ptrs, mask, "a store")
        return store(self, ptrs, value, mask, cache_policy)

    monkeypatch.setattr(interpreter.GridExecutor, "_init_args_hst", record_args)
    monkeypatch.setattr(interpreter.InterpreterBuilder, "create_masked_load", checked_load)
    monkeypatch.setattr(interpreter.InterpreterBuilder, "create_masked_store", checked_store)
    yield
