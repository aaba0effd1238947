"""One training run: `train(cfg)` fits, early-stops, tests and leaves a verdict in the run directory.

The run directory (`cfg.out_dir`) holds:
- `config.yaml`  the resolved configuration (a rerun with another config there is refused);
- `metrics.csv`  every logged metric (Lightning's CSVLogger; a resumed run appends, so the steps
                 between the last checkpoint and an interruption appear twice: the later row wins);
- `last.ckpt`    saved after every validation, and `interrupted.ckpt` on Ctrl-C / SIGTERM; a rerun
                 resumes from the newer on exactly the data stream it would have seen (batches are
                 keyed by (seed, step));
- `result.json`  written atomically at the end: `status` (early_stopped, max_steps, diverged,
                 failed), `val_accuracy` (best), `step`, `steps_to_threshold`, `params`,
                 `wall_time_s`, the final validation and test metrics (per slice), and `error`.
- `wandb/`       the offline wandb run (unless `logger.wandb.mode=disabled`).
A run whose result.json says early_stopped, max_steps or diverged is finished and is not redone.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
import os
import tempfile
import time
import traceback
import warnings
from pathlib import Path
from typing import Any, Optional

import torch
from omegaconf import OmegaConf

from loglinear.sweeps.config import ConfigError, RunConfig, to_container, to_yaml

FINISHED = ("early_stopped", "max_steps", "diverged")
STATUSES = (*FINISHED, "failed")


def write_json_atomic(path: Path, payload: dict[str, Any]) -> None:
    """Write JSON through a temporary file and a rename, so readers never see half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        json.dump(payload, f, indent=2, default=_jsonable)
    os.replace(tmp, path)


def read_result(out_dir: str | Path) -> Optional[dict[str, Any]]:
    path = Path(out_dir) / "result.json"
    return json.loads(path.read_text()) if path.is_file() else None


