"""`train_pack(cfgs)`: train several runs together as one model; each run's folder ends as its alone run's does.

A pack holds runs that share the model, task and shapes (packing/compatibility.py). Each run builds its own
model from its own seed, draws its own batches and keeps its own optimiser; the step stacks their parameters
over a leading run axis and trains them as one (packing/stacked.py): the loss is the sum of the runs' losses, so
each run's gradient is its own, and each run's AdamW, schedule and clipping are its own (packing/optimizer.py).
On the CPU a run trains to the bit as it does alone.

The step never waits for the device: whether a run's loss was finite, where it diverged and its train metrics
stay on the device until the next validation, when they are read once. A run whose loss is not finite stops
changing at once (its update is masked) and is ended as `diverged` at that validation, with the records it
would have written alone. At every validation each run is validated, logged, checkpointed and, once solved or out
of budget, tested and ended (runs/train.py's contract for its folder: config.yaml, metrics.csv, last.ckpt,
result.json); the others train on. Runs at different steps (resumed from different checkpoints) train apart
until the earlier ones catch up.

A signal (SIGINT, SIGTERM) lets the step in flight finish, then every training run saves `interrupted.ckpt` (or
keeps the `last.ckpt` of a validation at that step) and `Interrupted` is raised; a second signal stops at once.
A run's own bad input ends that run alone, as it would end alone: its folder held by another process, or holding
another run or progress made under another configuration (refused: nothing written), a `train.init_from` that is
no finished run or a checkpoint that does not load into its model (`failed`); the others train on, and the error
is raised once they have ended (a refusal before a failure). Any other error ends every unfinished run of the
pack as `failed` (rerunning retries them) and is raised.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader

from loglinear.packing.batches import PackStream
from loglinear.packing.compatibility import check_packable
from loglinear.packing.member import Member, say
from loglinear.packing.step import PackedStep
from loglinear.runs.config import ConfigError, RunConfig, to_yaml
from loglinear.runs.folder import CONFIG, INTERRUPTED, LOCK, DiskFull, exclusive, write_text_atomic
from loglinear.runs.interrupt import SIGNALS, Interrupted
from loglinear.runs.machine import gpu_name
from loglinear.runs.train import check_machine, finished_result, record_failure, resolved_precision
from loglinear.synthetics.datamodule import ignore_sigint


def _device(cfg: RunConfig) -> torch.device:
    accelerator = cfg.train.accelerator
    if accelerator in ("gpu", "cuda") or (accelerator == "auto" and torch.cuda.is_available()):
        return torch.device("cuda")
    return torch.device("cpu")


def _autocast(cfg: RunConfig, device: torch.device) -> Callable[[], Any]:
    """The run's precision as Lightning applies it: bf16-mixed autocasts the forward passes, 32-true nothing."""
    if resolved_precision(cfg.train.precision) == "bf16-mixed":
        return lambda: torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext


