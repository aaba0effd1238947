"""Everything a GPU must show, in one command: the first minutes on a GPU verify the project there.

    python -m benchmarks.gpu_check                     # CUDA: every step, within --time-limit (default 540 s)
    python -m benchmarks.gpu_check --dry-run           # any machine: its arguments checked (the logs folder
                                                       # writable), the steps it would run, and exit 0
    python -m benchmarks.gpu_check --time-limit 900 --logs DIR
    python -m benchmarks.gpu_check --only training sweep   # the steps whose names hold any of these words

Steps, each a child process of this one (its output in the logs folder), one after another, most telling first:
1. the fault probe (benchmarks/fault_probe.py): one call of the fused kernels per variant, shape, dtype and
   pass at 1,024 tokens, each in a process of its own, so that a fault is pinned to its case (and each failing
   case again under compute-sanitizer memcheck where it is on the PATH);
2. `loglinear doctor`: versions, devices, the fused kernels' self-check (its verdicts stored for later runs);
3. the determinism probe (benchmarks/determinism.py): each fused kernel, forward and backward, both variants,
   fp32 and bf16, four calls on identical inputs; the largest difference between calls per output;
4. the GPU tests, `pytest -m gpu` (with pytest-xdist: one worker per core), their summary and every failure;
5. the kernel benchmark (benchmarks/kernels.py) at the paper's and the MQAR shapes, 1K to 64K tokens, against
   fla (the kernels fla accepts on the GPU found: kernel_peers.fla_refusal), our linear kernels and SDPA;
6. GPU training throughput (benchmarks/gpu_training.py) of every mixer at the paper's MQAR sizes, d_model
   16/32/64, impl auto and chunk, eager and compiled (`train.compile=true`), with the GPU's utilisation
   sampled by nvidia-smi while it runs;
7. a short MQAR sweep on the GPU with several runs per GPU against the same runs on the CPU
   (benchmarks/sweep_agreement.py).

A step that fails (an exit status other than 0) or runs out of time is recorded so, and the next step runs.
The whole command keeps to `--time-limit` seconds, and each step to its own cap (`Step.cap_s`), so that one
slow step leaves time for those after it: a step is stopped (its process group killed) at the smaller of the
two; a step that would start with less than MIN_STEP_S left is skipped. The
record, a dated section `gpu check <date>` appended to benchmarks/RESULTS.md (device, compute capability,
driver, torch, Triton and fla versions, the command, each step's status and duration), points at the logs
folder, which holds each step's output and the raw measurements the steps write (json).
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks.results_md import command, markdown_table, write_section
from loglinear.checks import int_option

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_LIMIT_S = 540  # one command on a lent GPU runs at most 10 minutes
MIN_STEP_S = 10
TRAIN_STEPS = 100
D_MODELS = (16, 32, 64)


@dataclass(frozen=True)
class Step:
    name: str
    argv: list[str]
    cap_s: float = float("inf")  # the most this step may use, so that one slow step leaves time for the rest
    sample_gpu: bool = False  # sample the GPU's utilisation while it runs


@dataclass
class Outcome:
    status: str  # "passed", "failed (exit N)", "timed out", "skipped: ..."
    seconds: float
    log: Path | None
    utilisation: str = ""


def plan(logs: Path, train_steps: int = TRAIN_STEPS) -> list[Step]:
    py = [sys.executable, "-m"]
    workers = ["-n", str(os.cpu_count() or 1)] if importlib.util.find_spec("xdist") else []
    sanitize = ["--sanitize-failures"] if shutil.which("compute-sanitizer") else []
    steps = [
        Step("fault probe", [*py, "benchmarks.fault_probe", "--T", "1024", *sanitize], cap_s=150),
        Step("doctor", [*py, "loglinear", "doctor"], cap_s=150),
        Step("determinism probe", [*py, "benchmarks.determinism", "--json", str(logs / "determinism.json")], cap_s=60),
        Step("GPU tests", [*py, "pytest", "-m", "gpu", "-q", "-rfE", *workers, "tests"], cap_s=200),
        Step("kernel benchmark", [*py, "benchmarks.kernels", "--variant", "all", "--shape", "all",
                                  "--json", str(logs / "kernels.json")], cap_s=150),
    ]
    for compiled in (False, True):
        for d in D_MODELS:
            steps.append(Step(f"GPU training, d_model {d}, {'compiled' if compiled else 'eager'}",
                              [*py, "benchmarks.gpu_training", "--d-model", str(d), "--steps", str(train_steps),
                               *(["--compile"] if compiled else [])], cap_s=180 if compiled else 90,
                              sample_gpu=True))
    steps.append(Step("MQAR sweep, GPU against CPU", [*py, "benchmarks.sweep_agreement", "--out",
                                                         str(logs / "sweep")], cap_s=300, sample_gpu=True))
    return steps


def select(steps: list[Step], only: list[str] | None) -> list[Step]:
    """The steps whose names contain any of `only` (case-insensitive), in plan order; all of them for None."""
    if not only:
        return steps
    chosen = [s for s in steps if any(word.lower() in s.name.lower() for word in only)]
    if not chosen:
        raise ValueError(f"--only {' '.join(only)} matches no step; the steps are: "
                         + "; ".join(s.name for s in steps))
    return chosen


def check_logs(logs: Path) -> None:
    """A ValueError naming `logs` when the check could not write its logs there: a file, or a folder that cannot be
    made or written (a temporary folder is made in it, or in its nearest existing parent, and removed)."""
    if logs.exists() and not logs.is_dir():
        raise ValueError(f"--logs {logs} is a file, not a folder")
    existing = next(p for p in (logs, *logs.parents) if p.exists())
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".gpu-check-", dir=existing))
    except OSError as e:
        raise ValueError(f"--logs {logs}: cannot write in {existing} ({e.strerror})") from None


def slug(name: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in name.lower()).strip("-")


def run_step(step: Step, log: Path, seconds: float) -> Outcome:
    """Run `step` with its output in `log`, stopped after `seconds` (its whole process group)."""
    started = time.monotonic()
    sampler = start_sampler(log.with_suffix(".gpu.csv")) if step.sample_gpu else None
    with log.open("w") as out:
        out.write(f"$ {' '.join(step.argv)}\n")
        out.flush()
        child = subprocess.Popen(step.argv, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, start_new_session=True)
        try:
            code = child.wait(timeout=seconds)
            status = "passed" if code == 0 else f"failed (exit {code})"
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
            status = f"timed out after {seconds:.0f} s"
    utilisation = stop_sampler(sampler, log.with_suffix(".gpu.csv")) if sampler else ""
    return Outcome(status, time.monotonic() - started, log, utilisation)


def start_sampler(path: Path) -> subprocess.Popen | None:
    """nvidia-smi printing the GPU's utilisation (%) every half second into `path`; None without nvidia-smi."""
    try:
        return subprocess.Popen(["nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits",
                                 "-lms", "500"], stdout=path.open("w"), stderr=subprocess.DEVNULL)
    except OSError:
        return None


