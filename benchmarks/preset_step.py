"""The CPU step at the paper's MQAR preset, side by side: this checkout's configurations against another commit's
eager step, for the five mixers of the studies, in one run.

    python3 -m benchmarks.preset_step --base 7fe320e    # writes its section of RESULTS.md (SECTION)
    python3 -m benchmarks.preset_step --base 7fe320e --quick   # 2 mixers, 1 repeat, fewer steps; prints only

The setting of "loglinear train: the CPU step at the paper's preset": configs/mqar_paper.yaml at d_model 16, batch 64
(the Based mix of 64, 128 and 256 tokens, vocabulary 8,192, 2 layers), one thread. Every configuration is a
`loglinear train` process timed by benchmarks/train_step.py (CPU time of the process per training step, getrusage);
the base commit's runs import its own code, from a temporary git worktree. The configurations, per mixer: the base
commit (eager), this checkout eager (its default), with `train.fused_loss`, and with `train.fused_loss` and
`train.compile`. In each of `--repeats` repeats every configuration runs once, in a fixed order (interleaved), with
the load average read before and after; a configuration's figure is its mean over the steps every configuration of
the mixer counted (a compiled run leaves out the steps that compiled), and the speed-up of a repeat is the base's
mean over that repeat's. Beside it, each configuration's least disturbed step: per step the fastest of the
repeats (another process's load only adds time), mean over the steps, and its speed-up over the base's figure of the
same kind.

The floor it states: the step's matmul arithmetic (torch's FlopCounterMode over one training step of each
component of the mixture, weighted as the timed steps are) at the core's measured sgemm rate, and the tensors the
step must write and read back (those the forward saves for the backward, the parameters, their gradients and
AdamW's two moments, read and written once) at its measured copy bandwidth: the larger of the two is what no
implementation of this arithmetic on one core beats.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from benchmarks.models import load_average
from benchmarks.results_md import markdown_table, write_section

SECTION = "loglinear train: the CPU step at the paper's preset, side by side"
ROOT = Path(__file__).resolve().parent.parent
MIXERS = ["attention", "mamba2", "gated_deltanet", "log_linear_mamba2", "log_linear_gated_deltanet"]
SETTING = ["model.d_model=16", "data.batch_size=64", "train.val_every=1000", "logger.wandb.mode=disabled",
           "logger.progress=false", "data.val_size=64", "data.test_size=64"]
CONFIGS = {"base": [], "eager": [], "fused loss": ["train.fused_loss=true"],
           "fused loss + compile": ["train.fused_loss=true", "train.compile=true"]}
"""Each configuration's keys beyond the setting; "base" runs the base commit's code, the others this checkout's."""


