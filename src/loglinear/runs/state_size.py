"""The state sizes a run records in result.json: what its decoder holds per sequence at the training
length and at each test length (`Mixer.state_size`, counted per layer and over the layers)."""

from __future__ import annotations

from typing import Any

from loglinear.synthetics import DataConfig
from loglinear.synthetics.config import evaluation_sets, training_set


def state_size_summary(model: Any, data: DataConfig) -> dict[str, Any]:
    """`{"train_seq_len": T, "test_seq_lens": [...], "per_layer": {"T": n}, "total": {"T": n}}`.

    The training length is `train_seq_len`; the per-layer
    count is one layer's (every block has the same mixer); `total` adds the layers.
    """
    train = train_seq_len(data)
    tests = sorted({task.seq_len for s in evaluation_sets(data) for task in s.tasks})
    per_layer, total = {}, {}
    for seq_len in sorted({train, *tests}):
        sizes = model.state_sizes(seq_len)
        per_layer[str(seq_len)], total[str(seq_len)] = sizes[0], sum(sizes)
    return {"train_seq_len": train, "test_seq_lens": tests, "per_layer": per_layer, "total": total}


def train_seq_len(data: DataConfig) -> int:
    """The training length: the longest training sequence (a mixture's longest component)."""
    return max(task.seq_len for task in training_set(data).tasks)
