"""Scale-out on existing engines: a Slurm job array through submitit, and a wandb sweep file for wandb agents.

Both start exactly the `loglinear train` command of the local runner, so a run lands in the same
`<out>/runs/<run_id>` folder whichever engine runs it, and any engine can resume it.

- submitit: one array task per unfinished run, or per pack of runs with `--pack N` (`AutoExecutor`: Slurm where
  `sbatch` exists, else local processes), with CPUs and GPUs per task that fit the partition unless given. The array is
  followed in Slurm's queue (`squeue`; no accounting database needed). A task that Slurm times out,
  preempts or requeues has its run save a checkpoint; the requeued task resumes the run.
- wandb: a grid sweep whose command is `loglinear train <base> out_dir=<out>/runs/{run_id}
  ${args_no_hyphens}`; `loglinear train` puts the run's id in place of `{run_id}`.
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from loglinear.runs.folder import is_finished, status_of, write_text_atomic
from loglinear.sweeps.arguments import command_line_value, override
from loglinear.sweeps.manifest import RUNS, run_dir
from loglinear.sweeps.progress import Progress
from loglinear.sweeps.runner import GRACE_S, SweepOutcome, cpu_count, finish_job, jobs_of, start_job
from loglinear.sweeps.spec import Run, SpecError, SweepSpec

SUBMITIT_FOLDER = "submitit"
SUBMITIT_DEFAULTS: dict[str, Any] = {"timeout_min": 24 * 60}
"""AutoExecutor parameters unless given with --executor KEY=VALUE (e.g. slurm_partition=gpu); on Slurm,
the time limit, CPUs and GPUs per task fit the partition (`partition_defaults`)."""
GPU_TASK_CPUS = 8
"""CPUs per task on a GPU partition, at most (a node's CPUs are shared among its GPUs)."""
WAIT_POLL_S = 5.0
WANDB_FILE = "wandb_sweep.yaml"
STOPPED = (128 + signal.SIGTERM, -signal.SIGTERM)
"""Exit statuses of a `loglinear train` that Slurm stopped (requeue, preemption, scancel) after it saved its
checkpoint."""


class TrainJob:
    """The callable of one array task: train (or resume) one run, or one pack of runs.

    Slurm stops a task with SIGTERM (requeue, preemption, scancel): the run saves a checkpoint and
    exits, and the task exits without a result, so that a requeued task resumes the run rather than
    counting it as done. Before a time limit Slurm sends SIGUSR2 (submitit's timeout signal):
    submitit calls `checkpoint`, which stops the run after its save, and requeues the task.
    """

    def __init__(self) -> None:
        self._process: Any = None

    def __call__(self, runs: list[Run], directories: list[str], threads: int) -> list[str]:
        env = {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
        self._process = start_job(runs, [Path(d) for d in directories], env)
        code = self._process.process.wait()
        if code in STOPPED:
            self._process.log.close()
            # SystemExit is not an Exception: submitit writes no result for this task, and a requeued task runs again
            raise SystemExit(code)
        return list(finish_job(self._process).values())

    def checkpoint(self, runs: list[Run], directories: list[str], threads: int) -> Any:
        import submitit

        job = self._process
        if job is not None and not _exited(job.process):
            job.process.send_signal(signal.SIGINT)  # `loglinear train` saves its checkpoint and exits
            # still saving after GRACE_S: the requeued task resumes from the last save
            deadline = time.monotonic() + GRACE_S
            while not _exited(job.process) and time.monotonic() < deadline:
                time.sleep(0.2)
        return submitit.helpers.DelayedSubmission(TrainJob(), runs, directories, threads)


def _exited(process: subprocess.Popen) -> bool:
    """Whether `process` has ended, without reaping it: `checkpoint` runs in a signal handler that may
    interrupt `__call__`'s `process.wait()`, which holds the Popen's lock (a nested wait would block)."""
    try:
        return os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:  # already reaped
        return True


def partition_defaults(params: dict[str, Any]) -> dict[str, Any]:
    """Time limit, CPUs and GPUs per task that fit the partition (`slurm_partition`, else Slurm's
    default one), for what `params` does not set: the time limit is SUBMITIT_DEFAULTS' capped at the
    partition's; a GPU partition gets one GPU per task and its node's CPUs shared among the node's GPUs
    (at most GPU_TASK_CPUS); a CPU partition gets one CPU per task and no GPU."""
    from loglinear.sweeps.slurm import partition

    given = set(params)
    part = partition(params.get("slurm_partition"))
    defaults: dict[str, Any] = {}
    if not given & {"timeout_min", "slurm_time"}:
        default_minutes = SUBMITIT_DEFAULTS["timeout_min"]
        defaults["timeout_min"] = min(default_minutes, part.max_minutes or default_minutes)
    if part.gpus and not given & {"gpus_per_node", "slurm_gpus_per_node", "slurm_gpus_per_task", "slurm_gres"}:
        defaults["gpus_per_node"] = 1
    if not given & {"cpus_per_task", "slurm_cpus_per_task", "slurm_cpus_per_gpu"}:
        defaults["cpus_per_task"] = max(1, min(GPU_TASK_CPUS, part.cpus // part.gpus)) if part.gpus else 1
    return defaults


def submit_array(runs: list[Run], out: Path, name: str, workers: int | None, executor_args: dict[str, Any],
                 progress: Progress, pack: int | None = None) -> SweepOutcome:
    """Submit the unfinished runs as one job array (a task per run, or per pack of up to `pack` runs), then follow
    them until they end (Ctrl-C stops following; the jobs go on). On Slurm, runs whose task of an earlier submission
    is still in the queue are followed, not submitted again; a job that Slurm will never start is cancelled (a
    SlurmError with Slurm's reason). sbatch's and submitit's refusals are one-line errors too."""
    try:
        import submitit
    except ImportError:
        raise SpecError("--launcher submitit needs submitit: pip install 'loglinear[slurm]'") from None
    from loglinear.sweeps.slurm import queued_tasks, record_submission

    todo = [r for r in runs if not is_finished(run_dir(out, r.run_id))]
    statuses = {r.run_id: status_of(run_dir(out, r.run_id)) for r in runs}
    statuses.update({r.run_id: "pending" for r in todo})
    if not todo:
        return SweepOutcome(statuses)
    params = {"name": f"loglinear-{name}", **executor_args}
    executor = submitit.AutoExecutor(folder=out / SUBMITIT_FOLDER, cluster=params.pop("cluster", None))
    local = executor.cluster != "slurm"
    followed = {} if local else {rid: task for rid, (task, _) in queued_tasks(out).items()}
    if followed:
        print(f"{len(followed)} runs are still in Slurm's queue from an earlier submission: following them",
              file=sys.stderr)
    submit = jobs_of([r for r in todo if r.run_id not in followed], pack)
    jobs = _submit(executor, submit, out, workers, params) if submit else []
    if jobs:
        print(f"submitted {sum(map(len, submit))} runs in {len(jobs)} tasks as {executor.cluster} job "
              f"{jobs[0].job_id.split('_')[0]} (logs: {out / SUBMITIT_FOLDER})", file=sys.stderr)
    try:
        if local:
            return _follow_local(submit, jobs, out, statuses, progress)
        if jobs:
            tasks = {job.job_id: [r.run_id for r in group] for group, job in zip(submit, jobs, strict=True)}
            record_submission(out, jobs[0].job_id.split("_")[0], tasks)
        followed.update({r.run_id: job.job_id for group, job in zip(submit, jobs, strict=True) for r in group})
        return _follow_slurm(followed, out, statuses, progress)
    except KeyboardInterrupt:
        progress.close()
        if local:  # the local jobs got the terminal's Ctrl-C too
            print("interrupted; the same command resumes the sweep (finished runs are skipped)", file=sys.stderr)
        else:
            arrays = " ".join(sorted({t.split("_")[0] for t in followed.values()}))
            print(f"stopped following Slurm job {arrays}; its tasks go on (cancel: scancel {arrays}). "
                  f"Their state: loglinear sweep status {out}", file=sys.stderr)
        return SweepOutcome(statuses, interrupted=True)


def _submit(executor: Any, groups: list[list[Run]], out: Path, workers: int | None,
            params: dict[str, Any]) -> list[Any]:
    """Submit `groups` (a run, or a pack of runs, each) as one array of TrainJob tasks; the submitit jobs."""
    import submitit

    from loglinear.sweeps.slurm import SlurmError, error_line

    if workers:
        params["slurm_array_parallelism"] = workers
    if executor.cluster != "slurm":  # every local job starts at once: share the cores
        params = {**SUBMITIT_DEFAULTS, **params}
        params.pop("gpus_per_node", None)
        threads = max(1, cpu_count() // len(groups))
    else:
        params = {**partition_defaults(params), **params}
        threads = int(params.get("cpus_per_task") or params.get("slurm_cpus_per_task") or 1)
    try:
        executor.update_parameters(**params)
    except (ValueError, NameError) as e:  # submitit lists every valid parameter: keep the first line
        raise SpecError(f"--executor: {str(e).strip().splitlines()[0]}") from None
    dirs = [[str(run_dir(out, r.run_id).resolve()) for r in group] for group in groups]
    printed = io.StringIO()  # submitit prints sbatch's error before raising it: it is said once, below
    try:
        with contextlib.redirect_stderr(printed):
            jobs = executor.map_array(TrainJob(), groups, dirs, [threads] * len(groups))
    except (submitit.core.utils.FailedJobError, submitit.core.utils.FailedSubmissionError) as e:
        raise SlurmError(f"the job array was not submitted: {error_line(str(e))}") from None
    sys.stderr.write(printed.getvalue())
    return jobs


def _follow_local(groups: list[list[Run]], jobs: list[Any], out: Path, statuses: dict[str, str],
                  progress: Progress) -> SweepOutcome:
    while True:
        done = [job.done() for job in jobs]
        for group, finished in zip(groups, done, strict=True):
            for run in group:
                statuses[run.run_id] = status_of(run_dir(out, run.run_id)) if finished else "running"
        progress.update(list(statuses.values()))
        if all(done):
            return SweepOutcome(statuses)
        time.sleep(0.5)


def _follow_slurm(tasks: dict[str, str], out: Path, statuses: dict[str, str], progress: Progress) -> SweepOutcome:
    """Follow the tasks (run id -> Slurm task id) in Slurm's queue until none is left (a requeued task
    stays in the queue)."""
    from loglinear.sweeps.slurm import SlurmError, client, queue

    arrays = sorted({t.split("_")[0] for t in tasks.values()})
    while True:
        queued = queue(arrays)
        for rid, task_id in tasks.items():
            task = queued.get(task_id)
            if task is not None and task.never_starts:
                array = task_id.split("_")[0]
                client("scancel", array)
                raise SlurmError(f"Slurm will never start job {array} (reason {task.reason}: {task.never_starts}); "
                                 f"cancelled it. Compare the --executor values with `scontrol show partition`")
            statuses[rid] = status_of(run_dir(out, rid)) if task is None else ("running" if task.running else "pending")
        progress.update(list(statuses.values()))
        if not queued:
            return SweepOutcome(statuses)
        time.sleep(WAIT_POLL_S)


def parse_executor_args(items: list[str]) -> dict[str, Any]:
    """`KEY=VALUE` strings (values read as YAML: 600 is an int) into AutoExecutor parameters."""
    params = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SpecError(f"--executor takes KEY=VALUE (e.g. slurm_partition=gpu), got {item!r}")
        params[key] = yaml.safe_load(value)
    return params


def wandb_sweep(spec: SweepSpec, out: Path) -> dict[str, Any]:
    """The wandb sweep config: a grid over the spec's grid keys, each agent run being
    `loglinear train <preset> <base keys> logger... out_dir=<out>/runs/{run_id} ${args_no_hyphens}`."""
    if spec.protocol is not None:
        raise SpecError(f"{spec.path or spec.name}: a two-stage protocol chooses its second stage from the first; "
                        f"a wandb grid cannot: run this spec with `loglinear sweep run`")
    if spec.zip:
        keys = ", ".join(k for group in spec.zip for k in group)
        raise SpecError(f"{spec.path or spec.name}: wandb sweeps are cartesian grids and cannot vary keys together "
                        f"(zip: {keys}); move them to grid or run this spec with `loglinear sweep run`")
    command = [
        "loglinear", "train", *([spec.preset] if spec.preset else []), *spec.base_overrides(),
        "logger.progress=false",  # as in the runs of `loglinear sweep run` (logger keys are not part of a run's id)
        "logger.wandb.mode=online",  # the sweep's controller follows its runs online
        override("out_dir", str(out / RUNS / "{run_id}")),
        "${args_no_hyphens}",
    ]
    return {
        "name": spec.name,
        "program": "loglinear",
        "method": "grid",
        "metric": {"name": "val/acc", "goal": "maximize"},
        "command": command,
        "parameters": {key: {"values": [command_line_value(v) for v in values]} for key, values in spec.grid.items()},
    }


def write_wandb_sweep(spec: SweepSpec, out: Path) -> Path:
    """Write `<out>/wandb_sweep.yaml`, with the commands that start it in its header."""
    sweep = wandb_sweep(spec, out)
    path = out / WANDB_FILE
    header = (
        f"# wandb sweep of {spec.path or spec.name} (written by `loglinear sweep wandb`). Start it with\n"
        f"#   wandb sweep --project loglinear {path}\n"
        f"# then, on each machine, from this working directory: wandb agent ENTITY/loglinear/SWEEP_ID\n"
        f"# Runs land in {out / RUNS}/<run_id>, as with `loglinear sweep run`; "
        f"the table: loglinear sweep report {out}\n"
    )
    write_text_atomic(path, header + yaml.safe_dump(sweep, sort_keys=False, width=1000))
    return path
