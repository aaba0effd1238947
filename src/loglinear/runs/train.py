"""One training run: `train(cfg)` fits, early-stops, tests and leaves a verdict in the run directory.

The run directory (`cfg.out_dir`) holds:
- `config.yaml`  the resolved configuration (a rerun with another config is refused once the run has
                 made progress there: a checkpoint or a result);
- `metrics.csv`  every logged metric (`metrics_file.MetricsFile`), kept whole across resumes;
- `last.ckpt`    saved after every validation and at the end of training, and `interrupted.ckpt` when a
                 signal stopped the run; a rerun resumes from the newer on exactly the data stream and
                 validation schedule it would have seen (batches are keyed by (seed, step)), and only under
                 the configuration that made it, which each records (`checkpoints.IDENTITY`);
- `result.json`  written atomically at the end: `status` (early_stopped, max_steps, diverged,
                 failed), `val_accuracy` (best), `step`, `steps_to_threshold` (the step at which the run
                 became solved: validation accuracy strictly above `train.early_stop_threshold`, or above SOLVED
                 when early stopping is off, on `train.threshold_evals` consecutive validations; null when it
                 never did; runs/stopping.py), `convergence` (how it ended: threshold, plateau, improving,
                 diverged or failed, runs/stopping.py), `stop_reason`, `params`,
                 `wall_time_s`, `state_size` (runs/state_size.py), `peak_memory_bytes` (the most GPU
                 memory torch held for tensors during this session of the run,
                 `torch.cuda.max_memory_allocated`; null off CUDA),
                 the final validation and test metrics (per slice), `implementations` (per mixer that runs
                 the log-linear operator: each implementation it ran in this session and the fused
                 kernels' self-check verdict it relied on), `recall` for MQAR (runs/recall_levels.py:
                 test accuracy by the Fenwick level and the distance of the recalled key, and the state held
                 at the query positions), `machine` (runs/machine.py: the processor, torch's CPU instruction set,
                 the GPU, torch's version and threads of the session that wrote the result) and `error`.
- `wandb/`       the offline wandb run (unless `logger.wandb.mode=disabled`).
- `.lock`        held while a process trains the run: a second process is refused.
A run whose result.json says early_stopped, max_steps or diverged is finished and is not redone.
An interrupted run (SIGINT, SIGTERM, kill -9, a full disk) resumes to the same validation rows, result
(apart from wall time and peak memory) and final weights as an uninterrupted one.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import math
import os
import sys
import time
import traceback
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from omegaconf import OmegaConf

from loglinear.kernels.cpp_compiler import cpp_compiler
from loglinear.runs.checkpoints import IDENTITY, MadeWith, Resume, made_with, progress, resume_point
from loglinear.runs.config import (
    ConfigError,
    RunConfig,
    identity,
    identity_difference,
    solved_threshold,
    to_container,
    to_yaml,
)
from loglinear.runs.folder import (
    CONFIG,
    FINISHED,
    INTERRUPTED,
    LAST,
    LOCK,
    RESULT,
    DiskFull,
    exclusive,
    read_result,
    write_json_atomic,
    write_text_atomic,
)
from loglinear.runs.init_from import load_initial_weights
from loglinear.runs.interrupt import Interrupted
from loglinear.runs.machine import gpu_name, machine, started_gpu
from loglinear.runs.recall_levels import recall_summary
from loglinear.runs.state_size import state_size_summary
from loglinear.runs.stopping import convergence


def jsonable(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return x.item()
    raise TypeError(f"not JSON serialisable: {type(x).__name__}")


def train(cfg: RunConfig, callbacks: Sequence[Any] = ()) -> dict[str, Any]:
    """Run (or resume, or skip if finished) the run of `cfg`; returns its result.

    `callbacks` are extra Lightning callbacks. Raises ConfigError when out_dir holds a different run or
    another process is training it, `Interrupted` when a signal stopped it (it stays resumable),
    `DiskFull` when its disk is full (what was saved before stays trusted). Any other exception is
    recorded as status `failed` and re-raised.
    """
    check_machine(cfg)
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if not is_rank_zero():  # a data-parallel rank that Lightning started: rank 0 holds the folder and writes its files
        return _train(cfg, out, callbacks, writes=False)
    busy = f"another process is training the run in {out}; wait for it or use another out_dir"
    with exclusive(out / LOCK, busy):
        return _train(cfg, out, callbacks, writes=True)


def check_machine(cfg: RunConfig) -> None:
    """What the config asks of this machine, checked before the run folder is made: float16 mixed precision
    needs a GPU (on the CPU Lightning would run bf16-mixed while config.yaml says 16-mixed); CUDA graphs need
    CUDA; torch.compile on the CPU needs a C++ compiler."""
    on_cpu = cfg.train.accelerator == "cpu" or (cfg.train.accelerator == "auto" and not torch.cuda.is_available()
                                                and not torch.backends.mps.is_available())
    if cfg.train.precision == "16-mixed" and on_cpu:
        raise ConfigError("train.precision=16-mixed needs a GPU (float16 autocast); on the CPU use bf16-mixed "
                          "or 32-true")
    if cfg.train.cuda_graphs and on_cpu:
        raise ConfigError("train.cuda_graphs=true needs a CUDA device; on the CPU leave it false")
    if cfg.train.compile and on_cpu and cpp_compiler() is None:
        raise ConfigError("train.compile=true needs a C++ compiler on the CPU (torch.compile builds C++ there) and "
                          "none was found: install g++ (or set CXX), or set train.compile=false")


def is_rank_zero() -> bool:
    """Whether this process is rank 0 (or the only process) of its run; Lightning reads the rank that its
    launcher (or Slurm, or torchrun) put in the environment."""
    from lightning.fabric.utilities.rank_zero import rank_zero_only

    return getattr(rank_zero_only, "rank", 0) == 0


def _train(cfg: RunConfig, out: Path, callbacks: Sequence[Any], writes: bool) -> dict[str, Any]:
    previous = finished_result(cfg, out)
    if previous is not None:
        return previous
    if writes:
        write_text_atomic(out / CONFIG, to_yaml(cfg))
    started = time.time()
    try:
        result = _fit(cfg, out, started, callbacks)
    except (Interrupted, KeyboardInterrupt, DiskFull):
        raise
    except Exception as e:  # the run's verdict is "failed"; the caller decides the exit code
        if writes:
            record_failure(cfg, out, e, started)
        raise
    if not writes:
        return result
    write_result(out, result)
    return result


def finished_result(cfg: RunConfig, out: Path) -> dict[str, Any] | None:
    """The result of the run of `cfg` when `out` holds it finished (it is not redone), else None; a ConfigError
    when `out` holds another run that got somewhere, a run finished with another configuration, or progress made
    under another configuration (`check_progress`)."""
    config_path = out / CONFIG
    other = config_path.is_file() and identity(_load_config(config_path)) != identity(to_container(cfg))
    if other and _has_progress(out):
        raise ConfigError(
            f"out_dir {out} holds a run of another configuration (see its config.yaml); use a new out_dir"
        )
    try:
        previous = read_result(out)
    except ValueError as e:
        previous = None
        print(f"loglinear train: {e}; the run is resumed as if it had none", file=sys.stderr, flush=True)
    now = identity(to_container(cfg))
    if previous is not None and previous.get("status") in FINISHED:
        finished_with = previous.get("config")
        found = isinstance(finished_with, dict) and identity_difference(identity(finished_with), now)
        if found:
            raise ConfigError(f"{out} holds a run finished with another configuration ({found}; the "
                              f"config of its result.json): an edited config.yaml does not redo it; use a new out_dir")
        return previous
    check_progress(out, now)
    return None


def check_progress(out: Path, now: dict[str, Any]) -> None:
    """A ConfigError when the checkpoint the run in `out` would resume from was made under another configuration
    than `now` (an identity), in what that checkpoint records of it (`checkpoints.made_with`)."""
    resume = progress(out)
    if resume is None:
        return
    recorded = made_with(resume.checkpoint)
    found = identity_difference(recorded, now if IDENTITY in resume.checkpoint else _part(recorded, now))
    if found:
        raise ConfigError(f"{out} holds progress made with another configuration ({resume.path.name} at step "
                          f"{resume.step}: {found}), which a resume would mix with this one: restore the configuration "
                          f"it was made with, or start the run anew in a new out_dir (or with its folder moved aside)")


def _part(keys: Any, values: Any) -> Any:
    """`values` (nested dicts) at the keys of `keys` only."""
    if isinstance(keys, dict) and isinstance(values, dict):
        return {k: _part(v, values.get(k)) for k, v in keys.items()}
    return values


def record_failure(cfg: RunConfig, out: Path, error: Exception, started: float) -> None:
    """Write the `failed` result of a run that raised `error`."""
    result = {"status": "failed", "convergence": "failed", "error": f"{type(error).__name__}: {error}",
              "traceback": traceback.format_exc()}
    result.update(run_summary(cfg, None, time.time() - started, started_gpu()))
    write_json_atomic(out / RESULT, result, default=jsonable)


def write_result(out: Path, result: dict[str, Any]) -> None:
    """Write a finished run's result; its interrupted checkpoint goes (last.ckpt holds the final weights)."""
    write_json_atomic(out / RESULT, result, default=jsonable)
    with contextlib.suppress(FileNotFoundError):
        (out / INTERRUPTED).unlink()


