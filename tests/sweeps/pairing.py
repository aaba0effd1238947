"""What two runs of a study share before training: their initial weights and their first training batch."""

from __future__ import annotations

import torch

from loglinear.models import build_model
from loglinear.runs.config import RunConfig
from loglinear.synthetics.datamodule import SyntheticDataModule


def initial_weights(cfg: RunConfig) -> dict[str, torch.Tensor]:
    return dict(build_model(cfg.model, seed=cfg.train.seed).named_parameters())


def drawn_apart(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> set[str]:
    """The parameters both models have whose initial values differ."""
    return {name for name in set(a) & set(b) if not torch.equal(a[name], b[name])}


def same_first_batch(a: RunConfig, b: RunConfig) -> bool:
    batches = [next(iter(SyntheticDataModule(cfg.data).train_dataloader())) for cfg in (a, b)]
    return all(torch.equal(batches[0][k], batches[1][k]) for k in ("inputs", "targets"))