class _Stop:
    """The pack's signal handlers: the first signal asks to stop after the step in flight, a second stops at once."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> _Stop:
        if threading.current_thread() is threading.main_thread():
            self._previous = {s: signal.signal(s, self._handle) for s in SIGNALS}
        return self

    def __exit__(self, *exc: Any) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)

    def _handle(self, signum: int, frame: Any) -> None:
        if self.signum is not None:
            raise Interrupted(signum)
        self.signum = signum
        say(f"{signal.Signals(signum).name} received: saving the pack's checkpoints after this step "
            "(send it again to stop at once)")


class _Live:
    """The members training now: their `PackedStep`, streams and the rows to log."""

    def __init__(self, members: list[Member], device: torch.device) -> None:
        self.members = members
        self.step_of = PackedStep([m.model for m in members], [m.cfg.train for m in members], device,
                                  [m.optimizer_state for m in members])
        self.stacked = self.step_of.stacked
        data = members[0].cfg.data
        stream = PackStream([m.train_stream(m.step) for m in members], members[0].step)
        self.batches = iter(DataLoader(stream, batch_size=None, num_workers=data.num_workers,
                                       pin_memory=device.type == "cuda",
                                       worker_init_fn=ignore_sigint if data.num_workers else None))

    def step(self, t: int, autocast: Callable[[], Any]) -> None:
        """Train every run one step from `t` completed steps."""
        self.step_of(t, next(self.batches), autocast, logging=(t + 1) % self.members[0].log_every == 0)
        for m in self.members:
            m.step = t + 1

    def read(self) -> dict[str, Any]:
        return self.step_of.read()

    def release(self) -> None:
        """Hand every run's weights and optimiser state back to its member."""
        self.batches = iter(())  # its DataLoader's workers stop
        for i, m in enumerate(self.members):
            self.stacked.store(i)
            m.optimizer_state = self.step_of.optimizer_state(i, m.step)

    def optimizer_state(self, i: int, step: int) -> dict[str, Any]:
        return self.step_of.optimizer_state(i, step)


def train_pack(cfgs: Sequence[RunConfig]) -> list[dict[str, Any]]:
    """Train (or resume, or skip when finished) the runs of `cfgs` together; their results, in order.

    Raises `PackError` for runs that cannot share a pack, `Interrupted` on a signal (every run stays resumable,
    packed or alone), `DiskFull` when the disk is full; once the others have ended, the ConfigError of a run refused
    (its folder held by another process, or holding another run) or failed on its own input, or `MemberFailed`. Any
    other exception is recorded as status `failed` in every unfinished run and re-raised.
    """
    check_packable(cfgs)
    for cfg in cfgs:
        check_machine(cfg)
    device = _device(cfgs[0])
    autocast = _autocast(cfgs[0], device)
    started = time.time()
    results: list[dict[str, Any] | None] = [None] * len(cfgs)
    ended: list[Exception] = []  # the runs that their own input ended, refused or failed
    with contextlib.ExitStack() as held:
        todo = []
        for i, cfg in enumerate(cfgs):
            out = Path(cfg.out_dir)
            out.mkdir(parents=True, exist_ok=True)
            try:
                held.enter_context(exclusive(out / LOCK, f"another process is training the run in {out}; wait for "
                                                          "it or use another out_dir"))
                previous = finished_result(cfg, out)
            except ConfigError as e:  # refused as alone: nothing written
                ended.append(e)
                continue
            if previous is not None:
                results[i] = previous
                continue
            write_text_atomic(out / CONFIG, to_yaml(cfg))
            todo.append(i)
        if device.type == "cuda":
            torch.cuda.init()
            torch.cuda.reset_peak_memory_stats(device)
        members: list[tuple[int, Member]] = []
        for i in todo:
            try:
                members.append((i, Member(cfgs[i], Path(cfgs[i].out_dir), device, autocast)))
            except Exception as e:  # its train.init_from, its checkpoint: it fails as alone, the others train on
                record_failure(cfgs[i], Path(cfgs[i].out_dir), e, started)
                ended.append(ConfigError(f"{cfgs[i].out_dir}: {e}") if isinstance(e, ConfigError) else
                             MemberFailed(cfgs[i].out_dir, e))
        try:
            with _Stop() as stop:
                _train(members, device, autocast, started, stop)
        except (Interrupted, KeyboardInterrupt, DiskFull):
            raise
        except Exception as e:
            for i, m in members:
                if not m.status:
                    record_failure(cfgs[i], Path(cfgs[i].out_dir), e, started)
            raise
    for i, m in members:
        results[i] = m.result
    if ended:  # a refusal first: it leaves a run without a result, which its caller must not read as a crash
        ended.sort(key=lambda e: not isinstance(e, ConfigError))
        for e in ended[1:]:
            say(f"error: {e}" if isinstance(e, ConfigError) else f"failed: {e}")
        raise ended[0]
    return results  # type: ignore[return-value]


