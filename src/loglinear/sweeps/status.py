"""`loglinear sweep status OUT`: where each run of a sweep stands, from its folder and Slurm's queue.

A run with a result is done (early_stopped, max_steps), diverged or failed. A run without one is
running or pending (with Slurm's reason) while its task of the latest Slurm submission that holds it
(`<out>/slurm_jobs.json`, written by `--launcher submitit`) is in the queue, or running while a process
holds its folder's lock (a local sweep, or a `loglinear train` by hand); otherwise it is
`stopped` (it has a checkpoint: the sweep's command resumes it) or `not started`. A running run also says how
far its metrics.csv has got (`step 1,250 of 2,000`). Nothing is submitted or changed.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from loglinear.runs.folder import FINISHED, INTERRUPTED, LAST, LOCK, holder, result_of
from loglinear.runs.metrics_rows import METRICS, read_rows
from loglinear.sweeps.manifest import read_manifest, run_dir


@dataclass(frozen=True)
class RunState:
    """One run's standing: `status` (a result's status, running, pending, stopped, not started),
    the Slurm task it belongs to, and a detail (Slurm's pending reason, the error of a failed run)."""

    run_id: str
    status: str
    task: str | None = None
    detail: str = ""
    point: str = ""


def sweep_status(out: Path, with_queue: bool = True) -> list[RunState]:
    """The standing of every run of the sweep in `out` (its manifest's runs, in order); without the
    queue (`with_queue=False`) a run without a result is `stopped` or `not started`."""
    from loglinear.sweeps.slurm import latest_tasks, queued_tasks

    manifest = read_manifest(out)
    tasks = latest_tasks(out)
    queued = {t: task for t, task in queued_tasks(out).values()} if with_queue else {}
    states = []
    for entry in manifest["runs"]:
        rid = entry["id"]
        point = ", ".join(f"{k}={v}" for k, v in entry["point"].items())
        directory = run_dir(out, rid)
        result = result_of(directory)
        task_id = tasks.get(rid)
        task = queued.get(task_id) if task_id else None
        if result.get("status") in FINISHED or (result and task is None):
            status = result.get("status", "failed")
            error = str(result.get("error") or "")
            detail = error.splitlines()[0][:200] if status == "failed" and error else ""
            states.append(RunState(rid, status, task_id, detail, point))
        elif task is not None:
            detail = (progress(directory, entry) if task.running else
                      task.reason + (f": {task.never_starts}" if task.never_starts else ""))
            states.append(RunState(rid, "running" if task.running else "pending", task_id, detail, point))
        elif (pid := holder(directory / LOCK)) is not None:  # a process on this machine holds the run
            detail = ", ".join(part for part in (f"pid {pid}" if pid else "", progress(directory, entry)) if part)
            states.append(RunState(rid, "running", task_id, detail, point))
        else:
            saved = [p for p in (directory / LAST, directory / INTERRUPTED) if p.is_file()]
            checkpoint = max(saved, key=lambda p: p.stat().st_mtime_ns, default=None)
            states.append(RunState(rid, "stopped" if checkpoint else "not started", task_id,
                                   f"resumes from {checkpoint.name}" if checkpoint else "", point))
    return states


def progress(directory: Path, entry: dict) -> str:
    """How many steps a run's metrics.csv has logged, of its configuration's max_steps ("" before its first row;
    what is wrong with it when it does not read)."""
    try:
        rows = read_rows(directory / METRICS)
        step = int(rows[-1]["step"]) + 1 if rows else None
    except ValueError as e:
        return f"{METRICS} does not read: {e}"
    except KeyError:
        return f"{METRICS} has no step column"
    return "" if step is None else f"step {step:,} of {entry['config']['train']['max_steps']:,}"


def format_status(name: str, states: list[RunState]) -> str:
    """A table of the runs (id, status, Slurm task, detail, varied values) and a count per status."""
    counts = Counter("done" if s.status in ("early_stopped", "max_steps") else s.status for s in states)
    lines = [f"{name}: {len(states)} runs: " + ", ".join(f"{n} {c}" for c, n in sorted(counts.items()))]
    for s in states:
        detail = f" ({s.detail})" if s.detail else ""
        lines.append(f"{s.run_id}  {s.status + detail:<40}  {s.task or '-':<10}  {s.point}")
    return "\n".join(lines)
