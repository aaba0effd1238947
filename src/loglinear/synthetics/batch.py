"""The unit every task returns: a batch of token sequences, their targets and per-example slices."""

from __future__ import annotations

from dataclasses import dataclass, field

from torch import Tensor

from loglinear.targets import IGNORE_INDEX

__all__ = ["IGNORE_INDEX", "Batch"]


@dataclass(frozen=True)
class Batch:
    """`inputs (B, T) int64`, `targets (B, T) int64` (`IGNORE_INDEX` where nothing is scored) and
    `slices`, per-example `(B,) int64` tensors that name the setting each example comes from
    (e.g. `seq_len`, `num_kv_pairs`) so metrics can be reported per slice.

    `allowed`: None, or `(B, T) int64` bitmasks for a task with several right answers at a position (RegBench: every
    symbol the automaton allows next): bit c set when token c is right there (`targets.allowed_tokens`). The target
    is the one the loss trains on; accuracy counts any allowed token as right, and the evaluation adds the total
    variation distance to the uniform distribution over the allowed tokens.

    Attributes and mapping keys both work: `batch.inputs` is `batch["inputs"]`.
    """

    inputs: Tensor
    targets: Tensor
    slices: dict[str, Tensor] = field(default_factory=dict)
    allowed: Tensor | None = None

    def __getitem__(self, key: str) -> Tensor | dict[str, Tensor] | None:
        if key not in ("inputs", "targets", "slices", "allowed"):
            raise KeyError(f"{key!r}: a Batch has keys 'inputs', 'targets', 'slices', 'allowed'")
        return getattr(self, key)

    def to_dict(self) -> dict[str, Tensor | dict[str, Tensor]]:
        """`{"inputs", "targets", "slices": {...}}` and, for a task that has them, `"allowed"`: the form the
        DataModule's loaders yield."""
        batch = {"inputs": self.inputs, "targets": self.targets, "slices": dict(self.slices)}
        return batch if self.allowed is None else {**batch, "allowed": self.allowed}