def _load_config(path: Path) -> dict[str, Any]:
    try:
        config = OmegaConf.to_container(OmegaConf.load(path))
    except Exception as e:
        raise ConfigError(
            f"{path} cannot be read ({type(e).__name__}); move the folder aside or use a new out_dir"
        ) from None
    return config if isinstance(config, dict) else {}


def _has_progress(out: Path) -> bool:
    """Whether the run in `out` got anywhere: a checkpoint or a result other than a failure."""
    if any((out / name).is_file() for name in (LAST, INTERRUPTED)):
        return True
    with contextlib.suppress(ValueError):
        result = read_result(out)
        return result is not None and result.get("status") != "failed"
    return False


def run_summary(cfg: RunConfig, model: Any, wall: float, gpu: str | None) -> dict[str, Any]:
    summary: dict[str, Any] = {"wall_time_s": round(wall, 3), "machine": machine(gpu), "config": to_container(cfg)}
    if model is not None:
        report = model.param_report()
        summary["params"] = report.total
        summary["param_report"] = {k: getattr(report, k) for k in vars(report)}
        summary["state_size"] = state_size_summary(model, cfg.data)
        summary["implementations"] = model.implementations()
    return summary


def _fit(cfg: RunConfig, out: Path, started: float, extra_callbacks: Sequence[Any]) -> dict[str, Any]:
    from loglinear.runs.interrupt import GracefulStop

    stop = GracefulStop(out / INTERRUPTED, cfg.train.val_every)
    stop.install()  # a signal before the training loop stops at once
    try:
        return _fit_run(cfg, out, started, extra_callbacks, stop)
    finally:
        stop.uninstall()


