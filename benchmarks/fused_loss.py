"""The training loss at the paper's MQAR preset, fused with the LM head or not, and the fused loss's chunk size.

    OMP_NUM_THREADS=1 python3 -m benchmarks.fused_loss            # writes its section of RESULTS.md (SECTION)
    OMP_NUM_THREADS=1 python3 -m benchmarks.fused_loss --quick    # fewer batches, 1 repeat; prints only
    OMP_NUM_THREADS=1 python3 -m benchmarks.fused_loss --base REV # also the fused loss of commit REV, side by side

The loss alone, forward and backward, from the final norm's output (batch 64 of configs/mqar_paper.yaml at
d_model 16: the Based mix, vocabulary 8,192): the unfused form (`lm_head`, then cross-entropy over the vocabulary,
as `train.fused_loss=false` computes it) against `linear_cross_entropy` at each chunk size (and, with `--base`, that
commit's `linear_cross_entropy` at its default chunk, loaded from its source). The number of scored
positions of each batch is that of the preset's first training batches (the features themselves are random: the
cost does not depend on their values). CPU time of the process (time.process_time) over those batches, freed memory
kept as `loglinear train` keeps it, each configuration once per repeat in a fixed order (interleaved); each
configuration's loss and gradients are compared with the unfused form's on the same inputs. Then one chunk of the
default size operation by operation, its matmuls' rate beside one thread's sgemm rate.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

from benchmarks.models import load_average
from benchmarks.preset_step import core_rates
from benchmarks.results_md import markdown_table, write_section
from loglinear.models.linear_cross_entropy import CHUNK, linear_cross_entropy
from loglinear.runs.config import load_run_config
from loglinear.runs.memory import keep_freed_memory
from loglinear.synthetics import SyntheticDataModule
from loglinear.targets import IGNORE_INDEX

SECTION = "the fused loss: chunk size"
PRESET = ("configs/mqar_paper.yaml", ["model.d_model=16", "data.batch_size=64"])
CHUNKS = [8, 16, 32, 64, 128, 256]
ROOT = Path(__file__).resolve().parent.parent


def scored_positions(batches: int) -> list[int]:
    """Scored positions of each of the preset's first `batches` training batches."""
    cfg = load_run_config(PRESET[0], PRESET[1])
    loader = iter(SyntheticDataModule(cfg.data).train_dataloader())
    return [int((next(loader)["targets"] != IGNORE_INDEX).sum()) for _ in range(batches)]


