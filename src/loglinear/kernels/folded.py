"""Calls that `torch.func.vmap` should not look into: the mapped axis folded into the batch axis.

Packed training (loglinear.packing) runs several runs' models as one, mapping the model over a leading run axis
with `torch.func.vmap`. Some calls compute every batch element on its own but have no batching rule vmap can
use: the log-linear operator (the fused kernels are opaque to vmap; the chunk path would be traced op by op)
and attention's fused scaled_dot_product_attention (which vmap runs once per mapped element). `call_folded`
runs such a call once on the batch of all runs: (runs, B, ...) reshaped to (runs * B, ...), and the output
back. Autograd records the call as it records any call. Where no vmap is active it is the plain call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from loglinear.kernels.impls import run_impl


def is_mapped(*xs: Tensor | None) -> bool:
    """Whether any of `xs` is a tensor seen through `torch.func.vmap` (one axis of it hidden)."""
    return any(x is not None and torch._C._functorch.is_batchedtensor(x) for x in xs)


class _Folded(torch.autograd.Function):
    """`fn(*tensors, **kwargs)` with a vmap rule that folds the mapped axis into axis 0 of every tensor; applied
    only under vmap, which runs the rule instead of `forward`."""

    @staticmethod
    def forward(fn: Callable[..., Tensor], kwargs: dict[str, Any], *tensors: Tensor | None) -> Tensor:
        raise RuntimeError("_Folded runs under torch.func.vmap only; outside it call the function itself")

    @staticmethod
    def setup_context(ctx, inputs, output) -> None:
        pass

    @staticmethod
    def vmap(info, in_dims, fn, kwargs, *tensors):
        runs = info.batch_size

        def fold(x: Tensor | None, dim: int | None) -> Tensor | None:
            if x is None:
                return None
            x = x.movedim(dim, 0) if dim is not None else x.expand(runs, *x.shape)
            return x.flatten(0, 1)

        out = fn(*(fold(x, d) for x, d in zip(tensors, in_dims[2:], strict=True)), **kwargs)
        return out.unflatten(0, (runs, -1)), 0


def call_folded(fn: Callable[..., Tensor], *tensors: Tensor | None, **kwargs: Any) -> Tensor:
    """`fn(*tensors, **kwargs)`, whose tensors share a leading batch axis that `fn` keeps apart; under vmap one
    call on the runs' batches folded together."""
    if is_mapped(*tensors):
        return _Folded.apply(fn, kwargs, *tensors)
    return fn(*tensors, **kwargs)


def _operator_output(q, k, v, g, lam, beta, *, name: str, chunk_size: int) -> Tensor:
    return run_impl(name, q, k, v, g, lam, beta, chunk_size=chunk_size)[0]


def run_impl_mappable(name: str, q: Tensor, k: Tensor, v: Tensor, g: Tensor, lam: Tensor | None,
                      beta: Tensor | None, *, chunk_size: int) -> Tensor:
    """`run_impl(name, ...)[0]` (no initial or final state), also under `torch.func.vmap`."""
    return call_folded(_operator_output, q, k, v, g, lam, beta, name=name, chunk_size=chunk_size)
