"""What Slurm says about a sweep: its jobs in the queue (`squeue`) and the nodes of a partition (`sinfo`);
and the sweep's own record of its submissions (`<out>/slurm_jobs.json`: Slurm task id -> run id).

Plain calls to the Slurm client commands; the accounting database (`sacct`) is not needed, so this
works on clusters without one. A task that left the queue has ended: its run folder says how.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from loglinear.runs.config import ConfigError
from loglinear.runs.folder import write_json_atomic

JOBS_FILE = "slurm_jobs.json"
QUEUE_FORMAT = "%i|%T|%r"
CLIENT_TIMEOUT_S = 60.0
NEVER_STARTS = {
    "PartitionConfig": "it asks for more than the partition's nodes have (CPUs per task, GPUs, memory)",
    "PartitionNodeLimit": "it asks for more nodes than the partition allows",
    "PartitionTimeLimit": "its time limit is above the partition's",
    "ReqNodeNotAvail": "the nodes it needs are down, drained or reserved",
    "BadConstraints": "no node has the features it asks for",
    "InvalidAccount": "its account is not valid",
    "InvalidQOS": "its QOS is not valid",
    "DependencyNeverSatisfied": "it depends on a job that failed",
}
"""Pending reasons of a job that Slurm will not start as it is, with what they mean."""


class SlurmError(ConfigError):
    """Slurm refused or cannot run what was asked (one line, with Slurm's own words)."""


@dataclass(frozen=True)
class QueuedTask:
    """A task in Slurm's queue: its state (PENDING, RUNNING, COMPLETING, ...) and pending reason."""

    state: str
    reason: str

    @property
    def running(self) -> bool:
        return self.state in ("RUNNING", "COMPLETING", "CONFIGURING", "STOPPED", "SUSPENDED")

    @property
    def never_starts(self) -> str | None:
        """What the pending reason means, when it says that Slurm will never start the task as it is."""
        code = self.reason.split(",")[0].strip()
        return None if self.running else NEVER_STARTS.get(code)


@dataclass(frozen=True)
class Partition:
    """A partition: CPUs and GPUs of its smallest node, and its time limit (None: unlimited)."""

    name: str
    cpus: int
    gpus: int
    max_minutes: int | None


def client(*command: str) -> str:
    """Run a Slurm client command; its stdout, or a SlurmError with its error line."""
    try:
        done = subprocess.run(list(command), capture_output=True, text=True, timeout=CLIENT_TIMEOUT_S)
    except FileNotFoundError:
        raise SlurmError(f"{command[0]} not found: is this a Slurm login node?") from None
    except subprocess.TimeoutExpired:
        raise SlurmError(f"`{' '.join(command)}` did not answer within {CLIENT_TIMEOUT_S:.0f}s") from None
    if done.returncode != 0:
        raise SlurmError(f"`{' '.join(command)}` failed: {error_line(done.stderr or done.stdout)}")
    return done.stdout


def error_line(text: str) -> str:
    """The line of a Slurm client's output that says what went wrong (the last `error:` line)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    errors = [line for line in lines if "error" in line.lower()]
    return (errors or lines or ["no output"])[-1]


def queue(job_ids: list[str]) -> dict[str, QueuedTask]:
    """This user's tasks of the jobs `job_ids` (array ids) that are still in Slurm's queue, by task id
    (`<job>_<index>`; a plain job by its id). A task absent from the result has ended."""
    if not job_ids:
        return {}
    text = client("squeue", "--noheader", "--array", f"--user={os.getuid()}", f"--format={QUEUE_FORMAT}")
    wanted = set(job_ids)
    tasks = {}
    for line in text.splitlines():
        task_id, _, rest = line.strip().partition("|")
        state, _, reason = rest.partition("|")
        if task_id.split("_")[0] in wanted:
            tasks[task_id] = QueuedTask(state.strip(), reason.strip())
    return tasks


def record_submission(out: Path, job: str, tasks: dict[str, list[str]]) -> None:
    """Append a submission (its job id, Slurm task id -> the ids of the runs it trains) to `<out>/slurm_jobs.json`."""
    path = out / JOBS_FILE
    record = json.loads(path.read_text()) if path.is_file() else {"jobs": []}
    record["jobs"].append({"job": job, "submitted": time.strftime("%Y-%m-%d %H:%M:%S"), "tasks": tasks})
    write_json_atomic(path, record)


def latest_tasks(out: Path) -> dict[str, str]:
    """Run id -> its task id in the latest submission that holds it."""
    path = out / JOBS_FILE
    if not path.is_file():
        return {}
    tasks: dict[str, str] = {}
    for job in json.loads(path.read_text())["jobs"]:
        for task_id, run_ids in job["tasks"].items():  # a run id, or (a pack's task) a list of them
            tasks.update({run_id: task_id for run_id in ([run_ids] if isinstance(run_ids, str) else run_ids)})
    return tasks


def queued_tasks(out: Path) -> dict[str, tuple[str, QueuedTask]]:
    """Run id -> (task id, its state) for the runs of `out` whose latest task is still in Slurm's queue."""
    tasks = latest_tasks(out)
    queued = queue(sorted({t.split("_")[0] for t in tasks.values()}))
    return {rid: (t, queued[t]) for rid, t in tasks.items() if t in queued}


def partition(name: str | None = None) -> Partition:
    """The partition `name` (default: the cluster's default partition) as `sinfo` shows it."""
    text = client("sinfo", "--noheader", "--format=%P|%c|%G|%l")
    rows = [line.strip().split("|") for line in text.splitlines() if line.count("|") == 3]
    for part, cpus, gres, limit in rows:
        is_default = part.endswith("*")
        if part.rstrip("*") == name or (name is None and is_default):
            return Partition(part.rstrip("*"), _leading_int(cpus, default=1), gpus_in(gres), minutes(limit))
    known = ", ".join(sorted({r[0].rstrip("*") for r in rows})) or "none"
    raise SlurmError(f"Slurm has no partition {name!r} (partitions: {known})" if name else
                     f"Slurm has no default partition: name one with --executor slurm_partition=NAME "
                     f"(partitions: {known})")


def gpus_in(gres: str) -> int:
    """GPUs per node in a GRES string (`gpu:4`, `gpu:a100:4(S:0-1)`, `gpu:a100:2,gpu:v100:2`; `(null)`: 0)."""
    total = 0
    for item in gres.split(","):
        fields = re.sub(r"\(.*?\)", "", item).split(":")
        if fields[0] == "gpu":
            total += _leading_int(fields[-1], default=1) if len(fields) > 1 else 1
    return total


def minutes(limit: str) -> int | None:
    """A Slurm time limit (`infinite`, `30`, `1:00:00`, `2-00:00:00`, `2-12`) in whole minutes (None: no limit)."""
    limit = limit.strip()
    if not limit or limit.lower() in ("infinite", "unlimited", "n/a"):
        return None
    days, _, clock = limit.rpartition("-")
    parts = [int(x) for x in clock.split(":")]
    if days:  # days-hours[:minutes[:seconds]]
        hours, mins, secs = (parts + [0, 0])[:3]
    elif len(parts) == 3:  # hours:minutes:seconds
        hours, mins, secs = parts
    else:  # minutes[:seconds]
        hours, mins, secs = 0, parts[0], (parts + [0])[1]
    return int(days or 0) * 24 * 60 + hours * 60 + mins + secs // 60


def _leading_int(text: str, default: int) -> int:
    match = re.match(r"\d+", text.strip())
    return int(match.group()) if match else default
