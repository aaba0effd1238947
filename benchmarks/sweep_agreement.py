"""A short MQAR sweep on the GPU, several runs sharing it, against the same runs on the CPU.

    python3 -m benchmarks.sweep_agreement --out DIR                 # CUDA: the four sweeps, then the comparisons
    python3 -m benchmarks.sweep_agreement --out DIR --runs-per-gpu 5 --steps 100

The runs are the demo's (configs/sweeps/demo_cpu.yaml: its base and its zip of mixers, learning rates and
seeds) cut to `--steps` steps and `--seeds` seeds, in float32 (`train.precision=32-true`) and without early
stopping, so both sides train the same steps on the same data from the same weights, with the training loss
logged every LOG_EVERY steps.

What is compared is each run's training loss, step by step, and only while rounding alone cannot have moved it.
A run that leaves a plateau amplifies a rounding difference until the two sides part: on an H100, the same run
in float64 with the same torch path on the GPU and on the CPU agreed to the logged precision for 40 steps and
then parted by 1e-3 of the loss within 20 steps (benchmarks/RESULTS.md, "GPU 2026-11-26 20:05-20:25"). So the CPU
runs each run twice, in float32 and in float64 (`model.impl=chunk`), and a run's *window* is the logged steps
before the first one where those two differ by more than WINDOW_RTOL of the loss: there the float32 run is still
the exact run up to rounding. In its window a GPU run agrees when its loss is within AGREE_RTOL of the CPU's
float32 loss at every logged step; a run whose window holds fewer than MIN_WINDOW logged steps cannot be judged
and counts as not agreeing. Exit status 0 when every run agrees.

A third GPU sweep, with `model.impl=chunk` (the torch path the CPU runs), is compared the same way as a diagnosis
outside the exit status: where the fused kernels disagree and chunk agrees, the kernels moved training; where
neither agrees, the GPU itself did. Each run's final accuracies and test loss are shown beside, for information:
past the window they may differ by anything rounding can cause.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import yaml

from benchmarks.results_md import markdown_table
from loglinear.runs.folder import read_result

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "configs" / "sweeps" / "demo_cpu.yaml"
LOG_EVERY = 5
WINDOW_RTOL = 1e-6
AGREE_RTOL = 1e-5
MIN_WINDOW = 3
OUTCOMES = ("val/acc", "test/acc", "test/loss")


def spec(accelerator: str, steps: int, seeds: int, impl: str = "auto", precision: str = "32-true") -> dict:
    """The demo's spec, shortened, without early stopping, on `accelerator` with `model.impl` and `precision`."""
    demo = yaml.safe_load(DEMO.read_text())
    base = {**demo["base"], "preset": str((DEMO.parent / demo["base"]["preset"]).resolve()),
            "train.max_steps": steps, "train.val_every": LOG_EVERY, "train.early_stop_threshold": None,
            "train.precision": precision, "train.accelerator": accelerator, "model.impl": impl}
    zipped = [{key: values[:seeds] if key.endswith("seed") else values for key, values in group.items()}
              for group in demo["zip"]]
    name = (f"gpu_check_mqar_{accelerator}" + ("" if impl == "auto" else f"_{impl}")
            + ("" if precision == "32-true" else f"_{precision.split('-')[0]}"))
    return {"name": name, "base": base, "zip": zipped}


def finished(sweep_out: Path) -> dict[tuple[str, int], Path]:
    """(mixer, seed) -> the folder of each run of a sweep that trained all its steps."""
    found = {}
    for folder in sorted((sweep_out / "runs").iterdir()) if (sweep_out / "runs").is_dir() else []:
        result = read_result(folder)
        if result and result.get("status") == "max_steps":
            config = result["config"]
            found[config["model"]["mixer"], config["train"]["seed"]] = folder
    return found


def outcomes(folder: Path) -> dict[str, float]:
    result = read_result(folder)
    return {"val/acc": result["final_val"]["val/acc"], "test/acc": result["test"]["test/acc"],
            "test/loss": result["test"]["test/loss"]}


def losses(folder: Path) -> dict[int, float]:
    """step -> the training loss a run logged."""
    with (folder / "metrics.csv").open() as rows:
        return {int(row["step"]): float(row["train/loss"]) for row in csv.DictReader(rows) if row.get("train/loss")}


def window(exact: dict[int, float], rounded: dict[int, float]) -> list[int]:
    """The logged steps before the first where `rounded` (float32) parts from `exact` (float64) by more than
    WINDOW_RTOL of the loss."""
    steps = []
    for step in sorted(exact.keys() & rounded.keys()):
        if abs(rounded[step] - exact[step]) > WINDOW_RTOL * abs(exact[step]):
            break
        steps.append(step)
    return steps


