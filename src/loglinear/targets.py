"""The targets' convention shared by the data (`synthetics`) and the loss (`models`), which import
nothing from each other."""

import torch
from torch import Tensor

IGNORE_INDEX = -100
"""Target value of positions that are not scored (PyTorch's cross-entropy default)."""


def allowed_tokens(allowed: Tensor, vocab_size: int) -> Tensor:
    """`(..., vocab_size)` bool from a batch's `allowed` bitmasks `(...)` int64: token c is a right answer where
    bit c is set (a task with several right answers at a position sets one bit per answer)."""
    return (allowed[..., None] >> torch.arange(vocab_size, device=allowed.device)) & 1 == 1
