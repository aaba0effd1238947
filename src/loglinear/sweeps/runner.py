"""The local runner: each run of a sweep in its own `loglinear train` process (or, with `pack` N, each pack of up to
N runs in one `loglinear train --pack` process: packing/), a few at a time.

On a GPU machine, K workers on each visible GPU (`runs_per_gpu`, default DEFAULT_RUNS_PER_GPU; each
process sees only its GPU), or N workers in all (`workers`), dealt round-robin over the GPUs; without
a GPU, N CPU workers (default one per core). Either way each process gets cores // N threads (or
$OMP_NUM_THREADS when set), so the cores are never oversubscribed.
A run whose result is finished is skipped; a run whose folder another process holds (its `.lock`:
someone trains it by hand, or another sweep) is left alone, said so, and counted as running
elsewhere; any other is started with `loglinear train runs/<run_id>/config.yaml` in the sweep folder (its out_dir
`runs/<run_id>`, so that what the run records names no absolute path; a relative `train.init_from` is read from the
sweep folder too), which resumes it from its last checkpoint. A crashed or diverged run never stops the others.
A fault of the machine stops them all (each saves its checkpoint) and raises an OSError naming the path: the
runner's own write failed (a full disk, a folder that cannot be written), or a run's process exited with status 1
without a result (what `loglinear train` does on a full disk, or when it cannot write its folder):
such a run is not failed, it resumes when the sweep is run again.
SIGINT / SIGTERM / SIGHUP: every running process gets one SIGINT (it saves its
checkpoint and exits), the runner waits for them and returns `interrupted`; running the sweep
again picks up where it stopped. If the runner itself is killed, Linux delivers SIGINT to its runs
(parent-death signal), so they stop cleanly instead of running on unattended.
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import dataclasses
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from loglinear.runs.config import ConfigError, to_yaml
from loglinear.runs.folder import (
    CONFIG,
    FINISHED,
    LAST,
    RESULT,
    append_text,
    exclusive,
    free_space,
    holder,
    is_finished,
    status_of,
    write_json_atomic,
    write_text_atomic,
)
from loglinear.runs.folder import INTERRUPTED as INTERRUPTED_CHECKPOINT
from loglinear.runs.folder import LOCK as RUN_LOCK
from loglinear.sweeps.manifest import LOG, run_dir, sweep_folder
from loglinear.sweeps.progress import ELSEWHERE, REFUSED, Progress, eta_seconds
from loglinear.sweeps.spec import Run

POLL_S = 0.2
GRACE_S = 60.0
"""How long interrupted runs get to save their checkpoints before they are killed."""
INTERRUPTED = (130, 143)
"""Exit statuses of an interrupted `loglinear train` (SIGINT, SIGTERM): its run resumes when started again."""
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
LOCK = ".runner.lock"
DEFAULT_RUNS_PER_GPU = 1
"""Runs sharing one GPU when neither `workers` nor `runs_per_gpu` is given. 1 until measured: the
default is to become the K with the most runs per hour in benchmarks/sweep_throughput.py on a GPU."""


def write_run_config(run: Run, directory: Path) -> Path:
    """Write the run's resolved configuration, quiet and with `directory` relative to its sweep folder
    (`runs/<run_id>`) as its out_dir, to `directory/config.yaml`: the exact input of its `loglinear train`, run in
    the sweep folder, whatever happens to the preset files after the sweep was expanded. (Same id, same run: only
    the logger and the folder may differ from an earlier session's file.) Returns the file's path relative to the
    sweep folder."""
    logger = dataclasses.replace(run.config.logger, progress=False)
    sweep = sweep_folder(directory)
    cfg = dataclasses.replace(run.config, out_dir=str(directory.relative_to(sweep)), logger=logger)
    path = directory / CONFIG
    write_text_atomic(path, to_yaml(cfg))
    return path.relative_to(sweep)


def train_command(configs: list[Path]) -> list[str]:
    """The command that trains (or resumes) the run whose resolved configuration is `configs[0]`, or the runs of
    `configs` as one pack (`loglinear train --pack`); the paths are relative to the sweep folder, where it runs."""
    if len(configs) == 1:
        return [sys.executable, "-m", "loglinear", "train", str(configs[0])]
    return [sys.executable, "-m", "loglinear", "train", "--pack", *map(str, configs)]


def jobs_of(runs: list[Run], pack: int | None) -> list[list[Run]]:
    """The processes that train `runs`: one run each, or (`pack` N) packs of up to N runs that can share one
    (packing/compatibility.py; a run that no pack can train runs alone)."""
    if pack is None or pack == 1:
        return [[run] for run in runs]
    from loglinear.packing.compatibility import pack_groups

    return [[runs[i] for i in group] for group in pack_groups([r.config for r in runs], pack)]


def cpu_count() -> int:
    """Cores this process may use (its affinity mask, which containers and Slurm set)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def visible_gpus() -> list[str]:
    """The CUDA devices this process sees, as values for CUDA_VISIBLE_DEVICES."""
    import torch

    count = torch.cuda.device_count()
    listed = [d.strip() for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    return (listed or [str(i) for i in range(count)])[:count]


def worker_envs(workers: int | None, runs: int, gpus: list[str], cores: int,
                threads: str | None = None, runs_per_gpu: int | None = None) -> list[dict[str, str]]:
    """The environment of each worker: its GPU (round-robin over `gpus`) and its thread count, `threads`
    if given (the user's OMP_NUM_THREADS), else cores // workers.

    Workers: `workers` in all, or `runs_per_gpu` on each GPU (at most one of the two; runs_per_gpu
    needs a GPU); by default DEFAULT_RUNS_PER_GPU per GPU, else one per core; never more than there
    are runs (the ones left are then spread evenly over the GPUs).
    """
    if workers is not None and runs_per_gpu is not None:
        raise ConfigError("--workers and --runs-per-gpu exclude each other: give one")
    if runs_per_gpu is not None and not gpus:
        raise ConfigError(
            "--runs-per-gpu needs a visible CUDA device and none is visible here; on a CPU give --workers")
    n = workers or (runs_per_gpu or DEFAULT_RUNS_PER_GPU) * len(gpus) or cores
    n = max(1, min(n, runs))
    threads = threads or str(max(1, cores // n))
    envs = [{"OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads} for _ in range(n)]
    for i, env in enumerate(envs):
        if gpus:
            env["CUDA_VISIBLE_DEVICES"] = gpus[i % len(gpus)]
    return envs


class RunFault(OSError):
    """A run's process ended on a fault of the machine (exit status 1 without a result); the message says which."""


@dataclass
class SweepOutcome:
    """Final statuses by run id, and whether the sweep was interrupted (`timed_out`: by its time limit)."""

    statuses: dict[str, str]
    interrupted: bool = False
    timed_out: bool = False


@dataclass
class RunProcess:
    """A started `loglinear train` process training `runs` (one run, or a pack) in `directories`, its log, what each
    run's result file was before it started, and whether it resumes a run (whose time here is only the rest)."""

    runs: list[Run]
    directories: list[Path]
    process: subprocess.Popen
    log: IO[str]
    slot: int
    started: float = field(default_factory=time.monotonic)
    result_mtimes: list[int | None] = field(default_factory=list)
    resumed: bool = False


class _StopRequest:
    """Signal handlers that ask the loop to stop (a second signal: stop without waiting)."""

    def __init__(self) -> None:
        self.signal: int | None = None
        self.urgent = False

    def __call__(self, signum: int, frame: object) -> None:
        self.urgent = self.signal is not None
        self.signal = signum

    def install(self) -> dict[int, Callable]:
        return {s: signal.signal(s, self) for s in STOP_SIGNALS}


def run_local(runs: list[Run], out: Path, workers: int | None = None, progress: Progress | None = None,
              grace_s: float = GRACE_S, runs_per_gpu: int | None = None, pack: int | None = None,
              deadline: float | None = None) -> SweepOutcome:
    """Run every unfinished run of `runs` into `out/runs/<id>`, `workers` processes at a time or `runs_per_gpu` on
    each GPU (`worker_envs`), each process one run or (`pack` N) a pack of up to N runs (`jobs_of`); returns the
    statuses (see module docstring). At `deadline` (time.monotonic()), as on a signal, no process starts any more and
    the running ones save their checkpoints and stop (`timed_out`). Call it inside `exclusive_sweep(out)`."""
    progress = progress or Progress("sweep", enabled=False)
    statuses = {r.run_id: status_of(run_dir(out, r.run_id)) for r in runs}
    statuses = {rid: s if s in FINISHED else "pending" for rid, s in statuses.items()}
    todo = collections.deque(jobs_of([r for r in runs if statuses[r.run_id] == "pending"], pack))
    threads = os.environ.get("OMP_NUM_THREADS")
    envs = worker_envs(workers, len(todo), visible_gpus(), cpu_count(), threads, runs_per_gpu) if todo else []
    free = list(range(len(envs)))
    active: list[RunProcess] = []
    durations: list[float] = []
    stop = _StopRequest()
    previous = stop.install()

    def timed_out() -> bool:
        return deadline is not None and time.monotonic() >= deadline

    try:
        try:
            while (todo or active) and stop.signal is None and not timed_out():
                while todo and free:
                    job = todo.popleft()
                    directories = [run_dir(out, r.run_id).resolve() for r in job]
                    held = [_held_elsewhere(d) for d in directories]
                    for run, elsewhere in zip(job, held, strict=True):
                        if elsewhere:
                            statuses[run.run_id] = ELSEWHERE
                    job = [r for r, elsewhere in zip(job, held, strict=True) if not elsewhere]
                    if not job:
                        continue
                    slot = free.pop(0)
                    active.append(start_job(job, [run_dir(out, r.run_id).resolve() for r in job], envs[slot], slot))
                    statuses.update({r.run_id: "running" for r in job})
                for job in [j for j in active if j.process.poll() is not None]:
                    active.remove(job)
                    free.append(job.slot)
                    ended = finish_job(job)
                    statuses.update(ended)
                    if all(s in FINISHED for s in ended.values()) and not job.resumed:
                        durations.append(time.monotonic() - job.started)
                now = time.monotonic()
                eta = eta_seconds(durations, len(todo), [now - j.started for j in active], len(envs))
                progress.update(list(statuses.values()), eta)
                if todo or active:
                    time.sleep(POLL_S)
        except OSError:  # a fault of the machine: the running runs save their checkpoints and stop too
            _interrupt(active, stop, grace_s)
            raise
        for rid, status in statuses.items():
            if status == ELSEWHERE and is_finished(run_dir(out, rid)):
                statuses[rid] = status_of(run_dir(out, rid))  # finished meanwhile by the other process
        if stop.signal is not None or timed_out():
            _interrupt(active, stop, grace_s)
            for job in active:
                for run, directory in zip(job.runs, job.directories, strict=True):
                    statuses[run.run_id] = status_of(directory) if is_finished(directory) else "pending"
            unfinished = any(s not in FINISHED for s in statuses.values())
            return SweepOutcome(statuses, interrupted=stop.signal is not None or unfinished,
                                timed_out=stop.signal is None and unfinished)
        return SweepOutcome(statuses)
    finally:
        for job in active:
            job.log.close()
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        progress.close()


def exclusive_sweep(out: Path) -> contextlib.AbstractContextManager[None]:
    """Hold `out/.runner.lock`: two runners on one folder would train the same runs twice."""
    return exclusive(out / LOCK,
                     f"another `loglinear sweep run` is running in {out}; wait for it or stop it first")


def _held_elsewhere(directory: Path) -> bool:
    """Whether another process holds the run's folder (it is never written into then); says so on stderr."""
    pid = holder(directory / RUN_LOCK)
    if pid is None:
        return False
    print(f"loglinear sweep: {directory} is being trained by another process{f' (pid {pid})' if pid else ''}: "
          "not started here (rerun the sweep once it is done)", file=sys.stderr, flush=True)
    return True


def start_job(runs: list[Run], directories: list[Path], env: dict[str, str], slot: int = 0) -> RunProcess:
    """Start `loglinear train` for `runs` (one run, or a pack) in `directories` (`<sweep>/runs/<run_id>`), in the
    sweep folder. The output of a run alone is appended to its `train.log`; a pack's goes to the first run's
    `train.log`, and the others' say where. The logs name the interpreter without its folder, and the runs' files
    relative to the sweep folder."""
    sweep = sweep_folder(directories[0])
    command = train_command([write_run_config(r, d) for r, d in zip(runs, directories, strict=True)])
    env_text = " ".join(f"{k}={v}" for k, v in sorted(env.items()))
    shown = subprocess.list2cmdline([Path(command[0]).name, *command[1:]])
    header = f"=== {time.strftime('%Y-%m-%d %H:%M:%S')} {env_text} {shown}\n"
    append_text(directories[0] / LOG, header)
    for directory in directories[1:]:
        append_text(directory / LOG,
                    f"{header}=== trained in a pack: its output is in {(directories[0] / LOG).relative_to(sweep)}\n")
    log = open(directories[0] / LOG, "a")
    # before the process can write either
    mtimes = [(d / RESULT).stat().st_mtime_ns if (d / RESULT).is_file() else None for d in directories]
    resumed = any((d / name).is_file() for d in directories for name in (LAST, INTERRUPTED_CHECKPOINT))
    process = subprocess.Popen(
        command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env={**child_environ(), **env},
        cwd=sweep,
        start_new_session=True,  # a Ctrl-C on the terminal reaches the runner only, which forwards one SIGINT
        preexec_fn=_child_signals,
    )
    return RunProcess(list(runs), list(directories), process, log, slot, result_mtimes=mtimes, resumed=resumed)


def child_environ() -> dict[str, str]:
    """This process's environment for a run's process, which starts in the sweep folder: relative entries of
    PYTHONPATH made absolute, so that it imports what this process imports."""
    environ = dict(os.environ)
    if environ.get("PYTHONPATH"):
        environ["PYTHONPATH"] = os.pathsep.join(map(os.path.abspath, environ["PYTHONPATH"].split(os.pathsep)))
    return environ


def finish_job(job: RunProcess) -> dict[str, str]:
    """The status of each run of a process that ended. Without a result of its own: an interrupted run stays
    `pending` (it resumes); status 2 (refused: its folder held by another process, or holding another run, or runs
    that cannot share a pack) is ELSEWHERE or REFUSED and nothing is written; status 1 is a fault of the machine,
    raised as `RunFault`; a process that died otherwise gets a `failed` result."""
    job.log.close()
    code = job.process.returncode
    last = _last_line(job.directories[0] / LOG)
    mtimes = job.result_mtimes or [None] * len(job.runs)
    statuses = {}
    for run, directory, mtime in zip(job.runs, job.directories, mtimes, strict=True):
        result = directory / RESULT
        wrote_result = result.is_file() and result.stat().st_mtime_ns != mtime
        rid = directory.name if run is None else run.run_id
        if code == 0 or code in INTERRUPTED or wrote_result:
            statuses[rid] = status_of(directory)
        elif code == 2:
            if _held_elsewhere(directory):
                statuses[rid] = ELSEWHERE
            else:
                print(f"loglinear sweep: {directory} was refused: {last}", file=sys.stderr, flush=True)
                statuses[rid] = REFUSED
        elif code == 1:
            raise RunFault(f"{directory}: loglinear train exited with status 1 without a result, a fault of the "
                           f"machine ({free_space(directory)} free on its disk; its log's last line: {last}); the "
                           "run stays resumable: free space or fix the folder, then rerun the sweep")
        else:
            if holder(directory / RUN_LOCK) is None:
                write_json_atomic(result, {
                    "status": "failed",
                    "error": f"loglinear train exited with status {code} without a result: {last}",
                    "exit_code": code,
                })
            statuses[rid] = status_of(directory)
    return statuses


def _interrupt(active: list[RunProcess], stop: _StopRequest, grace_s: float) -> None:
    """Ask each running process to save and exit; kill those still running after `grace_s`."""
    for job in active:
        _signal(job.process, signal.SIGINT)
    deadline = time.monotonic() + grace_s
    while any(j.process.poll() is None for j in active) and time.monotonic() < deadline and not stop.urgent:
        time.sleep(POLL_S)
    for job in active:
        if job.process.poll() is None:
            _signal(job.process, signal.SIGKILL)
            job.process.wait()


def _signal(process: subprocess.Popen, signum: int) -> None:
    try:
        process.send_signal(signum)
    except ProcessLookupError:
        pass


def _child_signals() -> None:
    """In the child before exec: SIGINT when its parent dies (Linux), and no death by SIGUSR2, which
    Slurm sends to every process of a job before its time limit (the job itself handles it)."""
    signal.signal(signal.SIGUSR2, signal.SIG_IGN)
    if sys.platform.startswith("linux"):
        pr_set_pdeathsig = 1
        ctypes.CDLL(None).prctl(pr_set_pdeathsig, signal.SIGINT)


def _last_line(path: Path) -> str:
    try:
        lines = [line.strip() for line in path.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return f"no log at {path}"
    return lines[-1][:300] if lines else f"empty log {path}"
