"""The `loglinear` command: `loglinear train ...` (one run), `loglinear sweep run | status | report | wandb`
(grids of runs from a spec: configs/sweeps/*.yaml, format in sweeps/spec.py) and `loglinear inspect RUN_DIR`
(lambda by level of a log-linear run), `loglinear doctor` (versions, devices and the fused kernels' self-check),
`loglinear data export` (a data preset's sets as .npy files).
This module parses and dispatches; each command's work lives in its layer: runs/command.py (train),
sweeps/commands.py (sweep status, a dry run's list of runs, launching) and cli/sweep_run.py (sweep run, report and
wandb, above the runs, the protocol and the report), reports/inspect_command.py (inspect), kernels/doctor.py
(doctor), synthetics/export.py (data), imported by the command that needs it."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from loglinear.checks import int_option

# Nothing here imports torch or the layers at module level: a command imports what it needs when it runs, inside
# `main`, so that a Ctrl-C while they load is one line, not a traceback.

TRAIN_HELP = """\
loglinear train [PRESET.yaml] [key=value ...]

Train one run. PRESET is a run preset (e.g. configs/mqar_cpu.yaml); key=value overrides any config
key (model.mixer=mamba2 train.lr=3.0e-3 out_dir=runs/x). A group may be a file: data=data/parity.yaml.
Rerunning the same command resumes an interrupted run and skips a finished one.
Exit status: 0 finished (early_stopped, max_steps or diverged), 1 failed (or a full disk), 2 bad config or
a run folder in use, 130 interrupted by SIGINT (Ctrl-C), 143 by SIGTERM: rerun the same command to resume.

loglinear train --pack RUN/config.yaml RUN/config.yaml ...

