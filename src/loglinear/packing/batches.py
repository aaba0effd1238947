"""A training step's batches of every run of a pack as fixed-size tensors, formed on the host.

Runs draw their own batches (their own data seeds); a mixture may give runs sequences of different lengths at
one step, so sequences are padded at the end to the longest (token 0, no target: causal models read nothing
after a position, so padding changes no scored logit), and a fixed training set batches of fewer rows at one step
(the last batch of a component's epoch), so batches are padded to the most rows with rows that score nothing.
The scored positions become indices into each run's flattened batch, padded to the most any run has with weight 0:
shapes never depend on a tensor on the device, so the step needs no host synchronisation. The loss and accuracy
per run read the weights.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.utils.data import IterableDataset, get_worker_info

from loglinear.synthetics.streams import TrainStream
from loglinear.targets import IGNORE_INDEX


@dataclass
class PackedBatch:
    """inputs (runs, B, T); at (runs, P) scored positions in each run's flattened (B * T) batch, their targets,
    weights (1 scored, 0 padding) and examples (the row of the batch each belongs to); `scored` each run's count of
    scored positions (on the host: the first entries of its row); `allowed` (runs, P) the allowed answers' bitmasks
    there, for a task whose batches name them (`Batch.allowed`; None otherwise)."""

    inputs: Tensor
    at: Tensor
    targets: Tensor
    weights: Tensor
    examples: Tensor
    scored: list[int]
    allowed: Tensor | None = None

    @classmethod
    def of(cls, batches: Sequence[dict[str, Any]]) -> PackedBatch:
        runs = len(batches)
        B, T = (max(b["inputs"].shape[dim] for b in batches) for dim in (0, 1))
        inputs = torch.zeros(runs, B, T, dtype=torch.int64)
        targets = torch.full((runs, B, T), IGNORE_INDEX, dtype=torch.int64)
        allowed = torch.zeros(runs, B, T, dtype=torch.int64) if "allowed" in batches[0] else None
        for r, b in enumerate(batches):
            rows, length = b["inputs"].shape
            inputs[r, :rows, :length] = b["inputs"]
            targets[r, :rows, :length] = b["targets"]
            if allowed is not None:
                allowed[r, :rows, :length] = b["allowed"]
        flat = targets.flatten(1)
        scored = [(row != IGNORE_INDEX).nonzero()[:, 0] for row in flat]
        P = max(len(s) for s in scored)
        at = torch.zeros(runs, P, dtype=torch.int64)
        weights = torch.zeros(runs, P)
        for r, s in enumerate(scored):
            at[r, : len(s)] = s
            weights[r, : len(s)] = 1.0
        return cls(inputs, at, flat.gather(1, at).clamp_min(0), weights, at // T, [len(s) for s in scored],
                   None if allowed is None else allowed.flatten(1).gather(1, at))

    def pin_memory(self) -> PackedBatch:
        """In pinned host memory (what a DataLoader with pin_memory asks of a batch)."""
        return self._each(lambda x: x.pin_memory())

    def to(self, device: torch.device) -> PackedBatch:
        """On `device`, copied without waiting (through pinned memory) from the host."""
        def moved(x: Tensor) -> Tensor:
            if x.device == device:
                return x
            return (x.pin_memory() if device.type == "cuda" else x).to(device, non_blocking=True)

        return self._each(moved)

    def _each(self, change) -> PackedBatch:
        return PackedBatch(*map(change, (self.inputs, self.at, self.targets, self.weights, self.examples)), self.scored,
                           None if self.allowed is None else change(self.allowed))


class PackStream(IterableDataset):
    """The PackedBatch of each training step of the runs of `streams`, from step `start` on. With W DataLoader
    workers, worker w makes steps start + w, start + w + W, ... and the loader returns them in step order, as
    TrainStream's workers do: the batches are made beside the training step, not in it."""

    def __init__(self, streams: Sequence[TrainStream], start: int) -> None:
        self.streams, self.start = list(streams), start

    def __iter__(self) -> Iterator[PackedBatch]:
        worker = get_worker_info()
        offset, stride = (worker.id, worker.num_workers) if worker is not None else (0, 1)
        for step in itertools.count(self.start + offset, stride):
            yield PackedBatch.of([stream.batch(step) for stream in self.streams])


def run_losses(logits: Tensor, batch: PackedBatch) -> Tensor:
    """Each run's mean cross-entropy over its scored positions (runs,), from logits (runs, P, vocab); 0, with a zero
    gradient, for a run whose batch scores no position (as `evaluation.score` alone)."""
    runs, P = batch.at.shape
    losses = F.cross_entropy(logits.float().flatten(0, 1), batch.targets.flatten(), reduction="none")
    return (losses.view(runs, P) * batch.weights).sum(1) / batch.weights.sum(1).clamp_min(1)


def logged_losses(logits: Tensor, batch: PackedBatch) -> Tensor:
    """Each run's loss (runs,) as its run alone computes it (the mean cross-entropy over its own scored positions:
    the same value to the bit, where `run_losses` may differ in the last bit by the order of its sum)."""
    return torch.stack([F.cross_entropy(logits[r, :n].float(), batch.targets[r, :n]) if n else logits[r, :0].sum()
                        for r, n in enumerate(batch.scored)])


def run_accuracies(logits: Tensor, batch: PackedBatch, batch_size: int) -> Tensor:
    """Each run's mean, over its examples with a scored position, of the example's accuracy over them (runs,)
    float64 (a prediction is right when it is the target, or any allowed token for a batch with `allowed`); NaN for a
    run whose batch scores no position (alone, its train/acc is not logged there)."""
    scored = batch.weights.to(torch.float64)
    predicted = logits.argmax(-1)
    hits = predicted == batch.targets if batch.allowed is None else (batch.allowed >> predicted) & 1 == 1
    right = hits.to(torch.float64) * scored
    zeros = torch.zeros(batch.at.shape[0], batch_size, dtype=torch.float64, device=logits.device)
    correct = zeros.scatter_add(1, batch.examples, right)
    counts = zeros.scatter_add(1, batch.examples, scored)
    has_scores = (counts > 0).to(torch.float64)
    return (correct / counts.clamp_min(1)).sum(1) / has_scores.sum(1)
