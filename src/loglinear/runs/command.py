"""The work of `loglinear train`: load the run's config, train it, and turn the outcome into one line and the
command's exit status (0 finished, 1 failed or a fault of the machine, 2 bad config or a folder in use, 130/143
interrupted)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from loglinear.runs.config import ConfigError, load_run_config
from loglinear.runs.folder import DiskFull, fault_line, result_of
from loglinear.runs.memory import keep_freed_memory_unless_off

T = TypeVar("T")


def train_command(preset: str | None, overrides: Sequence[str]) -> int:
    """Train the run of `preset` and `overrides` (resuming it, or skipping it when finished); its exit status."""
    try:
        cfg = load_run_config(preset, list(overrides))
        keep_freed_memory_unless_off()  # set by the command: importing the library leaves the allocator alone
    except ConfigError as e:
        return fail(f"error: {e}", 2)
    from loglinear.runs.train import is_rank_zero, train

    def failure(e: Exception) -> str:  # recorded in result.json as status "failed", unless it could not be written
        recorded = result_of(Path(cfg.out_dir)).get("error") == f"{type(e).__name__}: {e}"
        if isinstance(e, OSError) and not recorded:
            return fault_line(e)
        return f"failed: {type(e).__name__}: {e} (see {cfg.out_dir}/result.json)"

    result, status = guarded(lambda: train(cfg), cfg.out_dir, failure)
    if result is None or not is_rank_zero():  # a data-parallel rank: rank 0 reports the run
        return status
    best = result.get("val_accuracy")
    print(
        f"{cfg.out_dir}: {result['status']} at step {result.get('step')}, "
        f"best val/acc {'-' if best is None else f'{best:.4f}'}, {result.get('wall_time_s', 0):.1f}s"
    )
    return 0


def guarded(work: Callable[[], T], folders: str, failure: Callable[[Exception], str]) -> tuple[T | None, int]:
    """(what `work` returns, 0), or (None, the exit status) with its one line on stderr: 2 for a bad config, the
    signal's status for an interruption (resumable in `folders`), 1 for a full disk or a failure (`failure`
    gives its line)."""
    from loglinear.runs.interrupt import Interrupted

    try:
        return work(), 0
    except ConfigError as e:
        return None, fail(f"error: {e}", 2)
    except Interrupted as e:
        return None, fail(f"{e}; rerun the same command to resume {folders}", e.exit_code)
    except KeyboardInterrupt:
        return None, fail(f"interrupted; rerun the same command to resume {folders}", 130)
    except DiskFull as e:
        return None, fail(f"{e}; the checkpoints already in {folders} are intact: free space and rerun the same "
                          "command to resume", 1)
    except Exception as e:
        return None, fail(failure(e), 1)


def fail(message: str, code: int) -> int:
    print(f"loglinear train: {message}", file=sys.stderr)
    return code
