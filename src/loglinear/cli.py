"""The `loglinear` command: `loglinear train ...` (one run), `loglinear sweep run | status | report | wandb`
(grids of runs from a spec: configs/sweeps/*.yaml, format in sweeps/spec.py) and `loglinear inspect RUN_DIR`
(lambda by level of a log-linear run), `loglinear doctor` (versions, devices and the fused kernels' self-check).
Heavy modules are imported by the command that needs them."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from loglinear.checks import int_option
from loglinear.reports.lambda_inspect import PROBE_SEQUENCES
from loglinear.runs.config import ConfigError
from loglinear.runs.folder import DiskFull, result_of
from loglinear.sweeps.runner import DEFAULT_RUNS_PER_GPU, SweepOutcome

if TYPE_CHECKING:
    from loglinear.sweeps.spec import Run, SweepSpec

TRAIN_HELP = """\
loglinear train [PRESET.yaml] [key=value ...]

Train one run. PRESET is a run preset (e.g. configs/mqar_cpu.yaml); key=value overrides any config
key (model.mixer=mamba2 train.lr=3.0e-3 out_dir=runs/x). A group may be a file: data=data/parity.yaml.
Rerunning the same command resumes an interrupted run and skips a finished one.
Exit status: 0 finished (early_stopped, max_steps or diverged), 1 failed (or a full disk), 2 bad config or
a run folder in use, 130 interrupted by SIGINT (Ctrl-C), 143 by SIGTERM: rerun the same command to resume.
"""


def train_main(argv: Sequence[str]) -> int:
    from loglinear.runs.config import ConfigError, load_run_config

    if any(a in ("-h", "--help") for a in argv):
        print(TRAIN_HELP, end="")
        return 0
    preset = argv[0] if argv and "=" not in argv[0] else None
    overrides = list(argv[1:] if preset else argv)
    try:
        cfg = load_run_config(preset, overrides)
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


SWEEP_HELP = """\
Grids of `loglinear train` runs. A spec (YAML: name, base, grid, zip, report, protocol; shipped ones in
configs/sweeps/) expands into runs with stable ids; each run lives in OUT/runs/<run_id> (OUT defaults to
sweeps_out/<name>). Rerunning a sweep skips finished runs and resumes interrupted ones. With a two-stage
protocol, `run` runs the selection seeds, selects each cell's learning rate, then runs the confirmation seeds.

  loglinear sweep run configs/sweeps/demo_cpu.yaml             # run locally, then print the table
  loglinear sweep run SPEC --dry-run                           # list the runs
  loglinear sweep run SPEC --runs-per-gpu 4                    # 4 runs share each GPU at a time
  loglinear sweep run SPEC --launcher submitit --executor slurm_partition=gpu   # Slurm job array
  loglinear sweep status sweeps_out/demo_cpu                   # done / running / pending (Slurm's reason) / failed
  loglinear sweep wandb SPEC                                   # a wandb sweep file for wandb agents
  loglinear sweep report sweeps_out/demo_cpu                   # results.csv, table.md, plots
  loglinear sweep report sweeps_out/demo_cpu --lambda          # and lambda by level per cell (lambda_levels.md)

