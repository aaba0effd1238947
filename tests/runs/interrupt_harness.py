"""Train one run and send the process a signal at a chosen point: `python interrupt_harness.py OUT_DIR HOOK STEP SIGNAL
key=value...` (HOOK: train, val or test; SIGNAL: a name such as SIGTERM, or none). Exits like `loglinear train`:
0 finished, 128 + signal when interrupted; SIGKILL kills it where it stands."""

from __future__ import annotations

import os
import signal
import sys

import lightning as L
from lightning.pytorch.trainer.states import TrainerFn

from loglinear.runs.config import load_run_config
from loglinear.runs.interrupt import Interrupted
from loglinear.runs.train import train


class SignalAt(L.Callback):
    """Send `signum` to this process once: after training step `step` (train), at the first batch of the
    validation at `step` (val), or at the first batch of the final test (test)."""

    def __init__(self, hook: str, step: int, signum: int) -> None:
        self.hook, self.step, self.signum, self.sent = hook, step, signum, False

    def _send(self) -> None:
        if not self.sent:
            self.sent = True
            os.kill(os.getpid(), self.signum)

    def on_train_batch_end(self, trainer: L.Trainer, *args) -> None:
        if self.hook == "train" and trainer.global_step == self.step:
            self._send()

    def on_validation_batch_start(self, trainer: L.Trainer, *args, **kwargs) -> None:
        if self.hook == "val" and trainer.global_step == self.step and trainer.state.fn == TrainerFn.FITTING:
            self._send()

    def on_test_batch_start(self, trainer: L.Trainer, *args, **kwargs) -> None:
        if self.hook == "test":
            self._send()


def main(out: str, hook: str, step: str, signame: str, *overrides: str) -> int:
    cfg = load_run_config(None, [*overrides, f"out_dir={out}"])
    callbacks = [] if signame == "none" else [SignalAt(hook, int(step), getattr(signal, signame))]
    try:
        train(cfg, callbacks)
    except Interrupted as e:
        return e.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
