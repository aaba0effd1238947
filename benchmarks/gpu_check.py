"""Everything a GPU must show, in one command that finishes within 9 minutes: what the fused kernels do on this GPU
kind (and whether the known faults stand there), then what the GPU gives.

On a machine with a CUDA GPU, from a checkout of the repository, after installing the torch build the machine needs
and `python -m pip install -e ".[test]"` (which brings Triton and the benchmark peer fla-core 0.6.0), the one
command is

    python -m benchmarks.gpu_check

It runs the steps below within --time-limit (default 540 s, plus a few seconds for its start and the record),
writes the logs to records/gpu_checks/<date>_<time>/, the record described below, and this GPU kind's entry in
src/loglinear/kernels/verified_gpus.json; commit all three. The steps after the verdict get short caps in that one
command; the same command with `--only training sweep` (or any other words) runs the steps named, their caps scaled
up to fill the time limit. Other forms:

    python -m benchmarks.gpu_check --dry-run           # any machine: the arguments checked (the logs folder
                                                       # writable), the plan (steps, caps, commands), exit 0
    python -m benchmarks.gpu_check --time-limit 900 --logs DIR

Steps, each a child process of this one (its output in the logs folder), one after another, most telling first;
the first four are the verdict on this GPU kind:
1. `loglinear doctor`: versions, devices, the fused kernels' self-check in float32 and bf16 (its cases include the
   shapes where GPUs faulted; it runs past a standing fault), how long each check took, and the records;
2. the GPU tests, `pytest -m gpu` (one pytest-xdist worker per core): the kernels against `chunk` in float32 and
   bf16, past the self-check and the known faults, bit-for-bit repeats at 2,048 tokens included;
3. the determinism probe (benchmarks/determinism.py): every fused kernel, forward and backward, both variants,
   float32 and bf16, four calls on identical inputs;
4. the fault probe (benchmarks/fault_probe.py) in bf16, where the illegal memory accesses were seen: one call per
   variant, shape and pass at 1,024 tokens, each in a process of its own (a failing case again under
   compute-sanitizer memcheck where it is on the PATH);
5. the kernel benchmark (benchmarks/kernels.py), both variants at the paper's and the MQAR head shapes, 4K to 16K
   tokens, against fla, our linear kernels and SDPA;
6. the packing benchmark (PACKING_STEP, `python -m benchmarks.packing --d-models 16`: packs of 1 to 64 runs
   against runs alone);
7. GPU training throughput (benchmarks/gpu_training.py) of the log-linear mixers, alone on the GPU, eager,
   with the GPU's utilisation sampled by nvidia-smi;
8. the same compiled (`train.compile=true`) and 9. compiled and captured as CUDA graphs (`train.cuda_graphs=true`);
10. a short MQAR sweep on the GPU, several runs sharing it, against the same runs on the CPU
   (benchmarks/sweep_agreement.py); it gets whatever time the steps before it left.

Each step has its own cap (`Step.cap_s`: estimates, as no step has been timed on a GPU in this form), so that one
slow step leaves time for those after it: a step is stopped (its process group killed) at the smaller of its cap and
what is left of --time-limit, and a step that would start with less than MIN_STEP_S left is skipped; a step that
fails or is stopped is recorded so, and the next one runs. Steps that take a time limit of their own get their
cap less a margin, so that they stop between items and keep what they measured. Every step shares one folder of
self-check verdicts (in the logs folder: doctor's verdicts are reused by the later steps, and kept as evidence) and
Triton's compile cache (TRITON_CACHE_DIR as set, else Triton's default folder; the record says whether it held
compiled kernels at the start, which the self-check's time depends on).

The record, one dated section `gpu check <date>` appended to benchmarks/RESULTS.md and `record.md` in the logs
folder: device, compute capability, driver, torch, Triton and fla versions, the command, each step's cap, status and
duration, which steps passed, failed, were stopped and were skipped for time, the self-check's seconds per dtype,
and what became of this GPU kind's entry in kernels/verified_gpus.json: when all four verdict steps passed, it is
replaced by a record of this check (float32 and bf16 verified, which lifts the known faults on this kind for this
fused code); when one of them failed, it is removed (the latest check of this kind did not pass); when one was left
out, stopped or skipped, it is left as it was. A passing record is written before step 5, so that the steps after
it run the kernels the record lifts.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import importlib.metadata
import importlib.util
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks.results_md import command, markdown_table, write_section

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_LIMIT_S = 540
MIN_STEP_S = 10
STEP_LIMIT_MARGIN_S = 10  # a step's own --time-limit is its cap less this: it stops between items, keeping them
PACKING = "benchmarks.packing"
"""The packed-training benchmark: a step of the plan where the module exists (PACKING_STEP)."""
VERDICT = ("doctor", "GPU tests", "determinism probe", "fault probe")
"""The steps whose passing verifies the fused kernels on this GPU kind (kernels/verified_gpus.py)."""
CHECKED_DTYPES = ("float32", "bfloat16")


@dataclass(frozen=True)
class Step:
    name: str
    base: list[str]  # the command, without the time limit of its own
    cap_s: float = float("inf")  # the most this step may use, so that one slow step leaves time for the rest
    sample_gpu: bool = False  # sample the GPU's utilisation while it runs
    own_limit: bool = False  # it takes --time-limit: its cap less STEP_LIMIT_MARGIN_S, to stop between its items

    @property
    def argv(self) -> list[str]:
        if not self.own_limit or self.cap_s == float("inf"):
            return self.base
        return [*self.base, "--time-limit", f"{max(1.0, self.cap_s - STEP_LIMIT_MARGIN_S):g}"]


@dataclass
class Outcome:
    status: str  # "passed", "failed (exit N)", "timed out after N s", "skipped: ..."
    seconds: float
    log: Path | None
    utilisation: str = ""


PACKING_STEP = Step("packing benchmark", [sys.executable, "-m", PACKING, "--d-models", "16"], cap_s=50,
                    sample_gpu=True, own_limit=True)
"""The packed-training benchmark's slot: in the plan (before training alone) where benchmarks/packing.py exists."""