Exit status: 0 all runs finished, 1 some run failed or did not finish, or a fault of the machine (a full disk,
a folder that cannot be written), 2 bad spec or usage, 130 interrupted.
"""


def sweep_main(argv: Sequence[str]) -> int:
    # Ctrl-C stops a sweep even when it was started with SIGINT ignored (a background job of a script
    # inherits that, and Python then raises no KeyboardInterrupt)
    signal.signal(signal.SIGINT, signal.default_int_handler)
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


def fault_line(e: OSError) -> str:
    """One line for a fault of the machine (a full disk, a read-only folder, no permission) naming the path."""
    if isinstance(e, DiskFull) or not e.filename:
        return f"{e.strerror or e}; free space or fix the folder, then rerun the same command"
    return f"cannot write {e.filename}: {e.strerror}"


def out_folder(path: str) -> Path:
    """`--out`: a folder, or a path where one can be made (a file there is bad input)."""
    out = Path(path)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out} is a file, not a folder: give a folder for the sweep's runs")
    return out


def sweep_parser() -> argparse.ArgumentParser:
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
    run.set_defaults(command=_run)

    status = commands.add_parser("status", help="each run's status from its folder and Slurm's queue (submits nothing)")
    status.add_argument("dir", help="the sweep's output folder (holding manifest.json)")
    status.set_defaults(command=_status)

    report = commands.add_parser("report", help="write results.csv, table.md and plots of a sweep folder")
    report.add_argument("dir", help="the sweep's output folder (holding manifest.json)")
    report.add_argument("--lambda", dest="lambda_levels", action="store_true",
                        help="also inspect the log-linear runs each cell reports and plot lambda by level per cell "
                             "(lambda_levels.md)")
    report.set_defaults(command=_report)

    wandb = commands.add_parser("wandb", help="write a wandb sweep file whose runs are `loglinear train` commands")
    wandb.add_argument("spec", help="sweep spec YAML")
    wandb.add_argument("--out", help="output folder of the runs (default: sweeps_out/<name>)")
    wandb.set_defaults(command=_wandb)
    return parser


def _run(args: argparse.Namespace) -> int:
    from loglinear.runs.folder import FINISHED
    from loglinear.sweeps.manifest import default_out, write_manifest
    from loglinear.sweeps.power import check_design
    from loglinear.sweeps.progress import ELSEWHERE
    from loglinear.sweeps.spec import expand, load_spec

    if args.runs_per_gpu is not None and args.launcher != "local":
        raise ConfigError("--runs-per-gpu is for the local launcher (a Slurm task trains one run on its own GPU)")
    spec = load_spec(args.spec)
    design = check_design(spec)  # before anything runs or is written: a design that cannot conclude is refused
    if design is not None:
        print(f"loglinear sweep: {design.text()}", file=sys.stderr)
    runs = expand(spec)
    out = out_folder(args.out) if args.out else default_out(spec)
    if args.dry_run:
        _print_plan(spec, runs, out)
        return 0
    from loglinear.sweeps.runner import exclusive_sweep

    with exclusive_sweep(out):
        write_manifest(out, spec, runs)
        outcome = _launch(args, spec.name, runs, out)
        if spec.protocol is not None and not outcome.interrupted:
            runs, outcome = _confirm(args, spec, runs, out, outcome)
    unfinished = [rid for rid, s in outcome.statuses.items() if s not in FINISHED]
    if outcome.interrupted:
        if args.launcher == "local":
            print(f"loglinear sweep: interrupted with {len(unfinished)} of {len(runs)} runs unfinished; resume with: "
                  f"loglinear sweep run {subprocess.list2cmdline([args.spec, '--out', str(out)])}", file=sys.stderr)
        return 130
    _print_report(out)
    if unfinished:
        elsewhere = sum(outcome.statuses[rid] == ELSEWHERE for rid in unfinished)
        held = f", {elsewhere} of them being trained by another process" if elsewhere else ""
        print(f"loglinear sweep: {len(unfinished)} of {len(runs)} runs did not finish{held} (see {out}/table.md)",
              file=sys.stderr)
        return 1
    return 0


def _launch(args: argparse.Namespace, name: str, runs: list[Run], out: Path) -> SweepOutcome:
    """Run `runs` (skipping finished ones) with the launcher `args` asks for."""
    from loglinear.sweeps.progress import Progress
    from loglinear.sweeps.runner import run_local

    progress = Progress(name, enabled=not args.quiet)
    if args.launcher == "submitit":
        from loglinear.sweeps.launchers import parse_executor_args, submit_array

        return submit_array(runs, out, name, args.workers, parse_executor_args(args.executor), progress)
    return run_local(runs, out, args.workers, progress, runs_per_gpu=args.runs_per_gpu)


def _confirm(args: argparse.Namespace, spec: SweepSpec, runs: list[Run], out: Path,
             first: SweepOutcome) -> tuple[list[Run], SweepOutcome]:
    """Stage 2 of a two-stage sweep: select each cell's learning rate on the selection runs (stage 1, over, with
    its extensions beyond the grid's edges), add the chosen configurations on the confirmation seeds to the manifest
    and run them."""
    from loglinear.reports.results import load_sweep, selected_points
    from loglinear.sweeps.manifest import write_manifest
    from loglinear.sweeps.spec import confirmation_points, expand

    runs, first = _extend(args, spec, runs, out, first)
    if first.interrupted:
        return runs, first
    confirmation = expand(spec, confirmation_points(spec, selected_points(load_sweep(out))))
    write_manifest(out, spec, [*runs, *confirmation])
    second = _launch(args, f"{spec.name} confirmation", confirmation, out)
    return [*runs, *confirmation], SweepOutcome({**first.statuses, **second.statuses}, second.interrupted)


def _extend(args: argparse.Namespace, spec: SweepSpec, runs: list[Run], out: Path,
            first: SweepOutcome) -> tuple[list[Run], SweepOutcome]:
    """Up to `protocol.extensions` rounds: each cell whose pick sits at an edge of its learning rates gets the next
    rate beyond it on the selection seeds (sweeps/extension.py). Rerunning the sweep makes the same decisions from
    the same results, so it resumes here too."""
    from loglinear.reports.results import edge_picks, load_sweep
    from loglinear.sweeps.extension import extension_points
    from loglinear.sweeps.manifest import write_manifest
    from loglinear.sweeps.spec import expand

    assert spec.protocol is not None
    for round_ in range(1, spec.protocol.extensions + 1):
        known = {r.run_id for r in runs}
        extra = [r for r in expand(spec, extension_points(spec, edge_picks(load_sweep(out)))) if r.run_id not in known]
        if not extra:
            break
        runs = [*runs, *extra]
        write_manifest(out, spec, runs)
        outcome = _launch(args, f"{spec.name} grid extension {round_}", extra, out)
        first = SweepOutcome({**first.statuses, **outcome.statuses}, outcome.interrupted)
        if outcome.interrupted:
            break
    return runs, first


def _status(args: argparse.Namespace) -> int:
    from loglinear.sweeps.manifest import read_manifest
    from loglinear.sweeps.slurm import SlurmError
    from loglinear.sweeps.status import format_status, sweep_status

    out = Path(args.dir)
    try:
        states = sweep_status(out)
    except SlurmError as e:
        print(f"loglinear sweep status: Slurm's queue is not readable here ({e}); runs without a result are shown as "
              f"stopped or not started", file=sys.stderr)
        states = sweep_status(out, with_queue=False)
    print(format_status(read_manifest(out)["name"], states))
    return 0


def _report(args: argparse.Namespace) -> int:
    _print_report(Path(args.dir))
    if args.lambda_levels:
        from loglinear.reports.lambda_plots import write_lambda_report

        written, skipped = write_lambda_report(Path(args.dir))
        print(f"wrote {', '.join(str(p) for p in written)}", file=sys.stderr)
        for name, reason in skipped.items():
            print(f"skipped {name}: {reason}", file=sys.stderr)
    return 0


def _print_report(out: Path) -> None:
    """Write the report; the tables go to stdout, the list of files to stderr."""
    from loglinear.reports.report import write_report

    report = write_report(out)
    print(report.table)
    print(f"wrote {', '.join(str(p) for p in report.written)}", file=sys.stderr)
    for name, reason in report.skipped.items():
        print(f"skipped {name}: {reason}", file=sys.stderr)


def _wandb(args: argparse.Namespace) -> int:
    from loglinear.sweeps.launchers import write_wandb_sweep
    from loglinear.sweeps.manifest import default_out, write_manifest
    from loglinear.sweeps.spec import expand, load_spec

    spec = load_spec(args.spec)
    runs = expand(spec)
    out = out_folder(args.out) if args.out else default_out(spec)
    path = write_wandb_sweep(spec, out)
    write_manifest(out, spec, runs)
    print(
        f"wrote {path} ({len(runs)} runs into {out}/runs/<run_id>). "
        "Start the sweep, then one agent per GPU or machine, "
        f"from this directory:\n  wandb sweep --project loglinear {path}\n  wandb agent ENTITY/loglinear/SWEEP_ID\n"
        f"When they are done: loglinear sweep report {out}"
    )
    return 0


def _print_plan(spec: SweepSpec, runs: list[Run], out: Path) -> None:
    """The runs of a sweep with their ids, status and varied values, and the command each one is."""
    from loglinear.runs.folder import FINISHED, status_of
    from loglinear.sweeps.manifest import run_dir
    from loglinear.sweeps.spec import describe, planned_runs

    statuses = [status_of(run_dir(out, r.run_id)) for r in runs]
    shared = subprocess.list2cmdline(([spec.preset] if spec.preset else []) + spec.base_overrides())
    print(f"{spec.name}: {len(runs)} runs, {sum(s in FINISHED for s in statuses)} finished")
    print(f"each run: loglinear train {shared} <varied keys> out_dir={out}/runs/<run_id>")
    for run, status in zip(runs, statuses, strict=True):
        print(f"{run.run_id}  {status:<13}  {describe(run.point)}")
    if spec.protocol is not None:
        seeds = ", ".join(map(str, spec.protocol.confirmation_seeds))
        print(f"then, once these selection runs are done: for each cell whose pick sits at an edge of its learning "
              f"rates, up to {spec.protocol.extensions} more beyond it on the selection seeds; then each cell's "
              f"selected learning rate on the confirmation seeds {seeds} "
              f"({planned_runs(spec) - len(runs)} runs more, without extensions)")


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
    from loglinear.reports.lambda_inspect import summary
    from loglinear.reports.lambda_plots import inspect_and_plot

    try:
        inspection = inspect_and_plot(args.run_dir, args.device, args.batches, args.probe_sequences)
    except ConfigError as e:
        print(f"loglinear inspect: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"loglinear inspect: {fault_line(e)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("loglinear inspect: interrupted; its files are whole (the previous ones or none)", file=sys.stderr)
        return 130
    print(summary(inspection))
    print(f"wrote {', '.join(str(p) for p in inspection.written)}", file=sys.stderr)
    return 0


DOCTOR_HELP = """\
loglinear doctor

