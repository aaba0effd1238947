"""The cost of one training step of `loglinear train`, measured inside the run: its setup, validation and test left
out. Arguments are those of `loglinear train`; the run is trained as that command trains it.

    OMP_NUM_THREADS=1 python3 -m benchmarks.train_step configs/mqar_paper.yaml model=model/gated_deltanet.yaml \\
        model.d_model=16 data.batch_size=64 train.max_steps=60 train.val_every=1000 logger.wandb.mode=disabled \\
        logger.progress=false out_dir=/tmp/step
    python3 -m benchmarks.train_step --profile ...   # and torch.profiler's operators over the timed steps

At the start of every training step a callback reads the process's user and system time (getrusage), the wall
clock and the minor page faults; a step is the interval to the next start (data, forward, loss, backward,
optimiser, logging), those with a validation inside left out (and the last, which no next start ends), and so are
those in which torch.compile compiled a graph (train.compile=true compiles each new shape when it first comes).
Prints one line: the mean per step over the steps after the first `--skip` (warm-up), and their count; with
`--steps-json FILE`, each counted step's index and CPU seconds too (benchmarks/preset_step.py compares
configurations on the steps all of them counted). The mean, not the median: a mixture of lengths (the paper's
MQAR) makes steps of very different costs, and the training stream, keyed by (seed, step), gives every run of one
configuration the same steps. The CPU time of one process is the figure least disturbed by other processes on a
shared machine. out_dir must not hold a finished run (it would not train).
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import time
from pathlib import Path
from typing import Any

import lightning as L

from loglinear.runs.config import load_run_config
from loglinear.runs.memory import keep_freed_memory_unless_off
from loglinear.runs.train import train


def compiled_graphs() -> int:
    """How many graphs torch.compile has compiled in this process."""
    from torch._dynamo.utils import counters

    return counters["stats"]["unique_graphs"]


class StepClock(L.Callback):
    """Per-step user, system and wall seconds and minor page faults of the training steps after the first `skip`
    that compiled nothing; `indices` holds each one's step."""

    def __init__(self, skip: int) -> None:
        self.skip = skip
        self.steps: list[tuple[float, float, float, int]] = []
        self.indices: list[int] = []
        self._last: tuple[float, float, float, int] | None = None
        self._graphs = 0

    @staticmethod
    def _now() -> tuple[float, float, float, int]:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime, usage.ru_stime, time.perf_counter(), usage.ru_minflt

    def on_train_batch_start(self, trainer: L.Trainer, *args: Any) -> None:
        now, graphs = self._now(), compiled_graphs()
        if self._last is not None and trainer.global_step > self.skip and graphs == self._graphs:
            self.steps.append(tuple(b - a for a, b in zip(self._last, now, strict=True)))  # type: ignore[arg-type]
            self.indices.append(trainer.global_step - 1)
        self._last, self._graphs = now, graphs

    def on_validation_start(self, trainer: L.Trainer, *args: Any) -> None:
        self._last = None  # the step holding a validation is not a training step's cost

    def summary(self) -> str:
        if not self.steps:
            return "steps=0 (raise train.max_steps above --skip + 1)"
        user, system, wall, faults = (statistics.fmean(column) for column in zip(*self.steps, strict=True))
        return (f"steps={len(self.steps)} cpu_ms={1000 * (user + system):.1f} user_ms={1000 * user:.1f} "
                f"sys_ms={1000 * system:.1f} wall_ms={1000 * wall:.1f} minor_faults={faults:.0f}")


class StepProfile(L.Callback):
    """torch.profiler over the training steps after the first `skip`: the operators by self CPU time."""

    def __init__(self, skip: int) -> None:
        import torch.profiler

        self.skip = skip
        self.profiler = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
        self._on = False

    def on_train_batch_start(self, trainer: L.Trainer, *args: Any) -> None:
        if not self._on and trainer.global_step >= self.skip:
            self.profiler.__enter__()
            self._on = True

    def on_train_end(self, trainer: L.Trainer, *args: Any) -> None:
        if self._on:
            self.profiler.__exit__(None, None, None)
            self._on = False

    def table(self, rows: int = 25) -> str:
        return self.profiler.key_averages().table(sort_by="self_cpu_time_total", row_limit=rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--skip", type=int, default=10, help="steps left out at the start (default 10)")
    parser.add_argument("--profile", action="store_true", help="also print torch.profiler's table of the steps")
    parser.add_argument("--steps-json", help="write each counted step's index and CPU seconds to this file")
    args, overrides = parser.parse_known_args()
    preset = overrides[0] if overrides and "=" not in overrides[0] else None
    cfg = load_run_config(preset, overrides[1:] if preset else overrides)
    kept = keep_freed_memory_unless_off()
    clock = StepClock(args.skip)
    callbacks: list[L.Callback] = [clock]
    if args.profile:
        callbacks.append(StepProfile(args.skip))
    train(cfg, callbacks=callbacks)
    print(f"{clock.summary()} keep_freed_memory={kept}")
    if args.steps_json:
        cpu = {step: user + system for step, (user, system, _, _) in zip(clock.indices, clock.steps, strict=True)}
        Path(args.steps_json).write_text(json.dumps(cpu))
    if args.profile:
        print(callbacks[1].table())


if __name__ == "__main__":
    main()
