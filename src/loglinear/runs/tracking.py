"""`RunTracker`: a Lightning callback holding a run's record so far, saved in every checkpoint."""

from __future__ import annotations

import time
from typing import Any

import lightning as L

from loglinear.runs.metrics_file import MetricsFile


class RunTracker(L.Callback):
    """Best `val/acc`, the first step where it exceeded `threshold` (recorded whether or not the run stops
    there), whether the run has stopped (only when `stop_above_threshold`), the latest validation's
    metrics, the wall time of earlier sessions of a resumed run, and how many metrics.csv rows were
    written (`metrics` is saved with each checkpoint, so a resume keeps exactly the rows before it)."""

    def __init__(self, threshold: float, metrics: MetricsFile | None = None, stop_above_threshold: bool = True) -> None:
        self.threshold = threshold
        self.stop_above_threshold = stop_above_threshold
        self.metrics = metrics
        self.best: float | None = None
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
        acc = trainer.callback_metrics.get("val/acc")
        if acc is None or trainer.sanity_checking:
            return
        acc = float(acc)
        self.last_val_step = trainer.global_step
        self.last_val = {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("val/")}
        self.best = acc if self.best is None else max(self.best, acc)
        if acc > self.threshold:
            self.stopped = self.stop_above_threshold
            if self.steps_to_threshold is None:
                self.steps_to_threshold = trainer.global_step

    def state_dict(self) -> dict[str, Any]:
        return {
            "best": self.best,
            "steps_to_threshold": self.steps_to_threshold,
            "last_val_step": self.last_val_step,
            "last_val": self.last_val,
            "stopped": self.stopped,
            "elapsed": self.elapsed_before + time.time() - self._session_start,
            "metrics_rows": self.metrics.flush() if self.metrics is not None else 0,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.best = state["best"]
        self.steps_to_threshold = state["steps_to_threshold"]
        self.last_val_step = state["last_val_step"]
        self.last_val = state.get("last_val", {})
        self.stopped = state["stopped"]
        self.elapsed_before = state["elapsed"]
        self._session_start = time.time()
