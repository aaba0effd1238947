"""State-tracking measures of a run: Grazzi et al.'s scaled accuracy and the lengths it was trained on; and a
run's test accuracy per slice (`slice_values`: per test length, per number of key-value pairs).

Scaled accuracy (Grazzi et al. 2025, "Unlocking State-Tracking in Linear RNNs Through Negative
Eigenvalues") maps chance to 0 and a perfect model to 1: (acc - 1/C) / (1 - 1/C) with C the task's
number of classes, so runs of tasks with different C read on one scale.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from loglinear.protocol.results import Record, lookup
from loglinear.synthetics.registry import get_task
from loglinear.targets import IGNORE_INDEX

SEQ_LEN_PREFIX = "test/acc/seq_len="
SEQ_ACC_PREFIX = "test/acc_seq/seq_len="
LENGTH_PROBE = 8
"""Sequences sampled to find a task's first scored position (`training_lengths`)."""


def num_classes(record: Record) -> int:
    return get_task(record.task, **(lookup(record.config, "data.task_args") or {})).num_classes


def scaled(accuracy: float, classes: int) -> float:
    chance = 1.0 / classes
    return (accuracy - chance) / (1.0 - chance)


def training_lengths(record: Record) -> tuple[int, int] | None:
    """The shortest and longest sequence length the run was trained to answer: over its training sets (its
    task_args, or each entry of its length mixture), from the first scored position to the longest sequence.
    A task that scores every position (parity's default, the word problems) trains every length from 1 up."""
    task_args: dict[str, Any] = lookup(record.config, "data.task_args") or {}
    mixture = lookup(record.config, "data.mixture") or [{}]
    shortest, longest = [], []
    for entry in mixture:
        task = get_task(record.task, **{**task_args, **entry})
        seq_len = getattr(task, "seq_len", None)
        if not isinstance(seq_len, int):
            continue
        scored = (task.sample(LENGTH_PROBE, seed=0).targets != IGNORE_INDEX).any(dim=0).nonzero()
        shortest.append(int(scored[0]) + 1 if len(scored) else seq_len)
        longest.append(seq_len)
    return (min(shortest), max(longest)) if longest else None


def tested_at_several_lengths(record: Record) -> bool:
    """Whether the run's test sets span several sequence lengths (length generalisation, on a task other than
    MQAR, whose lengths are slices of one mix): only such runs are read by test length. A run tested at its one
    training length, as each of MAD's tasks is, is read by its test accuracy alone, even when the sweep's tasks
    differ in length."""
    return record.task != "mqar" and len(slice_values([record], SEQ_LEN_PREFIX)) >= 2


def accuracy_at(length: int) -> Callable[[Record], float | None]:
    """A run's test accuracy at test length `length`, scored like `Record.test_score` (paired comparisons per
    length)."""
    return lambda record: record.test_value(f"{SEQ_LEN_PREFIX}{length}")


def slice_values(records: Iterable[Record], prefix: str) -> dict[int, list[float]]:
    """Test accuracy per slice value, e.g. prefix `test/acc/num_kv_pairs=`: {4: [...], 8: [...]} over `records`."""
    values: dict[int, list[float]] = {}
    for record in records:
        for metric, value in record.test.items():
            if metric.startswith(prefix) and metric[len(prefix):].lstrip("-").isdigit():
                values.setdefault(int(metric[len(prefix):]), []).append(float(value))
    return dict(sorted(values.items()))