def _fit_run(cfg: RunConfig, out: Path, started: float, extra_callbacks: Sequence[Any], stop: Any) -> dict[str, Any]:
    import lightning as L
    from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint
    from lightning.pytorch.callbacks.early_stopping import EarlyStoppingReason

    from loglinear.runs.lit import LitLanguageModel
    from loglinear.runs.metrics_file import MetricsFile
    from loglinear.runs.tracking import RunTracker
    from loglinear.synthetics import SyntheticDataModule

    quiet = not cfg.logger.progress
    if quiet:
        for name in ("lightning.pytorch", "lightning.fabric", "lightning"):
            logging.getLogger(name).setLevel(logging.ERROR)
    resume = resume_point(out)
    metrics = MetricsFile(out, keep_rows=_metrics_rows(resume))
    L.seed_everything(cfg.train.seed, workers=True, verbose=False)
    datamodule = SyntheticDataModule(cfg.data)
    set_names = {"val": datamodule.val_set_names, "test": datamodule.test_set_names}
    module = LitLanguageModel(cfg.model, cfg.train, set_names)
    if cfg.train.init_from is not None and resume is None:  # a resumed run has its own weights
        load_initial_weights(module.model, cfg.train.init_from)
    threshold = cfg.train.early_stop_threshold
    tracker = RunTracker(solved_threshold(cfg.train), metrics, stop_above_threshold=threshold is not None,
                         evals=cfg.train.threshold_evals)
    callbacks: list[Any] = [
        tracker,  # stops the run once it is solved (runs/stopping.py)
        stop,
        MadeWith(identity(to_container(cfg))),
        ModelCheckpoint(dirpath=out, filename="last", enable_version_counter=False),  # rewritten at each validation
        *extra_callbacks,
    ]
    stopper = None
    if cfg.train.patience is not None:
        stopper = EarlyStopping(monitor="val/acc", mode="max", patience=cfg.train.patience,
                                check_on_train_epoch_end=False, verbose=not quiet)
        callbacks.append(stopper)
    with _quiet_warnings():
        trainer = _trainer(cfg, out, metrics, callbacks, quiet)
        device = trainer.strategy.root_device
        if device.type == "cuda":
            torch.cuda.init()  # a fresh process has no CUDA state yet, and resetting its statistics needs one
            torch.cuda.reset_peak_memory_stats(device)  # this run's peak, not an earlier one's in this process
        trainer.fit(module, datamodule=datamodule, ckpt_path=None if resume is None else resume.path)
        if stop.requested:  # the signal came in the last step: the run resumes from its last checkpoint
            raise Interrupted(stop.signum)  # type: ignore[arg-type]
        trainer.save_checkpoint(out / LAST)  # the final weights (also off the validation grid), training over
        if module.diverged:
            status = "diverged"
        elif tracker.stopped or (stopper is not None and stopper.stopping_reason != EarlyStoppingReason.NOT_STOPPED):
            status = "early_stopped"
            tracker.stopped = True
        else:
            status = "max_steps"
        if status != "diverged" and tracker.last_val_step != trainer.global_step:
            trainer.validate(module, datamodule=datamodule, verbose=False)  # the final weights' validation
        test = {} if status == "diverged" else float_metrics(trainer.test(module, datamodule=datamodule,
                                                                          verbose=False))
        recall = None if status == "diverged" else recall_summary(module.model, cfg.data, datamodule.test_dataloader())
    metrics.save()
    _finish_wandb(trainer)
    peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None
    return run_result(cfg, status, tracker, trainer.global_step, test, recall, peak, stop_reason(cfg, tracker, stopper),
                      module.model, tracker.elapsed_before + time.time() - started,
                      gpu_name(device, trainer.num_devices))


