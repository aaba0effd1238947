"""CPU training steps/s of every mixer, eager against `train.compile=true` (torch.compile of each block), side by
side in one process.

    python3 -m benchmarks.compile_cpu            # writes the "models: CPU training step, compiled" section
    python3 -m benchmarks.compile_cpu --quick    # tiny sizes, print only

The step and its setting are those of benchmarks/models.py (`make_step`: forward, cross-entropy at the scored
positions, backward, AdamW; d_model 64, 2 layers, no MLP, vocabulary 64, float32, batch 64), compiled by the
same function a run with `train.compile=true` uses. The warm-up round compiles; then interleaved rounds, and
each configuration keeps its fastest step (wall and CPU time of the process), so load from other processes
biases neither side.
"""

from __future__ import annotations

import argparse
import time

import torch

from benchmarks.models import fastest, load_average, make_step
from benchmarks.results_md import markdown_table, write_section
from loglinear.kernels.cpp_compiler import cpp_compiler
from loglinear.models import MIXERS
from loglinear.runs.memory import keep_freed_memory

SECTION = "models: CPU training step, compiled"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="tiny sizes, print only")
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds (after the warm-up round that compiles)")
    parser.add_argument("--lengths", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--mixers", nargs="+", default=list(MIXERS.names()), choices=list(MIXERS.names()))
    args = parser.parse_args()
    if cpp_compiler() is None:
        parser.error("torch.compile needs a C++ compiler on the CPU and none was found (install g++ or set CXX)")
    torch.set_num_threads(args.threads)
    sizes = dict(d_model=16, layers=1, batch=4, vocab=64, attention_heads=2, lengths=[32]) if args.quick else dict(
        d_model=64, layers=2, batch=64, vocab=64, attention_heads=4)
    vars(args).update(sizes)
    freed = keep_freed_memory()
    load_before = load_average()
    started = time.perf_counter()
    steps = {(m, T, c): make_step(m, T, args, compile=c) for T in args.lengths for m in args.mixers
             for c in (False, True)}
    best = fastest(steps, args.rounds)
    minutes = (time.perf_counter() - started) / 60
    rows = []
    for T in args.lengths:
        for m in args.mixers:
            (eager_wall, eager_cpu), (comp_wall, comp_cpu) = best[m, T, False], best[m, T, True]
            rows.append([T, f"`{m}`", f"{1 / eager_wall:.1f}", f"{1 / comp_wall:.1f}", f"{eager_wall / comp_wall:.2f}x",
                         f"{eager_cpu / comp_cpu:.2f}x"])
    body = (
        f"Steps/s (fastest of {args.rounds} interleaved rounds after a warm-up round that compiles) of "
        f"benchmarks/models.py's training step, d_model {args.d_model}, {args.layers} layers, batch {args.batch}, "
        f"{args.threads} threads, eager and with each block compiled as `train.compile=true` does (C++ compiler "
        f"{cpp_compiler()}). Speed-up = eager step time / compiled step time, in wall and in CPU time of the "
        f"process. glibc keeps freed memory: {freed}. Load average of the machine before/after: "
        f"{load_before}/{load_average()}; {minutes:.1f} min in all, compilation included. {machine_note(load_before)}"
        f"\n\n"
        + markdown_table(["T", "mixer", "steps/s eager", "steps/s compiled", "speed-up (wall)", "speed-up (CPU time)"],
                         rows)
    )
    print(body)
    if not args.quick:
        write_section(SECTION, body)
        print(f"wrote section {SECTION!r} of benchmarks/RESULTS.md")


def machine_note(load_before: str) -> str:
    """Whether other work shared the machine when the measurement started (a load average of a core or more)."""
    if load_before == "?":
        return "The machine's load is unknown: the ratios are indicative."
    if float(load_before) >= 1.0:
        return "Other work shared the machine when it started: the ratios are indicative."
    return "The machine was otherwise idle when it started (load below one core)."


if __name__ == "__main__":
    main()
