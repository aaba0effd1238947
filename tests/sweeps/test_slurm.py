"""Sweeps on a real single-node Slurm cluster (the `slurm_cluster` fixture: this machine, partition `debug`,
CPUs only): `loglinear sweep run SPEC --launcher submitit --executor slurm_partition=debug` runs every run,
a requeued task resumes its run, a job Slurm cannot start ends the command, and `loglinear sweep status`
reads the queue."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from loglinear.sweeps.launchers import partition_defaults
from loglinear.sweeps.spec import expand, load_spec

from .. import child_process
from .slurm_cluster import MAX_MINUTES, PARTITION
from .sweep_helpers import sweep_cli, write_spec

# one cluster for the whole module: under pytest-xdist its tests run on one worker, which starts it once
pytestmark = [pytest.mark.slurm, pytest.mark.xdist_group("slurm")]

SLURM = ["--launcher", "submitit", "--executor", f"slurm_partition={PARTITION}"]
"""What the Slurm command of docs/sweeps.md gives: only the partition."""
HANG_S = 1800.0
"""A guard on the wall clock, far above the tasks' time on a busy machine: the work runs in Slurm's jobs."""


def submission_script(out: Path) -> str:
    scripts = sorted((out / "submitit").glob("*_submission.sh"))
    assert scripts, f"no submission script in {out / 'submitit'}"
    return scripts[-1].read_text()


def wait_for(condition, what: str, poll: float = 0.5):
    started = time.monotonic()
    while time.monotonic() < started + HANG_S:
        value = condition()
        if value:
            return value
        time.sleep(poll)
    raise AssertionError(f"hung: no {what} after {HANG_S:.0f} s (load average {os.getloadavg()[0]:.1f})")


def finish(sweep: subprocess.Popen) -> tuple[str, str]:
    """The sweep's output once it ends; it follows Slurm's jobs (not its own children), so the guard is on the wall
    clock, far above their time."""
    try:
        return sweep.communicate(timeout=HANG_S)
    except subprocess.TimeoutExpired:
        sweep.kill()
        raise AssertionError(f"hung: the sweep still ran after {HANG_S:.0f} s (load average "
                             f"{os.getloadavg()[0]:.1f}): {sweep.communicate()[1][-3000:]}") from None


def test_partition_defaults_fit_the_cpu_partition(slurm_cluster):
    """No GPU on a CPU-only partition, one CPU per task, the partition's time limit; what the user gives is kept."""
    fitting = {"cpus_per_task": 1, "timeout_min": MAX_MINUTES}
    assert partition_defaults({"slurm_partition": PARTITION}) == fitting
    assert partition_defaults({}) == fitting  # `debug` is the default partition
    assert partition_defaults({"slurm_partition": PARTITION, "cpus_per_task": 2, "timeout_min": 5}) == {}