def unfused(h: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(F.linear(h, weight).float(), targets)


def base_loss(rev: str) -> Callable:
    """`linear_cross_entropy` as commit `rev` has it, loaded from its source."""
    source = subprocess.run(["git", "show", f"{rev}:src/loglinear/models/linear_cross_entropy.py"], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(f"linear_cross_entropy_{rev}", None))
    exec(compile(source, f"{rev}:linear_cross_entropy.py", "exec"), module.__dict__)
    return module.linear_cross_entropy


def loss_and_grads(config: str, h: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor,
                   base: Callable | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """config: "unfused", "base" (`base`, at its default chunk) or a chunk size of this checkout's fused loss."""
    h, weight = h.detach().requires_grad_(), weight.detach().requires_grad_()
    if config == "unfused":
        loss = unfused(h, weight, targets)
    elif config == "base":
        loss = base(h, weight, targets)[0]
    else:
        loss = linear_cross_entropy(h, weight, targets, chunk=int(config))[0]
    loss.backward()
    return loss.detach(), h.grad, weight.grad


def relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm())


def chunk_parts(d_model: int, vocab: int, reps: int) -> list[tuple[str, float, float]]:
    """(operation, CPU seconds, FLOP) of each operation of one chunk of `linear_cross_entropy`'s forward at its
    default chunk (its backward only scales the gradients), the best of 3 means over `reps` calls."""
    gen = torch.Generator().manual_seed(1)
    h, w = torch.randn(CHUNK, d_model, generator=gen), 0.02 * torch.randn(vocab, d_model, generator=gen)
    t = torch.randint(0, vocab, (CHUNK, 1), generator=gen)
    minus_one = torch.full((CHUNK, 1), -1.0)
    logits = h @ w.T
    p = torch.softmax(logits, -1)
    g = p.clone()
    dh, dw_t = torch.empty(CHUNK, d_model), torch.zeros(d_model, vocab)
    matmul = 2 * CHUNK * vocab * d_model
    parts = [("logits: h @ weight.T", lambda: h @ w.T, matmul),
             ("softmax", lambda: torch.softmax(logits, -1), 0),
             ("the targets' probabilities (gather)", lambda: p.gather(1, t), 0),
             ("p - onehot (scatter_add_)", lambda: g.scatter_add_(1, t, minus_one), 0),
             ("grad h: g @ weight", lambda: torch.mm(g, w, out=dh), matmul),
             ("grad weight, transposed: addmm_(h.T, g)", lambda: dw_t.addmm_(h.T, g), matmul)]
    timed = []
    for name, fn, flop in parts:
        fn()
        means = []
        for _ in range(3):
            start = time.process_time()
            for _ in range(reps):
                fn()
            means.append((time.process_time() - start) / reps)
        timed.append((name, min(means), flop))
    return timed


def label(config: str, rev: str | None) -> str:
    if config == "unfused":
        return "unfused"
    if config == "base":
        return f"fused at {rev}, its default chunk"
    return f"fused, chunk {config}" + (" (default)" if int(config) == CHUNK else "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=20, help="training batches of the preset timed per repeat")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="4 batches, 1 repeat; prints only (no RESULTS.md)")
    parser.add_argument("--base", help="a commit whose fused loss (at its default chunk) is timed beside")
    a = parser.parse_args()
    base = base_loss(a.base) if a.base else None
    batches, repeats, calls = (4, 1, 20) if a.quick else (a.batches, a.repeats, 200)
    keep_freed_memory()
    d_model, vocab = 16, 8192
    counts = scored_positions(batches)
    gen = torch.Generator().manual_seed(0)
    inputs = [(torch.randn(n, d_model, generator=gen), torch.randint(0, vocab, (n,), generator=gen)) for n in counts]
    weight = 0.02 * torch.randn(vocab, d_model, generator=gen)
    configs = ["unfused", *(["base"] if base else []), *map(str, CHUNKS)]

    errors = {c: [0.0, 0.0, 0.0] for c in configs}
    for h, targets in inputs:
        reference = loss_and_grads("unfused", h, weight, targets)
        for c in configs:
            got = loss_and_grads(c, h, weight, targets, base)
            errors[c] = [max(e, relative(x, r)) for e, x, r in zip(errors[c], got, reference, strict=True)]

    seconds: dict[str, list[float]] = {c: [] for c in configs}
    load_before = load_average()
    for _ in range(repeats):
        for c in configs:
            start = time.process_time()
            for h, targets in inputs:
                loss_and_grads(c, h, weight, targets, base)
            seconds[c].append((time.process_time() - start) / batches)
    load_after = load_average()

    unfused_s = statistics.median(seconds["unfused"])
    rows = [[label(c, a.base), f"{1000 * statistics.median(s):.1f}", f"{1000 * min(s):.1f}-{1000 * max(s):.1f}",
             f"{unfused_s / statistics.median(s):.2f}x", *(f"{e:.1e}" for e in errors[c])]
            for c, s in seconds.items()]
    body = (f"The loss and the LM head alone, forward + backward, per training batch of the paper's MQAR preset (batch "
            f"64, d_model 16, vocabulary 8,192; the preset's first {batches} training batches: "
            f"{min(counts)}-{max(counts)} scored positions, mean {statistics.fmean(counts):.0f}), "
            f"{torch.get_num_threads()} thread, CPU time of the process, {repeats} interleaved repeats: median "
            f"(range). Load average {load_before} before, {load_after} after. The error columns: the largest relative "
            f"norm of the difference from the unfused form over the batches, float32.\n\n"
            + markdown_table(["loss", "ms per batch", "range", "unfused / this", "loss error", "grad h error",
                              "grad weight error"], rows).rstrip())
    medians = {c: statistics.median(s) for c, s in seconds.items() if c not in ("unfused", "base")}
    fastest, default = min(medians, key=medians.get), str(CHUNK)
    overlap = min(seconds[default]) <= max(seconds[fastest])
    body += (f"\n\nAt its default chunk the fused loss takes {1000 * medians[default]:.1f} ms per batch against the "
             f"unfused form's {1000 * unfused_s:.1f} ({medians[default] / unfused_s:.0%} of it). The fastest chunk "
             f"here is {fastest} ({1000 * medians[fastest]:.1f} ms); the default's repeats "
             f"{'overlap' if overlap else 'do not overlap'} its range.")
    if base:
        ratios = [b / d for b, d in zip(seconds["base"], seconds[default], strict=True)]
        body += (f" The fused loss of {a.base} takes {1000 * statistics.median(seconds['base']):.1f} ms: this "
                 f"checkout's default is {statistics.median(ratios):.2f}x as fast (per repeat, "
                 f"{min(ratios):.2f}x-{max(ratios):.2f}x).")
    sgemm, _ = core_rates()
    parts = chunk_parts(d_model, vocab, calls)
    total = sum(p[1] for p in parts)
    rows = [[name, f"{1e6 * sec:.0f}", f"{sec / total:.0%}", f"{flop / sec / 1e9:.0f}" if flop else "-"]
            for name, sec, flop in parts]
    matmuls = sum(sec for _, sec, flop in parts if flop)
    rates = [flop / sec / 1e9 for _, sec, flop in parts if flop]
    body += (f"\n\nOne chunk of {CHUNK} positions, operation by operation (the best of 3 means of "
             f"{calls} calls; the same shapes; one thread's sgemm rate at 1024^3 in the same process: "
             f"{sgemm / 1e9:.0f} GFLOP/s):\n\n"
             + markdown_table(["operation", "CPU us", "share", "GFLOP/s"], rows).rstrip()
             + f"\n\nThe three matmuls, each with a dimension of {d_model}, take {matmuls / total:.0%} of the chunk at "
             f"{min(rates):.0f}-{max(rates):.0f} GFLOP/s; "
             f"at the sgemm rate they would take {1e6 * 3 * parts[0][2] / sgemm:.0f} us of the chunk's "
             f"{1e6 * total:.0f}.")
    print(body)
    if not a.quick:
        print(f"\nwritten to {write_section(SECTION, body)}")


if __name__ == "__main__":
    main()
