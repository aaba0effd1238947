"""The layouts shared by the implementations: GQA head groups, and the chunk map of the chunkwise paths.

Heads. q and k may have HK heads for v's H (H a multiple of HK): v head h reads q/k head h // (H // HK).

Chunks (kernels/chunk.py and the fused kernels).
Chunks hold C = 2^c slots aligned to absolute multiples of C. Sequence b starts at absolute
position p0[b], so slot j of its chunk i holds token t = i*C + j - shift[b] with
shift[b] = p0[b] mod C; slots with t outside [0, T) are padding: q = k = v = 0, g = 0, beta = 0
(no decay, no contribution). Its absolute chunk index is first[b] + i with first[b] = p0[b] // C.
N is the most chunks any sequence of the batch spans.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor


def expand_heads(x: Tensor, H: int) -> Tensor:
    """q or k with HK heads (B, [T,] HK, K) -> one head per v head (B, [T,] H, K)."""
    return x if x.shape[-2] == H else x.repeat_interleave(H // x.shape[-2], dim=-2)


def sum_head_groups(d: Tensor, x: Tensor) -> Tensor:
    """A gradient per v head (B, T, H, K) -> per q/k head of x (B, T, HK, K), in x's dtype."""
    B, T, H, K = d.shape
    return d.reshape(B, T, x.shape[2], H // x.shape[2], K).sum(3).to(x.dtype)


@dataclass(frozen=True)
class ChunkLayout:
    """The chunk map of one call (see the module docstring); tensors are on the inputs' device."""

    C: int  # chunk size, a power of two
    T: int  # tokens per sequence in this call
    N: int  # chunks per sequence (the most any sequence spans)
    shift: Tensor  # (B,) int32, p0 mod C
    first: Tensor  # (B,) int64, absolute index of each sequence's first chunk
    n_chunks: Tensor  # (B,) int32, chunks each sequence spans
    aligned: bool  # every sequence starts at a chunk boundary (no shift): padding only at the end

    @property
    def c(self) -> int:
        return self.C.bit_length() - 1

    @classmethod
    def build(cls, p0: Tensor, T: int, C: int) -> ChunkLayout:
        """The layout of sequences starting at absolute positions p0 (B,): N and `aligned` are read from the
        device (a host sync)."""
        shift = p0 % C
        n_chunks = (shift + T + C - 1) // C
        N, aligned = int(n_chunks.max()), not bool(shift.any())
        return cls(C, T, N, shift.to(torch.int32), p0 // C, n_chunks.to(torch.int32), aligned)

    @classmethod
    def at_start(cls, B: int, T: int, C: int, device: torch.device) -> ChunkLayout:
        """`build` with every sequence at position 0 (no initial state), known on the host: no host sync, so
        torch.compile keeps the operator in one graph."""
        N = -(-T // C)
        shift = torch.zeros(B, dtype=torch.int32, device=device)
        return cls(C, T, N, shift, shift.long(), torch.full((B,), N, dtype=torch.int32, device=device), True)

    def slot_tokens(self) -> tuple[Tensor, Tensor]:
        """Token index of every slot (B, N*C) and whether it is a real token."""
        t = torch.arange(self.N * self.C, device=self.shift.device)[None, :] - self.shift[:, None].long()
        return t, (t >= 0) & (t < self.T)

    def to_chunks(self, x: Tensor) -> Tensor:
        """(B, T, H, *) per-token values -> (B, H, N*C, *) in chunk layout, zero on padding slots."""
        B, T, H = x.shape[:3]
        flat = x.reshape(B, T, -1)
        if self.aligned:
            out = F.pad(flat, (0, 0, 0, self.N * self.C - T)).reshape(B, -1, H, *x.shape[3:])
            return out.transpose(1, 2)
        # padding slots read zeros padded in front and behind: every slot reads its own row, so the gather's
        # backward adds one value into each row (atomic adds on CUDA stay exact)
        t, _ = self.slot_tokens()
        padded = F.pad(flat, (0, 0, self.C, self.N * self.C - T))
        out = padded.gather(1, (t + self.C)[:, :, None].expand(-1, -1, flat.shape[2]))
        return out.reshape(B, -1, H, *x.shape[3:]).transpose(1, 2)

    def from_chunks(self, x: Tensor) -> Tensor:
        """(B, H, N*C, *) chunk layout -> (B, T, H, *), dropping padding slots."""
        if self.aligned:
            return x[:, :, : self.T].transpose(1, 2)
        idx = torch.arange(self.T, device=x.device)[None, :] + self.shift[:, None].long()  # (B, T)
        idx = idx.reshape(idx.shape[0], 1, self.T, *([1] * (x.dim() - 3)))
        return x.gather(2, idx.expand(-1, x.shape[1], -1, *x.shape[3:])).transpose(1, 2)

    def chunk_cumsum(self, g: Tensor) -> Tensor:
        """G (B, H, N*C) float32: the inclusive cumulative sum of g (B, T, H) inside each chunk."""
        gc = self.to_chunks(g.float())
        B, H = gc.shape[:2]
        return gc.reshape(B, H, self.N, self.C).cumsum(-1).reshape(B, H, self.N * self.C)
