"""Sweep throughput with several runs sharing one GPU: runs per hour of a small mqar_paper sweep through the
local runner (`loglinear sweep run --runs-per-gpu K`) for K = 1, 2, 4, 8, 16 runs on each GPU.

    python3 -m benchmarks.sweep_throughput           # CUDA: writes its section of RESULTS.md
    python3 -m benchmarks.sweep_throughput --ks 1 4 16 --steps 300
    python3 -m benchmarks.sweep_throughput --quick   # any device: tiny runs, --workers 1 and 2, print only (CPU: 1 min)

The sweep: configs/mqar_paper_256.yaml (batch 256, T 256, vocabulary 8192, 2 layers) with the four recurrent
mixers x d_model {16, 64} x seeds {0, 1} = 16 runs (720 of the 840 runs of the paper's sweep are
recurrent), `--steps` (200) steps each at lr 1e-3, a validation every 100 steps, no early stopping, wandb
off. Every K trains the same 16 runs from scratch into a folder of its own, through `run_local`, the
runner `loglinear sweep run` uses: each run its own `loglinear train` process, K of them on each GPU,
the CPU cores shared among them. Reported per K: the sweep's wall time (from the first process started
to the last result), runs per hour (16 / wall), the speed-up over K = 1 (its target: the table at
the top of RESULTS.md), training steps per second of all runs together, the mean time a run spent
inside its process (result.json's wall_time_s: imports excluded; it grows as runs share the GPU), and
the in-process speed-up K x t(1) / t(K) of those times: the gain if runs spent all their time in the
process, a closer estimate for long runs than the wall-time speed-up (below).

Before the timed sweeps, a warm-up sweep (the 8 seed-0 runs, 2 steps each, all at once) compiles the
Triton kernels for each shape into Triton's on-disk cache and brings the Python files into the page
cache, so K = 1 does not pay for compilation that later K find done.

Caveat: each run also pays a start-up (imports, CUDA context, loading the kernels from Triton's cache)
of several seconds, a large part of a 200-step run and a negligible one of the paper's 20,000-step runs.
Start-ups overlap on the CPU cores whatever the GPU does, so the wall-time speed-up of short runs
overstates the one long runs get; the in-process speed-up leaves the imports out (not Lightning's
set-up, the CUDA context or the final test), and `--steps` trades time for runs closer to long ones.

Without MPS, processes on one GPU take turns in time slices rather than running kernels side by side;
NVIDIA's MPS daemon (nvidia-cuda-mps-control) lets them overlap, and would be the next thing to measure
if the gain saturates well below the CPU count.

Time on an H100 (an estimate, not a measurement): a run is about 5 s of start-up, 200 x 25 ms of steps
(the mqar_paper sweep's assumption) and 1 s of validation and test, about 11 s; K = 1: 16 runs one
after another, 3 min; K = 2 about 1.5 min; K = 4, 8, 16 under 1 min each; the warm-up 1 to 2 min
(compilation): about 7 to 8 min in all. The section is rewritten after each K (marked partial until
the last), so a run stopped early keeps what it measured; `--time-limit S` starts no K that would
end more than S seconds after the start if it took as long as the K before it (larger K take less).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch

from benchmarks.results_md import markdown_table, write_section
from benchmarks.time_limit import TimeLimit
from loglinear.runs.folder import FINISHED, result_of
from loglinear.sweeps.manifest import run_dir, write_manifest
from loglinear.sweeps.progress import Progress
from loglinear.sweeps.runner import exclusive_sweep, run_local, visible_gpus
from loglinear.sweeps.spec import Run, SweepSpec, expand, parse_spec

SECTION = "sweep throughput: runs per GPU"
MIXERS = ["mamba2", "log_linear_mamba2", "gated_deltanet", "log_linear_gated_deltanet"]
D_MODELS = [16, 64]
SEEDS = [0, 1]
WARMUP_STEPS = 2
QUICK_DATA = {"data.batch_size": 16, "data.task_args.seq_len": 64, "data.task_args.num_kv_pairs": [4, 8],
              "data.val_size": 16, "data.test_size": 16}


def sweep_spec(steps: int, quick: bool, seeds: list[int]) -> SweepSpec:
    """The benchmark sweep with `steps` steps a run (quick: tiny data, d_model 16 only)."""
    base = {
        "preset": "mqar_paper_256.yaml", "train.max_steps": steps, "train.warmup_steps": max(1, steps // 10),
        "train.val_every": min(100, steps), "train.early_stop_threshold": None, "logger.wandb.mode": "disabled",
        **(QUICK_DATA if quick else {}),
    }
    grid = {"model.mixer": MIXERS, "model.d_model": D_MODELS[:1] if quick else D_MODELS, "train.seed": seeds}
    return parse_spec({"name": "sweep_throughput", "base": base, "grid": grid})


def run_sweep(spec: SweepSpec, out: Path, k: int, gpus: bool, label: str) -> tuple[list[Run], float]:
    """Train the runs of `spec` into `out` with K runs on each GPU (K workers in all without one); the runs and
    the wall time in s."""
    runs = expand(spec)
    with exclusive_sweep(out):
        write_manifest(out, spec, runs)
        started = time.perf_counter()
        outcome = run_local(runs, out, progress=Progress(label), **({"runs_per_gpu": k} if gpus else {"workers": k}))
        wall = time.perf_counter() - started
    unfinished = {rid: s for rid, s in outcome.statuses.items() if s not in FINISHED}
    if outcome.interrupted or unfinished:
        raise SystemExit(f"{label}: {len(unfinished)} of {len(runs)} runs did not finish ({out}/runs/*/train.log)")
    return runs, wall


def row(k: int, wall: float, runs: list[Run], out: Path, steps: int, baseline: tuple[float, float] | None
        ) -> list[object]:
    """One table row; `baseline` is K=1's (runs/hour, mean s per run in its process)."""
    per_run = statistics.fmean(result_of(run_dir(out, r.run_id))["wall_time_s"] for r in runs)
    per_hour = len(runs) / wall * 3600
    if baseline is None:
        speedups = ["1.00x", "1.00x"] if k == 1 else ["n/a (no K=1)"] * 2
    else:
        speedups = [f"{per_hour / baseline[0]:.2f}x", f"{k * baseline[1] / per_run:.2f}x"]
    return [k, f"{wall:.1f}", f"{per_hour:.0f}", speedups[0], f"{len(runs) * steps / wall:.1f}", f"{per_run:.1f}",
            speedups[1]]


