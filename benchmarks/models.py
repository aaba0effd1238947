"""CPU training-step time of every mixer at MQAR sizes, relative to softmax attention, and tokens/s by length.

    python3 -m benchmarks.models            # writes the "models: CPU training step" section of RESULTS.md
    python3 -m benchmarks.models --quick    # a tiny smoke run; prints, writes nothing
    python3 -m benchmarks.models --threads 1 --lengths 64 256   # its own section: less disturbed on a loaded machine

The setting of the CPU MQAR preset (configs/mqar_cpu.yaml): d_model 64, 2 layers, no MLP, vocabulary
64, float32, attention with 4 heads, NUM_SCORED scored positions per sequence (logits only there, as
MQAR scores its queries), AdamW, ModelConfig defaults otherwise and max_len = T. One step = forward,
cross-entropy, backward, AdamW update, on fixed random data. Batch 64 at T <= 256, then
TOKENS_PER_STEP / T sequences (the same tokens per step from T = 256 on).

All configurations run in one process, in interleaved rounds (every configuration once per round),
and each keeps its fastest step, in wall time and in the process's CPU time: load from other
processes on a shared machine then biases no configuration against another.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

from benchmarks.results_md import markdown_table, write_section
from loglinear.models import MIXERS, build_model, param_groups
from loglinear.runs.config import TrainConfig
from loglinear.runs.lit import compile_blocks
from loglinear.runs.memory import keep_freed_memory

SECTION = "models: CPU training step"
REFERENCE = "attention"  # every other mixer's step time is reported relative to softmax attention's
NUM_SCORED = 16
TOKENS_PER_STEP = 16384
RATIO_LENGTHS = (64, 256)
GRID = dict(threads=(1, 2), d_models=(16, 64), lengths=(64, 256))  # the studies' sizes (--grid)
RATIO_TARGET = 1.5  # every recurrent mixer's step within this factor of attention's at the GRID sizes


def batch_for(T: int, args: argparse.Namespace) -> int:
    return args.batch if T <= 256 else max(1, TOKENS_PER_STEP // T)


def make_step(mixer: str, T: int, args: argparse.Namespace, compile: bool = False) -> Callable[[], None]:
    """A closure running one training step of a fresh model on fixed random data; with `compile`, the model's
    blocks compiled as `train.compile=true` compiles them."""
    torch.manual_seed(0)
    model = build_model(dict(
        mixer=mixer, d_model=args.d_model, n_layers=args.layers, vocab_size=args.vocab, max_len=T, mlp_ratio=0.0,
        attention_heads=args.attention_heads,  # read by attention only
    ))
    compile_blocks(model, TrainConfig(compile=compile))
    opt = torch.optim.AdamW(param_groups(model, 0.1), lr=1e-3)
    B = batch_for(T, args)
    inputs = torch.randint(0, args.vocab, (B, T))
    targets = torch.randint(0, args.vocab, (B, T))
    scored = torch.rand(B, T).argsort(-1)[:, : min(NUM_SCORED, T)]
    mask = torch.zeros(B, T, dtype=torch.bool).scatter_(1, scored, True)

    def step() -> None:
        logits = model(inputs, mask)  # (B * NUM_SCORED, vocab)
        loss = F.cross_entropy(logits, targets[mask])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    return step


def fastest_steps(args: argparse.Namespace) -> dict[tuple[str, int], tuple[float, float]]:
    """Best (wall, CPU) seconds per step of every (mixer, T) over interleaved rounds, after a warm-up round."""
    return fastest({(m, T): make_step(m, T, args) for T in args.lengths for m in MIXERS}, args.rounds)


def fastest(steps: dict, rounds: int) -> dict:
    """Best (wall, CPU) seconds of every step over `rounds` interleaved rounds, after a warm-up round."""
    best = {key: (float("inf"), float("inf")) for key in steps}
    for round_ in range(rounds + 1):
        for key, step in steps.items():
            wall, cpu = time.perf_counter(), time.process_time()
            step()
            if round_:
                wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
                best[key] = (min(best[key][0], wall), min(best[key][1], cpu))
    return best


def load_average() -> str:
    """The machine's 1-minute load average (all processes), "?" where /proc is missing."""
    path = Path("/proc/loadavg")
    return path.read_text().split()[0] if path.exists() else "?"


