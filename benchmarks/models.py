"""CPU training-step throughput of every mixer in a small language model, with and without score_mask.

    python3 benchmarks/models.py            # the issue's size; writes the "models: CPU training step" section
    python3 benchmarks/models.py --quick    # a tiny smoke run; prints, writes nothing

One step = forward, cross-entropy, backward, AdamW update. The score_mask rows score NUM_SCORED
random positions per sequence, as MQAR scores its queries; without it every position is scored.
Configurations are timed in interleaved rounds and each keeps its fastest step (wall time and the
process's CPU time, the latter for the ratios), so that load from other processes on a shared
machine biases no configuration against another.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

from loglinear.models import MIXERS, build_model, param_groups
from results import markdown_table, write_section

SECTION = "models: CPU training step"
BASES = {"log_linear_mamba2": "mamba2", "log_linear_gated_deltanet": "gated_deltanet"}
NUM_SCORED = 16


def make_step(mixer: str, args: argparse.Namespace, masked: bool) -> Callable[[], None]:
    """A closure running one training step of a fresh model on fixed random data."""
    torch.manual_seed(0)
    model = build_model(dict(
        mixer=mixer, d_model=args.d_model, n_layers=args.layers, vocab_size=args.vocab, max_len=args.seq_len,
    ))
    opt = torch.optim.AdamW(param_groups(model, 0.1), lr=1e-3)
    inputs = torch.randint(0, args.vocab, (args.batch, args.seq_len))
    targets = torch.randint(0, args.vocab, (args.batch, args.seq_len))
    mask = None
    if masked:
        scored = torch.rand(args.batch, args.seq_len).argsort(-1)[:, :NUM_SCORED]
        mask = torch.zeros(args.batch, args.seq_len, dtype=torch.bool).scatter_(1, scored, True)

    def step() -> None:
        logits = model(inputs, mask)  # (num scored, vocab) with the mask, else (B, T, vocab)
        loss = F.cross_entropy(logits.reshape(-1, args.vocab), targets[mask] if masked else targets.flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    return step


def fastest_steps(args: argparse.Namespace) -> dict[tuple[str, bool], tuple[float, float]]:
    """Best (wall, CPU) seconds per step of every (mixer, masked) over interleaved rounds, after a warm-up round.

    CPU time (all threads of this process) is what other processes on a shared machine disturb least.
    """
    steps = {(m, masked): make_step(m, args, masked) for m in MIXERS for masked in (False, True)}
    best = {key: (float("inf"), float("inf")) for key in steps}
    for round_ in range(args.rounds + 1):
        for key, step in steps.items():
            wall, cpu = time.perf_counter(), time.process_time()
            step()
            if round_:
                wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
                best[key] = (min(best[key][0], wall), min(best[key][1], cpu))
    return best


def keep_freed_memory() -> bool:
    """Ask glibc to keep freed memory in the process instead of handing it back to the OS.

    An unmasked step allocates and frees ~2 GB of logits and their gradients; by default glibc
    unmaps such blocks on free, and the next step faults every page in again (in this VM that
    made steps 2-5x slower and their times erratic). M_TRIM_THRESHOLD (-1) and M_MMAP_THRESHOLD
    (-3) set to 2^31 - 1 keep them. Returns False where glibc is not available.
    """
    try:
        libc = ctypes.CDLL("libc.so.6")
        return bool(libc.mallopt(-1, 2**31 - 1) and libc.mallopt(-3, 2**31 - 1))
    except (OSError, AttributeError):
        return False


def load_average() -> str:
    """The machine's 1-minute load average (all processes), "?" where /proc is missing."""
    path = Path("/proc/loadavg")
    return path.read_text().split()[0] if path.exists() else "?"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="tiny sizes, print only")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds (after one warm-up round)")
    args = parser.parse_args()
    sizes = dict(d_model=16, layers=1, seq_len=32, batch=4, vocab=64) if args.quick else dict(
        d_model=64, layers=2, seq_len=256, batch=64, vocab=8192
    )
    vars(args).update(sizes)
    kept = keep_freed_memory()

    load_before = load_average()
    seconds = fastest_steps(args)
    load_after = load_average()
    tokens = args.batch * args.seq_len
    rows = []
    for m in MIXERS:
        row: list[object] = [m]
        for masked in (False, True):
            wall, cpu = seconds[m, masked]
            ratio = f"{cpu / seconds[BASES[m], masked][1]:.2f}x" if m in BASES else "-"
            row += [f"{1000 * wall:.0f}", f"{tokens / wall:,.0f}", f"{1000 * cpu:.0f}", ratio]
        rows.append(row)
    header = ["mixer"] + [
        f"{h} ({mode})"
        for mode in ("all positions", "score_mask")
        for h in ("wall ms/step", "tokens/s", "CPU ms/step", "vs base (CPU)")
    ]
    table = markdown_table(header, rows)
    print(table)
    if args.quick:
        return
    body = (
        f"Training step (forward, cross-entropy, backward, AdamW) of a language model with d_model "
        f"{args.d_model}, {args.layers} layers, no MLP, vocabulary {args.vocab}, T = {args.seq_len}, batch "
        f"{args.batch}, float32, ModelConfig defaults otherwise (impl auto = chunk on CPU; Mamba-2 head and "
        f"state dim 16; log-linear: softplus lambda, max_len = T, so 9 levels). Fastest of {args.rounds} "
        f"interleaved rounds after a warm-up round, in wall time and in CPU time of the process (both threads; "
        f"less disturbed by other load on a shared machine). score_mask: {NUM_SCORED} scored positions per sequence "
        f"(MQAR-like), logits only there. 'vs base': CPU time per step relative to the base mixer "
        f"(target: log-linear within 2x). glibc keeps freed memory (mallopt, see keep_freed_memory): "
        f"{kept}. Load average of the machine (other processes included) before/after: "
        f"{load_before}/{load_after} on {os.cpu_count()} cores.\n\n{table}"
    )
    print(f"wrote {write_section(SECTION, body)}")


if __name__ == "__main__":
    main()
