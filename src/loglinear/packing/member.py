"""`Member`: one run of a pack: its folder, data, model, records, and what it does at validations and at its end,
each as the same run alone does it (runs/train.py)."""

from __future__ import annotations

import contextlib
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader

from loglinear.models.backbone import LanguageModel, build_model
from loglinear.packing.checkpoint import model_weights, save_checkpoint
from loglinear.runs.checkpoints import resume_point
from loglinear.runs.config import RunConfig, identity, solved_threshold, to_container
from loglinear.runs.evaluation import Evaluation, count_transitions, logged, score, transition_fractions
from loglinear.runs.folder import INTERRUPTED, LAST
from loglinear.runs.init_from import load_initial_weights
from loglinear.runs.metrics_file import MetricsFile
from loglinear.runs.recall_levels import recall_summary
from loglinear.runs.tracking import RunTracker
from loglinear.runs.train import run_result, stop_reason, write_result
from loglinear.synthetics import SyntheticDataModule
from loglinear.synthetics.streams import TrainStream

LOG_EVERY = 50
"""Train metrics are logged every min(LOG_EVERY, val_every) steps, as runs/train.py's Trainer logs them."""


def to_device(batch: Any, device: torch.device) -> Any:
    """A batch (tensors in dicts) on `device`."""
    if isinstance(batch, dict):
        return {k: to_device(v, device) for k, v in batch.items()}
    return batch.to(device, non_blocking=True) if isinstance(batch, torch.Tensor) else batch