def plan(logs: Path) -> list[Step]:
    """The steps, most telling first, each with its cap (seconds)."""
    py = [sys.executable, "-m"]
    logs = Path(logs_path(logs))  # the steps run in the repository's root
    workers = ["-n", str(os.cpu_count() or 1)] if importlib.util.find_spec("xdist") else []
    sanitize = ["--sanitize-failures"] if shutil.which("compute-sanitizer") else []
    steps = [
        Step("doctor", [*py, "loglinear", "doctor"], cap_s=175),
        Step("GPU tests", [*py, "pytest", "-m", "gpu", "-q", "-rfE", "-p", "no:cacheprovider", *workers, "tests"],
             cap_s=120),
        Step("determinism probe", [*py, "benchmarks.determinism", "--json", str(logs / "determinism.json")],
             cap_s=30),
        Step("fault probe", [*py, "benchmarks.fault_probe", "--dtype", "bf16", "--T", "1024", *sanitize], cap_s=45),
        Step("kernel benchmark", [*py, "benchmarks.kernels", "--variant", "all", "--shape", "all", "--T", "4096",
                                  "8192", "16384", "--json", str(logs / "kernels.json")], cap_s=45, own_limit=True),
    ]
    if importlib.util.find_spec(PACKING) is not None:
        steps.append(PACKING_STEP)
    training = [*py, "benchmarks.gpu_training", "--mixers", "log_linear_mamba2", "log_linear_gated_deltanet",
                "--steps", "60"]
    for label, extra in (("eager", []), ("compiled", ["--compile"]), ("compiled, CUDA graphs", ["--cuda-graphs"])):
        steps.append(Step(f"GPU training, {label}", [*training, *extra], cap_s=25, sample_gpu=True, own_limit=True))
    steps.append(Step("MQAR sweep, GPU against CPU", [*py, "benchmarks.sweep_agreement", "--out", str(logs / "sweep")],
                      sample_gpu=True))
    return steps


def fit_caps(steps: list[Step], limit_s: float) -> list[Step]:
    """The steps with their caps scaled up to fill `limit_s` where they sum to less and none takes what is left
    (a selection by --only gets the time of the steps it leaves out)."""
    caps = sum(s.cap_s for s in steps)
    if caps >= limit_s:
        return steps
    return [dataclasses.replace(s, cap_s=s.cap_s * limit_s / caps) for s in steps]


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


def step_env(logs: Path) -> dict[str, str]:
    """Every step's environment: this one, with one folder of self-check verdicts in the logs."""
    return {**os.environ, "LOGLINEAR_CACHE_DIR": str(logs / "selfcheck"), "PYTHONUNBUFFERED": "1"}


def run_step(step: Step, log: Path, seconds: float, env: dict[str, str] | None = None) -> Outcome:
    """Run `step` with its output in `log`, stopped after `seconds` (its whole process group)."""
    started = time.monotonic()
    sampler = start_sampler(log.with_suffix(".gpu.csv")) if step.sample_gpu else None
    with log.open("w") as out:
        out.write(f"$ {' '.join(step.argv)}\n")
        out.flush()
        child = subprocess.Popen(step.argv, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, start_new_session=True,
                                 env=env)
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


