"""What every fused kernel shares: the chunk layout, output allocation (poisonable) and launch settings.

Chunk layout. Chunks hold C = 2^c slots aligned to absolute multiples of C. Sequence b starts at
absolute position p0[b], so slot j of its chunk i holds token t = i*C + j - shift[b] with
shift[b] = p0[b] mod C; slots with t outside [0, T) are padding: q = k = v = 0, g = 0, beta = 0
(no decay, no contribution). Its absolute chunk index is first[b] + i with first[b] = p0[b] // C.
Per-token tensors keep their (B, T, H, ...) layout and are read through that map; per-chunk tensors
are stored (B, H, N, ...) with N = the most chunks any sequence spans.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import torch
import triton
import triton.language as tl
from torch import Tensor

_poison = False


@contextlib.contextmanager
def poison_outputs() -> Iterator[None]:
    """Inside this block, kernel outputs and scratch start as NaN instead of uninitialised memory.

    A kernel that forgets to write an element then shows it as NaN in the result (tests use this).
    """
    global _poison
    previous, _poison = _poison, True
    try:
        yield
    finally:
        _poison = previous


def alloc(*shape: int, like: Tensor, dtype: torch.dtype = torch.float32) -> Tensor:
    """An output buffer the kernels write in full: uninitialised, or NaN inside `poison_outputs()`."""
    if _poison:
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


@dataclass(frozen=True)
class ChunkLayout:
    """The chunk map of one call (see the module docstring); tensors are on the inputs' device."""

    C: int  # chunk size, a power of two >= 16
    T: int  # tokens per sequence in this call
    N: int  # chunks per sequence (the most any sequence spans)
    shift: Tensor  # (B,) int32, p0 mod C
    first: Tensor  # (B,) int64, absolute index of each sequence's first chunk
    n_chunks: Tensor  # (B,) int32, chunks each sequence spans

    @property
    def c(self) -> int:
        return self.C.bit_length() - 1

    @classmethod
    def build(cls, p0: Tensor, T: int, C: int) -> "ChunkLayout":
        shift = p0 % C
        n_chunks = (shift + T + C - 1) // C
        return cls(C, T, int(n_chunks.max()), shift.to(torch.int32), p0 // C, n_chunks.to(torch.int32))

    def slot_tokens(self) -> tuple[Tensor, Tensor]:
        """Token index of every slot (B, N*C) and whether it is a real token."""
        t = torch.arange(self.N * self.C, device=self.shift.device)[None, :] - self.shift[:, None].long()
        return t, (t >= 0) & (t < self.T)

    def to_chunks(self, x: Tensor) -> Tensor:
        """(B, T, H, *) per-token values -> (B, H, N*C, *) in chunk layout, zero on padding slots."""
        t, valid = self.slot_tokens()
        B, T, H = x.shape[:3]
        flat = x.reshape(B, T, -1)
        out = flat.gather(1, t.clamp(0, self.T - 1)[:, :, None].expand(-1, -1, flat.shape[2]))
        out = torch.where(valid[:, :, None], out, torch.zeros_like(out)).reshape(B, -1, H, *x.shape[3:])
        return out.transpose(1, 2)

    def from_chunks(self, x: Tensor) -> Tensor:
        """(B, H, N*C) chunk layout -> (B, T, H), dropping padding slots."""
        idx = torch.arange(self.T, device=x.device)[None, :] + self.shift[:, None].long()  # (B, T)
        return x.gather(2, idx[:, None, :].expand(-1, x.shape[1], -1)).transpose(1, 2)

    def chunk_cumsum(self, g: Tensor) -> Tensor:
        """G (B, H, N*C) float32: the inclusive cumulative sum of g (B, T, H) inside each chunk."""
        gc = self.to_chunks(g.float())
        B, H = gc.shape[:2]
        return gc.reshape(B, H, self.N, self.C).cumsum(-1).reshape(B, H, self.N * self.C)


@triton.jit
def slot_rows(b, i, shift_ptr, T, C: tl.constexpr):
    """Token index of each slot of chunk i of sequence b, and whether it is a real token."""
    t = i * C + tl.arange(0, C) - tl.load(shift_ptr + b)
    return t, (t >= 0) & (t < T)


@triton.jit
def level_of(x):
    """bit_length(x) for 0 <= x < 256 (an int tensor): the Fenwick level of two slots whose XOR is x."""
    lvl = tl.zeros_like(x)
    for j in tl.static_range(8):
        lvl = tl.where(x >= (1 << j), j + 1, lvl)
    return lvl


@triton.jit
def token_tile(b, h, t, valid, cols, T, H, D):
    """Offsets and mask of the (C, len(cols)) tile of rows t, head h, columns cols of a (B, T, H, D) tensor."""
    off = ((b * T + t).to(tl.int64) * H + h)[:, None] * D + cols[None, :]
    return off, valid[:, None] & (cols < D)[None, :]
