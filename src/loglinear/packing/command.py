"""The work of `loglinear train --pack CONFIG...`: train the runs of resolved run configs (each run folder's
config.yaml, as a sweep writes them) as one pack; exit status as `loglinear train`'s (runs/command.py)."""

from __future__ import annotations

from collections.abc import Sequence

from loglinear.runs.command import fail, guarded
from loglinear.runs.config import ConfigError, load_run_config
from loglinear.runs.folder import fault_line
from loglinear.runs.memory import keep_freed_memory_unless_off


def pack_command(configs: Sequence[str]) -> int:
    """Train the runs of `configs` together; the command's exit status."""
    if not configs:
        return fail("error: --pack needs the config.yaml of each run to train (loglinear train --pack A B ...)", 2)
    try:
        cfgs = [load_run_config(path) for path in configs]
        keep_freed_memory_unless_off()  # as `loglinear train` does (runs/memory.py)
    except ConfigError as e:
        return fail(f"error: {e}", 2)
    from loglinear.packing.train import MemberFailed, train_pack

    def failure(e: Exception) -> str:  # recorded in each unfinished run's result.json (or its own) as "failed"
        if isinstance(e, OSError):
            return fault_line(e)
        if isinstance(e, MemberFailed):
            return f"failed: {e}"
        return f"failed: {type(e).__name__}: {e} (each unfinished run of the pack is marked failed)"

    return guarded(lambda: train_pack(cfgs), ", ".join(cfg.out_dir for cfg in cfgs), failure)[1]