HEADER = ["K (runs per GPU)", "wall (s)", "runs/hour", "speed-up over K=1", "steps/s, all runs",
          "s per run in its process", "in-process speed-up"]


def describe(args: argparse.Namespace, spec: SweepSpec, done: int, gpus: list[str]) -> str:
    total = len(set(args.ks))
    partial = "" if done == total else \
        f"**Partial: {done} of {total} K measured (stopped early: --time-limit, or killed).**\n\n"
    where = f"{len(gpus)} GPU(s) visible" if gpus else "no GPU: K is --workers"
    grid = " x ".join(f"{key} {'/'.join(map(str, values))}" for key, values in spec.grid.items())
    return (
        f"{partial}{len(expand(spec))} runs of `configs/mqar_paper_256.yaml`{' (tiny data)' if args.quick else ''}: "
        f"{grid}; {args.steps} steps each, a validation every {min(100, args.steps)} steps, no early stopping, wandb "
        f"off; {where}; torch {torch.__version__}. Wall time of `run_local` after a warm-up sweep that filled "
        f"Triton's cache (benchmarks/sweep_throughput.py's docstring: the start-up of each run makes these speed-ups "
        f"an upper bound for long runs). Its target: the table at the top of this file.\n\n"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ks", type=int, nargs="+", help="runs per GPU to measure (default 1 2 4 8 16; --quick: 1 2)")
    parser.add_argument("--steps", type=int, help="training steps of every run (default 200; --quick: 20)")
    parser.add_argument("--quick", action="store_true", help="4 tiny runs (batch 16, T 64, d_model 16), print only")
    parser.add_argument("--time-limit", type=float, metavar="S",
                        help="start no K that would end more than S seconds after the start, if it took as long "
                             "as the K before it")
    args = parser.parse_args()
    limit = TimeLimit(args.time_limit)
    args.ks = args.ks or ([1, 2] if args.quick else [1, 2, 4, 8, 16])
    args.steps = args.steps or (20 if args.quick else 200)
    if min(args.ks) < 1 or args.steps < 1:
        parser.error("--ks and --steps take positive integers")
    gpus = visible_gpus()
    write = bool(gpus) and not args.quick
    if not gpus:
        print("no CUDA device: K is the number of CPU workers; printing only", flush=True)
    seeds = SEEDS[:1] if args.quick else SEEDS
    spec = sweep_spec(args.steps, args.quick, seeds)
    rows: list[list[object]] = []
    baseline = None
    with tempfile.TemporaryDirectory(prefix="sweep_throughput_") as tmp:
        warm = sweep_spec(WARMUP_STEPS, args.quick, seeds[:1])
        run_sweep(warm, Path(tmp) / "warmup", len(expand(warm)) if gpus else 2, bool(gpus), "warm-up")
        for k in sorted(set(args.ks)):
            if not limit.fits():
                print(f"--time-limit {args.time_limit:g}: K={k} and larger not measured", flush=True)
                break
            out = Path(tmp) / f"k{k}"
            runs, wall = run_sweep(spec, out, k, bool(gpus), f"K={k}")
            rows.append(row(k, wall, runs, out, args.steps, baseline))
            if k == 1:
                baseline = (len(runs) / wall * 3600, float(rows[-1][5]))
            body = describe(args, spec, len(rows), gpus) + markdown_table(HEADER, rows)
            print(f"K={k}: {wall:.1f} s for {len(runs)} runs", flush=True)
            if write:
                write_section(SECTION, body)
            limit.done()
    print(body)
    if write:
        print(f"wrote section {SECTION!r} of benchmarks/RESULTS.md")


if __name__ == "__main__":
    main()