def run_result(cfg: RunConfig, status: str, tracker: Any, step: int, test: dict[str, float],
               recall: dict[str, Any] | None, peak: int | None, reason: str | None, model: Any, wall: float,
               gpu: str | None) -> dict[str, Any]:
    """The result.json of a finished run (module docstring) from its end: `status`, its `RunTracker`, the steps
    it trained, its test metrics and recall, its peak GPU memory, why it stopped and its model."""
    result = {
        "status": status,
        "val_accuracy": tracker.best,
        "step": step,
        "steps_to_threshold": tracker.steps_to_threshold,
        "convergence": convergence(status, tracker.steps_to_threshold is not None, tracker.history,
                                   cfg.train.plateau_window, cfg.train.plateau_min_delta),
        "stop_reason": reason,
        "final_val": tracker.last_val,
        "test": test,
        "peak_memory_bytes": peak,
    }
    if recall is not None:
        result["recall"] = recall
    result.update(run_summary(cfg, model, wall, gpu))
    return result


def stop_reason(cfg: RunConfig, tracker: Any, stopper: Any) -> str | None:
    if cfg.train.early_stop_threshold is not None and tracker.steps_to_threshold is not None:
        held = "" if cfg.train.threshold_evals == 1 else f" on {cfg.train.threshold_evals} consecutive validations"
        return f"val/acc above {cfg.train.early_stop_threshold}{held} (solved at step {tracker.steps_to_threshold})"
    return None if stopper is None else stopper.stopping_reason_message


