"""Which fused-kernel call faults on this GPU: each case (variant, shape, dtype, forward or forward+backward) in a
child process of its own, so that an illegal memory access, which leaves a process's CUDA context unusable, is
pinned to its case and the next case still runs. With `--sanitizer` (and `compute-sanitizer` on the PATH) each
child runs under its memory checker, which names the kernel and the address of a bad access.

    python3 -m benchmarks.fault_probe                      # CUDA: every case at T=1024, a table of outcomes
                                                           # (without a CUDA device: exit 2, --smoke included)
    python3 -m benchmarks.fault_probe --dtype bf16         # the bf16 cases only (where faults were seen)
    python3 -m benchmarks.fault_probe --sanitize-failures  # then each failing case again under compute-sanitizer
    python3 -m benchmarks.fault_probe --sanitizer --T 256  # each case under compute-sanitizer (slow)
    python3 -m benchmarks.fault_probe --case mamba2 paper bf16 backward --T 1024   # one case, in this process
    TRITON_INTERPRET=1 python3 -m benchmarks.fault_probe --case gdn mqar fp32 backward --T 80 --device cpu --smoke
                                                           # the script itself on tiny shapes, on the CPU

Exit status 0 when every case ran, 1 when one failed, 2 for a bad argument.
"""

from __future__ import annotations

import argparse
import itertools
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from loglinear.checks import int_option

VARIANTS = ("mamba2", "gdn")
SHAPE_NAMES = ("paper", "mqar")
DTYPES = ("fp32", "bf16")
PASSES = ("forward", "backward")
CHILD_TIMEOUT_S = 600


def run_case(variant: str, shape_name: str, dtype_name: str, passes: str, T: int, device_name: str = "cuda",
             smoke: bool = False) -> None:
    """One call of the fused kernels, synchronised, past the self-check and the refusals by version (kernels/
    triton_limits.py): a refused combination is probed too, since why it fails is what a probe is for. `smoke`:
    the shape's tiny stand-in (benchmarks/kernel_inputs.py), to check the script rather than the GPU."""
    import torch

    from benchmarks.kernel_inputs import CHUNK, SHAPES, SMOKE_SHAPES, make_base
    from loglinear.kernels import value_checks
    from loglinear.kernels.impls import run_impl

    device = torch.device(device_name)
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype_name]
    base = make_base((SMOKE_SHAPES if smoke else SHAPES)[(variant, shape_name)], T, variant == "gdn", dtype, device)
    grad = passes == "backward"
    leaves = {n: None if x is None else x.detach().clone().requires_grad_(grad) for n, x in base.items()}
    with value_checks(False), torch.set_grad_enabled(grad):
        o, _ = run_impl("triton", *leaves.values(), chunk_size=CHUNK)
        if grad:
            o.float().sum().backward()
    if device.type == "cuda":
        torch.cuda.synchronize()


def case_argv(case: tuple[str, str, str, str], T: int, smoke: bool) -> list[str]:
    """The command that runs one case in a process of its own."""
    argv = [sys.executable, "-m", "benchmarks.fault_probe", "--case", *case, "--T", str(T)]
    return [*argv, "--smoke"] if smoke else argv


def probe(case: tuple[str, str, str, str], T: int, sanitizer: bool, smoke: bool) -> tuple[str, float, str]:
    """(outcome, seconds, the child's last lines) of one case in a child process."""
    argv = case_argv(case, T, smoke)
    if sanitizer:
        argv = ["compute-sanitizer", "--tool", "memcheck", "--print-limit", "3", "--error-exitcode", "99", *argv]
    started = time.monotonic()
    env = dict(os.environ, CUDA_LAUNCH_BLOCKING="1")  # a fault is raised at the launch that made it
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S, env=env)
    except subprocess.TimeoutExpired:
        return f"did not finish in {CHILD_TIMEOUT_S} s", time.monotonic() - started, ""
    text = (done.stdout + done.stderr).strip().splitlines()
    outcome = "ok" if done.returncode == 0 else f"exit {done.returncode}"
    return outcome, time.monotonic() - started, " / ".join(line.strip() for line in text[-6:])


