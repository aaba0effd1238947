"""A short MQAR sweep on the GPU, several runs sharing it, against the same runs on the CPU.

    python3 -m benchmarks.sweep_agreement --out DIR                 # CUDA: the three sweeps, then the comparisons
    python3 -m benchmarks.sweep_agreement --out DIR --runs-per-gpu 5 --steps 300

The runs are the demo's (configs/sweeps/demo_cpu.yaml: its base and its zip of mixers, learning rates and
seeds) cut to `--steps` steps and `--seeds` seeds, in float32 (`train.precision=32-true`) and without early
stopping, so both sides train the same steps. The GPU sweep runs with `--runs-per-gpu` runs at a time on each
GPU, the CPU sweep with `train.accelerator=cpu` and one run per core pair. Each run's outcome is its final
validation and test accuracy and test loss; a pair agrees when the accuracies differ by at most ACC_TOL and the
losses by at most LOSS_RTOL of the CPU's. These tolerances were set before any GPU run: training carries a
rounding difference on from step to step, so "within rounding" of a whole run is wider than float32's unit.
Exit status 0 when every pair agrees, 1 otherwise.

A third sweep, the same runs on the GPU with `model.impl=chunk` (the torch path the CPU runs), is compared with
the CPU too, as a diagnosis and not part of the exit status: where the first comparison fails, it tells the
fused kernels moving training (chunk agrees, auto does not) from the GPU itself (neither agrees). A change of
rounding alone can move a run that is leaving a plateau by more than the tolerances (benchmarks/RESULTS.md, "GPU
2026-11-26 11:12-11:33").
"""

from __future__ import annotations

import argparse
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
ACC_TOL = 0.01
LOSS_RTOL = 0.01
OUTCOMES = ("val/acc", "test/acc", "test/loss")


def spec(accelerator: str, steps: int, seeds: int, impl: str = "auto") -> dict:
    """The demo's spec, shortened, in float32, without early stopping, on `accelerator` with `model.impl`."""
    demo = yaml.safe_load(DEMO.read_text())
    base = {**demo["base"], "preset": str((DEMO.parent / demo["base"]["preset"]).resolve()),
            "train.max_steps": steps, "train.val_every": max(1, steps // 5), "train.early_stop_threshold": None,
            "train.precision": "32-true", "train.accelerator": accelerator, "model.impl": impl}
    zipped = [{key: values[:seeds] if key.endswith("seed") else values for key, values in group.items()}
              for group in demo["zip"]]
    name = f"gpu_check_mqar_{accelerator}" + ("" if impl == "auto" else f"_{impl}")
    return {"name": name, "base": base, "zip": zipped}


def outcomes(sweep_out: Path) -> dict[tuple[str, int], dict[str, float]]:
    """(mixer, seed) -> the outcome of each finished run of a sweep's folder."""
    found = {}
    for folder in sorted((sweep_out / "runs").iterdir()) if (sweep_out / "runs").is_dir() else []:
        result = read_result(folder)
        if not result or result.get("status") != "max_steps":
            continue
        config = result["config"]
        found[config["model"]["mixer"], config["train"]["seed"]] = {
            "val/acc": result["final_val"]["val/acc"], "test/acc": result["test"]["test/acc"],
            "test/loss": result["test"]["test/loss"]}
    return found


def agrees(gpu: dict[str, float], cpu: dict[str, float]) -> bool:
    return (abs(gpu["val/acc"] - cpu["val/acc"]) <= ACC_TOL and abs(gpu["test/acc"] - cpu["test/acc"]) <= ACC_TOL
            and abs(gpu["test/loss"] - cpu["test/loss"]) <= LOSS_RTOL * abs(cpu["test/loss"]))


def compare(gpu: dict, cpu: dict) -> tuple[list[list[object]], bool]:
    """One row per run of either side (a run missing on one side disagrees); whether every pair agrees."""
    rows, every = [], True
    for key in sorted(gpu.keys() | cpu.keys()):
        g, c = gpu.get(key), cpu.get(key)
        ok = g is not None and c is not None and agrees(g, c)
        every &= ok
        cells = [f"{g[o]:.4f} / {c[o]:.4f}" if g and c else ("missing on the GPU" if c else "missing on the CPU")
                 for o in OUTCOMES]
        rows.append([f"`{key[0]}`", key[1], *cells, "yes" if ok else "**no**"])
    return rows, every


def sweep(spec_path: Path, out: Path, at_a_time: list[str]) -> float:
    """Run the sweep of `spec_path` into `out`; its wall time in seconds."""
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "loglinear", "sweep", "run", str(spec_path), "--out", str(out), "--quiet",
                    *at_a_time], check=False)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="folder of the two sweeps")
    parser.add_argument("--steps", type=int, default=300)
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
    for label, accelerator, impl, at_a_time in (
            ("gpu", "gpu", "auto", on_gpu), ("gpu_chunk", "gpu", "chunk", on_gpu),
            ("cpu", "cpu", "auto", ["--workers", str(max(1, (os.cpu_count() or 2) // 2))])):
        path = out / f"{label}.yaml"
        path.write_text(yaml.safe_dump(spec(accelerator, args.steps, args.seeds, impl), sort_keys=False))
        walls[label] = sweep(path, out / label, at_a_time)
    cpu = outcomes(out / "cpu")
    rows, every = compare(outcomes(out / "gpu"), cpu)
    chunk_rows, chunk_every = compare(outcomes(out / "gpu_chunk"), cpu)
    print(f"GPU sweep ({args.runs_per_gpu} runs per GPU): {walls['gpu']:.0f} s; with model.impl=chunk: "
          f"{walls['gpu_chunk']:.0f} s; the same runs on the CPU: {walls['cpu']:.0f} s; {args.steps} steps, float32. "
          f"Agree: |d acc| <= {ACC_TOL}, |d loss| <= {LOSS_RTOL} x the CPU's.\n")
    header = ["mixer", "seed", *(f"{o} GPU / CPU" for o in OUTCOMES), "agree"]
    print(markdown_table(header, rows))
    print("\nDiagnosis, not in the exit status: the GPU with model.impl=chunk against the CPU.\n")
    print(markdown_table(header, chunk_rows))
    (out / "comparison.json").write_text(json.dumps(
        {"wall_s": walls, "agree": every, "rows": rows, "chunk_agree": chunk_every, "chunk_rows": chunk_rows},
        indent=1))
    raise SystemExit(0 if every else 1)


if __name__ == "__main__":
    main()
