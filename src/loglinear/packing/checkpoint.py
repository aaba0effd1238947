"""A packed run's checkpoint in Lightning's format, and what a pack reads back from any run's checkpoint.

The file a pack writes is the one Lightning writes for the same run alone after the same validation (its weights,
its optimiser's and learning-rate schedule's state, its loops' counters, its `RunTracker`), so a run trained in a
pack resumes alone, and a run trained alone resumes in a pack.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning as L
import torch

from loglinear.models.backbone import LanguageModel
from loglinear.runs.checkpoints import IDENTITY
from loglinear.runs.config import TrainConfig
from loglinear.runs.folder import write_atomic

MODEL_PREFIX = "model."  # LitLanguageModel holds the language model as `model`
CHECKPOINT_KEY = "ModelCheckpoint{'monitor': None, 'mode': 'min', 'every_n_train_steps': 0, 'every_n_epochs': 1, " \
                 "'train_time_interval': None}"  # the state key of the ModelCheckpoint runs/train.py installs


def _progress(n: int, started: bool = True) -> dict[str, Any]:
    counts = {"ready": n, "completed": n, **({"started": n, "processed": n} if started else {})}
    return {"total": dict(counts), "current": dict(counts)}


def _loops(step: int, val_batches: int, mid_step: bool) -> dict[str, Any]:
    """Lightning's loop counters after `step` training steps: at the validation that follows them, or (`mid_step`)
    at the end of the last one's batch, where runs/interrupt.py saves an interrupted run."""
    idle = {"state_dict": {}, "batch_progress": {**_progress(0), "is_last_batch": False}}
    batches = _progress(step)
    if mid_step:  # the batch is not counted as completed before its end hooks have run
        batches["total"]["completed"] = batches["current"]["completed"] = step - 1
    optimizer = {"step": _progress(step, started=False), "zero_grad": {
        "total": {"ready": step, "completed": step, "started": step},
        "current": {"ready": step, "completed": step, "started": step}}}
    fit = {
        "state_dict": {},
        "epoch_loop.state_dict": {"_batches_that_stepped": step - 1},
        "epoch_loop.batch_progress": {**batches, "is_last_batch": False},
        "epoch_loop.scheduler_progress": _progress(step, started=False),
        "epoch_loop.automatic_optimization.state_dict": {},
        "epoch_loop.automatic_optimization.optim_progress": {"optimizer": optimizer},
        "epoch_loop.manual_optimization.state_dict": {},
        "epoch_loop.manual_optimization.optim_step_progress": _progress(0, started=False),
        "epoch_loop.val_loop.state_dict": {},
        "epoch_loop.val_loop.batch_progress": {**_progress(val_batches), "is_last_batch": True},
        "epoch_progress": {"total": {"ready": 1, "completed": 0, "started": 1, "processed": 0},
                           "current": {"ready": 1, "completed": 0, "started": 1, "processed": 0}},
    }
    predict = {"state_dict": {}, "batch_progress": _progress(0)}
    return {"fit_loop": fit, "validate_loop": idle, "test_loop": dict(idle), "predict_loop": predict}


def _scheduler(train: TrainConfig, step: int) -> dict[str, Any]:
    """LambdaLR's state after `step` steps (two parameter groups with the same rate)."""
    lr = train.lr * train.lr_factor(step)
    return {"base_lrs": [train.lr, train.lr], "last_epoch": step, "_step_count": step + 1, "_is_initial": False,
            "_get_lr_called_within_step": False, "_last_lr": [lr, lr], "lr_lambdas": [{}, {}]}


def save_checkpoint(path: Path, model: LanguageModel, train: TrainConfig, step: int, optimizer_state: dict[str, Any],
                    tracker_state: dict[str, Any], val_batches: int, made_with: dict[str, Any],
                    mid_step: bool = False) -> None:
    """Write a run's checkpoint after `step` training steps (at the validation that follows them, or `mid_step`: an
    interrupted run's, off the validation grid), atomically; `made_with`: the identity of its configuration."""
    out = path.parent
    checkpoint = {
        IDENTITY: made_with,
        "epoch": 0,
        "global_step": step,
        "pytorch-lightning_version": L.__version__,
        "state_dict": {MODEL_PREFIX + k: v for k, v in model.state_dict().items()},
        "loops": _loops(step, val_batches, mid_step),
        "callbacks": {
            "RunTracker": tracker_state,
            CHECKPOINT_KEY: {"monitor": None, "best_model_score": None, "best_model_path": str(out / "last.ckpt"),
                             "current_score": None, "dirpath": str(out), "best_k_models": {}, "kth_best_model_path": "",
                             "kth_value": torch.tensor(float("inf")), "last_model_path": ""},
        },
        "optimizer_states": [optimizer_state],
        "lr_schedulers": [_scheduler(train, step)],
    }
    write_atomic(path, lambda f: torch.save(checkpoint, f))


def model_weights(checkpoint: dict[str, Any]) -> dict[str, torch.Tensor]:
    """The language model's state dict in a run's checkpoint."""
    return {k[len(MODEL_PREFIX):]: v for k, v in checkpoint["state_dict"].items() if k.startswith(MODEL_PREFIX)}
