"""`SyntheticDataModule`: the Lightning face of the synthetic tasks (the only Lightning import here)."""

from __future__ import annotations

import signal
from collections.abc import Mapping
from typing import Any

import lightning as L
import torch
from omegaconf import DictConfig
from torch.utils.data import DataLoader

from loglinear.synthetics.arguments import check_int
from loglinear.synthetics.config import (
    DataConfig,
    TaskSet,
    as_data_config,
    check_same_vocabulary,
    evaluation_sets,
    training_set,
    validation_sets,
)
from loglinear.synthetics.streams import FixedBatches, TrainStream


class SyntheticDataModule(L.LightningDataModule):
    """Training stream, validation set and test sets of a `DataConfig`.

    Loaders (all with `batch_size=None`: the tasks return whole batches) yield dicts
    `{"inputs": (B, T), "targets": (B, T), "slices": {name: (B,)}}`; validation and test batches
    add the slice `eval_set`, the index of their set in `val_set_names` / `test_set_names`.

    - `train_dataloader()`: infinite; batch n is the batch of training step `start + n`. The start
      is `set_start_step(step)` if called, else `trainer.global_step * accumulate_grad_batches` of
      the attached trainer (restored from the checkpoint when resuming), else 0. Use an integer
      `val_check_interval` and `max_steps` with it.
    - `val_dataloader()`: one loader over every validation set, set after set (`val_set_names`:
      ["train"], or the eval set names with `validate_on: eval_sets`).
    - `test_dataloader()`: one loader over every eval set (`test_set_names`), set after set.
    Tasks are built (and their arguments checked) when the module is constructed.
    """

    def __init__(self, config: DataConfig | Mapping[str, Any] | DictConfig) -> None:
        super().__init__()
        self.config = as_data_config(config)
        self.train_set = training_set(self.config)
        self.val_sets = validation_sets(self.config)
        self.test_sets = evaluation_sets(self.config)
        self.vocab_size = check_same_vocabulary([self.train_set, *self.val_sets, *self.test_sets])
        self.num_classes = self.train_set.tasks[0].num_classes
        self._start_step: int | None = None

    @property
    def val_set_names(self) -> list[str]:
        return [s.name for s in self.val_sets]

    @property
    def test_set_names(self) -> list[str]:
        return [s.name for s in self.test_sets]

    def set_start_step(self, step: int | None) -> None:
        """Start the training stream at `step` (None: follow the trainer's global step)."""
        self._start_step = None if step is None else check_int("start step", step, minimum=0)

    def train_dataloader(self) -> DataLoader:
        trainer = self.trainer
        start = self._start_step
        if start is None:
            start = trainer.global_step * trainer.accumulate_grad_batches if trainer is not None else 0
        rank, world = (trainer.global_rank, trainer.world_size) if trainer is not None else (0, 1)
        stream = TrainStream(self.train_set, self.config.batch_size, self.config.seed, start, rank, world,
                             self.config.train_size)
        return self._loader(stream, persistent=False)

    def val_dataloader(self) -> DataLoader:
        return self._fixed_loader(self.val_sets, self.config.val_size, "validation")

    def test_dataloader(self) -> DataLoader:
        return self._fixed_loader(self.test_sets, self.config.test_size, "test")

    def _fixed_loader(self, sets: list[TaskSet], size: int, stage: str) -> DataLoader:
        batches = FixedBatches(sets, size, self.config.batch_size, self.config.seed, stage)
        return self._loader(batches, persistent=self.config.num_workers > 0)

    def _loader(self, dataset: Any, persistent: bool) -> DataLoader:
        return DataLoader(
            dataset,
            batch_size=None,
            num_workers=self.config.num_workers,
            persistent_workers=persistent,
            pin_memory=torch.cuda.is_available(),
            worker_init_fn=ignore_sigint if self.config.num_workers else None,
        )


def ignore_sigint(worker_id: int) -> None:
    """In a DataLoader worker: Ctrl-C on a terminal reaches the whole process group, and the main process
    handles it (it saves a checkpoint and stops its workers); a worker that handled it too would print the
    run's signal line and a traceback of its own. Batches draw from their own seeded generators, so the
    workers need no seeding."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