def _jsonable(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return x.item()
    raise TypeError(f"not JSON serialisable: {type(x).__name__}")


def train(cfg: RunConfig) -> dict[str, Any]:
    """Run (or resume, or skip if finished) the run of `cfg`; returns its result.

    Raises ConfigError when out_dir holds a different run, KeyboardInterrupt when interrupted
    (the run stays resumable). Any other exception is recorded as status `failed` and re-raised.
    """
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    text = to_yaml(cfg)
    config_path = out / "config.yaml"
    if config_path.is_file() and _identity(OmegaConf.to_container(OmegaConf.load(config_path))) != _identity(to_container(cfg)):
        raise ConfigError(f"out_dir {out} holds a run of another configuration (see its config.yaml); use a new out_dir")
    previous = read_result(out)
    if previous is not None and previous.get("status") in FINISHED:
        return previous
    config_path.write_text(text)
    started = time.time()
    try:
        result = _fit(cfg, out, started)
    except KeyboardInterrupt:
        raise
    except Exception as e:  # the run's verdict is "failed"; the caller decides the exit code
        result = {"status": "failed", "error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()}
        result.update(_summary(cfg, None, time.time() - started))
        write_json_atomic(out / "result.json", result)
        raise
    write_json_atomic(out / "result.json", result)
    return result


def _identity(config: dict[str, Any]) -> dict[str, Any]:
    """What a run computes: its config without where it lives and how it is logged (a run may move, or be
    resumed by a wandb agent)."""
    return {k: v for k, v in config.items() if k not in ("out_dir", "logger")}


def _summary(cfg: RunConfig, model: Any, wall: float) -> dict[str, Any]:
    summary: dict[str, Any] = {"wall_time_s": round(wall, 3), "config": to_container(cfg)}
    if model is not None:
        report = model.param_report()
        summary["params"] = report.total
        summary["param_report"] = {k: getattr(report, k) for k in vars(report)}
    return summary


def _fit(cfg: RunConfig, out: Path, started: float) -> dict[str, Any]:
    import lightning as L
    from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint, OnExceptionCheckpoint
    from lightning.pytorch.callbacks.early_stopping import EarlyStoppingReason

    from loglinear.models.lit import LitLanguageModel
    from loglinear.sweeps.tracking import RunTracker
    from loglinear.synthetics import SyntheticDataModule

    quiet = not cfg.logger.progress
    if quiet:
        for name in ("lightning.pytorch", "lightning.fabric", "lightning"):
            logging.getLogger(name).setLevel(logging.ERROR)
    L.seed_everything(cfg.train.seed, workers=True, verbose=False)
    datamodule = SyntheticDataModule(cfg.data)
    module = LitLanguageModel(cfg.model, cfg.train, {"val": datamodule.val_set_names, "test": datamodule.test_set_names})
    threshold = cfg.train.early_stop_threshold
    tracker = RunTracker(threshold)
    callbacks: list[Any] = [
        tracker,
        ModelCheckpoint(dirpath=out, filename="last", enable_version_counter=False),  # rewritten at each validation
        OnExceptionCheckpoint(dirpath=out, filename="interrupted"),  # Ctrl-C / SIGTERM; removed after a clean finish
    ]
    stopper = None
    if threshold is not None or cfg.train.patience is not None:
        stopper = EarlyStopping(
            monitor="val/acc", mode="max", stopping_threshold=threshold,
            patience=cfg.train.patience if cfg.train.patience is not None else 10**9,
            check_on_train_epoch_end=False, verbose=not quiet,
        )
        callbacks.append(stopper)
    trainer = L.Trainer(
        max_steps=cfg.train.max_steps,
        val_check_interval=cfg.train.val_every,
        check_val_every_n_epoch=None,
        num_sanity_val_steps=0,
        log_every_n_steps=min(50, cfg.train.val_every),
        logger=_loggers(cfg, out),
        callbacks=callbacks,
        enable_progress_bar=not quiet,
        enable_model_summary=not quiet,
        gradient_clip_val=cfg.train.grad_clip or None,
        precision=_precision(cfg.train.precision),
        accelerator=cfg.train.accelerator,
        devices=cfg.train.devices,
        strategy=cfg.train.strategy,
        deterministic=cfg.train.deterministic,
        default_root_dir=out,
    )
    with _quiet_warnings():
        trainer.fit(module, datamodule=datamodule, ckpt_path=resume_checkpoint(out))
        if trainer.interrupted:
            raise KeyboardInterrupt
        if module.diverged:
            status = "diverged"
        elif tracker.stopped or (stopper is not None and stopper.stopping_reason != EarlyStoppingReason.NOT_STOPPED):
            status = "early_stopped"
            tracker.stopped = True
        else:
            status = "max_steps"
        if status != "diverged" and tracker.last_val_step != trainer.global_step:
            trainer.validate(module, datamodule=datamodule, verbose=False)  # the final weights' validation
        final_val = _metrics(trainer, "val/")
        test = {} if status == "diverged" else _metrics_of(trainer.test(module, datamodule=datamodule, verbose=False))
    _finish_wandb(trainer)
    result = {
        "status": status,
        "val_accuracy": tracker.best,
        "step": trainer.global_step,
        "steps_to_threshold": tracker.steps_to_threshold,
        "stop_reason": None if stopper is None else stopper.stopping_reason_message,
        "final_val": final_val,
        "test": test,
    }
    result.update(_summary(cfg, module.model, tracker.elapsed_before + time.time() - started))
    return result


def resume_checkpoint(out: Path) -> Optional[Path]:
    """The newest of last.ckpt (saved at each validation) and interrupted.ckpt (saved on Ctrl-C / SIGTERM)."""
    found = [p for p in (out / "last.ckpt", out / "interrupted.ckpt") if p.is_file() and p.stat().st_size > 0]
    return max(found, key=lambda p: p.stat().st_mtime_ns, default=None)


def _precision(precision: str) -> str:
    if precision != "auto":
        return precision
    return "bf16-mixed" if torch.cuda.is_available() else "32-true"


def _loggers(cfg: RunConfig, out: Path) -> list[Any]:
    from lightning.pytorch.loggers import CSVLogger, WandbLogger

    loggers: list[Any] = [CSVLogger(save_dir=out, name="", version="")]
    wandb = cfg.logger.wandb
    if wandb.mode != "disabled":
        run_id = hashlib.sha1(str(out.resolve()).encode()).hexdigest()[:16]  # the same run after a resume
        loggers.append(
            WandbLogger(
                project=wandb.project, entity=wandb.entity, group=wandb.group, name=out.name,
                id=None if os.environ.get("WANDB_SWEEP_ID") else run_id,  # a wandb agent's run belongs to its sweep
                save_dir=str(out), mode=wandb.mode, resume="allow", config=to_container(cfg),
            )
        )
    return loggers


def _finish_wandb(trainer: Any) -> None:
    """Close the wandb run, so a second run in this process starts its own."""
    from lightning.pytorch.loggers import WandbLogger

    for lg in trainer.loggers:
        if isinstance(lg, WandbLogger):
            lg.experiment.finish()


def _metrics(trainer: Any, prefix: str) -> dict[str, float]:
    return {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith(prefix)}


def _metrics_of(results: list[dict[str, Any]]) -> dict[str, float]:
    return {k: float(v) for d in results for k, v in d.items() if math.isfinite(float(v))}


@contextlib.contextmanager
def _quiet_warnings():
    """Lightning's advice that does not apply to these runs (an infinite stream has no length, etc.)."""
    with warnings.catch_warnings():
        for pattern in (".*does not have many workers.*", ".*exists and is not empty.*", ".*Total length of.*",
                        ".*is an `IterableDataset`.*", ".*The number of training batches.*",
                        ".*was called without a model.*", ".*there is no last checkpoint available.*",
                        ".*isinstance.treespec, LeafSpec.*"):
            warnings.filterwarnings("ignore", message=pattern)
        yield
