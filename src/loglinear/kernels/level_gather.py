"""Reading per-level weights lam[..., index] with a gradient that is the same on every call.

torch.gather's backward adds the incoming gradient into lam with scatter_add, which on CUDA adds with
atomics: where many entries read the same level (every slot pair at one Fenwick level, every state bucket
clamped to the top level), the order of those additions, and so the float32 rounding of the gradient,
changes from call to call. Here the backward on CUDA sums per level instead: one reduction per level, in a
fixed order; on the CPU, where scatter_add adds in order, it keeps scatter_add (the faster one there).
"""

from __future__ import annotations

import torch
from torch import Tensor


class _LevelGather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, lam: Tensor, index: Tensor) -> Tensor:
        ctx.save_for_backward(index)
        ctx.levels = lam.shape[-1]
        return lam.gather(-1, index)

    @staticmethod
    def backward(ctx, grad: Tensor):
        (index,) = ctx.saved_tensors
        if not grad.is_cuda:  # scatter_add adds in a fixed order on the CPU, and 1.3-1.5 times faster there
            return grad.new_zeros(*index.shape[:-1], ctx.levels).scatter_add_(-1, index, grad), None
        return sum_per_level(grad, index, ctx.levels), None


def sum_per_level(grad: Tensor, index: Tensor, levels: int) -> Tensor:
    """zeros(..., levels).scatter_add(-1, index, grad), as one reduction per level in a fixed order."""
    return torch.stack([torch.where(index == level, grad, 0).sum(-1) for level in range(levels)], -1)


def gather_levels(lam: Tensor, index: Tensor) -> Tensor:
    """lam.gather(-1, index) for lam (..., L) and an index (..., M) of the same leading shape, whose
    gradient does not depend on the order of floating-point additions."""
    if index.shape[:-1] != lam.shape[:-1]:
        raise ValueError(f"gather_levels: index {tuple(index.shape)} must share lam's {tuple(lam.shape)} "
                         "leading dimensions")
    return _LevelGather.apply(lam, index)
