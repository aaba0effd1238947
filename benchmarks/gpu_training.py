"""GPU training end to end: every mixer on configs/mqar_paper_256.yaml with `model.impl=auto` (on CUDA the fused
Triton kernels) and with `model.impl=chunk` (the chunkwise torch path), same seed, same data.

    python3 -m benchmarks.gpu_training                      # CUDA: writes its section of RESULTS.md
    python3 -m benchmarks.gpu_training --mixers mamba2 gated_deltanet   # a subset: its own section
    python3 -m benchmarks.gpu_training --quick --steps 20   # tiny data, any device, print only (CPU: about 1 min)
    python3 -m benchmarks.gpu_training --compile            # compiled (train.compile=true); --cuda-graphs: captured too

Each run is the real training path, `loglinear.runs.train.train` on the preset with overrides
(model=model/<mixer>.yaml, model.d_model, model.impl, train.precision=auto: bf16-mixed on CUDA,
train.max_steps, warmup a tenth of the steps, no early stopping, a validation on one batch every
VAL_EVERY steps, wandb off), in this process, one run after another. What is read from each run:
- the training loss from its metrics.csv (logged at every validation, every VAL_EVERY = 25 steps or a
  tenth of a shorter run: Lightning logs every min(50, train.val_every) steps), each a single batch's
  loss at that step;
- peak GPU memory from its result.json (`peak_memory_bytes`, torch.cuda.max_memory_allocated over the run);
- steps/s from a callback: the wall time from the end of one optimizer step to the end of the next
  (data, forward, backward, update; the GPU synchronised at each step end, which costs little as the
  training step already reads its loss back to check it is finite), summed over the steps after the
  first `--skip` (10: the first step compiles the Triton kernels; later ones warm the allocator and
  caches), leaving out each step that follows a validation (and its checkpoint).

Do the loss curves agree? `max |d|` is the largest |loss_auto - loss_chunk| over the logged steps,
`rel` that over the mean chunk loss. Both runs train in bf16-mixed on CUDA, so they differ by rounding
(the kernels: float32 accumulation, tf32 dots; chunk: autocast bf16 matmuls), and a difference of
rounding grows over the steps of training. The yardstick is rounding of the same kind, measured here:
a third run, chunk in float32 (`32-true`), and `ref` = max |loss_chunk(bf16) - loss_chunk(fp32)|. The
curves agree when max |d| <= max(ref, ROUNDING_FLOOR x mean loss): swapping the operator moves the
loss no more than swapping the precision does; the floor, 2^-7 (twice bf16's unit roundoff), keeps a
reference that is small by chance from failing a run. This checks the training path (autocast around
the kernels, their backward in a real optimizer loop), not the kernels' exactness, which
tests/kernels/test_fused_gpu.py checks; attention has no operator to swap (auto and chunk are one
computation), so its row shows run-to-run GPU nondeterminism. On a CPU both runs are float32 and
`auto` is `chunk` (the reference run is skipped), so the smoke run only exercises the script.

Time on an H100 (an estimate, not a measurement): 5 mixers x 3 runs x 300 steps = 4,500 steps, 2 min
at the 25 ms a step the mqar_paper sweep's header assumes at d_model 64 (the chunk runs may be slower:
more kernel launches); start-up, validations and the final test about 5 s a run, 1.3 min; Triton's
compilation on the first use of each kernel family (forward, backward, inference forward) perhaps
1 min each for Mamba-2 and the delta rule: about 6 min in all. The section is rewritten after each
mixer (marked partial until the last), so a run stopped early keeps what it measured; `--time-limit
S` starts no mixer that would end more than S seconds after the start if it took as long as the one
before it. A run with `--mixers` writes a section of its own.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import lightning as L
import torch

from benchmarks.results_md import markdown_table, write_section
from benchmarks.time_limit import TimeLimit
from loglinear.models import MIXERS
from loglinear.runs.config import compile_refusal, load_run_config
from loglinear.runs.metrics_rows import METRICS, read_rows
from loglinear.runs.train import train

SECTION = "GPU training: impl auto vs chunk"
PRESET = "configs/mqar_paper_256.yaml"
VAL_EVERY = 25
"""Steps between validations, and so between logged losses (a tenth of the steps in shorter runs)."""
ROUNDING_FLOOR = 2.0**-7
QUICK_DATA = ["data.batch_size=32", "data.task_args.seq_len=64", "data.task_args.num_kv_pairs=[4,8]"]


class StepTimer(L.Callback):
    """Seconds and count of the optimizer steps after the first `skip`, each timed from the end of the step
    before it; a step that follows a validation is left out."""

    def __init__(self, skip: int) -> None:
        self.skip = skip
        self.seconds = 0.0
        self.steps = 0
        self._last: float | None = None

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, *args: object) -> None:
        if pl_module.device.type == "cuda":
            torch.cuda.synchronize(pl_module.device)
        now = time.perf_counter()
        if self._last is not None and trainer.global_step > self.skip:
            self.seconds += now - self._last
            self.steps += 1
        self._last = now

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._last = None

    @property
    def steps_per_s(self) -> float | None:
        return self.steps / self.seconds if self.steps else None


def val_every(steps: int) -> int:
    return max(1, min(VAL_EVERY, steps // 10))


def run_once(mixer: str, impl: str, precision: str, args: argparse.Namespace, root: Path) -> dict:
    """Train one run (`precision` a train.precision value); its logged training losses by step, steps/s and
    peak GPU memory."""
    out = root / f"{mixer}-{impl}-{precision}"
    overrides = [
        f"model=model/{mixer}.yaml", f"model.d_model={args.d_model}", f"model.impl={impl}",
        f"train.precision={precision}", f"train.max_steps={args.steps}",
        f"train.warmup_steps={max(1, args.steps // 10)}", f"train.val_every={val_every(args.steps)}",
        "train.early_stop_threshold=null", "train.seed=0",
        "logger.wandb.mode=disabled", "logger.progress=false", f"out_dir={out}",
        *(QUICK_DATA if args.quick else []), *(["train.compile=true"] if args.compile else []),
        *(["train.cuda_graphs=true"] if args.cuda_graphs else []),
    ]
    cfg = load_run_config(PRESET, overrides)
    batch = cfg.data.batch_size
    cfg = load_run_config(PRESET, [*overrides, f"data.val_size={batch}", f"data.test_size={batch}"])
    timer = StepTimer(min(args.skip, args.steps // 2))
    started = time.perf_counter()
    result = train(cfg, callbacks=[timer])
    if result["status"] != "max_steps":
        raise RuntimeError(f"{out.name}: the run ended {result['status']}: {result.get('error', '')}")
    losses = {int(r["step"]): float(r["train/loss"]) for r in read_rows(out / METRICS) if "train/loss" in r}
    print(f"  {out.name}: {time.perf_counter() - started:.0f} s, {timer.steps_per_s or float('nan'):.2f} steps/s "
          f"over {timer.steps} steps, final logged loss {losses[max(losses)]:.4f}", flush=True)
    return {"losses": losses, "steps_per_s": timer.steps_per_s, "peak": result["peak_memory_bytes"]}


def max_gap(a: dict[int, float], b: dict[int, float]) -> float:
    steps = sorted(a.keys() & b.keys())
    if not steps:
        raise RuntimeError("the two runs logged no common step")
    return max(abs(a[s] - b[s]) for s in steps)


def compare(mixer: str, auto: dict, chunk: dict, reference: dict | None) -> list[object]:
    """One table row: final losses, the gap auto - chunk, the rounding yardstick, the verdict, speed, memory."""
    steps = sorted(auto["losses"].keys() & chunk["losses"].keys())
    scale = statistics.fmean(abs(chunk["losses"][s]) for s in steps)
    gap = max_gap(auto["losses"], chunk["losses"])
    ref = max_gap(chunk["losses"], reference["losses"]) if reference else None
    tolerance = max(ref or 0.0, ROUNDING_FLOOR * scale)
    speedup = auto["steps_per_s"] / chunk["steps_per_s"] if auto["steps_per_s"] and chunk["steps_per_s"] else None
    return [
        f"`{mixer}`", f"{auto['losses'][steps[-1]]:.3f} / {chunk['losses'][steps[-1]]:.3f}",
        f"{gap:.4f} ({len(steps)} steps)", f"{gap / scale:.2%}", "n/a" if ref is None else f"{ref:.4f}",
        f"{tolerance:.4f}", "yes" if gap <= tolerance else "**no**",
        fmt_rate(auto["steps_per_s"]), fmt_rate(chunk["steps_per_s"]), "n/a" if speedup is None else f"{speedup:.2f}x",
        fmt_mib(auto["peak"]), fmt_mib(chunk["peak"]),
    ]


def fmt_rate(rate: float | None) -> str:
    return "n/a" if rate is None else f"{rate:.1f}"


def fmt_mib(peak: int | None) -> str:
    return "n/a (CPU)" if peak is None else f"{peak / 2**20:.0f}"


HEADER = ["mixer", "final loss auto / chunk", "max abs d auto-chunk", "rel", "ref: chunk bf16-fp32",
          "tolerance", "agree", "steps/s auto", "steps/s chunk", "auto speed-up", "peak MiB auto", "peak MiB chunk"]


def describe(args: argparse.Namespace, precision: str, done: int, total: int) -> str:
    partial = "" if done == total else \
        f"**Partial: {done} of {total} mixers measured (stopped early: --time-limit, or killed).**\n\n"
    return (
        f"{partial}`{PRESET}`, d_model {args.d_model}, {args.steps} steps, "
        f"{mode(args)}, seed 0, precision {precision}, "
        f"torch {torch.__version__}, triton {triton_version()}. Loss logged every {val_every(args.steps)} steps; "
        f"steps/s over the steps after the first {min(args.skip, args.steps // 2)}, those after a validation left "
        f"out; peak memory torch.cuda.max_memory_allocated. The curves agree when max |d| <= max(ref, 2^-7 x mean "
        f"loss) (benchmarks/gpu_training.py's docstring says why).\n\n"
    )


def mode(args: argparse.Namespace) -> str:
    if args.cuda_graphs:
        return "compiled and captured as CUDA graphs (train.compile=true, train.cuda_graphs=true)"
    return "compiled (train.compile=true)" if args.compile else "eager"


def triton_version() -> str:
    try:
        import triton
    except ImportError:
        return "not installed"
    return triton.__version__


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=300, help="training steps of every run")
    parser.add_argument("--mixers", nargs="+", default=list(MIXERS.names()), choices=list(MIXERS.names()))
    parser.add_argument("--d-model", type=int, default=64)
    parser.add_argument("--skip", type=int, default=10, help="first steps left out of steps/s (at most half)")
    parser.add_argument("--quick", action="store_true", help="tiny data (batch 32, T 64), print only")
    parser.add_argument("--compile", action="store_true", help="every run with train.compile=true (its own section)")
    parser.add_argument("--cuda-graphs", action="store_true",
                        help="every run compiled and captured as CUDA graphs (train.cuda_graphs=true; implies "
                             "--compile; CUDA only; its own section)")
    parser.add_argument("--time-limit", type=float, metavar="S",
                        help="start no mixer that would end more than S seconds after the start, if it took as "
                             "long as the mixer before it")
    args = parser.parse_args()
    limit = TimeLimit(args.time_limit)
    if args.steps < 10:
        parser.error("--steps must be at least 10 (a loss logged every tenth of the steps)")
    cuda = torch.cuda.is_available()
    if args.cuda_graphs and not cuda:
        parser.error("--cuda-graphs needs a CUDA device (CUDA graphs capture GPU work)")
    args.compile = args.compile or args.cuda_graphs
    precision = "bf16-mixed" if cuda else "32-true"  # what the runs' train.precision=auto picks
    write = cuda and not args.quick
    if not cuda:
        print("no CUDA device: impl auto is chunk here and both runs are float32; printing only", flush=True)
    section = SECTION if args.mixers == list(MIXERS.names()) else f"{SECTION} ({', '.join(args.mixers)})"
    if args.compile or args.d_model != 64:
        section += f", d_model {args.d_model}" + (", compiled" if args.compile else "")
        section += ", CUDA graphs" if args.cuda_graphs else ""
    rows: list[list[object]] = []
    with tempfile.TemporaryDirectory(prefix="gpu_training_") as tmp:
        for mixer in args.mixers:
            if not limit.fits():
                print(f"--time-limit {args.time_limit:g}: {mixer} and the mixers after it not measured", flush=True)
                break
            print(f"{mixer}:", flush=True)
            refused = compile_refusal(mixer) if args.compile else None
            if refused:
                print(f"{mixer}: not compiled ({refused})", flush=True)
                rows.append([mixer, f"not compiled: {refused}", *["-"] * (len(HEADER) - 2)])
                limit.done()
                continue
            auto = run_once(mixer, "auto", "auto", args, Path(tmp))
            chunk = run_once(mixer, "chunk", "auto", args, Path(tmp))
            reference = run_once(mixer, "chunk", "32-true", args, Path(tmp)) if cuda else None
            rows.append(compare(mixer, auto, chunk, reference))
            body = describe(args, precision, len(rows), len(args.mixers)) + markdown_table(HEADER, rows)
            if write:
                write_section(section, body)
            limit.done()
    body = describe(args, precision, len(rows), len(args.mixers)) + markdown_table(HEADER, rows)
    if write:
        write_section(section, body)
    print(body)
    if write:
        print(f"wrote section {section!r} of benchmarks/RESULTS.md")


if __name__ == "__main__":
    main()
