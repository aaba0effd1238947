"""Train a pack and send the process a signal after a chosen training step: `python pack_harness.py STEP SIGNAL
CONFIG...` (SIGNAL: a name such as SIGINT, or none). Exits like `loglinear train --pack`: 0 finished, 128 + signal
when interrupted."""

from __future__ import annotations

import os
import signal
import sys

from loglinear.packing import train as pack_train
from loglinear.runs.config import load_run_config
from loglinear.runs.interrupt import Interrupted


def main(step: str, signame: str, *configs: str) -> int:
    if signame != "none":
        original = pack_train._Live.step

        def step_then_signal(self, t, autocast):
            original(self, t, autocast)
            if t + 1 == int(step):
                os.kill(os.getpid(), getattr(signal, signame))

        pack_train._Live.step = step_then_signal
    try:
        pack_train.train_pack([load_run_config(path) for path in configs])
    except Interrupted as e:
        return e.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