Train several runs together as one model (a pack, docs/runs.md#packed-runs): runs that share the model, task
and shapes and differ in seeds, learning rate and the optimiser's other scalars, budget or init options. Each
run's folder ends as it would alone. `loglinear sweep run SPEC --pack N` writes the configs and starts the packs.
"""


def train_main(argv: Sequence[str]) -> int:
    if any(a in ("-h", "--help") for a in argv):
        print(TRAIN_HELP, end="")
        return 0
    if argv and argv[0] == "--pack":
        from loglinear.packing.command import pack_command

        return pack_command(argv[1:])
    preset = argv[0] if argv and "=" not in argv[0] else None
    overrides = argv[1:] if preset else argv
    odd = [a for a in ([preset] if preset else []) if a.startswith("-")] + \
        [a for a in overrides if "=" not in a or a.startswith("-")]
    if odd:
        where = " (--pack comes first: loglinear train --pack CONFIG ...)" if "--pack" in odd else ""
        print(f"loglinear train: error: {odd[0]!r} is neither a preset nor a key=value override{where}; usage: "
              f"{TRAIN_HELP.splitlines()[0]}", file=sys.stderr)
        return 2
    from loglinear.runs.command import train_command

    return train_command(preset, overrides)


SWEEP_HELP = """\
Grids of `loglinear train` runs. A spec (YAML: name, base, grid, zip, report, protocol; shipped ones in
configs/sweeps/) expands into runs with stable ids; each run lives in OUT/runs/<run_id> (OUT defaults to
sweeps_out/<name>). Rerunning a sweep skips finished runs and resumes interrupted ones. With a two-stage
protocol, `run` runs the selection seeds, selects each cell's learning rate, then runs the confirmation seeds.

  loglinear sweep run configs/sweeps/demo_cpu.yaml             # run locally, then print the table
  loglinear sweep run SPEC --dry-run                           # list the runs
  loglinear sweep run SPEC --runs-per-gpu 4                    # 4 runs share each GPU at a time
  loglinear sweep run SPEC --pack 32                           # up to 32 runs trained as one model per process
  loglinear sweep run SPEC --set-aside                         # an edited spec: move the runs it drops aside
  loglinear sweep run SPEC --launcher submitit --executor slurm_partition=gpu   # Slurm job array
  loglinear sweep status sweeps_out/demo_cpu                   # done / running / pending (Slurm's reason) / failed
  loglinear sweep wandb SPEC                                   # a wandb sweep file for wandb agents
  loglinear sweep report sweeps_out/demo_cpu                   # results.csv, table.md, plots
  loglinear sweep report sweeps_out/demo_cpu --lambda          # and lambda by level per cell (lambda_levels.md)
  loglinear sweep report results/mqar_state_cpu --spec configs/sweeps/mqar_state_cpu.yaml
                                # re-report from results.csv: a study whose run folders are gone

Exit status: 0 all runs finished, 1 some run failed or did not finish, or a fault of the machine (a full disk,
a folder that cannot be written), 2 bad spec or usage, 75 stopped by --time-limit with runs to go (run the same
command again), 78 stopped by it a second time in a row without any run reaching a checkpoint, 130 interrupted.
"""


def sweep_main(argv: Sequence[str]) -> int:
    from loglinear.runs.config import ConfigError
    from loglinear.runs.folder import fault_line

    parser = sweep_parser()
    try:
        args = parser.parse_args(list(argv))
    except SystemExit as e:  # --help, or a usage error (argparse has printed it)
        return int(e.code or 0)
    try:
        return args.command(args)
    except (ConfigError, FileNotFoundError, NotADirectoryError) as e:
        print(f"loglinear sweep: error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the reader of stdout stopped: `main` ends quietly
        raise
    except OSError as e:  # a fault of the machine: a full disk, a folder that cannot be written
        print(f"loglinear sweep: {fault_line(e)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("loglinear sweep: interrupted; every file written so far is whole: rerun the same command",
              file=sys.stderr)
        return 130


def sweep_parser() -> argparse.ArgumentParser:
    from loglinear.sweeps.runner import DEFAULT_RUNS_PER_GPU

    parser = argparse.ArgumentParser(prog="loglinear sweep", description=SWEEP_HELP,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="name", required=True, metavar="{run,status,report,wandb}")

    run = commands.add_parser("run", help="run a sweep (skips finished runs, resumes interrupted ones), then report")
    run.add_argument("spec", help="sweep spec YAML (e.g. configs/sweeps/demo_cpu.yaml)")
    run.add_argument("--out", help="output folder (default: sweeps_out/<name>)")
    at_a_time = run.add_mutually_exclusive_group()
    at_a_time.add_argument("--workers", type=int_option(1),
                           help="runs at a time, dealt round-robin over the visible GPUs (default: --runs-per-gpu "
                                "on a GPU machine, else one per CPU core); with submitit: the array's parallelism")
    at_a_time.add_argument("--runs-per-gpu", type=int_option(1), metavar="K",
                           help=f"local launcher, GPU machines: K runs share each visible GPU "
                                f"(default {DEFAULT_RUNS_PER_GPU})")
    run.add_argument("--dry-run", action="store_true", help="list the runs and their status; run nothing")
    run.add_argument("--launcher", choices=("local", "submitit"), default="local",
                     help="local processes (default), or a Slurm job array through submitit")
    run.add_argument("--executor", action="append", default=[], metavar="KEY=VALUE",
                     help="submitit AutoExecutor parameter (repeatable), e.g. slurm_partition=gpu timeout_min=600 "
                          "cpus_per_task=8 gpus_per_node=1, or cluster=local")
    run.add_argument("--quiet", action="store_true", help="no progress line")
    run.add_argument("--pack", type=int_option(1), metavar="N",
                     help="train up to N runs that share the model, task and shapes together as one model, in one "
                          "process (or array task) each: the same results, far fewer steps on a GPU "
                          "(docs/runs.md#packed-runs)")
    run.add_argument("--time-limit", type=int_option(1), metavar="S",
                     help="local launcher: after S seconds start nothing more, stop the running runs after they save "
                          "their checkpoints and exit with status 75 (not finished: run the same command again); 78 "
                          "the second time in a row that no run reached a checkpoint (the limit is too short)")
    run.add_argument("--set-aside", action="store_true",
                     help="the spec was edited on purpose: move the finished or started runs it no longer plans, and "
                          "the report that holds them, into OUT/aside/<date>-<time>/ (nothing is deleted), then run; "
                          "without it such a spec is refused before anything is written")
    run.set_defaults(command=_run)

    status = commands.add_parser("status", help="each run's status from its folder and Slurm's queue (submits nothing)")
    status.add_argument("dir", help="the sweep's output folder (holding manifest.json)")
    status.set_defaults(command=_status)

    report = commands.add_parser("report", help="write results.csv, table.md and plots of a sweep folder")
    report.add_argument("dir", help="the sweep's output folder (holding manifest.json); with --spec, where the "
                                    "re-report goes")
    report.add_argument("--spec", help="re-report a study whose run folders are gone from its results.csv and this "
                                       "spec (the one it was run from)")
    report.add_argument("--from-results", metavar="CSV",
                        help="with --spec: the results.csv to re-report (default: DIR/results.csv)")
    report.add_argument("--lambda", dest="lambda_levels", action="store_true",
                        help="also inspect the log-linear runs each cell reports and plot lambda by level per cell "
                             "(lambda_levels.md)")
    report.add_argument("--force", action="store_true",
                        help="replace the report there even when this one has fewer finished runs")
    report.set_defaults(command=_report)

    wandb = commands.add_parser("wandb", help="write a wandb sweep file whose runs are `loglinear train` commands")
    wandb.add_argument("spec", help="sweep spec YAML")
    wandb.add_argument("--out", help="output folder of the runs (default: sweeps_out/<name>)")
    wandb.set_defaults(command=_wandb)
    return parser


def _run(args: argparse.Namespace) -> int:
    from loglinear.cli.sweep_run import run_sweep
    from loglinear.sweeps.commands import Launch

    deadline = None if args.time_limit is None else time.monotonic() + args.time_limit
    launch = Launch(args.launcher, args.workers, args.runs_per_gpu, tuple(args.executor), args.quiet, args.pack,
                    deadline)
    return run_sweep(args.spec, args.out, launch, dry_run=args.dry_run, set_aside=args.set_aside)


def _status(args: argparse.Namespace) -> int:
    from loglinear.sweeps.commands import print_status

    return print_status(Path(args.dir))


def _report(args: argparse.Namespace) -> int:
    from loglinear.cli.sweep_run import report_sweep

    return report_sweep(Path(args.dir), lambda_levels=args.lambda_levels, spec=args.spec,
                        from_results=args.from_results, force=args.force)


def _wandb(args: argparse.Namespace) -> int:
    from loglinear.cli.sweep_run import write_wandb

    return write_wandb(args.spec, args.out)


INSPECT_HELP = """\
Where lambda puts its weight in a trained log-linear run: loads RUN_DIR's config.yaml and last.ckpt,
runs the run's validation data through the model and writes RUN_DIR/lambda_levels.csv (per layer,
head and level: mean, std and quantiles of lambda over the tokens where the level is occupied, and
the mean effective weight), RUN_DIR/lambda_levels.png and, for MQAR, RUN_DIR/lambda_recall.csv (the
effective weight of each level at the queries, by the level holding the recalled key, beside its
lambda = 1 control). Exit status: 0 written, 1 a full disk or a
folder that cannot be written, 2 not a log-linear run, no checkpoint, a config.yaml or checkpoint that
cannot be read or do not match, or bad arguments, 130 interrupted.
"""


def inspect_main(argv: Sequence[str]) -> int:
    from loglinear.reports.lambda_inspect import PROBE_SEQUENCES

    parser = argparse.ArgumentParser(prog="loglinear inspect", description=INSPECT_HELP,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", help="a run's out_dir (holding config.yaml and last.ckpt)")
    parser.add_argument("--device", default="auto", help="auto (CUDA if available), cpu, cuda or cuda:N")
    parser.add_argument("--batches", type=int_option(1), default=None, help="validation batches to read (default: all)")
    parser.add_argument("--probe-sequences", type=int_option(0), default=PROBE_SEQUENCES,
                        help="sequences of each length the effective weights are measured on "
                             f"(default {PROBE_SEQUENCES}; 0: none)")
    try:
        args = parser.parse_args(list(argv))
    except SystemExit as e:
        return int(e.code or 0)
    from loglinear.reports.inspect_command import inspect_command

    return inspect_command(args.run_dir, args.device, args.batches, args.probe_sequences)


DATA_HELP = """\
loglinear data export PRESET OUT --train-size N [key=value ...]

