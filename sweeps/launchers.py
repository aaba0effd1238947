"""Scale-out on existing engines: a Slurm job array through submitit, and a wandb sweep file for wandb agents.

Both start exactly the `loglinear train` command of the local runner, so a run lands in the same
`<out>/runs/<run_id>` folder whichever engine runs it, and any engine can resume it.

- submitit: one array task per unfinished run (`AutoExecutor`: Slurm where `sbatch` exists, else
  local processes). A task that Slurm times out or preempts asks its run to save a checkpoint and is
  requeued; the requeued task resumes the run.
- wandb: a grid sweep whose command is `loglinear train <base> out_dir=<out>/runs/{run_id}
  ${args_no_hyphens}`; `loglinear train` puts the run's id in place of `{run_id}`.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Optional

import yaml

from loglinear.sweeps.manifest import RUNS, is_finished, run_dir, status_of
from loglinear.sweeps.progress import Progress
from loglinear.sweeps.runner import GRACE_S, SweepOutcome, cpu_count, finish_run, start_run
from loglinear.sweeps.spec import Run, SpecError, SweepSpec, command_line_value, override

SUBMITIT_FOLDER = "submitit"
SUBMITIT_DEFAULTS: dict[str, Any] = {"timeout_min": 24 * 60, "gpus_per_node": 1, "cpus_per_task": 8}
"""AutoExecutor parameters unless given with --executor KEY=VALUE (e.g. slurm_partition=gpu)."""
WAIT_POLL_S = 5.0
WANDB_FILE = "wandb_sweep.yaml"


class TrainJob:
    """The callable of one array task: train (or resume) one run; on Slurm's timeout / preemption signal
    the run saves a checkpoint and the task is requeued (submitit calls `checkpoint`)."""

    def __init__(self) -> None:
        self._process: Any = None

    def __call__(self, run: Run, directory: str, threads: int) -> str:
        env = {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
        self._process = start_run(run, Path(directory), env)
        self._process.process.wait()
        return finish_run(self._process)

    def checkpoint(self, run: Run, directory: str, threads: int) -> Any:
        import submitit

        job = self._process
        if job is not None and job.process.poll() is None:
            job.process.send_signal(signal.SIGINT)  # `loglinear train` saves last.ckpt and exits
            try:
                job.process.wait(timeout=GRACE_S)
            except subprocess.TimeoutExpired:  # still saving: the requeued task resumes from the last save
                pass
        return submitit.helpers.DelayedSubmission(TrainJob(), run, directory, threads)


def submit_array(runs: list[Run], out: Path, name: str, workers: Optional[int], executor_args: dict[str, Any],
                 progress: Progress) -> SweepOutcome:
    """Submit the unfinished runs as one job array, then follow them until they end (Ctrl-C stops
    following; the jobs go on)."""
    try:
        import submitit
    except ImportError:
        raise SpecError("--launcher submitit needs submitit: pip install 'loglinear[slurm]'") from None
    todo = [r for r in runs if not is_finished(run_dir(out, r.run_id))]
    statuses = {r.run_id: status_of(run_dir(out, r.run_id)) for r in runs}
    statuses.update({r.run_id: "pending" for r in todo})
    if not todo:
        return SweepOutcome(statuses)
    params = {**SUBMITIT_DEFAULTS, "name": f"loglinear-{name}", **executor_args}
    cluster = params.pop("cluster", None)
    executor = submitit.AutoExecutor(folder=out / SUBMITIT_FOLDER, cluster=cluster)
    if workers:
        params["slurm_array_parallelism"] = workers
    local = executor.cluster != "slurm"
    if local:  # every local job starts at once: share the cores
        params.pop("gpus_per_node", None)
        threads = max(1, cpu_count() // len(todo))
    else:
        threads = int(params.get("cpus_per_task") or params.get("slurm_cpus_per_task") or 1)
    executor.update_parameters(**params)
    dirs = [str(run_dir(out, r.run_id).resolve()) for r in todo]
    jobs = executor.map_array(TrainJob(), todo, dirs, [threads] * len(todo))
    array = jobs[0].job_id.split("_")[0]
    print(f"submitted {len(jobs)} runs as {executor.cluster} job {array} (logs: {out / SUBMITIT_FOLDER})", file=sys.stderr)
    try:
        while True:
            done = [job.done() for job in jobs]
            for run, job, finished in zip(todo, jobs, done):
                statuses[run.run_id] = status_of(run_dir(out, run.run_id)) if finished else _job_state(job)
            progress.update(list(statuses.values()))
            if all(done):
                return SweepOutcome(statuses)
            time.sleep(WAIT_POLL_S if not local else 0.5)
    except KeyboardInterrupt:
        progress.close()
        if local:  # the local jobs got the terminal's Ctrl-C too
            print("interrupted; the same command resumes the sweep (finished runs are skipped)", file=sys.stderr)
        else:
            print(f"stopped following job {array}; its tasks go on (cancel: scancel {array}). "
                  f"When they end: loglinear sweep report {out}", file=sys.stderr)
        return SweepOutcome(statuses, interrupted=True)


def _job_state(job: Any) -> str:
    return "running" if job.state.upper() in ("RUNNING", "COMPLETING") else "pending"


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
    path.parent.mkdir(parents=True, exist_ok=True)
    header = (
        f"# wandb sweep of {spec.path or spec.name} (written by `loglinear sweep wandb`). Start it with\n"
        f"#   wandb sweep --project loglinear {path}\n"
        f"# then, on each machine, from this working directory: wandb agent ENTITY/loglinear/SWEEP_ID\n"
        f"# Runs land in {out / RUNS}/<run_id>, as with `loglinear sweep run`; the table: loglinear sweep report {out}\n"
    )
    path.write_text(header + yaml.safe_dump(sweep, sort_keys=False, width=1000))
    return path
