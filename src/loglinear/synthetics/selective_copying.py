"""Selective copying (Gu and Dao 2023, "Mamba"), with MAD's layout and difficulty settings (Poli et al. 2024)."""

from __future__ import annotations

import torch

from loglinear.synthetics.arguments import check_answers, check_int
from loglinear.synthetics.batch import IGNORE_INDEX, Batch
from loglinear.synthetics.sampling import sample_distinct
from loglinear.synthetics.task import Task

PLACEMENTS = ("uniform", "mad")


class SelectiveCopying(Task):
    """Copy the N = num_tokens_to_copy tokens scattered among blanks, in order, after a copy token.

    With V = vocab_size: tokens to copy are uniform over [0, V-2) (repeats allowed), V-2 is the blank and
    V-1 the copy token. Positions 0 .. L-1 (L = T - N - 1) hold the N tokens in order at N positions
    and blanks elsewhere; position L is the copy token; positions L+1 .. T-1 are blanks whose targets
    are the N tokens in order (the only scored positions). Example, V = 6 (tokens 0..3, blank 4,
    copy 5), T = 9, N = 2, L = 6::

        inputs   4 4 2 4 0 4 5 4 4
        targets  - - - - - - - 2 0

    `placement="uniform"` (default) puts the N tokens at a uniformly random N-subset of the L
    positions, which is the task as Mamba and MAD describe it. `"mad"` reproduces MAD's generator
    (mad-lab 0f49a45) for comparison with its published numbers: each of the L - N blanks goes
    before one of the N tokens, chosen uniformly, so a blank never follows the last token to copy
    and the L - N blanks spread as a multinomial over N gaps, not over N + 1. (MAD also draws these
    gaps from NumPy's global RNG; here both placements use the batch's own generator.)
    `num_classes` is V - 2.
    """

    name = "selective_copying"

    def __init__(self, vocab_size: int = 16, seq_len: int = 256, num_tokens_to_copy: int = 16,
                 placement: str = "uniform") -> None:
        self.vocab_size = check_int("vocab_size", vocab_size, minimum=3)
        self.num_tokens_to_copy = check_int("num_tokens_to_copy", num_tokens_to_copy, minimum=1)
        self.seq_len = check_int("seq_len", seq_len, minimum=2 * num_tokens_to_copy + 2)
        if placement not in PLACEMENTS:
            raise ValueError(f"unknown selective_copying placement {placement!r}; valid: {list(PLACEMENTS)}")
        self.placement = placement
        self.num_classes = check_answers(vocab_size - 2, f"vocab_size {vocab_size}", "vocab_size must be >= 4")

    def _sample(self, batch_size: int, generator: torch.Generator) -> Batch:
        rows, copied, blank = batch_size, self.num_tokens_to_copy, self.vocab_size - 2
        region = self.seq_len - copied - 1
        tokens = torch.randint(0, blank, (rows, copied), generator=generator)
        if self.placement == "uniform":
            positions = sample_distinct(rows, copied, (region,), generator)[0].sort(dim=1).values
        else:
            gaps = torch.randint(0, copied, (rows, region - copied), generator=generator)
            before = torch.zeros(rows, copied, dtype=torch.int64).scatter_add_(1, gaps, torch.ones_like(gaps))
            positions = before.cumsum(dim=1).add_(torch.arange(copied))
        inputs = torch.full((rows, self.seq_len), blank, dtype=torch.int64)
        inputs.scatter_(1, positions, tokens)
        inputs[:, region] = blank + 1
        targets = torch.full((rows, self.seq_len), IGNORE_INDEX, dtype=torch.int64)
        targets[:, region + 1 :] = tokens
        return self._batch(inputs, targets)
