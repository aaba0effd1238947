"""Datasets of ready-made batches (torch only): the infinite training stream and fixed eval sets.

Every batch is a pure function of its key, so nothing depends on how many batches were drawn
before, on the DataLoader's worker count or on which process draws it.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from torch import Tensor
from torch.utils.data import Dataset, IterableDataset, get_worker_info

from loglinear.synthetics.config import TaskSet
from loglinear.synthetics.seeding import (
    COMPONENT,
    EPOCH,
    FIXED,
    TEST,
    TRAIN,
    VALIDATION,
    derive_seed,
    make_generator,
    unit_interval,
)
from loglinear.synthetics.task import Task

STAGES = {"validation": VALIDATION, "test": TEST}
FIXED_CHUNK = 256
"""Examples per draw of a fixed training set (`data.train_size`): the set is the same whatever `data.batch_size`."""


def fixed_chunks(task: Task, seed: int, size: int, *component: int) -> Iterator[dict[str, Any]]:
    """The fixed training set of `size` examples of `task`, in draws of FIXED_CHUNK examples: draw c is keyed by
    (seed, FIXED, c), the last cut to the set's size (a mixture's component i: (seed, FIXED, i, c)). The set is the
    first `size` examples of these draws, so a larger set holds a smaller one (same seed) as its start, and
    `data.batch_size` plays no part."""
    for chunk, start in enumerate(range(0, size, FIXED_CHUNK)):
        batch = task.sample(FIXED_CHUNK, derive_seed(seed, FIXED, *component, chunk)).to_dict()
        yield _rows(batch, slice(0, min(FIXED_CHUNK, size - start)))


def component_sizes(weights: Sequence[float], size: int) -> list[int]:
    """How many of a fixed set's `size` examples each mixture component holds: its share by weight, rounded by the
    largest remainders (ties to the earlier component), so they sum to `size` (zoology's Based mix, whose weights are
    its example counts, at their sum: those counts exactly)."""
    total = sum(weights)
    shares = [size * w / total for w in weights]
    counts = [int(s) for s in shares]
    by_remainder = sorted(range(len(shares)), key=lambda i: (counts[i] - shares[i], i))
    for i in by_remainder[: size - sum(counts)]:
        counts[i] += 1
    return counts


def _concatenated(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    """The chunks' examples in one batch dict (`inputs`, `targets`, `slices` and, where the task has it, `allowed`)."""
    return {k: ({name: torch.cat([c[k][name] for c in chunks]) for name in v} if k == "slices"
                else torch.cat([c[k] for c in chunks])) for k, v in chunks[0].items()}


def _rows(examples: dict[str, Any], rows: Tensor | slice) -> dict[str, Any]:
    """Those rows of a batch dict, every part of it."""
    return {k: ({name: x[rows] for name, x in v.items()} if k == "slices" else v[rows]) for k, v in examples.items()}


def choose_task(task_set: TaskSet, *key: int) -> Task:
    """The component of `task_set` for a batch, drawn from `key` with probability ∝ its weight."""
    if len(task_set.tasks) == 1:
        return task_set.tasks[0]
    cumulative = list(itertools.accumulate(task_set.weights))
    return task_set.tasks[bisect.bisect_right(cumulative, unit_interval(COMPONENT, *key) * cumulative[-1])]