def run_all(steps: list[Step], logs: Path, limit_s: float, env: dict[str, str] | None = None,
            after_verdict=None) -> list[Outcome]:
    """Every step in order, each within its cap and what is left of `limit_s`; a failure does not stop the next.
    `after_verdict(outcomes so far)` runs once the last verdict step of the plan is done, before the next step."""
    deadline = time.monotonic() + limit_s
    last_verdict = max((i for i, s in enumerate(steps) if s.name in VERDICT), default=None)
    outcomes = []
    for i, step in enumerate(steps):
        left = deadline - time.monotonic()
        if left < MIN_STEP_S:
            outcomes.append(Outcome(f"skipped: {max(left, 0):.0f} s of --time-limit left", 0.0, None))
        else:
            outcome = run_step(step, logs / f"{i + 1:02d}-{slug(step.name)}.log", min(left, step.cap_s), env)
            print(f"{i + 1}. {step.name}: {outcome.status}, {outcome.seconds:.0f} s", flush=True)
            outcomes.append(outcome)
        if i == last_verdict and after_verdict is not None:
            after_verdict(outcomes)
    return outcomes


def verdict(steps: list[Step], outcomes: list[Outcome]) -> tuple[str, str]:
    """("passed", ""), ("failed", which) when a verdict step failed, or ("inconclusive", why): one was left out by
    --only, stopped at its cap or skipped for time."""
    status = {s.name: o.status for s, o in zip(steps, outcomes, strict=False)}
    missing = [name for name in VERDICT if name not in status]
    if missing:
        return "inconclusive", f"{', '.join(missing)} not in the steps run (--only)"
    failed = [f"{name} {status[name]}" for name in VERDICT if status[name].startswith("failed")]
    if failed:
        return "failed", "; ".join(failed)
    other = [f"{name} {status[name]}" for name in VERDICT if status[name] != "passed"]
    return ("inconclusive", "; ".join(other)) if other else ("passed", "")


def update_trust(steps: list[Step], outcomes: list[Outcome], logs: Path, date: str) -> str:
    """This GPU kind's record in kernels/verified_gpus.json, from the verdict steps: written when they all passed,
    removed when one failed, left as it was otherwise; what was done, in a line."""
    import torch

    from loglinear.kernels import verified_gpus
    from loglinear.kernels.selfcheck import versions

    found, why = verdict(steps, outcomes)
    kind = verified_gpus.GpuKind.of(torch.device("cuda", 0), versions()["triton"] or "not installed")
    where = f"loglinear/kernels/{verified_gpus.RECORDS.name}"
    if found == "inconclusive":
        return f"{kind}: not judged ({why}); {where} unchanged"
    every = verified_gpus.load_records()
    others = [r for r in every if r.kind != kind]
    if found == "failed":
        verified_gpus.save_records(others)
        removed = f"; its record removed from {where}" if len(others) < len(every) else ""
        return f"{kind}: not verified ({why}); the known faults stand there{removed}"
    record = verified_gpus.Record(
        kind, verified_gpus.fused_digest(), date, CHECKED_DTYPES,
        "benchmarks.gpu_check: loglinear doctor's self-check (float32 and bf16, the faulting shapes included), every "
        "GPU test, the determinism probe and the bf16 fault probe passed", "float16: not checked", logs_path(logs))
    verified_gpus.save_records([*others, record])
    return (f"{kind}: verified in {', '.join(CHECKED_DTYPES)}, record written to {where} (kernels "
            f"{record.kernels}): the known faults are lifted there for this code")


def selfcheck_costs(doctor_log: Path | None) -> list[str]:
    """doctor's self-check lines: device, dtype, verdict and seconds (its first words and its last)."""
    if doctor_log is None or not doctor_log.is_file():
        return []
    found = []
    for line in doctor_log.read_text().splitlines():
        match = re.match(r"self-check on (.*?): (passed|FAILED).*; took (\d+ s)$", line)
        if match:
            found.append(f"{match.group(1)}: {match.group(2)}, {match.group(3)}")
    return found


def triton_cache() -> Path:
    """Triton's compile cache folder: TRITON_CACHE_DIR, else Triton's default under TRITON_HOME or the home folder."""
    if os.environ.get("TRITON_CACHE_DIR"):
        return Path(os.environ["TRITON_CACHE_DIR"])
    return Path(os.environ.get("TRITON_HOME") or Path.home()) / ".triton" / "cache"