def stop_sampler(sampler: subprocess.Popen | None, path: Path) -> str:
    if sampler is None:
        return "n/a (no nvidia-smi)"
    sampler.terminate()
    sampler.wait()
    return utilisation_summary(path.read_text())


def utilisation_summary(text: str) -> str:
    """Mean and share of samples above 90% of nvidia-smi's utilisation lines (GPU 0's, one a line)."""
    values = [float(line.split(",")[0]) for line in text.splitlines() if line.strip().split(",")[0].isdigit()]
    if not values:
        return "no samples"
    busy = sum(v > 90 for v in values) / len(values)
    return f"mean {sum(values) / len(values):.0f}%, > 90% in {busy:.0%} of {len(values)} samples"


def run_all(steps: list[Step], logs: Path, limit_s: float) -> list[Outcome]:
    """Every step in order, each within its cap and what is left of `limit_s`; a failure does not stop the next."""
    deadline = time.monotonic() + limit_s
    outcomes = []
    for i, step in enumerate(steps, 1):
        left = deadline - time.monotonic()
        if left < MIN_STEP_S:
            outcomes.append(Outcome(f"skipped: {left:.0f} s of --time-limit left", 0.0, None))
            continue
        outcome = run_step(step, logs / f"{i:02d}-{slug(step.name)}.log", min(left, step.cap_s))
        print(f"{i}. {step.name}: {outcome.status}, {outcome.seconds:.0f} s", flush=True)
        outcomes.append(outcome)
    return outcomes