def ratio_table(
    seconds: dict[tuple[str, int], tuple[float, float]], lengths: list[int], clock: int
) -> tuple[str, list[str]]:
    """Step time relative to attention per (T, mixer) on one clock (0 wall, 1 CPU), and the slowest mixer's ratio
    at each T of RATIO_LENGTHS."""
    recurrent = [m for m in MIXERS if m != REFERENCE]
    rows, slowest = [], []
    for T in lengths:
        base = seconds[REFERENCE, T][clock]
        ratios = {m: seconds[m, T][clock] / base for m in recurrent}
        rows.append([T, f"{1000 * base:.0f} ms"] + [f"{ratios[m]:.2f}x" for m in recurrent])
        if T in RATIO_LENGTHS:
            worst = max(ratios, key=ratios.get)
            slowest.append(f"T={T}: slowest {worst} at {ratios[worst]:.2f}x attention")
    return markdown_table(["T", REFERENCE, *recurrent], rows), slowest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="tiny sizes, print only")
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds (after one warm-up round)")
    parser.add_argument("--lengths", type=int, nargs="+", default=[64, 256, 1024, 4096])
    parser.add_argument("--threads", type=int, default=2,
                        help="torch threads (2 writes the main section, others a section of their own)")
    parser.add_argument("--grid", action="store_true",
                        help="the ratios at every size of GRID side by side (its own section of RESULTS.md)")
    parser.add_argument("--profile", action="store_true",
                        help="instead of timing: the operators taking the most CPU time in each mixer's step")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    sizes = dict(d_model=16, layers=1, batch=4, vocab=64, attention_heads=2, lengths=[32, 64]) if args.quick else dict(
        d_model=64, layers=2, batch=64, vocab=64, attention_heads=4
    )
    vars(args).update(sizes)
    if args.profile:
        profile_steps(args)
        return
    kept = keep_freed_memory()
    if args.grid:
        grid_ratios(args, kept)
        return

    load_before = load_average()
    seconds = fastest_steps(args)
    load_after = load_average()
    ratio_lengths = [T for T in args.lengths if T in RATIO_LENGTHS] or args.lengths[:1]
    ratios_wall, slowest = ratio_table(seconds, ratio_lengths, 0)
    ratios_cpu, _ = ratio_table(seconds, ratio_lengths, 1)
    rows = [
        [m] + [f"{batch_for(T, args) * T / seconds[m, T][0]:,.0f}" for T in args.lengths] for m in MIXERS
    ]
    tokens = markdown_table(["mixer"] + [f"T={T} (batch {batch_for(T, args)})" for T in args.lengths], rows)
    text = (
        f"### Step time relative to attention (wall clock)\n\n{ratios_wall}\n"
        + "\n".join(f"- {line}" for line in slowest)
        + f"\n\n### The same in CPU time of the process\n\n{ratios_cpu}\n### Tokens/s (wall clock)\n\n{tokens}"
    )
    print(text)
    if args.quick:
        return
    body = (
        f"Training step (forward, cross-entropy, backward, AdamW) of a language model with d_model {args.d_model}, "
        f"{args.layers} layers, no MLP, vocabulary {args.vocab}, float32, {NUM_SCORED} scored positions per sequence "
        f"(logits only there), attention with {args.attention_heads} heads, ModelConfig defaults otherwise "
        f"(impl auto = chunk on CPU, max_len = T), {torch.get_num_threads()} threads. Batch {args.batch} at T <= 256, "
        f"{TOKENS_PER_STEP} tokens per step beyond. Fastest of {args.rounds} interleaved rounds after a warm-up "
        f"round, all in one process. The machine is shared with other users, so single timings are noisy: "
        f"compare the ratios, which come from the same rounds; CPU time of the process is less disturbed by "
        f"other load than wall time. glibc keeps freed memory (mallopt, see keep_freed_memory): {kept}. Load "
        f"average of the machine (other processes included) before/after: {load_before}/{load_after} on "
        f"{os.cpu_count()} cores. Targets: the table at the top of this file.\n\n{text}"
    )
    section = SECTION if args.threads == 2 else f"{SECTION} ({args.threads} thread{'s' * (args.threads > 1)})"
    print(f"wrote {write_section(section, body)}")