@dataclass
class Member:
    """A run of a pack. `step` counts the steps it has trained; `status` is set once it has finished."""

    cfg: RunConfig
    out: Path
    device: torch.device
    autocast: Any  # a context factory: the run's precision (runs/train.py's Lightning precision)
    datamodule: SyntheticDataModule = field(init=False)
    model: LanguageModel = field(init=False)
    metrics: MetricsFile = field(init=False)
    tracker: RunTracker = field(init=False)
    made_with: dict[str, Any] = field(init=False)  # its identity, recorded in its checkpoints
    step: int = 0
    status: str | None = None
    result: dict[str, Any] | None = None
    optimizer_state: dict[str, Any] | None = None  # torch AdamW's state_dict form, from a checkpoint
    started: float = field(default_factory=time.time)

    def __post_init__(self) -> None:
        cfg = self.cfg
        self.made_with = identity(to_container(cfg))
        resume = resume_point(self.out)
        rows = 0 if resume is None else int(resume.checkpoint.get("callbacks", {}).get("RunTracker", {})
                                             .get("metrics_rows", 0))
        self.metrics = MetricsFile(self.out, keep_rows=rows)
        self.datamodule = SyntheticDataModule(cfg.data)
        self.model = build_model(cfg.model, seed=cfg.train.seed)
        self.tracker = RunTracker(solved_threshold(cfg.train), self.metrics,
                                  stop_above_threshold=cfg.train.early_stop_threshold is not None,
                                  evals=cfg.train.threshold_evals)
        if resume is None:
            if cfg.train.init_from is not None:
                load_initial_weights(self.model, cfg.train.init_from)
        else:
            self.model.load_state_dict(model_weights(resume.checkpoint))
            self.tracker.load_state_dict(resume.checkpoint["callbacks"]["RunTracker"])
            self.optimizer_state = resume.checkpoint["optimizer_states"][0]
            self.step = resume.step
        self.model.to(self.device)

    @property
    def val_every(self) -> int:
        return self.cfg.train.val_every

    @property
    def log_every(self) -> int:
        return min(LOG_EVERY, self.val_every)

    @property
    def done_training(self) -> bool:
        """Nothing left to train: its budget is spent, or it stopped (solved) before a result was written."""
        return self.step >= self.cfg.train.max_steps or self.tracker.stopped

    def train_stream(self, start: int) -> TrainStream:
        return TrainStream(self.datamodule.train_set, self.cfg.data.batch_size, self.cfg.data.seed, start, 0, 1,
                           self.cfg.data.train_size)

    def log(self, metrics: dict[str, float], step: int, epoch: int = 0) -> None:
        """A metrics.csv row as Lightning logs it (values as `logged` or `log_train` form them)."""
        self.metrics.log_metrics({**metrics, "epoch": epoch}, step=step)

    def log_train(self, step: int, loss: float, acc: float | None, lr_step: int | None = None) -> None:
        """The train row at `step`: the loss (float32), the accuracy (float64: Lightning keeps a float64 tensor so;
        None or NaN, a batch without a scored position: not in the row) and the learning rate of step `lr_step`
        (default `step`)."""
        lr = self.cfg.train.lr * self.cfg.train.lr_factor(step if lr_step is None else lr_step)
        accuracy = {} if acc is None or math.isnan(acc) else {"train/acc": acc}
        self.log({"train/loss": logged(loss), **accuracy, "train/lr": logged(lr)}, step)

    def evaluate(self, stage: str) -> dict[str, float]:
        """The model's metrics over the stage's sets (val or test), as logged."""
        loader: DataLoader = getattr(self.datamodule, f"{stage}_dataloader")()
        names = self.datamodule.val_set_names if stage == "val" else self.datamodule.test_set_names
        evaluation = Evaluation(names)
        self.model.eval()
        if stage == "val":
            count_transitions(self.model)
        with torch.inference_mode(), self.autocast():
            for batch in loader:
                batch = to_device(batch, self.device)
                evaluation.add(batch, *score(self.model, batch))
        self.model.train()
        headline, rest = evaluation.metrics(stage)
        fractions = transition_fractions(self.model) if stage == "val" else {}
        return {k: logged(v) for k, v in {**headline, **rest, **fractions}.items()}

    def validate(self, epoch: int = 0) -> None:
        """The validation after `step` steps: its row (logged at step - 1 inside the training loop, at `step` after
        it), the tracker's record."""
        values = self.evaluate("val")
        self.log(values, self.step - 1 if epoch == 0 else self.step, epoch)
        self.tracker.record(self.step, values)

    def save(self, optimizer_state: dict[str, Any], name: str = LAST) -> None:
        """Its checkpoint: last.ckpt at a validation or its end, interrupted.ckpt off the validation grid."""
        save_checkpoint(self.out / name, self.model, self.cfg.train, self.step, optimizer_state,
                        self.tracker.state_dict(), len(self.datamodule.val_dataloader()),
                        self.made_with, mid_step=name == INTERRUPTED)

    def finish(self, status: str, optimizer_state: dict[str, Any], wall: float, gpu: str | None,
               peak: int | None) -> dict[str, Any]:
        """End the run as `status`: its final checkpoint, validation and test, and its result.json."""
        self.save(optimizer_state)
        test: dict[str, float] = {}
        recall = None
        if status != "diverged":
            if self.tracker.last_val_step != self.step:
                self.validate(epoch=1)  # the final weights' validation, off the validation grid
            tested = self.evaluate("test")
            self.log(tested, self.step, epoch=1)
            test = {k: v for k, v in tested.items() if math.isfinite(v)}
            recall = recall_summary(self.model, self.cfg.data, self.datamodule.test_dataloader())
        self.metrics.save()
        replay_to_wandb(self.cfg, self.out, self.metrics.rows)
        self.status = status
        reason = stop_reason(self.cfg, self.tracker, None)
        self.result = run_result(self.cfg, status, self.tracker, self.step, test, recall, peak, reason, self.model,
                                 self.tracker.elapsed_before + wall, gpu)
        write_result(self.out, self.result)
        best = self.result.get("val_accuracy")
        print(f"{self.out}: {status} at step {self.step}, best val/acc {'-' if best is None else f'{best:.4f}'}, "
              f"{self.result.get('wall_time_s', 0):.1f}s (packed)", flush=True)
        with contextlib.suppress(FileNotFoundError):
            (self.out / INTERRUPTED).unlink()
        return self.result


def replay_to_wandb(cfg: RunConfig, out: Path, rows: list[dict[str, Any]]) -> None:
    """The run's wandb record, as its alone run's logger makes it (runs/train.py), written from its metrics rows once
    it has finished: a pack holds one wandb run at a time."""
    if cfg.logger.wandb.mode == "disabled":
        return
    from loglinear.runs.train import wandb_logger

    logger = wandb_logger(cfg, out)
    for row in rows:
        logger.log_metrics({k: v for k, v in row.items() if k != "step"}, step=row.get("step"))
    logger.experiment.finish()


def say(line: str) -> None:
    print(f"loglinear train: {line}", file=sys.stderr, flush=True)
