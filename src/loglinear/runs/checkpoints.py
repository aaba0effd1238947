"""A run's checkpoints: written atomically, verified before a resume, and set aside (never trusted) when corrupt.

`last.ckpt` is saved after every validation and `interrupted.ckpt` when a run is stopped by a signal
(at the start of a training step, so the step counters and the validation schedule resume exactly). Each records
the identity of the configuration that made its progress (`IDENTITY`): a run resumes only under that one.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import IO, Any, NamedTuple

import lightning as L
import torch
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO

from loglinear.runs.folder import INTERRUPTED, LAST, write_atomic

CORRUPT_SUFFIX = ".corrupt"
IDENTITY = "run_identity"
"""The checkpoint key of the identity of the configuration that made its progress (`made_with`)."""


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning's torch checkpoint IO, writing through a temporary file and a rename."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None) -> None:
        write_atomic(path, lambda f: save(checkpoint, f))


def save(checkpoint: dict[str, Any], f: IO[bytes]) -> None:
    """`torch.save(checkpoint, f)`, a write that fails (a full disk) raised as its own OSError: torch's zip writer
    turns it into a RuntimeError (`unexpected pos`) that `write_atomic` would not know for a fault of the disk."""
    writes = _Writes(f)
    try:
        torch.save(checkpoint, writes)
    except RuntimeError:
        if writes.error is None:
            raise
        raise writes.error from None


class _Writes:
    """A file that keeps the OSError its last failed write raised."""

    def __init__(self, f: IO[bytes]) -> None:
        self.f = f
        self.error: OSError | None = None

    def write(self, data: bytes) -> int:
        try:
            return self.f.write(data)
        except OSError as e:
            self.error = e
            raise

    def flush(self) -> None:
        self.f.flush()


class MadeWith(L.Callback):
    """Records in each checkpoint Lightning writes the identity of the configuration that made it (`IDENTITY`)."""

    def __init__(self, identity: dict[str, Any]) -> None:
        self.identity = identity

    def on_save_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]) -> None:
        checkpoint[IDENTITY] = self.identity


class Resume(NamedTuple):
    """The checkpoint a run resumes from and its contents."""

    path: Path
    checkpoint: dict[str, Any]

    @property
    def step(self) -> int:
        return int(self.checkpoint.get("global_step", 0))


def _candidates(out: Path) -> list[Path]:
    """The run's checkpoints, the newest first: the order a resume tries them in."""
    candidates = [p for p in (out / LAST, out / INTERRUPTED) if p.is_file()]
    return sorted(candidates, key=lambda p: p.stat().st_mtime_ns, reverse=True)


def _read(path: Path, mmap: bool = False) -> dict[str, Any]:
    checkpoint = torch.load(path, map_location="cpu", weights_only=False, mmap=mmap)
    if not isinstance(checkpoint, dict) or "state_dict" not in checkpoint:
        raise ValueError("not a Lightning checkpoint")
    return checkpoint


def made_with(checkpoint: dict[str, Any]) -> dict[str, Any]:
    """What a checkpoint records of the configuration that made its progress: the run's identity (runs/config.py
    `identity`); a checkpoint written before it recorded that, the learning rate of its schedule only."""
    if isinstance(checkpoint.get(IDENTITY), dict):
        return checkpoint[IDENTITY]
    with contextlib.suppress(LookupError, TypeError):
        return {"train": {"lr": checkpoint["lr_schedulers"][0]["base_lrs"][0]}}
    return {}


def progress(out: Path) -> Resume | None:
    """The checkpoint a resume of the run in `out` would start from, read without changing anything (None: none
    readable); its tensors are mapped, not loaded."""
    for path in _candidates(out):
        with contextlib.suppress(Exception):  # unreadable: `resume_point` sets it aside
            return Resume(path, _read(path, mmap=True))
    return None


def resume_point(out: Path) -> Resume | None:
    """The newest readable checkpoint of the run in `out` (None: start from step 0).

    A checkpoint that cannot be read (a crash or a full disk while it was written by an older
    version, a truncated copy) is renamed to `<name>.corrupt` with one line on stderr saying so and
    where the run resumes instead.
    """
    set_aside = []
    for path in _candidates(out):
        try:
            checkpoint = _read(path)
        except Exception as e:  # any failure to read means the file is not to be trusted
            aside = path.with_name(path.name + CORRUPT_SUFFIX)
            path.replace(aside)
            set_aside.append(f"{path} is unreadable ({type(e).__name__}), moved to {aside.name}")
            continue
        if set_aside:
            _say(f"{'; '.join(set_aside)}; resuming from {path.name} at step {checkpoint.get('global_step', 0)}")
        return Resume(path, checkpoint)
    if set_aside:
        _say(f"{'; '.join(set_aside)}; no readable checkpoint left: starting from step 0")
    return None


def _say(line: str) -> None:
    print(f"loglinear train: {line}", file=sys.stderr, flush=True)
