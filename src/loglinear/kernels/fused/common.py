"""What every fused kernel shares: output allocation (poisonable), launch settings and in-kernel helpers.

The kernels read per-token tensors in their (B, T, H, ...) layout through the chunk map of
kernels/layout.py (slot j of chunk i of sequence b holds token i*C + j - shift[b]); per-chunk
tensors are stored (B, H, N, ...).
"""

from __future__ import annotations

from contextlib import AbstractContextManager

import torch
import triton
import triton.language as tl
from torch import Tensor

from loglinear.kernels.switch import Switch

_POISON = Switch(False)


def poison_outputs() -> AbstractContextManager[None]:
    """Inside this block, kernel outputs and scratch start as NaN instead of uninitialised memory.

    A kernel that forgets to write an element then shows it as NaN in the result (tests use this).
    """
    return _POISON.set(True)


def alloc(*shape: int, like: Tensor, dtype: torch.dtype = torch.float32) -> Tensor:
    """An output buffer the kernels write in full: uninitialised, or NaN inside `poison_outputs()`."""
    if _POISON:
        return torch.full(shape, float("nan"), dtype=dtype, device=like.device)
    return torch.empty(shape, dtype=dtype, device=like.device)


def pow2(n: int, minimum: int = 16) -> int:
    """Block size for a dimension of n: the next power of two, at least `minimum` (tl.dot needs 16)."""
    return max(minimum, triton.next_power_of_2(n))


def num_warps(*tile_sizes: int) -> int:
    """Warps per program: 8 once a kernel's largest register tile reaches 4096 float32 elements, else 4.

    Chosen from ptxas's register and spill counts for sm_90a (benchmarks/kernel_resources.py), not
    from timings: 8 warps cut the spills of the paper-shape kernels several-fold.
    """
    return 8 if max(tile_sizes) >= 4096 else 4


def dot_precision(dtype: torch.dtype) -> str:
    """tl.dot input precision: exact ("ieee") for float32 inputs, tf32 for half-precision ones.

    Every dot takes float32 operands (half-precision inputs are converted after loading): that keeps
    one code path, and Triton's interpreter computes bf16 dots wrongly, so the CPU tests could not
    check a bf16 dot.
    """
    return "ieee" if dtype == torch.float32 else "tf32"


@triton.jit
def slot_rows(b, i, shift_ptr, T, C: tl.constexpr):
    """Token index of each slot of chunk i of sequence b, and whether it is a real token."""
    t = i * C + tl.arange(0, C) - tl.load(shift_ptr + b)
    return t, (t >= 0) & (t < T)


LEVEL_OF_LIMIT = 256


def check_chunk_size(C: int) -> None:
    """The fused kernels' chunk-size contract: a power of two from 16 (tl.dot's minimum) to LEVEL_OF_LIMIT."""
    if not (16 <= C <= LEVEL_OF_LIMIT and C & (C - 1) == 0):
        raise ValueError(f"the fused kernels take chunks of 16 to LEVEL_OF_LIMIT = {LEVEL_OF_LIMIT} tokens (a power "
                         f"of two; level_of covers XORs below it), got {C}")
"""`level_of` covers slot XORs below this, so a chunk holds at most this many tokens."""


@triton.jit
def level_of(x):
    """bit_length(x) for 0 <= x < LEVEL_OF_LIMIT (256) (an int tensor): the Fenwick level of two slots
    whose XOR is x."""
    lvl = tl.zeros_like(x)
    for j in tl.static_range(8):
        lvl = tl.where(x >= (1 << j), j + 1, lvl)
    return lvl


@triton.jit
def token_tile(b, h, t, valid, cols, T, H, D):
    """Offsets and mask of the (C, len(cols)) tile of rows t, head h, columns cols of a (B, T, H, D) tensor."""
    off = ((b * T + t).to(tl.int64) * H + h)[:, None] * D + cols[None, :]
    return off, valid[:, None] & (cols < D)[None, :]