class TrainStream(IterableDataset):
    """Batch n of the stream is the training batch of step n, keyed by (seed, step).

    Iteration starts at `start_step` (resume: the batches a run would have seen after that step).
    With W DataLoader workers, worker w yields steps start + w, start + w + W, ...: no batch is
    duplicated and the DataLoader's round-robin returns them in step order. Under data
    parallelism (world_size > 1), rank r draws batch (step * world_size + r) so ranks differ;
    with one process the key is the step itself.

    With `train_size` N, training draws from a fixed set instead: N examples drawn once (`fixed_chunks`: the
    same whatever the batch size; what `loglinear data export` writes), cycled by epochs of ceil(N / batch_size)
    batches, in an order drawn anew each epoch from (seed, epoch); batch key k is batch k mod that count of
    epoch k div it (the last batch of an epoch is smaller when batch_size does not divide N). A mixture's fixed set
    gives each component its share of N by weight (`component_sizes`: zoology's Based mix, whose weights are its
    example counts, at N = their sum holds those counts), drawn once per component (`fixed_chunks`); as in the fresh
    stream, a batch holds one component's examples: an epoch cuts each component's examples, in an order drawn from
    (seed, epoch, component), into ceil(n / batch_size) batches and visits all the components' batches in an order
    drawn from (seed, epoch).
    """

    def __init__(
        self, task_set: TaskSet, batch_size: int, seed: int, start_step: int = 0, rank: int = 0, world_size: int = 1,
        train_size: int | None = None,
    ) -> None:
        self.task_set, self.batch_size, self.seed = task_set, batch_size, seed
        self.start_step, self.rank, self.world_size = start_step, rank, world_size
        self.train_size = train_size
        self._fixed: list[dict[str, Any]] | None = None

    def batch(self, step: int) -> dict[str, Any]:
        key = step * self.world_size + self.rank
        if self.train_size is None:
            return self.fresh_batch(step, key)
        return self._fixed_batch(key)

    def fresh_batch(self, step: int, key: int) -> dict[str, Any]:
        task = choose_task(self.task_set, self.seed, TRAIN, step)
        return task.sample(self.batch_size, derive_seed(self.seed, TRAIN, key)).to_dict()

    def _fixed_batch(self, key: int) -> dict[str, Any]:
        if self._fixed is None:
            self._fixed = self._fixed_sets()
        counts = [-(-len(examples["inputs"]) // self.batch_size) for examples in self._fixed]
        epoch, index = divmod(key, sum(counts))
        if len(self._fixed) == 1:
            component, within = 0, index
            key_of_order: tuple[int, ...] = (self.seed, EPOCH, epoch)
        else:  # the epoch's batches of every component, in an order drawn from (seed, epoch)
            batches = torch.randperm(sum(counts), generator=make_generator(derive_seed(self.seed, EPOCH, epoch)))
            start = int(batches[index])
            component = bisect.bisect_right(list(itertools.accumulate(counts)), start)
            within = start - sum(counts[:component])
            key_of_order = (self.seed, EPOCH, epoch, component)
        examples = self._fixed[component]
        order = torch.randperm(len(examples["inputs"]), generator=make_generator(derive_seed(*key_of_order)))
        return _rows(examples, order[within * self.batch_size : (within + 1) * self.batch_size])

    def _fixed_sets(self) -> list[dict[str, Any]]:
        """The fixed training set, one part per component that holds examples (a single task: one part)."""
        if len(self.task_set.tasks) == 1:
            return [_concatenated(list(fixed_chunks(self.task_set.tasks[0], self.seed, self.train_size)))]
        sizes = component_sizes(self.task_set.weights, self.train_size)
        return [_concatenated(list(fixed_chunks(task, self.seed, size, i)))
                for i, (task, size) in enumerate(zip(self.task_set.tasks, sizes, strict=True)) if size]

    def __iter__(self) -> Iterator[dict[str, Any]]:
        worker = get_worker_info()
        offset, stride = (worker.id, worker.num_workers) if worker is not None else (0, 1)
        for step in itertools.count(self.start_step + offset, stride):
            yield self.batch(step)


class FixedBatches(Dataset):
    """The batches of one or more fixed evaluation sets, set after set.

    Set i holds `size` examples in batches of `batch_size` (the last may be smaller); batch b of
    set i is keyed by (seed, stage, i, b), so validation and test sets never share a seed with
    each other or with training. Each batch carries an extra `eval_set` slice: i.
    """

    def __init__(self, sets: Sequence[TaskSet], size: int, batch_size: int, seed: int, stage: str) -> None:
        self.sets, self.seed, self.stream = list(sets), seed, STAGES[stage]
        sizes = [min(batch_size, size - start) for start in range(0, size, batch_size)]
        self.index = [(i, b, n) for i in range(len(self.sets)) for b, n in enumerate(sizes)]

    def __len__(self) -> int:
        return len(self.index)

    def __getitem__(self, item: int) -> dict[str, Any]:
        set_index, batch_index, size = self.index[item]
        task = choose_task(self.sets[set_index], self.seed, self.stream, set_index, batch_index)
        batch = task.sample(size, derive_seed(self.seed, self.stream, set_index, batch_index)).to_dict()
        batch["slices"]["eval_set"] = torch.full((size,), set_index, dtype=torch.int64)
        return batch