Versions (Python, torch, Triton, lightning, loglinear), the devices, which implementation impl="auto" picks
on each, and the fused Triton kernels' self-check against the chunk path, run now on every CUDA device (in
float32 and bfloat16; without a CUDA device, on the CPU in Triton's interpreter, in float32). The verdicts are
stored where training reads them (LOGLINEAR_CACHE_DIR, else $XDG_CACHE_HOME/loglinear or ~/.cache/loglinear).
Exit status: 0 every check passed (or triton is not installed), 1 a check failed.
"""


def doctor_main(argv: Sequence[str]) -> int:
    if any(a in ("-h", "--help") for a in argv):
        print(DOCTOR_HELP, end="")
        return 0
    if argv:
        print(f"loglinear doctor: takes no arguments, got {' '.join(argv)}", file=sys.stderr)
        return 2
    import torch

    if not torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1":
        # the kernels then run in Triton's interpreter, which Triton reads when its own modules load (torch may
        # have loaded them already): a new process with it set
        env = {**os.environ, "TRITON_INTERPRET": "1"}
        return subprocess.run([sys.executable, "-m", "loglinear", "doctor"], env=env, check=False).returncode
    from loglinear.kernels.doctor import run_doctor

    return 0 if run_doctor() else 1


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in COMMANDS:
        parser = argparse.ArgumentParser(prog="loglinear", description="Log-Linear Attention experiment suite.")
        parser.add_argument("command", choices=sorted(COMMANDS),
                            help="train: one run; sweep: grids of runs; inspect: lambda by level of a log-linear run; "
                                 "doctor: versions, devices and the fused kernels' self-check")
        parser.parse_args(argv[:1])
        return 2
    try:
        return COMMANDS[argv[0]](argv[1:])
    except BrokenPipeError:
        # whoever read stdout stopped (`loglinear sweep run --dry-run | head`): end quietly, as a shell tool does,
        # with stdout on /dev/null so the interpreter's own flush at exit cannot fail again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE


EXIT_BROKEN_PIPE = 128 + signal.SIGPIPE


COMMANDS = {"train": train_main, "sweep": sweep_main, "inspect": inspect_main, "doctor": doctor_main}
"""The subcommands of `loglinear`: name -> entry point taking the remaining arguments."""

if __name__ == "__main__":
    sys.exit(main())