def timed_run(src: Path, mixer: str, keys: list[str], steps: int, out: Path) -> tuple[dict[int, float], str, str]:
    """CPU seconds per counted step of one run (benchmarks/train_step.py in a fresh process importing loglinear
    from `src`), and the load average before and after."""
    before = load_average()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(src)}
    steps_json = out / "steps.json"
    subprocess.run([sys.executable, "-m", "benchmarks.train_step", "--steps-json", str(steps_json),
                    str(ROOT / "configs/mqar_paper.yaml"), f"model=model/{mixer}.yaml", *SETTING, *keys,
                    f"train.max_steps={steps}", f"out_dir={out / 'run'}"],
                   cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return {int(k): v for k, v in json.loads(steps_json.read_text()).items()}, before, load_average()


def measure(base_src: Path, mixers: list[str], repeats: int, steps: int, scratch: Path) -> dict:
    """{(mixer, config): [per-repeat {step: CPU seconds}]} and the load averages, interleaved repeats."""
    runs: dict[tuple[str, str], list[dict[int, float]]] = collections.defaultdict(list)
    loads = []
    for repeat in range(repeats):
        for mixer in mixers:
            for config, keys in CONFIGS.items():
                out = scratch / f"{repeat}-{mixer}-{config.replace(' ', '_').replace('+', '')}"
                src = base_src if config == "base" else ROOT / "src"
                cpu, before, after = timed_run(src, mixer, keys, steps, out)
                runs[mixer, config].append(cpu)
                loads += [before, after]
                print(f"repeat {repeat + 1} {mixer} {config}: {1000 * statistics.fmean(cpu.values()):.1f} ms/step "
                      f"over {len(cpu)} steps (load {before} -> {after})", flush=True)
    return {"runs": runs, "loads": loads}


def summary(runs: dict, mixers: list[str], repeats: int) -> tuple[str, list[float]]:
    """The table (mean CPU ms per step and speed-up over the base per configuration, mean and range over the repeats)
    and the speed-ups of the last configuration."""
    rows, best = [], []
    for mixer in mixers:
        common = set.intersection(*(set(r) for c in CONFIGS for r in runs[mixer, c]))
        means = {c: [1000 * statistics.fmean(r[s] for s in common) for r in runs[mixer, c]] for c in CONFIGS}
        row = [f"`{mixer}`", f"{statistics.fmean(means['base']):.1f}"]
        for config in list(CONFIGS)[1:]:
            speedups = [b / x for b, x in zip(means["base"], means[config], strict=True)]
            row.append(f"{statistics.fmean(means[config]):.1f}: {statistics.fmean(speedups):.2f}x "
                       f"({min(speedups):.2f}-{max(speedups):.2f})")
        best.append(statistics.fmean(b / x for b, x in zip(means["base"], means[list(CONFIGS)[-1]], strict=True)))
        rows.append([*row, len(common)])
    header = ["mixer", "base (ms)", *(f"{c} (ms: speed-up)" for c in list(CONFIGS)[1:]), "steps compared"]
    return markdown_table(header, rows), best


def least_disturbed(runs: dict, mixers: list[str]) -> str:
    """The table of each configuration's least disturbed step: per step, the fastest of the repeats (another
    process's load only adds time), mean over the steps, and the speed-up over the base's figure of the same kind."""
    rows = []
    for mixer in mixers:
        common = set.intersection(*(set(r) for c in CONFIGS for r in runs[mixer, c]))
        fastest = {c: 1000 * statistics.fmean(min(r[s] for r in runs[mixer, c]) for s in common) for c in CONFIGS}
        rows.append([f"`{mixer}`", f"{fastest['base']:.1f}",
                     *(f"{fastest[c]:.1f}: {fastest['base'] / fastest[c]:.2f}x" for c in list(CONFIGS)[1:])])
    return markdown_table(["mixer", "base (ms)", *(f"{c} (ms: speed-up)" for c in list(CONFIGS)[1:])], rows)


def step_components(mixer: str) -> dict[tuple[int, int], tuple[float, float]]:
    """Per mixture component (tokens, scored positions per batch of 64): one eager training step's matmul FLOPs and
    the bytes it must write and read back (saved activations, parameters, gradients, AdamW's moments), with the
    fused loss (the logits never stored)."""
    from torch.utils.flop_counter import FlopCounterMode

    from loglinear.models import build_model, param_groups
    from loglinear.models.linear_cross_entropy import linear_cross_entropy

    model = build_model(dict(mixer=mixer, d_model=16, n_layers=2, vocab_size=8192, max_len=256, mlp_ratio=0.0),
                        seed=0)
    optimizer = torch.optim.AdamW(param_groups(model, 0.1), lr=1e-3)
    parameters = sum(p.numel() * p.element_size() for p in model.parameters())
    found = {}
    for T, pairs in [(64, 4), (128, 8), (256, 16), (256, 32), (256, 64)]:
        inputs, targets = torch.randint(0, 8192, (2, 64, T))
        mask = torch.zeros(64, T, dtype=torch.bool)
        mask[:, T - pairs:] = True
        saved: list[int] = []

        def pack(t: torch.Tensor, saved: list[int] = saved) -> torch.Tensor:
            saved.append(t.numel() * t.element_size())
            return t

        counter = FlopCounterMode(display=False)
        with counter, torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            linear_cross_entropy(model.features(inputs, mask), model.lm_head.weight, targets[mask])[0].backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        # saved tensors written and read once; parameters read and written, gradients written and read, 2 moments
        found[T, 64 * pairs] = counter.get_total_flops(), 2 * sum(saved) + 2 * 4 * parameters
    return found


def core_rates() -> tuple[float, float]:
    """One thread's sgemm FLOP/s (1024 x 1024 x 1024) and copy bandwidth in bytes/s (a 256 MB clone, read and
    written), the best of 5 by the process's CPU time."""
    torch.set_num_threads(1)
    a, b, big = torch.randn(1024, 1024), torch.randn(1024, 1024), torch.empty(64 * 2**20)

    def best(fn) -> float:
        fn()
        times = []
        for _ in range(5):
            start = time.process_time()
            fn()
            times.append(time.process_time() - start)
        return min(times)

    return 2 * 1024**3 / best(lambda: a @ b), 2 * big.numel() * 4 / best(big.clone)


def floor_table(mixers: list[str], runs: dict, measured: dict[str, float]) -> str:
    """Per mixer: the floor of its step (mixture-weighted as the timed steps of this run are) against the measured
    step of the last configuration."""
    rate, bandwidth = core_rates()
    components = list(step_components(mixers[0]))
    # the mixture as the timed steps drew it: the stream's step -> component is the same in every run
    weights = collections.Counter(component_of_steps()[s] for s in set(runs[mixers[0], "base"][0]))
    rows = []
    for mixer in mixers:
        cost = step_components(mixer)
        total = sum(weights.values())
        gflop = sum(weights[c] * cost[c][0] for c in components) / total
        traffic = sum(weights[c] * cost[c][1] for c in components) / total
        floor = max(gflop / rate, traffic / bandwidth)
        rows.append([f"`{mixer}`", f"{gflop / 1e9:.2f}", f"{1000 * gflop / rate:.1f}", f"{traffic / 2**20:.0f}",
                     f"{1000 * traffic / bandwidth:.1f}", f"{1000 * floor:.1f}", f"{measured[mixer]:.1f}",
                     f"{measured[mixer] / (1000 * floor):.1f}x"])
    table = markdown_table(["mixer", "matmul GFLOP/step", "at sgemm rate (ms)", "must-move MB/step",
                            "at copy bandwidth (ms)", "floor (ms)", "measured, fastest configuration (ms)",
                            "measured / floor"], rows)
    return (f"One thread's sgemm rate: {rate / 1e9:.0f} GFLOP/s; copy bandwidth {bandwidth / 1e9:.1f} GB/s "
            f"(read + write).\n\n{table}")


def component_of_steps() -> dict[int, tuple[int, int]]:
    """The training stream's (tokens, scored positions) of steps 0-199 at the preset (the stream is keyed by step)."""
    from loglinear.runs.config import load_run_config
    from loglinear.synthetics.datamodule import SyntheticDataModule
    from loglinear.synthetics.streams import TrainStream
    from loglinear.targets import IGNORE_INDEX

    cfg = load_run_config(str(ROOT / "configs/mqar_paper.yaml"), [*SETTING, "out_dir=unused"])
    stream = TrainStream(SyntheticDataModule(cfg.data).train_set, cfg.data.batch_size, cfg.data.seed)
    found = {}
    for step in range(200):
        batch = stream.batch(step)
        found[step] = batch["inputs"].shape[1], int((batch["targets"] != IGNORE_INDEX).sum())
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", required=True, help="the commit to compare against (its eager step)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=60, help="train.max_steps of every run (steps 11 on timed)")
    parser.add_argument("--mixers", nargs="+", default=MIXERS, choices=MIXERS)
    parser.add_argument("--quick", action="store_true", help="2 mixers, 1 repeat, 25 steps; prints only")
    args = parser.parse_args()
    if args.quick:
        args.mixers, args.repeats, args.steps = ["attention", "gated_deltanet"], 1, 25
    commit = subprocess.run(["git", "rev-parse", "--short", args.base], cwd=ROOT, check=True, capture_output=True,
                            text=True).stdout.strip()
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, check=True, capture_output=True,
                          text=True).stdout.strip()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as scratch:
        worktree = Path(scratch) / "base"
        subprocess.run(["git", "worktree", "add", "--detach", str(worktree), commit], cwd=ROOT, check=True,
                       capture_output=True)
        try:
            found = measure(worktree / "src", args.mixers, args.repeats, args.steps, Path(scratch))
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(worktree)], cwd=ROOT, check=True)
    runs, loads = found["runs"], found["loads"]
    table, speedups = summary(runs, args.mixers, args.repeats)
    last = list(CONFIGS)[-1]
    measured = {m: 1000 * statistics.fmean(statistics.fmean(r.values()) for r in runs[m, last]) for m in args.mixers}
    body = (
        f"CPU time of the process per training step (getrusage, user + system), {args.repeats} interleaved repeats "
        f"of {args.steps}-step runs (steps 11 on timed, a compiled run's compiling steps left out; every figure over "
        f"the steps all configurations of its mixer counted), one thread. Base: commit {commit}, eager; the others: "
        f"this checkout ({head}). Speed-up: the base's mean over the configuration's, per repeat: mean (range). "
        f"Load average over the runs: {min(loads)} to {max(loads)} on 2 cores; "
        f"{(time.perf_counter() - started) / 60:.0f} min in all.\n\n{table}\n\n"
        f"The least disturbed step (per step the fastest of the {args.repeats} repeats, mean over the steps):\n\n"
        f"{least_disturbed(runs, args.mixers)}\n\n"
        f"**The floor** (the mixture of the timed steps):\n\n{floor_table(args.mixers, runs, measured)}"
    )
    print(body)
    print("speed-ups of the last configuration:", ", ".join(f"{m} {s:.2f}x" for m, s in zip(args.mixers, speedups,
                                                                                              strict=True)))
    if not args.quick:
        write_section(SECTION, body)
        print(f"wrote section {SECTION!r} of benchmarks/RESULTS.md")


if __name__ == "__main__":
    main()