def environment() -> dict[str, str]:
    """Device, compute capability, driver and the versions the record names."""
    import torch

    found = {"torch": f"{torch.__version__} (CUDA {torch.version.cuda})"}
    for name in ("triton", "fla-core"):
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = "not installed"
    if torch.cuda.is_available():
        found["device"] = torch.cuda.get_device_name()
        found["capability"] = ".".join(map(str, torch.cuda.get_device_capability()))
    else:
        found["device"], found["capability"] = "no CUDA device", "-"
    try:
        found["driver"] = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                         capture_output=True, text=True, timeout=30).stdout.split("\n")[0] or "?"
    except (OSError, subprocess.TimeoutExpired):
        found["driver"] = "n/a (no nvidia-smi)"
    return found


def record(steps: list[Step], outcomes: list[Outcome], env: dict[str, str], logs: Path, limit_s: float) -> str:
    """The section body: environment, command, and one row per step."""
    rows = []
    for i, (step, o) in enumerate(zip(steps, outcomes, strict=True), 1):
        log = "-" if o.log is None else f"`{o.log.name}`"
        rows.append([i, step.name, f"`{' '.join(step.argv[1:])}`", o.status, f"{o.seconds:.0f}", log,
                     o.utilisation or "-"])
    total = sum(o.seconds for o in outcomes)
    head = ", ".join(f"{k} {env[k]}" for k in ("device", "capability", "driver", "torch", "triton", "fla-core"))
    return (f"{head}. Time limit {limit_s:.0f} s, {total:.0f} s used. Logs and raw measurements: `{logs_path(logs)}`; "
            f"each step's own sections of this file are rewritten by it.\n\n"
            + markdown_table(["#", "step", "command", "status", "s", "log", "GPU utilisation"], rows))


def logs_path(logs: Path) -> str:
    try:
        return str(logs.resolve().relative_to(ROOT))
    except ValueError:
        return str(logs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dry-run", action="store_true", help="list the steps and exit 0 (any machine)")
    parser.add_argument("--time-limit", type=float, default=DEFAULT_LIMIT_S, metavar="S",
                        help=f"seconds for the whole check (default {DEFAULT_LIMIT_S})")
    parser.add_argument("--logs", help="folder of the logs (default benchmarks/gpu_checks/<date>)")
    parser.add_argument("--train-steps", type=int_option(1), default=TRAIN_STEPS,
                        help="steps of each GPU training run")
    parser.add_argument("--only", nargs="+", metavar="WORD",
                        help="run only the steps whose names contain one of these words (case-insensitive)")
    args = parser.parse_args()
    if args.time_limit <= 0:
        parser.error(f"--time-limit must be > 0 seconds, got {args.time_limit:g}")
    stamp = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    folder = stamp.replace(" ", "_").replace(":", "")
    logs = Path(args.logs) if args.logs else ROOT / "benchmarks" / "gpu_checks" / folder
    try:
        steps = select(plan(logs, args.train_steps), args.only)
        check_logs(logs)
    except ValueError as e:
        parser.error(str(e))
    if args.dry_run:
        print(f"would run, within {args.time_limit:.0f} s, logs in {logs_path(logs)}:")
        for i, step in enumerate(steps, 1):
            print(f"{i}. {step.name}: {' '.join(step.argv[1:])}")
        return
    import torch

    if not torch.cuda.is_available():
        parser.error("needs a CUDA device (--dry-run lists the steps on any machine)")
    logs.mkdir(parents=True, exist_ok=True)
    outcomes = run_all(steps, logs, args.time_limit)
    body = record(steps, outcomes, environment(), logs, args.time_limit)
    (logs / "record.md").write_text(f"command: `{command()}`\n\n{body}")
    write_section(f"gpu check {stamp}", body)
    print(body)


if __name__ == "__main__":
    main()
