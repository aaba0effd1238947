"""`RunTracker`: a Lightning callback holding a run's record so far, saved in every checkpoint."""

from __future__ import annotations

import time
from typing import Any

import lightning as L

from loglinear.runs.metrics_file import MetricsFile
from loglinear.runs.metrics_rows import validation_history
from loglinear.runs.stopping import crossing_step


class RunTracker(L.Callback):
    """Best `val/acc`, its history, the step where the run became solved (`stopping.crossing_step`: above
    `threshold` on `evals` consecutive validations; recorded whether or not the run stops there), whether the run
    has stopped there (only when `stop_above_threshold`: it then stops the trainer), the latest validation's
    metrics, the wall time of earlier sessions of a resumed run, and how many metrics.csv rows were
    written (`metrics` is saved with each checkpoint, so a resume keeps exactly the rows before it)."""

    def __init__(self, threshold: float, metrics: MetricsFile | None = None, stop_above_threshold: bool = True,
                 evals: int = 1) -> None:
        self.threshold = threshold
        self.evals = evals
        self.stop_above_threshold = stop_above_threshold
        self.metrics = metrics
        self.best: float | None = None
        self.history: list[tuple[int, float]] = []  # (steps trained, val/acc) of every validation
        self.steps_to_threshold: int | None = None
        self.last_val_step: int | None = None
        self.last_val: dict[str, float] = {}  # the metrics of the latest validation (the final one at the end)
        self.stopped = False
        self.elapsed_before = 0.0
        self._session_start = time.time()

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.stopped:  # resumed after an early stop whose result was not written yet: do not train on
            trainer.should_stop = True

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.callback_metrics.get("val/acc") is None or trainer.sanity_checking:
            return
        self.record(trainer.global_step,
                    {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("val/")})
        if self.stopped:
            trainer.should_stop = True

    def record(self, step: int, val: dict[str, float]) -> None:
        """Record the validation after `step` steps (its metrics `val`, `val/acc` among them); sets `stopped`
        once the run is solved and stops there."""
        acc = val["val/acc"]
        self.last_val_step = step
        self.last_val = val
        self.best = acc if self.best is None else max(self.best, acc)
        self.history.append((step, acc))
        if self.steps_to_threshold is None:
            self.steps_to_threshold = crossing_step(self.history, self.threshold, self.evals)
        if self.steps_to_threshold is not None and self.stop_above_threshold:
            self.stopped = True

    def state_dict(self) -> dict[str, Any]:
        return {
            "best": self.best,
            "steps_to_threshold": self.steps_to_threshold,
            "history": self.history,
            "last_val_step": self.last_val_step,
            "last_val": self.last_val,
            "stopped": self.stopped,
            "elapsed": self.elapsed_before + time.time() - self._session_start,
            "metrics_rows": self.metrics.flush() if self.metrics is not None else 0,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.best = state["best"]
        self.steps_to_threshold = state["steps_to_threshold"]
        # a checkpoint written before the history was kept: the validations its metrics.csv rows hold
        history = state.get("history", validation_history(self.metrics.rows) if self.metrics is not None else [])
        self.history = [(int(steps), float(acc)) for steps, acc in history]
        self.last_val_step = state["last_val_step"]
        self.last_val = state.get("last_val", {})
        self.stopped = state["stopped"]
        self.elapsed_before = state["elapsed"]
        self._session_start = time.time()
