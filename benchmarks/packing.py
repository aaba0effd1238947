"""Packed training against runs alone: run-steps/s and sequences/s of packs of N runs, side by side in one process.

    python3 -m benchmarks.packing                  # writes the "packing: training throughput" section of RESULTS.md
    python3 -m benchmarks.packing --quick          # a tiny smoke run; prints, writes nothing
    python3 -m benchmarks.packing --d-models 16 --time-limit 60          # the GPU check's step (gpu_check.py)

The paper's MQAR model (configs/mqar_paper.yaml with each mixer's preset: 2 layers, no MLP, vocabulary 8,192,
256 tokens) at each d_model, with SCORED scored positions per sequence (logits only there). One step = forward at
the scored positions, cross-entropy, backward, gradient clipping, AdamW:
- alone: one model's step as a run alone takes it (the model with its score mask, torch's AdamW,
  clip_grad_norm_), on fixed random data on the device; its run-steps/s is 1 / its step time;
- packed N: the step of `loglinear.packing` (PackedStep) on N runs, on fixed random data on the device (a
  different draw per run); its run-steps/s is N / its step time.
The ratio column is the packed cost of one run-step over the alone one (at most 1.10 is the CPU's target: the CPU
is compute-bound, so packing cannot gain there; on a GPU the step is overhead-bound and packing is the lever).
Configurations run in interleaved rounds after a warm-up; each keeps its fastest round's mean. A pack that does
not fit the GPU's memory is recorded as such and the larger ones at that size are skipped.
The closing lines: how fast the training stream makes the paper-shape batches on this process's threads, fresh and
from fixed training sets (the data a pack needs each step is N batches: above the model's rate, the data is the
limit unless DataLoader workers, `data.num_workers`, make it beside the step).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

from benchmarks.results_md import markdown_table, write_section
from loglinear.models import MIXERS, build_model, param_groups
from loglinear.packing.batches import PackedBatch
from loglinear.packing.step import PackedStep
from loglinear.runs.config import load_run_config
from loglinear.runs.memory import keep_freed_memory
from loglinear.synthetics import SyntheticDataModule
from loglinear.synthetics.streams import TrainStream
from loglinear.targets import IGNORE_INDEX

SECTION = "packing: training throughput"
SCORED = 64  # scored positions per sequence: MQAR's largest count at 256 tokens (the head's heaviest case)
T = 256
FIXED_SET = 20_000  # examples in each run's fixed training set for `fixed_set_rate` (the paper's is 180,000)
QUICK_FIXED_SET = 64  # --quick's: 4 sets of 20,000 took 1.0 of its 1.5 CPU s of work (one thread)


def _config(mixer: str, d_model: int, batch: int):
    return load_run_config("configs/mqar_paper.yaml", [f"model=model/{mixer}.yaml", f"model.d_model={d_model}",
                                                       f"data.batch_size={batch}", "out_dir=unused",
                                                       "train.grad_clip=1.0"])


def _data(runs: int, batch: int, vocab: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    inputs = torch.randint(0, vocab, (runs, batch, T), generator=g)
    targets = torch.full((runs, batch, T), IGNORE_INDEX)
    where = torch.rand(runs, batch, T, generator=g).argsort(-1)[..., :SCORED]
    targets.scatter_(2, where, torch.randint(0, vocab, (runs, batch, SCORED), generator=g))
    return inputs, targets


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def alone_step(mixer: str, d_model: int, batch: int, device: torch.device) -> Callable[[], None]:
    cfg = _config(mixer, d_model, batch)
    model = build_model(cfg.model, seed=0).to(device)
    optimizer = torch.optim.AdamW(param_groups(model, cfg.train.weight_decay), lr=cfg.train.lr)
    inputs, targets = (x[0].to(device) for x in _data(1, batch, cfg.model.vocab_size, 0))
    mask = targets != IGNORE_INDEX
    autocast = _autocast(device)

    def step() -> None:
        with autocast():
            logits = model(inputs, mask)
        F.cross_entropy(logits.float(), targets[mask]).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.train.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def packed_step(mixer: str, d_model: int, batch: int, runs: int, device: torch.device) -> Callable[[], None]:
    cfg = _config(mixer, d_model, batch)
    models = [build_model(cfg.model, seed=s).to(device) for s in range(runs)]
    step_of = PackedStep(models, [cfg.train] * runs, device)
    inputs, targets = _data(runs, batch, cfg.model.vocab_size, 1)
    packed = PackedBatch.of([{"inputs": inputs[r], "targets": targets[r]} for r in range(runs)]).to(device)
    autocast = _autocast(device)
    t = [0]

    def step() -> None:
        step_of(t[0], packed, autocast, logging=False)
        t[0] += 1

    return step


def _autocast(device: torch.device) -> Callable[[], contextlib.AbstractContextManager]:
    """The precision runs train with by default: bf16-mixed on a GPU, float32 on the CPU."""
    if device.type == "cuda":
        return lambda: torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext


def data_rate(batch: int) -> float:
    """Sequences/s the training stream makes at the paper's training mix, on this process's threads."""
    cfg = _config("attention", 16, batch)
    stream = TrainStream(SyntheticDataModule(cfg.data).train_set, batch, 0)
    stream.batch(0)
    started = time.perf_counter()
    steps = 40  # the mix's components differ in cost: enough batches to draw each of them
    for step in range(1, steps + 1):
        stream.batch(step)
    return steps * batch / (time.perf_counter() - started)


def fixed_set_rate(batch: int, runs: int = 4, train_size: int = FIXED_SET) -> float:
    """Sequences/s of packed batches (PackedBatch.of, what a pack's data loader makes) drawn from `runs` fixed
    training sets (`data.train_size`) of the paper's single-length MQAR (a fixed set holds one task), once made."""
    cfg = load_run_config("configs/mqar_paper.yaml", ["data=data/mqar_paper_256.yaml", f"data.batch_size={batch}",
                                                      "out_dir=unused"])
    task_set = SyntheticDataModule(cfg.data).train_set
    streams = [TrainStream(task_set, batch, seed, train_size=train_size) for seed in range(runs)]
    PackedBatch.of([s.batch(0) for s in streams])
    started = time.perf_counter()
    steps = 10
    for step in range(1, steps + 1):
        PackedBatch.of([s.batch(step) for s in streams])
    return steps * runs * batch / (time.perf_counter() - started)


def measure(args: argparse.Namespace, device: torch.device) -> list[list[object]]:
    """One row per (mixer, d_model, pack): run-steps/s, sequences/s, the packed/alone cost of a run-step, memory."""
    deadline = time.monotonic() + args.time_limit
    rows = []
    for mixer in args.mixers:
        for d in args.d_models:
            configs: dict[object, Callable[[], None]] = {"alone": alone_step(mixer, d, args.batch, device)}
            too_big = False
            for n in args.packs:
                if too_big:
                    rows.append([mixer, d, n, "-", "-", "-", "skipped: a smaller pack did not fit"])
                    continue
                try:
                    configs[n] = packed_step(mixer, d, args.batch, n, device)
                    configs[n]()
                    _sync(device)
                except torch.OutOfMemoryError:
                    too_big = True
                    configs.pop(n, None)
                    torch.cuda.empty_cache()
                    rows.append([mixer, d, n, "-", "-", "-", "out of GPU memory"])
            seconds = _fastest(configs, args.rounds, args.steps, device)
            alone = seconds.pop("alone")
            rows.append([mixer, d, "alone", f"{1 / alone:.1f}", f"{args.batch / alone:,.0f}", "1.00", ""])
            for n, s in seconds.items():
                rows.append([mixer, d, n, f"{n / s:.1f}", f"{n * args.batch / s:,.0f}", f"{s / n / alone:.2f}", ""])
            print("\n".join(" | ".join(map(str, r)) for r in rows[-len(configs):]), flush=True)
            if time.monotonic() > deadline:
                rows.append(["(time budget spent: the remaining sizes and mixers were not measured)", *[""] * 6])
                return rows
    return rows


def _fastest(configs: dict, rounds: int, steps: int, device: torch.device) -> dict:
    """Seconds per step of each configuration: the fastest of `rounds` interleaved rounds of `steps` steps, after a
    warm-up step each; on the CPU in the process's CPU time (other processes on a shared machine lengthen its wall
    time, not its CPU time), on a GPU in wall time."""
    clock = time.perf_counter if device.type == "cuda" else time.process_time
    for step in configs.values():
        step()
    best = {name: float("inf") for name in configs}
    for _ in range(rounds):
        for name, step in configs.items():
            _sync(device)
            started = clock()
            for _ in range(steps):
                step()
            _sync(device)
            best[name] = min(best[name], (clock() - started) / steps)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    on_gpu = torch.cuda.is_available()
    parser.add_argument("--mixers", nargs="+", default=list(MIXERS.names()), choices=list(MIXERS.names()))
    parser.add_argument("--d-models", nargs="+", type=int, default=[16, 32, 64] if on_gpu else [16])
    parser.add_argument("--packs", nargs="+", type=int, default=[1, 4, 16, 64] if on_gpu else [1, 4])
    parser.add_argument("--batch", type=int, default=256 if on_gpu else 64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10 if on_gpu else 2)
    parser.add_argument("--time-limit", type=float, default=float("inf"), metavar="S",
                        help="start no new size after S seconds (what was measured is written)")
    parser.add_argument("--quick", action="store_true", help="one mixer, tiny: prints, writes nothing")
    args = parser.parse_args()
    if args.quick:
        args.mixers, args.d_models, args.packs, args.batch, args.rounds, args.steps = ["mamba2"], [16], [1, 2], 4, 1, 1
    keep_freed_memory()
    device = torch.device("cuda" if on_gpu else "cpu")
    load_before = os.getloadavg()[0]
    rows = measure(args, device)
    data = data_rate(args.batch)
    fixed = fixed_set_rate(args.batch, train_size=QUICK_FIXED_SET if args.quick else FIXED_SET)
    load = f"load average of the machine (other processes included) before/after: {load_before:.2f}/" \
           f"{os.getloadavg()[0]:.2f} on {os.cpu_count()} cores"
    if args.quick:
        return
    clock = "wall time" if on_gpu else "the process's CPU time"
    body = (
        f"The paper's MQAR model at 256 tokens, vocabulary 8,192, batch {args.batch}, {SCORED} scored positions per "
        f"sequence; {'bf16-mixed' if on_gpu else 'float32'}; data fixed on the device. Fastest of {args.rounds} "
        f"interleaved rounds of {args.steps} steps, in {clock}; "
        f"{load}. `cost` is a packed run-step's time over a run-step alone.\n\n"
        + markdown_table(["mixer", "d_model", "pack", "run-steps/s", "sequences/s", "cost", "note"], rows)
        + f"\nThe training stream makes {data:,.0f} sequences/s of the paper's training mix on this process's "
          f"{torch.get_num_threads()} threads: a pack of N runs needs {args.batch} N a step. From fixed training "
          f"sets (`data.train_size` {FIXED_SET:,} of the single-length MQAR), a pack's loader makes {fixed:,.0f} "
          f"packed sequences/s on the same threads.\n"
    )
    print(body)
    write_section(SECTION, body)


if __name__ == "__main__":
    main()
