"""Where an MQAR answer comes from: for each scored position, the position of the key it recalls."""

from __future__ import annotations

import torch
from torch import Tensor

from loglinear.synthetics.batch import IGNORE_INDEX


def recall_sources(inputs: Tensor, targets: Tensor) -> Tensor:
    """`(B, T)` int64: at each scored position t, the last s <= t - 2 where the pair (inputs[t], targets[t])
    stands (inputs[s] is the queried key, inputs[s + 1] its value); -1 where t is not scored.

    Read from the tokens alone, so it serves every MQAR layout; a filler that happens to repeat the pair
    later than the pair itself counts as the source (the nearest copy is the one a model can use last).
    """
    rows, length = inputs.shape
    same_key = inputs[:, None, :-1] == inputs[:, :, None]  # (B, t, s) for s < T - 1
    same_value = inputs[:, None, 1:] == targets[:, :, None]
    s = torch.arange(length - 1)
    before = s[None, :] <= torch.arange(length)[:, None] - 2  # (t, s)
    found = same_key & same_value & before
    last = torch.where(found, s, torch.full_like(s, -1)).amax(dim=2)  # (B, T)
    scored = targets != IGNORE_INDEX
    if (last[scored] < 0).any():
        raise ValueError("a scored position has no (key, value) pair before it: not an MQAR batch")
    return torch.where(scored, last, torch.full_like(last, -1))