def grid_ratios(args: argparse.Namespace, kept: bool) -> None:
    """Step time relative to attention at every GRID size (d_model, T, threads), all measured in one process:
    per thread count, every (d_model, T, mixer) in interleaved rounds. Attention has d_model / 16 heads, as in the
    presets (4 at d_model 64, the studies' 1 at d_model 16); batch as in the timing sections."""
    recurrent = [m for m in MIXERS if m != REFERENCE]
    rows, worst = [], []
    load_before = load_average()
    for threads in GRID["threads"]:
        torch.set_num_threads(threads)
        steps = {}
        for d in GRID["d_models"]:
            sized = argparse.Namespace(**{**vars(args), "d_model": d, "attention_heads": max(1, d // 16)})
            steps.update({(d, T, m): make_step(m, T, sized) for T in GRID["lengths"] for m in MIXERS})
        best = fastest(steps, args.rounds)
        for d in GRID["d_models"]:
            for T in GRID["lengths"]:
                base = best[d, T, REFERENCE]
                ratios = {m: best[d, T, m][1] / base[1] for m in recurrent}
                rows.append([threads, d, T, f"{1000 * base[1]:.0f} ms"] + [f"{ratios[m]:.2f}x" for m in recurrent])
                worst.append(max(ratios.values()))
    load_after = load_average()
    table = markdown_table(["threads", "d_model", "T", f"{REFERENCE} (CPU time)", *recurrent], rows)
    verdict = "met" if max(worst) <= RATIO_TARGET else "MISSED"
    text = f"{table}\n- slowest recurrent mixer: {max(worst):.2f}x attention (target <= {RATIO_TARGET}x): {verdict}\n"
    print(text)
    if args.quick:
        return
    body = (
        f"Training step as in the sections above ({args.layers} layers, no MLP, vocabulary {args.vocab}, batch "
        f"{args.batch}, {NUM_SCORED} scored positions), at every d_model, T and thread count of GRID in one process "
        f"(the machine line names the last thread count); per thread count, fastest of {args.rounds} interleaved "
        f"rounds after a warm-up round. Ratios of the process's CPU time per step (its threads together), the clock "
        f"least disturbed by other load. glibc keeps freed memory: {kept}. Load average before/after: "
        f"{load_before}/{load_after} on {os.cpu_count()} cores.\n\n{text}"
    )
    print(f"wrote {write_section(f'{SECTION}: ratios by size', body)}")


def profile_steps(args: argparse.Namespace, steps: int = 3, top: int = 6) -> None:
    """Per mixer and length, the `top` torch operators by share of self CPU time over `steps` training steps
    (after two warm-up steps); written to its own section of RESULTS.md (printed only with --quick)."""
    rows = []
    for mixer in MIXERS:
        for T in args.lengths:
            step = make_step(mixer, T, args)
            for _ in range(2):
                step()
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
                for _ in range(steps):
                    step()
            events = prof.key_averages()
            total = sum(e.self_cpu_time_total for e in events)
            ranked = sorted(events, key=lambda e: -e.self_cpu_time_total)[:top]
            shares = ", ".join(f"{e.key} {100 * e.self_cpu_time_total / total:.0f}%" for e in ranked)
            rows.append([mixer, str(T), shares])
    table = markdown_table(["mixer", "T", f"top {top} operators by share of self CPU time"], rows)
    print(table)
    if args.quick:
        return
    body = (
        f"The setting of the timing sections (d_model {args.d_model}, {args.layers} layers, batch {args.batch}), "
        f"{torch.get_num_threads()} thread(s), torch.profiler over {steps} training steps after 2 warm-up steps.\n\n"
        f"{table}"
    )
    print(f"wrote {write_section(f'{SECTION}: profile', body)}")


if __name__ == "__main__":
    main()
