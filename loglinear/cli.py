"""The `loglinear` command: `loglinear train ...`, `loglinear sweep ...` and `loglinear inspect RUN_DIR`."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

TRAIN_HELP = """\
loglinear train [PRESET.yaml] [key=value ...]

Train one run. PRESET is a run preset (e.g. configs/mqar_cpu.yaml); key=value overrides any config
key (model.mixer=mamba2 train.lr=3.0e-3 out_dir=runs/x). A group may be a file: data=data/parity.yaml.
Rerunning the same command resumes an interrupted run and skips a finished one.
Exit status: 0 finished (early_stopped, max_steps or diverged), 1 failed (or a full disk), 2 bad config or
a run folder in use, 130 interrupted by SIGINT (Ctrl-C), 143 by SIGTERM: rerun the same command to resume.
"""


def train_main(argv: Sequence[str]) -> int:
    from loglinear.sweeps.config import ConfigError, load_run_config

    if any(a in ("-h", "--help") for a in argv):
        print(TRAIN_HELP, end="")
        return 0
    preset = argv[0] if argv and "=" not in argv[0] else None
    overrides = list(argv[1:] if preset else argv)
    try:
        cfg = load_run_config(preset, overrides)
    except ConfigError as e:
        return _fail(f"error: {e}", 2)
    from loglinear.sweeps.files import DiskFull
    from loglinear.sweeps.interrupt import Interrupted
    from loglinear.sweeps.train import is_rank_zero, train

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
    except Exception as e:  # recorded in result.json as status "failed"
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


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in COMMANDS:
        parser = argparse.ArgumentParser(prog="loglinear", description="Log-Linear Attention experiment suite.")
        parser.add_argument("command", choices=sorted(COMMANDS),
                            help="train: one run; sweep: grids of runs; inspect: lambda by level of a log-linear run")
        parser.parse_args(argv[:1])
        return 2
    return COMMANDS[argv[0]](argv[1:])


def _sweep_main(argv: Sequence[str]) -> int:
    from loglinear.sweeps.cli import sweep_main

    return sweep_main(argv)


def _inspect_main(argv: Sequence[str]) -> int:
    from loglinear.sweeps.lambda_inspect import inspect_main

    return inspect_main(argv)


COMMANDS = {"train": train_main, "sweep": _sweep_main, "inspect": _inspect_main}
"""The subcommands of `loglinear`: name -> entry point taking the remaining arguments."""

if __name__ == "__main__":
    sys.exit(main())
