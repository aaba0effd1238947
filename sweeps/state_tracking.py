"""State-tracking measures of a run: Grazzi et al.'s scaled accuracy and the lengths it was trained on.

Scaled accuracy (Grazzi et al. 2025, "Unlocking State-Tracking in Linear RNNs Through Negative
Eigenvalues") maps chance to 0 and a perfect model to 1: (acc - 1/C) / (1 - 1/C) with C the task's
number of classes, so runs of tasks with different C read on one scale.
"""

from __future__ import annotations

from typing import Any

from loglinear.sweeps.results import Record, lookup
from loglinear.synthetics.registry import get_task

SEQ_LEN_PREFIX = "test/acc/seq_len="
SEQ_ACC_PREFIX = "test/acc_seq/seq_len="


def num_classes(record: Record) -> int:
    return get_task(record.task, **(lookup(record.config, "data.task_args") or {})).num_classes


def scaled(accuracy: float, classes: int) -> float:
    chance = 1.0 / classes
    return (accuracy - chance) / (1.0 - chance)


def training_lengths(record: Record) -> tuple[int, int] | None:
    """The shortest and longest training sequence of the run (its task_args, or its length mixture)."""
    task_args: dict[str, Any] = lookup(record.config, "data.task_args") or {}
    mixture = lookup(record.config, "data.mixture") or []
    lengths = [entry.get("seq_len", task_args.get("seq_len")) for entry in mixture] or [task_args.get("seq_len")]
    lengths = [n for n in lengths if isinstance(n, int)]
    return (min(lengths), max(lengths)) if lengths else None
