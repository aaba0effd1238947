"""The work of `loglinear train --pack CONFIG...`: train the runs of resolved run configs (each run folder's
config.yaml, as a sweep writes them) as one pack; exit status as `loglinear train`'s (runs/command.py)."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from loglinear.runs.config import ConfigError, load_run_config
from loglinear.runs.folder import DiskFull, fault_line
from loglinear.runs.memory import keep_freed_memory_unless_off


def pack_command(configs: Sequence[str]) -> int:
    """Train the runs of `configs` together; the command's exit status."""
    if not configs:
        return _fail("error: --pack needs the config.yaml of each run to train (loglinear train --pack A B ...)", 2)
    try:
        cfgs = [load_run_config(path) for path in configs]
        keep_freed_memory_unless_off()  # as `loglinear train` does (runs/memory.py)
    except ConfigError as e:
        return _fail(f"error: {e}", 2)
    from loglinear.packing.train import train_pack
    from loglinear.runs.interrupt import Interrupted

    folders = ", ".join(cfg.out_dir for cfg in cfgs)
    try:
        train_pack(cfgs)
    except ConfigError as e:
        return _fail(f"error: {e}", 2)
    except Interrupted as e:
        return _fail(f"{e}; rerun the same command to resume {folders}", e.exit_code)
    except KeyboardInterrupt:
        return _fail(f"interrupted; rerun the same command to resume {folders}", 130)
    except DiskFull as e:
        return _fail(f"{e}; the checkpoints already in {folders} are intact: free space and rerun the same "
                     "command to resume", 1)
    except OSError as e:
        return _fail(fault_line(e), 1)
    except Exception as e:  # recorded in each unfinished run's result.json as status "failed"
        return _fail(f"failed: {type(e).__name__}: {e} (each unfinished run of the pack is marked failed)", 1)
    return 0


def _fail(message: str, code: int) -> int:
    print(f"loglinear train: {message}", file=sys.stderr)
    return code