def test_sweep_with_only_the_partition_runs_every_run(slurm_cluster, tmp_path):
    """The command of docs/sweeps.md; Ctrl-C stops following (the tasks go on), and the same command again
    follows the queued tasks instead of submitting them twice."""
    # runs long enough (about 20 s each) that the sweep is still following them when Ctrl-C arrives
    long_enough = {"train.max_steps": 1500, "train.val_every": 500, "train.early_stop_threshold": None}
    spec = write_spec(tmp_path, {"model.mixer": ["attention", "mamba2", "log_linear_mamba2"]}, **long_enough)
    runs = expand(load_spec(spec))
    out = tmp_path / "out"
    command = ["run", str(spec), "--out", str(out), *SLURM, "--workers", "2"]
    sweep = subprocess.Popen([sys.executable, "-m", "loglinear", "sweep", *command], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    # two tasks at a time (--workers 2): the third waits in the queue with Slurm's reason
    seen = wait_for(lambda: _status_with(out, "running", "pending (JobArrayTaskLimit"), "a running and a throttled run")
    assert len(seen.splitlines()) == 1 + len(runs)
    sweep.send_signal(signal.SIGINT)
    _, stderr = child_process.communicate(sweep, cpu_s=120)
    assert sweep.returncode == 130 and "its tasks go on" in stderr, stderr
    again = sweep_cli(*command)
    assert again.returncode == 0, again.stderr
    assert "still in Slurm's queue from an earlier submission" in again.stderr
    assert len(json.loads((out / "slurm_jobs.json").read_text())["jobs"]) == 1
    table = (out / "table.md").read_text()
    for run in runs:
        assert json.loads((out / "runs" / run.run_id / "result.json").read_text())["status"] == "max_steps"
    assert f"None: all {len(runs)} runs finished." in table and "Mamba-2" in again.stdout
    script = submission_script(out)
    assert f"--partition={PARTITION}" in script and "--cpus-per-task=1" in script and f"--time={MAX_MINUTES}" in script
    assert "gpu" not in script.lower()
    status = sweep_cli("status", str(out))
    assert status.returncode == 0, status.stderr
    assert status.stdout.splitlines()[0] == f"tiny: {len(runs)} runs: {len(runs)} done"


def _status_with(out: Path, *wanted: str):
    if not (out / "slurm_jobs.json").is_file():
        return None
    done = sweep_cli("status", str(out))
    return done.stdout if done.returncode == 0 and all(w in done.stdout for w in wanted) else None


def test_a_job_slurm_can_never_start_ends_the_command_in_one_line(slurm_cluster, tmp_path):
    spec = write_spec(tmp_path, {"model.mixer": ["attention"]})
    out = tmp_path / "out"
    too_big = sweep_cli("run", str(spec), "--out", str(out), *SLURM,
                        "--executor", f"cpus_per_task={slurm_cluster.cpus * 32}", "--quiet", cpu_s=120)
    assert too_big.returncode == 2
    error = too_big.stderr.strip().splitlines()[-1]
    assert "PartitionConfig" in error and "Traceback" not in too_big.stderr
    assert slurm_cluster.run("squeue", "--noheader").strip() == ""  # cancelled, not left pending forever


@pytest.mark.parametrize("executor, words", [
    ("slurm_partition=nope", "no partition 'nope'"),
    ("gpus_per_node=1", "gres"),
])
def test_submission_errors_are_one_line(slurm_cluster, tmp_path, executor, words):
    spec = write_spec(tmp_path, {"model.mixer": ["attention"]})
    done = sweep_cli("run", str(spec), "--out", str(tmp_path / "out"), *SLURM, "--executor", executor, "--quiet",
                     cpu_s=120)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("loglinear sweep: error:") and words in lines[0].lower(), done.stderr


def metric_rows(directory: Path) -> list[dict[str, str]]:
    """metrics.csv's rows that hold a value, without the empty cells."""
    with open(directory / "metrics.csv", newline="") as f:
        return [{k: v for k, v in row.items() if v} for row in csv.DictReader(f)]


def test_a_requeued_or_timed_out_task_resumes_its_run_from_its_checkpoint(slurm_cluster, tmp_path):
    """`scontrol requeue` (what preemption does: SIGTERM), then Slurm's timeout warning (SIGUSR2, submitit
    requeues the task itself): each time the run saves a checkpoint, the task goes back to the queue and its
    next start resumes the run; metrics.csv keeps every earlier row and the result equals an uninterrupted run's."""
    spec = write_spec(tmp_path, {"model.mixer": ["attention"]},
                      **{"train.max_steps": 1000, "train.val_every": 50, "train.early_stop_threshold": None})
    run = expand(load_spec(spec))[0]
    out = tmp_path / "out"
    directory = out / "runs" / run.run_id
    command = [sys.executable, "-m", "loglinear", "sweep", "run", str(spec), "--out", str(out), *SLURM, "--quiet"]
    sweep = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for(lambda: (directory / "last.ckpt").is_file(), "the run's first checkpoint")
    (task,) = json.loads((out / "slurm_jobs.json").read_text())["jobs"][0]["tasks"]
    kept = []
    queue = ("squeue", "--noheader", "--array", "--format=%T", f"--jobs={task}")
    for stop in (["scontrol", "requeue", task], ["scancel", "--signal=USR2", task]):
        slurm_cluster.run(*stop)
        wait_for(lambda: "PENDING" in slurm_cluster.run(*queue), f"the task back in the queue after {' '.join(stop)}")
        assert not (directory / "result.json").is_file()
        kept.append(metric_rows(directory))
        # Slurm holds a requeued job back 2 minutes; started at once, it needs its last start's processes gone, and a
        # new second: Slurm revokes the old credential by the second and refuses a start within it ("Job credential
        # revoked", the task then ends failed)
        wait_for(slurm_cluster.node_idle, f"the node idle after {' '.join(stop)}")
        time.sleep(1.0)
        requeued = time.time()
        slurm_cluster.run("scontrol", "update", f"JobId={task}", "StartTime=now")
        wait_for(lambda since=requeued: (directory / "last.ckpt").stat().st_mtime > since,
                 "a checkpoint of the resumed run")
    stdout, stderr = finish(sweep)
    assert sweep.returncode == 0, stderr
    result = json.loads((directory / "result.json").read_text())
    log = (directory / "train.log").read_text()
    assert result["status"] == "max_steps" and result["step"] == 1000, log
    assert log.count("=== ") == 3, log  # three sessions: before the requeue, before the timeout, after
    rows = metric_rows(directory)
    for before in kept:
        assert len(before) >= 2 and [row for row in before if row in rows] == before

    reference = tmp_path / "reference"
    command = [sys.executable, "-m", "loglinear", "train", str(directory / "config.yaml"), f"out_dir={reference}"]
    train = child_process.run(command, cpu_s=600, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert train.returncode == 0, train.stderr
    expected = json.loads((reference / "result.json").read_text())
    for key in ("status", "step", "val_accuracy", "steps_to_threshold", "final_val", "test", "params"):
        assert result[key] == expected[key], key