Write the data of a data preset (configs/data/*.yaml, with key=value overrides of its keys) as NumPy files
another framework reads without this package: the fixed training set of N examples (what a run with this preset
and data.train_size=N trains on), every validation and test set, and OUT/data.json naming each file's set, the
arguments (data.train_size: N) and the seeds. The export makes OUT, a new folder, and writes it whole or not at
all: an interruption (SIGINT, SIGTERM) or a full disk leaves nothing.
Exit status: 0 written, 1 a fault of the machine (a full disk, a folder that cannot be written, no memory left),
2 bad preset, overrides or usage (a preset a run refuses, OUT empty or existing), 130 interrupted (143 by SIGTERM).
"""


def data_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="loglinear data", description=DATA_HELP,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="name", required=True, metavar="{export}")
    export = commands.add_parser("export", help="write a preset's training, validation and test sets as .npy files")
    export.add_argument("preset", help="a data preset (YAML), e.g. configs/data/in_context_recall.yaml")
    export.add_argument("out", help="the new folder to write (the export makes it)")
    export.add_argument("--train-size", type=int_option(1), required=True, help="training examples to write")
    return parser


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where SIGINT raises KeyboardInterrupt: the same clean-up, and the shell's status 143."""


def _terminated(signum: int, frame: object) -> None:
    raise Terminated()


def data_main(argv: Sequence[str]) -> int:
    parser = data_parser()
    try:
        args, overrides = parser.parse_known_args(list(argv))  # key=value overrides may follow the options
        odd = [a for a in overrides if "=" not in a or a.startswith("-")]
        if odd:
            parser.error(f"unrecognized arguments: {' '.join(odd)} (overrides are key=value)")
    except SystemExit as e:
        return int(e.code or 0)
    from omegaconf.errors import OmegaConfBaseException

    from loglinear.runs.folder import fault_line
    from loglinear.synthetics import load_data_config
    from loglinear.synthetics.export import export_data

    previous = signal.signal(signal.SIGTERM, _terminated)  # SIGTERM leaves nothing either
    try:
        path = export_data(load_data_config(args.preset, overrides), args.out, args.train_size)
    except (ValueError, OmegaConfBaseException) as e:
        print(f"loglinear data export: error: {str(e).splitlines()[0]}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"loglinear data export: {fault_line(e)}", file=sys.stderr)
        return 1
    except MemoryError:
        print(f"loglinear data export: out of memory drawing the sets (--train-size {args.train_size}); nothing "
              "written", file=sys.stderr)
        return 1
    except KeyboardInterrupt as e:
        how = " (SIGTERM)" if isinstance(e, Terminated) else ""
        print(f"loglinear data export: interrupted{how}; nothing written (OUT was not made)", file=sys.stderr)
        return 128 + (signal.SIGTERM if how else signal.SIGINT)
    finally:
        signal.signal(signal.SIGTERM, previous)
    print(path)
    return 0


DOCTOR_HELP = """\
loglinear doctor

Versions (Python, torch, Triton, lightning, loglinear), the devices, which implementation impl="auto" picks
on each, and the fused Triton kernels' self-check against the chunk path, run now on every CUDA device (in
float32 and bfloat16; without a CUDA device, on the CPU in Triton's interpreter, in float32). The verdicts are
stored where training reads them (LOGLINEAR_CACHE_DIR, else $XDG_CACHE_HOME/loglinear or ~/.cache/loglinear).
Exit status: 0 every check passed (or triton is not installed), 1 a check failed or its verdict could not be
stored, 2 bad arguments or an unknown LOGLINEAR_SELFCHECK, 130 interrupted.
"""


def doctor_main(argv: Sequence[str]) -> int:
    if any(a in ("-h", "--help") for a in argv):
        print(DOCTOR_HELP, end="")
        return 0
    if argv:
        print(f"loglinear doctor: takes no arguments, got {' '.join(argv)}", file=sys.stderr)
        return 2
    from loglinear.kernels.doctor import doctor_command

    try:
        return doctor_command()
    except KeyboardInterrupt:
        print("loglinear doctor: interrupted; the self-check that was running stored no verdict", file=sys.stderr)
        return 130


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in COMMANDS:
        parser = argparse.ArgumentParser(prog="loglinear", description="Log-Linear Attention experiment suite.")
        parser.add_argument("command", choices=sorted(COMMANDS),
                            help="train: one run; sweep: grids of runs; inspect: lambda by level of a log-linear run; "
                                 "doctor: versions, devices and the fused kernels' self-check; "
                                 "data: a data preset's sets as .npy files")
        parser.parse_args(argv[:1])
        return 2
    # Ctrl-C stops every command even when it was started with SIGINT ignored (a background job of a script
    # inherits that, and Python then raises no KeyboardInterrupt): a run's SIGINT before its own handler is in
    # place would be lost
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return COMMANDS[argv[0]](argv[1:])
    except KeyboardInterrupt:  # before a command's own handling: while it loads its libraries
        print(f"loglinear {argv[0]}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # whoever read stdout stopped (`loglinear sweep run --dry-run | head`): end quietly, as a shell tool does,
        # with stdout on /dev/null so the interpreter's own flush at exit cannot fail again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE


EXIT_BROKEN_PIPE = 128 + signal.SIGPIPE


COMMANDS = {"train": train_main, "sweep": sweep_main, "inspect": inspect_main, "doctor": doctor_main,
            "data": data_main}
"""The subcommands of `loglinear`: name -> entry point taking the remaining arguments."""