def cache_state(folder: Path) -> str:
    files = sum(1 for p in folder.rglob("*") if p.is_file()) if folder.is_dir() else 0
    return f"{folder} ({files} files at the start)"


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


def summary(steps: list[Step], outcomes: list[Outcome]) -> str:
    """Which steps passed, failed, ran out of their time, and were skipped for time."""
    groups: dict[str, list[str]] = {"passed": [], "failed": [], "stopped at its cap or the limit": [],
                                    "skipped for time": []}
    for step, o in zip(steps, outcomes, strict=True):
        key = ("passed" if o.status == "passed" else "skipped for time" if o.status.startswith("skipped")
               else "stopped at its cap or the limit" if o.status.startswith("timed out") else "failed")
        groups[key].append(step.name)
    return "; ".join(f"{key}: {', '.join(names) if names else 'none'}" for key, names in groups.items())


def record(steps: list[Step], outcomes: list[Outcome], env: dict[str, str], logs: Path, limit_s: float,
           trust: str | None = None, costs: list[str] | None = None, cache: str = "") -> str:
    """The section body: environment, command, what ran, the self-check's cost, the GPU kind's record, the steps."""
    rows = []
    for i, (step, o) in enumerate(zip(steps, outcomes, strict=True), 1):
        log = "-" if o.log is None else f"`{o.log.name}`"
        cap = "-" if step.cap_s == float("inf") else f"{step.cap_s:.0f}"
        rows.append([i, step.name, f"`{' '.join(step.argv[1:])}`", cap, o.status, f"{o.seconds:.0f}", log,
                     o.utilisation or "-"])
    total = sum(o.seconds for o in outcomes)
    head = ", ".join(f"{k} {env[k]}" for k in ("device", "capability", "driver", "torch", "triton", "fla-core"))
    lines = [f"{head}. Time limit {limit_s:.0f} s, {total:.0f} s used. Logs and raw measurements: "
             f"`{logs_path(logs)}`; each step's own sections of this file are rewritten by it.", "",
             f"- steps: {summary(steps, outcomes)}"]
    if cache:
        lines.append(f"- Triton's compile cache: {cache}")
    if costs is not None:
        lines.append("- self-check (doctor): " + ("; ".join(costs) if costs else "no verdict in the doctor's log"))
    if trust is not None:
        lines.append(f"- this GPU kind's record: {trust}")
    return "\n".join(lines) + "\n\n" + markdown_table(
        ["#", "step", "command", "cap s", "status", "s", "log", "GPU utilisation"], rows)


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
    parser.add_argument("--logs", help="folder of the logs (default records/gpu_checks/<date>_<time>)")
    parser.add_argument("--only", nargs="+", metavar="WORD",
                        help="run only the steps whose names contain one of these words (case-insensitive)")
    args = parser.parse_args()
    if args.time_limit <= 0:
        parser.error(f"--time-limit must be > 0 seconds, got {args.time_limit:g}")
    now = datetime.datetime.now()
    stamp = now.strftime("%Y-%m-%d %H:%M")
    logs = Path(args.logs) if args.logs else ROOT / "records" / "gpu_checks" / now.strftime("%Y-%m-%d_%H%M")
    try:
        steps = fit_caps(select(plan(logs), args.only), args.time_limit)
        check_logs(logs)
    except ValueError as e:
        parser.error(str(e))
    if args.dry_run:
        print(f"would run, within {args.time_limit:.0f} s, logs in {logs_path(logs)}:")
        for i, step in enumerate(steps, 1):
            cap = "what is left" if step.cap_s == float("inf") else f"at most {step.cap_s:.0f} s"
            print(f"{i}. {step.name} ({cap}): {' '.join(step.argv[1:])}")
        return
    import torch

    if not torch.cuda.is_available():
        parser.error("needs a CUDA device (--dry-run lists the steps on any machine)")
    logs.mkdir(parents=True, exist_ok=True)
    cache = cache_state(triton_cache())
    trust: list[str] = []
    outcomes = run_all(steps, logs, args.time_limit, step_env(logs),
                       after_verdict=lambda done: trust.append(update_trust(steps, done, logs, now.date().isoformat())))
    doctor = [o.log for s, o in zip(steps, outcomes, strict=True) if s.name == "doctor"]
    body = record(steps, outcomes, environment(), logs, args.time_limit, trust[0] if trust else None,
                  selfcheck_costs(doctor[0]) if doctor else None, cache)
    (logs / "record.md").write_text(f"command: `{command()}`\n\n{body}")
    write_section(f"gpu check {stamp}", body)
    print(body)


if __name__ == "__main__":
    main()
