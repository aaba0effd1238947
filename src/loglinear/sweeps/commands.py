"""The work of `loglinear sweep status` and of `sweep run --dry-run`'s list of runs, and how `sweep run` launches
runs (`Launch`); cli/sweep_run.py drives a whole `sweep run`, which ends with the report, and `sweep wandb`."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from loglinear.runs.config import ConfigError
from loglinear.runs.folder import FINISHED, status_of
from loglinear.runs.stopping import TOO_SHORT, budget_validations
from loglinear.sweeps import runner
from loglinear.sweeps.gpu_estimate import figures_warning, gpu_time_lines, read_figures
from loglinear.sweeps.manifest import default_out, read_manifest, run_dir
from loglinear.sweeps.progress import Progress
from loglinear.sweeps.runner import SweepOutcome
from loglinear.sweeps.spec import Run, SweepSpec, describe


@dataclass(frozen=True)
class Launch:
    """How `sweep run` starts runs: `launcher` "local" (processes here: `workers` at a time, or `runs_per_gpu`
    on each GPU) or "submitit" (a Slurm job array of `workers` parallelism, `executor` KEY=VALUE parameters);
    `quiet`: no progress line; `pack` N: each process (or array task) trains up to N runs that can share a pack
    together (packing/), else one run; `deadline` (time.monotonic(), local launcher only): no process starts after
    it, and the running ones save their checkpoints and stop (`sweep run --time-limit`)."""

    launcher: str = "local"
    workers: int | None = None
    runs_per_gpu: int | None = None
    executor: tuple[str, ...] = ()
    quiet: bool = False
    pack: int | None = None
    deadline: float | None = None

    def __post_init__(self) -> None:
        """Refuse arguments that do not go together, before the sweep's folder is made."""
        if self.runs_per_gpu is not None and self.launcher != "local":
            raise ConfigError("--runs-per-gpu is for the local launcher (a Slurm task trains one run on its own GPU)")
        if self.deadline is not None and self.launcher != "local":
            raise ConfigError("--time-limit is for the local launcher (Slurm stops and requeues its tasks at their own "
                              "time limit: --executor timeout_min=M)")
        if self.executor and self.launcher != "submitit":
            raise ConfigError("--executor is for --launcher submitit (AutoExecutor parameters); the local launcher "
                              "takes --workers or --runs-per-gpu")
        if self.launcher == "submitit":
            from loglinear.sweeps.launchers import parse_executor_args

            parse_executor_args(list(self.executor))
        if self.runs_per_gpu is not None:
            runner.worker_envs(None, 1, runner.visible_gpus(), 1, runs_per_gpu=self.runs_per_gpu)

    def __call__(self, name: str, runs: list[Run], out: Path) -> SweepOutcome:
        """Run `runs` (skipping finished ones), showing progress under `name`."""
        progress = Progress(name, enabled=not self.quiet)
        if self.launcher == "submitit":
            from loglinear.sweeps.launchers import parse_executor_args, submit_array

            return submit_array(runs, out, name, self.workers, parse_executor_args(list(self.executor)), progress,
                                self.pack)
        return runner.run_local(runs, out, self.workers, progress, runs_per_gpu=self.runs_per_gpu, pack=self.pack,
                                deadline=self.deadline)


def sweep_out(spec: SweepSpec, out: str | None) -> Path:
    """The sweep's folder: `--out`, a folder or a path where one can be made (a file there is bad input), or
    sweeps_out/<name>."""
    if out is None:
        return default_out(spec)
    path = Path(out)
    if path.exists() and not path.is_dir():
        raise ConfigError(f"--out {path} is a file, not a folder: give a folder for the sweep's runs")
    return path


def print_plan(spec: SweepSpec, runs: list[Run], out: Path, pack: int | None = None) -> None:
    """The runs of a sweep with their ids, status and varied values, the command each one is and, with `pack`, the
    packs its unfinished runs train in."""
    statuses = [status_of(run_dir(out, r.run_id)) for r in runs]
    shared = subprocess.list2cmdline(([spec.preset] if spec.preset else []) + spec.base_overrides())
    steps = sum(r.config.train.max_steps for r in runs)
    print(f"{spec.name}: {len(runs)} runs, {sum(s in FINISHED for s in statuses)} finished, {steps:,} run-steps at "
          f"most (each run's train.max_steps)")
    print(f"each run: loglinear train {shared} <varied keys> out_dir={out}/runs/<run_id>")
    for run, status in zip(runs, statuses, strict=True):
        print(f"{run.run_id}  {status:<13}  {describe(run.point)}")
    if pack is not None:
        jobs = runner.jobs_of([r for r, s in zip(runs, statuses, strict=True) if s not in FINISHED], pack)
        sizes = sorted((len(job) for job in jobs), reverse=True)
        print(f"with --pack {pack}: {len(jobs)} processes for {sum(sizes)} unfinished runs (pack sizes "
              f"{', '.join(map(str, sizes)) or '-'})")
        for job in jobs:
            print(f"  pack: {' '.join(r.run_id for r in job)}")
        figures = read_figures()
        warning = figures_warning(figures)
        if warning:
            print(f"loglinear sweep: {warning}", file=sys.stderr)
        for line in gpu_time_lines(spec, jobs, lambda stage: runner.jobs_of(stage, pack), figures):
            print(line)
    short = budget_too_short(runs)
    if short:
        print(short)


def budget_too_short(runs: list[Run]) -> str | None:
    """Why the budget cannot label the runs' ends (runs/stopping.py): fewer validations than the plateau window, so
    a run ended by its budget is `too short`, neither plateau nor improving; None when every run's budget can."""
    short = sorted({(budget_validations(t.max_steps, t.val_every), t.max_steps, t.val_every, t.plateau_window)
                    for t in (r.config.train for r in runs)
                    if budget_validations(t.max_steps, t.val_every) < t.plateau_window})
    if not short:
        return None
    budgets = "; ".join(f"{v} validations (train.max_steps {m}, train.val_every {e}) below train.plateau_window {w}"
                        for v, m, e, w in short)
    return (f"the budget cannot label its runs: {budgets}: a run that ends by its budget is labelled `{TOO_SHORT}`, "
            f"neither plateau nor improving")


def print_status(out: Path) -> int:
    """Each run's status from its folder and Slurm's queue (without the queue when it cannot be read)."""
    from loglinear.sweeps.slurm import SlurmError
    from loglinear.sweeps.status import format_status, sweep_status

    try:
        states = sweep_status(out)
    except SlurmError as e:
        print(f"loglinear sweep status: Slurm's queue is not readable here ({e}); runs without a result are shown as "
              f"stopped or not started", file=sys.stderr)
        states = sweep_status(out, with_queue=False)
    print(format_status(read_manifest(out)["name"], states))
    return 0