def sanitizer_report(case: tuple[str, str, str, str], T: int, smoke: bool) -> str:
    """compute-sanitizer memcheck's first errors for one case (the kernel and the address of a bad access)."""
    argv = ["compute-sanitizer", "--tool", "memcheck", "--print-limit", "3", "--error-exitcode", "99",
            *case_argv(case, T, smoke)]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S,
                              env=dict(os.environ, CUDA_LAUNCH_BLOCKING="1"))
    except subprocess.TimeoutExpired:
        return f"compute-sanitizer did not finish in {CHILD_TIMEOUT_S} s"
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.startswith("=========")]
    return f"exit {done.returncode}\n" + "\n".join(lines[:40])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--T", type=int_option(1), default=1024, help="tokens per sequence (default 1024)")
    parser.add_argument("--sanitizer", action="store_true", help="run each case under compute-sanitizer memcheck")
    parser.add_argument("--sanitize-failures", action="store_true",
                        help="after the table, run each failing case again under compute-sanitizer memcheck")
    parser.add_argument("--jobs", type=int, default=min(8, os.cpu_count() or 1),
                        help="cases at a time, each its own process (default: min(8, cores)); compiling dominates")
    parser.add_argument("--case", nargs=4, metavar=("VARIANT", "SHAPE", "DTYPE", "PASSES"),
                        help=f"one case in this process: {VARIANTS} {SHAPE_NAMES} {DTYPES} {PASSES}")
    parser.add_argument("--device", default="cuda",
                        help="with --case: the device (cpu: Triton's interpreter, TRITON_INTERPRET=1)")
    parser.add_argument("--smoke", action="store_true",
                        help="tiny shapes (1 sequence, 2 heads): checks the script, e.g. on the CPU, not the GPU")
    parser.add_argument("--dtype", choices=DTYPES, help="only the cases in this dtype (default: every dtype)")
    args = parser.parse_args()
    import torch

    if args.case:
        variant, shape_name, dtype_name, passes = args.case
        for value, valid in zip(args.case, (VARIANTS, SHAPE_NAMES, DTYPES, PASSES), strict=True):
            if value not in valid:
                parser.error(f"--case: {value!r} is not one of {', '.join(valid)}")
        try:
            device = torch.device(args.device)
        except (RuntimeError, ValueError):
            parser.error(f"--device: {args.device!r} is not a device (cpu, cuda or cuda:N)")
        if device.type == "cuda" and not torch.cuda.is_available():
            parser.error(f"--device {args.device}: no CUDA device here (--device cpu with TRITON_INTERPRET=1 runs "
                         "the kernels in Triton's interpreter)")
        run_case(variant, shape_name, dtype_name, passes, args.T, args.device, args.smoke)
        return
    if args.jobs < 1:
        parser.error(f"--jobs must be >= 1, got {args.jobs}")
    if (args.sanitizer or args.sanitize_failures) and shutil.which("compute-sanitizer") is None:
        parser.error("--sanitizer/--sanitize-failures: compute-sanitizer is not on the PATH")
    if not torch.cuda.is_available():
        parser.error("the table of cases needs a CUDA device, and none is here (--smoke included: it shrinks the "
                     "shapes, not the device); one case on the CPU: --case ... --device cpu --smoke with "
                     "TRITON_INTERPRET=1")
    print(f"T={args.T}{', tiny shapes' if args.smoke else ''}"
          f"{', under compute-sanitizer memcheck' if args.sanitizer else ''}; each case in its own process, "
          f"{args.jobs} at a time")
    print("| variant | shape | dtype | passes | outcome | s | last lines |\n|---|---|---|---|---|---|---|", flush=True)
    cases = list(itertools.product(VARIANTS, SHAPE_NAMES, (args.dtype,) if args.dtype else DTYPES, PASSES))
    failing = []
    with ThreadPoolExecutor(args.jobs) as pool:
        outcomes = pool.map(lambda c: probe(c, args.T, args.sanitizer, args.smoke), cases)
        for case, (outcome, seconds, tail) in zip(cases, outcomes, strict=True):
            print(f"| {' | '.join(case)} | {outcome} | {seconds:.0f} | {tail if outcome != 'ok' else ''} |", flush=True)
            if outcome != "ok":
                failing.append(case)
    if args.sanitize_failures:
        for case in failing:
            report = sanitizer_report(case, args.T, args.smoke)
            print(f"\n{' '.join(case)} under compute-sanitizer memcheck:\n{report}", flush=True)
    if failing:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
