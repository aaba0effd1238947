"""Where do the Gated DeltaNet runs of the sweep agreement part, GPU against CPU? Two sweeps of its runs:
A) float64, model.impl=chunk, GPU and CPU, 300 steps (does the GPU's torch path repeat the CPU's?);
B) float32, the GPU with impl auto (fused) and chunk, 60 steps, loss logged every 2 steps (how the difference grows).
(The script as run on the H100, laid out for the linter afterwards.)"""
import csv
import glob
import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

from benchmarks.sweep_agreement import spec

out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)


def make(label, accelerator, impl, steps, precision, val_every):
    s = spec(accelerator, steps, 2, impl)
    s["name"] = label
    s["base"].update({"train.precision": precision, "train.val_every": val_every})
    s["zip"][0] = {"model.mixer": ["log_linear_gated_deltanet", "gated_deltanet"], "train.lr": [1e-2, 1e-2]}
    p = out / f"{label}.yaml"
    p.write_text(yaml.safe_dump(s, sort_keys=False))
    return p


jobs = [("f64_gpu", "gpu", "chunk", 300, "64-true", 10, ["--runs-per-gpu", "4"]),
        ("f64_cpu", "cpu", "chunk", 300, "64-true", 10, ["--workers", "4"]),
        ("f32_gpu_auto", "gpu", "auto", 60, "32-true", 2, ["--runs-per-gpu", "4"]),
        ("f32_gpu_chunk", "gpu", "chunk", 60, "32-true", 2, ["--runs-per-gpu", "4"])]
procs = [subprocess.Popen([sys.executable, "-m", "loglinear", "sweep", "run", str(make(*j[:6])),
                           "--out", str(out / j[0]), "--quiet", *j[6]],
                          stdout=open(out / f"{j[0]}.log", "w"), stderr=subprocess.STDOUT) for j in jobs]
for p in procs:
    p.wait()


def losses(label):
    got = {}
    for f in glob.glob(str(out / label / "runs" / "*")):
        r = json.load(open(f + "/result.json")) if os.path.exists(f + "/result.json") else None
        if r:
            c = r["config"]
            got[c["model"]["mixer"], c["train"]["seed"]] = {
                int(row["step"]): float(row["train/loss"])
                for row in csv.DictReader(open(f + "/metrics.csv")) if row.get("train/loss")}
    return got


for a, b in (("f64_gpu", "f64_cpu"), ("f32_gpu_auto", "f32_gpu_chunk")):
    A, B = losses(a), losses(b)
    print(f"\n{a} against {b}: train/loss, |difference|")
    for key in sorted(A.keys() & B.keys()):
        steps = sorted(A[key].keys() & B[key].keys())
        print(key, " ".join(f"{s}:{A[key][s]:.6f}/{abs(A[key][s] - B[key][s]):.1e}"
                            for s in steps[::max(1, len(steps) // 10)]))
