"""The work of `loglinear train`: load the run's config, train it, and turn the outcome into one line and the
command's exit status (0 finished, 1 failed or a fault of the machine, 2 bad config or a folder in use, 130/143
interrupted)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from loglinear.runs.config import ConfigError, load_run_config
from loglinear.runs.folder import DiskFull, fault_line, result_of
from loglinear.runs.memory import keep_freed_memory_unless_off


def train_command(preset: str | None, overrides: Sequence[str]) -> int:
    """Train the run of `preset` and `overrides` (resuming it, or skipping it when finished); its exit status."""
    try:
        cfg = load_run_config(preset, list(overrides))
        keep_freed_memory_unless_off()  # set by the command: importing the library leaves the allocator alone
    except ConfigError as e:
        return _fail(f"error: {e}", 2)
    from loglinear.runs.interrupt import Interrupted
    from loglinear.runs.train import is_rank_zero, train

    try:
        result = train(cfg)
    except ConfigError as e:
        return _fail(f"error: {e}", 2)
    except Interrupted as e:
        return _fail(f"{e}; rerun the same command to resume {cfg.out_dir}", e.exit_code)
    except KeyboardInterrupt:
        return _fail(f"interrupted; rerun the same command to resume {cfg.out_dir}", 130)
    except DiskFull as e:
        return _fail(f"{e}; the checkpoints already in {cfg.out_dir} are intact: "
                     "free space and rerun the same command to resume", 1)
    except Exception as e:  # recorded in result.json as status "failed", unless the folder could not be written
        recorded = result_of(Path(cfg.out_dir)).get("error") == f"{type(e).__name__}: {e}"
        if isinstance(e, OSError) and not recorded:
            return _fail(fault_line(e), 1)
        return _fail(f"failed: {type(e).__name__}: {e} (see {cfg.out_dir}/result.json)", 1)
    best = result.get("val_accuracy")
    if not is_rank_zero():  # a data-parallel rank: rank 0 reports the run
        return 0
    print(
        f"{cfg.out_dir}: {result['status']} at step {result.get('step')}, "
        f"best val/acc {'-' if best is None else f'{best:.4f}'}, {result.get('wall_time_s', 0):.1f}s"
    )
    return 0


def _fail(message: str, code: int) -> int:
    print(f"loglinear train: {message}", file=sys.stderr)
    return code
