"""Generation throughput of MAD's tasks at MAD's baseline and longest settings, written to benchmarks/RESULTS.md.

Each setting: examples/s of `task.sample(128, seed)` (MAD's batch size), a new seed per batch, the best of
several timed runs after a warm-up, in this process with torch's thread count set by `--threads`.

Usage: python3 -m benchmarks.mad_tasks [--threads N] [--repeats R] [--note TEXT]
"""

from __future__ import annotations

import argparse
import time

import torch

from benchmarks.results_md import markdown_table, write_section
from loglinear.synthetics import get_task

BATCH = 128
SETTINGS = [  # MAD's baseline of each task, then its longest (or largest) setting
    ("in_context_recall", {}),
    ("in_context_recall", {"seq_len": 1024}),
    ("noisy_in_context_recall", {}),
    ("noisy_in_context_recall", {"seq_len": 1024}),
    ("fuzzy_in_context_recall", {}),
    ("fuzzy_in_context_recall", {"seq_len": 1024}),
    ("selective_copying", {}),
    ("selective_copying", {"seq_len": 1024, "num_tokens_to_copy": 96}),
    ("compression", {}),
    ("compression", {"seq_len": 256}),
    ("memorization", {}),
    ("memorization", {"vocab_size": 8192}),
]


def seconds_per_batch(name: str, arguments: dict, repeats: int, batch: int = BATCH, clock=time.perf_counter) -> float:
    """The best over `repeats` timed runs of the mean seconds per `task.sample(batch, seed)` by `clock` (wall time;
    `time.process_time`: the process's CPU time), a new seed per batch, after one batch of warm-up."""
    task = get_task(name, **arguments)
    task.sample(batch, 0)
    batches = max(3, 4096 // task.seq_len)
    best = float("inf")
    for r in range(repeats):
        start = clock()
        for b in range(batches):
            task.sample(batch, 1000 * (r + 1) + b)
        best = min(best, (clock() - start) / batches)
    return best


def generation_arguments(description: str) -> argparse.Namespace:
    """The options of a generation benchmark (--threads, --repeats, --note), parsed, with torch's thread count set."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--note", default="", help="a sentence on the conditions (e.g. a shared machine)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    return args


def main() -> None:
    args = generation_arguments(__doc__.splitlines()[0])
    rows = []
    for name, arguments in SETTINGS:
        best = seconds_per_batch(name, arguments, args.repeats)
        setting = ", ".join(f"{k}={v}" for k, v in arguments.items()) or "baseline"
        rows.append([f"`{name}`", setting, f"{BATCH / best:,.0f}", f"{best * 1e3:.2f}"])
        print(rows[-1], flush=True)
    body = (
        f"`get_task(name, **setting).sample({BATCH}, seed)`, a new seed per batch, best of the timed runs. "
        "Fuzzy recall is sampled one pair at a time (its layout is sequential); the others are vectorised. "
        f"{args.note}\n\n" + markdown_table(["task", "setting", "examples/s", "ms/batch"], rows)
    )
    print(write_section("synthetics: MAD task generation", body))


if __name__ == "__main__":
    main()
