"""`LitLanguageModel`: the LightningModule around `build_model`, trained as `TrainConfig` says.

One shared step serves training, validation and test: logits only at the scored positions, the
cross-entropy there, and accuracies (runs/evaluation.py, which names the evaluation metrics).
`train/loss`, `train/acc`, `train/lr` are logged every log_every_n_steps (the accuracy is computed on those steps
only, over the examples with a scored position; a batch without one computes none, and Lightning writes the
last one it logged again).
"""

from __future__ import annotations

from typing import Any

import lightning as L
import torch
from torch import Tensor

from loglinear.models.backbone import LanguageModel, build_model
from loglinear.models.config import ModelConfig
from loglinear.models.optim import param_groups
from loglinear.runs.config import TrainConfig
from loglinear.runs.evaluation import Evaluation, count_transitions, example_accuracy, score, transition_fractions

RECOMPILE_LIMIT = 64
"""Compiled variants a block may have before torch falls back to running it eagerly (torch's default: 8)."""


def compile_blocks(model: LanguageModel, train_cfg: TrainConfig) -> None:
    """torch.compile each block of `model` in place when `train.compile` says so (with CUDA graphs when
    `train.cuda_graphs` does).

    The blocks, not the whole model: the model picks the scored positions by a boolean mask, whose
    data-dependent size would split its graph anyway. In place (`Module.compile`), so parameter names and
    checkpoints are those of an eager run. Each shape a block sees compiles once, with static shapes (the chunk
    path's loops follow the sequence length): a variant per sequence length and batch size of training and of
    evaluation, with and without gradients (10 in a run of the paper's MQAR preset: 3 lengths, its evaluation's
    last batches smaller); torch's recompile limit is raised to RECOMPILE_LIMIT, so that none runs eagerly."""
    if train_cfg.compile:
        torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, RECOMPILE_LIMIT)
        for block in model.blocks:
            block.compile(mode="reduce-overhead" if train_cfg.cuda_graphs else None, dynamic=False)


class LitLanguageModel(L.LightningModule):
    """Trains a `build_model(model_cfg, seed=train_cfg.seed)` language model on scored positions only."""

    def __init__(self, model_cfg: ModelConfig, train_cfg: TrainConfig, set_names: dict[str, list[str]] | None = None):
        super().__init__()
        self.model_cfg, self.train_cfg = model_cfg, train_cfg
        self.model = build_model(model_cfg, seed=train_cfg.seed)
        compile_blocks(self.model, train_cfg)
        self.set_names = set_names or {}  # stage -> names of its evaluation sets (the `eval_set` slice)
        self.diverged = False
        self._evaluations: dict[str, Evaluation] = {}  # by stage, while its batches are added

    def forward(self, inputs: Tensor, score_mask: Tensor | None = None) -> Tensor:
        return self.model(inputs, score_mask)

    def shared_step(self, batch: dict[str, Any], counts: bool = True,
                    fused: bool = False) -> tuple[Tensor, dict[str, Tensor]]:
        """Loss over the scored positions and per-example (correct, scored) counts (none without `counts`;
        `evaluation.score`, fused with the LM head when `fused`)."""
        return score(self.model, batch, counts, fused)

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> Tensor | None:
        logged = self._logs_this_step()  # the accuracy (an argmax over the vocabulary) only where it is written
        loss, counts = self.shared_step(batch, counts=logged, fused=self.train_cfg.fused_loss)
        if not torch.isfinite(loss):
            self.diverged = True
            self.trainer.should_stop = True
            return None  # no backward on a non-finite loss; the run ends as `diverged`
        metrics = {"train/loss": loss}
        if logged and (has_scores := counts["scored"] > 0).any():  # over the examples with a scored position
            metrics["train/acc"] = example_accuracy(counts)[has_scores].mean()
        self.log_dict(metrics, prog_bar=True, batch_size=batch["inputs"].shape[0])
        self.log("train/lr", self.lr_schedulers().get_last_lr()[0], batch_size=1)
        return loss

    def _logs_this_step(self) -> bool:
        """Whether the loggers write this training step's metrics (every `log_every_n_steps`, as Lightning decides)."""
        return self.trainer._logger_connector.should_update_logs

    def validation_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        self._accumulate("val", batch)

    def test_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        self._accumulate("test", batch)

    def on_validation_epoch_start(self) -> None:
        count_transitions(self.model)

    def on_validation_epoch_end(self) -> None:
        self._log_accumulated("val")
        fractions = transition_fractions(self.model)
        if fractions:
            self.log_dict(fractions)

    def on_test_epoch_end(self) -> None:
        self._log_accumulated("test")

    def _accumulate(self, stage: str, batch: dict[str, Any]) -> None:
        if stage not in self._evaluations:
            self._evaluations[stage] = Evaluation(self.set_names.get(stage, []))
        self._evaluations[stage].add(batch, *self.shared_step(batch))

    def _log_accumulated(self, stage: str) -> None:
        headline, metrics = self._evaluations.pop(stage, Evaluation([])).metrics(stage)
        self.log_dict(headline, prog_bar=True)
        self.log_dict(metrics)

    def configure_optimizers(self) -> dict[str, Any]:
        cfg = self.train_cfg
        optimizer = torch.optim.AdamW(
            param_groups(self.model, cfg.weight_decay), lr=cfg.lr, betas=(cfg.beta1, cfg.beta2)
        )
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, cfg.lr_factor)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