class MemberFailed(Exception):
    """A run of a pack that failed on its own input (its result says so) while the others trained on."""

    def __init__(self, out_dir: str, error: Exception) -> None:
        first = (str(error).splitlines() or [""])[0]
        super().__init__(f"{out_dir}: {type(error).__name__}: {first} (see {out_dir}/result.json; the other runs of "
                         f"the pack trained on)")


def _train(indexed: list[tuple[int, Member]], device: torch.device, autocast: Callable[[], Any], started: float,
           stop: _Stop) -> None:
    members = [m for _, m in indexed]
    gpu = gpu_name(device, 1)

    def peak() -> int | None:
        return torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None

    def finish(m: Member, status: str, optimizer_state: dict[str, Any]) -> None:
        m.finish(status, optimizer_state, time.time() - started, gpu, peak())

    live: _Live | None = None
    while True:
        for m in members:  # resumed with nothing left to train: only its end is left
            if m.status is None and m.done_training:
                m.optimizer_state = m.optimizer_state or {"state": {}, "param_groups": []}
                finish(m, "early_stopped" if m.tracker.stopped else "max_steps", m.optimizer_state)
        unfinished = [m for m in members if m.status is None]
        if not unfinished:
            return
        t = min(m.step for m in unfinished)
        active = [m for m in unfinished if m.step == t]
        if live is None or live.members != active:
            if live is not None:
                live.release()
            live = _Live(active, device)
        while True:
            live.step(t, autocast)
            t += 1
            ends = any(t >= m.cfg.train.max_steps for m in live.members)
            on_grid = t % live.members[0].val_every == 0
            if on_grid or ends or stop.signum is not None:
                changed = _validate(live, t, on_grid, finish)
                if stop.signum is not None:
                    _save_interrupted(live, t, on_grid)
                    raise Interrupted(stop.signum)
                if changed:
                    live.release()
                    live = None
                    break
            if any(m.step == t for m in members if m not in live.members and m.status is None):
                break  # a run resumed at this step joins


def _validate(live: _Live, t: int, on_grid: bool, finish: Callable[[Member, str, dict[str, Any]], None]) -> bool:
    """Write what each run logged since the last validation; end the diverged runs; on the grid validate and
    checkpoint the others, and end those solved or out of budget. Whether a run ended."""
    seen = live.read()
    changed = False
    for i, m in enumerate(live.members):
        rows = [(step, values[2 * i : 2 * i + 2]) for step, values in seen["rows"]]
        if not seen["alive"][i]:
            bad = seen["first_bad"][i]
            for step, (loss, acc) in rows:
                if step < bad:
                    m.log_train(step, loss, acc)
            loss, acc = seen["stale"][i]
            if loss is not None:  # Lightning logs the metrics it holds once more at the step that stopped the run
                m.log_train(bad, loss, acc, lr_step=bad - 1)
            m.step = bad + 1  # Lightning counts the skipped step
            live.stacked.store(i)
            m.validate()
            finish(m, "diverged", live.optimizer_state(i, bad))
            changed = True
            continue
        for step, (loss, acc) in rows:
            m.log_train(step, loss, acc)
        if on_grid:
            live.stacked.store(i)
            m.validate()
            m.save(live.optimizer_state(i, t))
        if m.tracker.stopped or t >= m.cfg.train.max_steps:
            live.stacked.store(i)
            finish(m, "early_stopped" if m.tracker.stopped else "max_steps", live.optimizer_state(i, t))
            changed = True
    return changed


def _save_interrupted(live: _Live, t: int, on_grid: bool) -> None:
    """Each unfinished run's checkpoint at `t` steps (the validation's last.ckpt on the grid)."""
    if on_grid:
        return
    for i, m in enumerate(live.members):
        if m.status is None:
            live.stacked.store(i)
            m.save(live.optimizer_state(i, t), INTERRUPTED)