def _trainer(cfg: RunConfig, out: Path, metrics: Any, callbacks: list[Any], quiet: bool) -> Any:
    import lightning as L

    return L.Trainer(
        max_steps=cfg.train.max_steps,
        val_check_interval=cfg.train.val_every,
        check_val_every_n_epoch=None,
        num_sanity_val_steps=0,
        log_every_n_steps=min(50, cfg.train.val_every),
        logger=_loggers(cfg, out, metrics),
        callbacks=callbacks,
        enable_progress_bar=not quiet,
        enable_model_summary=not quiet,
        gradient_clip_val=cfg.train.grad_clip or None,
        precision=resolved_precision(cfg.train.precision),
        accelerator=cfg.train.accelerator,
        devices=cfg.train.devices,
        strategy=cfg.train.strategy,
        # data parallel: the training stream splits itself by rank; every rank evaluates every validation and
        # test batch, so each rank's metrics are the whole set's (and early stopping agrees across ranks)
        use_distributed_sampler=False,
        deterministic=cfg.train.deterministic,
        default_root_dir=out,
        plugins=_plugins(),
    )


def _metrics_rows(resume: Resume | None) -> int:
    """How many metrics.csv rows the checkpoint's run had written (0 for a fresh start)."""
    if resume is None:
        return 0
    return int(resume.checkpoint.get("callbacks", {}).get("RunTracker", {}).get("metrics_rows", 0))


def _plugins() -> list[Any]:
    """Inside a Slurm job, Lightning's cluster environment without its own requeue handling: the
    launcher requeues, and a stopped run checkpoints through `GracefulStop`."""
    from lightning.fabric.plugins.environments import SLURMEnvironment

    from loglinear.runs.checkpoints import AtomicCheckpointIO

    plugins: list[Any] = [AtomicCheckpointIO()]
    if SLURMEnvironment.detect():
        plugins.append(SLURMEnvironment(auto_requeue=False))
    return plugins


def resolved_precision(precision: str) -> str:
    if precision != "auto":
        return precision
    return "bf16-mixed" if torch.cuda.is_available() else "32-true"


def _loggers(cfg: RunConfig, out: Path, metrics: Any) -> list[Any]:
    loggers: list[Any] = [metrics]
    if cfg.logger.wandb.mode != "disabled":
        loggers.append(wandb_logger(cfg, out))
    return loggers


def wandb_logger(cfg: RunConfig, out: Path) -> Any:
    """The run's wandb logger: its id follows the folder, so a resumed run continues the same wandb run."""
    from lightning.pytorch.loggers import WandbLogger

    wandb = cfg.logger.wandb
    run_id = hashlib.sha1(str(out.resolve()).encode()).hexdigest()[:16]
    return WandbLogger(
        project=wandb.project, entity=wandb.entity, group=wandb.group, name=out.name,
        id=None if os.environ.get("WANDB_SWEEP_ID") else run_id,  # a wandb agent's run belongs to its sweep
        save_dir=str(out), mode=wandb.mode, resume="allow", config=to_container(cfg),
    )


def _finish_wandb(trainer: Any) -> None:
    """Close the wandb run, so a second run in this process starts its own."""
    from lightning.pytorch.loggers import WandbLogger

    for lg in trainer.loggers:
        if isinstance(lg, WandbLogger):
            lg.experiment.finish()


def float_metrics(results: list[dict[str, Any]]) -> dict[str, float]:
    return {k: float(v) for d in results for k, v in d.items() if math.isfinite(float(v))}


@contextlib.contextmanager
def _quiet_warnings():
    """Lightning's advice that does not apply to these runs (an infinite stream has no length, etc.)."""
    with warnings.catch_warnings():
        for pattern in (".*does not have many workers.*", ".*exists and is not empty.*", ".*Total length of.*",
                        ".*is an `IterableDataset`.*", ".*The number of training batches.*",
                        ".*was called without a model.*", ".*there is no last checkpoint available.*",
                        ".*isinstance.treespec, LeafSpec.*", ".*The `srun` command is available.*",
                        # data parallel: every rank evaluates the whole set, so the ranks' values agree
                        ".*when logging on epoch level in distributed setting.*"):
            warnings.filterwarnings("ignore", message=pattern)
        yield
