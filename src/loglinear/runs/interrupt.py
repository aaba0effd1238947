"""Stopping a run on SIGINT / SIGTERM so that resuming it gives exactly the uninterrupted result.

The first signal lets the training step in flight finish. After a step off the validation grid the run
saves `interrupted.ckpt` there (Lightning resumes such a checkpoint with its step counters and
validation schedule intact); after a step on the grid it first validates, which saves `last.ckpt`, and
stops at the start of the next step. Either way it then raises `Interrupted`. A second signal stops at
once; the run then resumes from its newest checkpoint, which is just as exact, only further back.
Outside the training loop (setup, the final validation and test) a signal stops at once: those phases
are redone on resume.

Lightning's own SIGTERM handling is replaced while the loop runs: it ends a validation with a
`SystemExit` (exit status 0) and would let a scheduler read an unfinished run as a success.
"""

from __future__ import annotations

import signal
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import Any

import lightning as L
from lightning.pytorch.trainer.states import TrainerFn

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(BaseException):
    """The run was stopped by `signum` and can be resumed; the process should exit with `exit_code`."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(f"interrupted by {signal.Signals(signum).name}")

    @property
    def exit_code(self) -> int:
        return 128 + self.signum  # the shell's convention: 130 for SIGINT, 143 for SIGTERM


class GracefulStop(L.Callback):
    """Installs the signal handlers for one run and turns a signal into a checkpoint and `Interrupted`."""

    def __init__(self, checkpoint: Path, val_every: int) -> None:
        self.checkpoint, self.val_every = checkpoint, val_every
        self.signum: int | None = None
        self._in_loop = False
        self._previous: dict[int, Any] = {}

    # -- handlers ---------------------------------------------------------------------------------
    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # signals reach only the main thread; a run trained elsewhere keeps the default handling
        for signum in SIGNALS:
            self._previous.setdefault(signum, signal.getsignal(signum))
            signal.signal(signum, self._handle)

    def uninstall(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous = {}

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.signum is not None or not self._in_loop:
            self.signum = signum
            raise Interrupted(signum)
        self.signum = signum
        print(f"loglinear train: {signal.Signals(signum).name} received: saving a checkpoint after this step "
              "(send it again to stop at once)", file=sys.stderr, flush=True)

    @property
    def requested(self) -> bool:
        return self.signum is not None

    # -- Lightning hooks --------------------------------------------------------------------------
    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.install()  # after Lightning registered its own SIGTERM handler for this stage
        self._in_loop = True

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._in_loop = False

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.install()

    def on_test_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.install()

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, *args: Any) -> None:
        step = trainer.global_step
        if step % self.val_every and step < (trainer.max_steps or 0) and self._agreed(trainer):
            self._stop(trainer, save=True)  # off the validation grid: checkpoint here

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, *args: Any) -> None:
        if trainer.global_step % self.val_every == 0 and self._agreed(trainer):
            self._stop(trainer, save=False)  # the validation after the previous step saved last.ckpt

    def _agreed(self, trainer: L.Trainer) -> bool:
        if trainer.world_size > 1:  # every rank must stop at the same step (a checkpoint is a collective)
            return trainer.strategy.reduce_boolean_decision(self.requested, all=False)
        return self.requested

    def _stop(self, trainer: L.Trainer, save: bool) -> None:
        if save:
            trainer.save_checkpoint(self.checkpoint)
        self._in_loop = False
        raise Interrupted(self.signum or signal.SIGTERM)

    def on_validation_batch_start(self, trainer: L.Trainer, *args: Any, **kwargs: Any) -> None:
        self._stop_outside_fit(trainer)

    def on_test_batch_start(self, trainer: L.Trainer, *args: Any, **kwargs: Any) -> None:
        self._stop_outside_fit(trainer)

    def _stop_outside_fit(self, trainer: L.Trainer) -> None:
        if self.requested and trainer.state.fn != TrainerFn.FITTING:
            raise Interrupted(self.signum)  # type: ignore[arg-type]
