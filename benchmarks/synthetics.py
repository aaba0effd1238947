"""MQAR generation throughput and peak memory, written to benchmarks/RESULTS.md.

Each shape is measured in a fresh subprocess: examples/s is the best of several timed runs of
`task.sample(256, seed)` with a new seed per batch (wall clock, after a warm-up); peak memory is
the growth of the process's peak resident set size (`resource.getrusage(...).ru_maxrss`) from
just before the first batch to the end, i.e. everything generation allocated on top of torch
itself. Generation never builds a dataset, so memory depends on the batch only.

Usage: python3 -m benchmarks.synthetics [--layout zoology|interleaved] [--threads N] [--repeats R]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

from benchmarks.results_md import markdown_table, write_section

SHAPES = {
    "zoology": [(64, 4), (256, 64), (1024, 256), (256, [4, 8, 16, 32, 64])],
    "interleaved": [(64, [4, 8, 16]), (256, [4, 8, 16, 32, 64])],  # the CPU studies' training mix, the paper's pairs
}
SECTIONS = {"zoology": "synthetics: MQAR generation", "interleaved": "synthetics: MQAR generation, interleaved layout"}
BATCH = 256
VOCAB = 8192


def measure(layout: str, seq_len: int, pairs: int | list[int], threads: int, repeats: int, batches: int) -> dict:
    """Run in a subprocess: throughput and peak-memory growth of one MQAR shape."""
    import torch

    from loglinear.synthetics import get_task

    torch.set_num_threads(threads)
    task = get_task("mqar", vocab_size=VOCAB, seq_len=seq_len, num_kv_pairs=pairs, layout=layout)
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    for seed in range(5):
        batch = task.sample(BATCH, seed)
    best = float("inf")
    for r in range(repeats):
        start = time.perf_counter()
        for seed in range(batches):
            batch = task.sample(BATCH, 1000 * (r + 1) + seed)
        best = min(best, (time.perf_counter() - start) / batches)
    rss_growth_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before
    batch_bytes = batch.inputs.nbytes + batch.targets.nbytes + sum(v.nbytes for v in batch.slices.values())
    return {"examples_per_s": BATCH / best, "ms_per_batch": best * 1e3,
            "rss_growth_mib": rss_growth_kib / 1024, "batch_mib": batch_bytes / 2**20}


def run_shape(layout: str, seq_len: int, pairs: int | list[int], threads: int, repeats: int) -> dict:
    batches = max(10, 20_000 // (seq_len * BATCH // 64))
    shape = json.dumps([layout, seq_len, pairs, threads, repeats, batches])
    command = [sys.executable, "-m", __spec__.name, "--measure", shape]
    return json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layout", choices=sorted(SHAPES), default="zoology", help="MQAR layout (its own section)")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="torch intra-op threads")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--measure", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(*json.loads(args.measure))))
        return
    rows = []
    for seq_len, pairs in SHAPES[args.layout]:
        for threads in args.threads:
            result = run_shape(args.layout, seq_len, pairs, threads, args.repeats)
            rows.append([
                seq_len, pairs, threads, f"{result['examples_per_s']:,.0f}", f"{result['ms_per_batch']:.2f}",
                f"{result['rss_growth_mib']:.1f}", f"{result['batch_mib']:.2f}",
            ])
            print(rows[-1], flush=True)
    table = markdown_table(
        ["seq_len", "num_kv_pairs", "threads", "examples/s", "ms/batch",
         "peak RSS growth (MiB)", "batch size (MiB)"],
        rows,
    )
    body = (
        f"`get_task('mqar', vocab_size={VOCAB}, seq_len=..., num_kv_pairs=...).sample({BATCH}, seed)`, a new seed "
        "per batch; best of the timed runs, each shape in a fresh process. Peak RSS growth: "
        "`ru_maxrss` after the runs minus before the first batch (everything generation allocated "
        "beyond torch itself); batch size: bytes of inputs, targets and slices. The last row is the "
        "paper preset (each example draws its pair count). zoology's generator does about 5,000 "
        "examples/s at each of the first three shapes on this machine and needs ~3 GB per 100k "
        "examples; this one holds one batch at a time. Targets: the table at the top of this file.\n\n" + table
    ) if args.layout == "zoology" else (
        f"`get_task('mqar', vocab_size={VOCAB}, seq_len=..., num_kv_pairs=..., layout='interleaved').sample({BATCH}, "
        "seed)`, a new seed per batch; best of the timed runs, each shape in a fresh process; columns as in "
        "\"synthetics: MQAR generation\". Placing pairs and queries along the sequence draws each pair's distance "
        "and query in turn, so this layout costs more per example than zoology's.\n\n" + table
    )
    print(write_section(SECTIONS[args.layout], body))


if __name__ == "__main__":
    main()