def judge(gpu: dict[int, float], cpu: dict[int, float], steps: list[int]) -> tuple[float, str]:
    """The largest relative difference of the GPU's loss from the CPU's in the window, and the verdict."""
    if len(steps) < MIN_WINDOW or any(step not in gpu for step in steps):
        return float("nan"), f"**cannot judge** ({len(steps)} logged steps in the window)"
    worst = max(abs(gpu[step] - cpu[step]) / abs(cpu[step]) for step in steps)
    return worst, "yes" if worst <= AGREE_RTOL else "**no**"


def compare(gpu: dict[tuple[str, int], Path], cpu: dict[tuple[str, int], Path],
            cpu64: dict[tuple[str, int], Path]) -> tuple[list[list[object]], bool]:
    """One row per run of any side (a run missing on one side does not agree); whether every run agrees."""
    rows, every = [], True
    for key in sorted(gpu.keys() | cpu.keys() | cpu64.keys()):
        missing = [side for side, runs in (("GPU", gpu), ("CPU", cpu), ("CPU float64", cpu64)) if key not in runs]
        if missing:
            every = False
            rows.append([f"`{key[0]}`", key[1], "-", "-", *["-"] * len(OUTCOMES), f"**missing on the {missing[0]}**"])
            continue
        cpu_losses = losses(cpu[key])
        steps = window(losses(cpu64[key]), cpu_losses)
        worst, verdict = judge(losses(gpu[key]), cpu_losses, steps)
        every &= verdict == "yes"
        g, c = outcomes(gpu[key]), outcomes(cpu[key])
        rows.append([f"`{key[0]}`", key[1], f"{steps[-1]}" if steps else "none", f"{worst:.1e}",
                     *(f"{g[o]:.4f} / {c[o]:.4f}" for o in OUTCOMES), verdict])
    return rows, every


def sweep(spec_path: Path, out: Path, at_a_time: list[str]) -> float:
    """Run the sweep of `spec_path` into `out`; its wall time in seconds."""
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "loglinear", "sweep", "run", str(spec_path), "--out", str(out), "--quiet",
                    *at_a_time], check=False)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="folder of the sweeps")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--runs-per-gpu", type=int, default=5)
    args = parser.parse_args()
    import torch

    if not torch.cuda.is_available():
        parser.error("needs a CUDA device")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    walls = {}
    on_gpu = ["--runs-per-gpu", str(args.runs_per_gpu)]
    on_cpu = ["--workers", str(max(1, (os.cpu_count() or 2) // 2))]
    for label, accelerator, impl, precision, at_a_time in (
            ("gpu", "gpu", "auto", "32-true", on_gpu), ("gpu_chunk", "gpu", "chunk", "32-true", on_gpu),
            ("cpu", "cpu", "auto", "32-true", on_cpu), ("cpu64", "cpu", "chunk", "64-true", on_cpu)):
        path = out / f"{label}.yaml"
        path.write_text(yaml.safe_dump(spec(accelerator, args.steps, args.seeds, impl, precision), sort_keys=False))
        walls[label] = sweep(path, out / label, at_a_time)
    cpu, cpu64 = finished(out / "cpu"), finished(out / "cpu64")
    rows, every = compare(finished(out / "gpu"), cpu, cpu64)
    chunk_rows, chunk_every = compare(finished(out / "gpu_chunk"), cpu, cpu64)
    print(f"GPU sweep ({args.runs_per_gpu} runs per GPU): {walls['gpu']:.0f} s; with model.impl=chunk: "
          f"{walls['gpu_chunk']:.0f} s; the same runs on the CPU: {walls['cpu']:.0f} s, in float64: "
          f"{walls['cpu64']:.0f} s; {args.steps} steps, training loss logged every {LOG_EVERY}. Window: the logged "
          f"steps before the CPU's float32 and float64 losses part by {WINDOW_RTOL:g}; agree: the GPU's loss within "
          f"{AGREE_RTOL:g} of the CPU's at every step of a window of at least {MIN_WINDOW}.\n")
    header = ["mixer", "seed", "window ends at step", "largest difference in it",
              *(f"{o} GPU / CPU" for o in OUTCOMES), "agree"]
    print(markdown_table(header, rows))
    print("\nDiagnosis, not in the exit status: the GPU with model.impl=chunk against the CPU.\n")
    print(markdown_table(header, chunk_rows))
    (out / "comparison.json").write_text(json.dumps(
        {"wall_s": walls, "agree": every, "rows": rows, "chunk_agree": chunk_every, "chunk_rows": chunk_rows},
        indent=1))
    raise SystemExit(0 if every else 1)


if __name__ == "__main__":
    main()
