"""`loglinear doctor`: the versions, the C++ compiler torch.compile needs on the CPU, the devices, the fused
kernels' self-check run now (kernels/selfcheck.py; its verdicts and its seconds), which implementation
`impl="auto"` picks on each device, the known faults that stand there and the records of checks on that GPU kind
(kernels/verified_gpus.py)."""

from __future__ import annotations

import os
import platform
import signal
import subprocess
import sys
import time
from collections.abc import Callable

import torch

from loglinear.kernels.api import resolve_impl
from loglinear.kernels.cpp_compiler import cpp_compiler
from loglinear.kernels.impls import triton_available
from loglinear.kernels.selfcheck import (
    CACHE_ENV,
    MODE_ENV,
    cache_dir,
    fault_on,
    mode_of,
    package_version,
    verdict,
    versions,
)
from loglinear.kernels.variant import Variant
from loglinear.kernels.verified_gpus import GpuKind, dtype_name, lifting_record, no_record

CUDA_DTYPES = (torch.float32, torch.bfloat16)
"""The dtypes checked on a CUDA device: float32, and bf16 (what bf16-mixed training, the GPU default, feeds in)."""


def doctor_command() -> int:
    """`loglinear doctor`: the report on stdout; exit status 0 when every check passed (or none could run), 1 when
    one failed or its verdict could not be stored, 2 for an unknown LOGLINEAR_SELFCHECK (one line on stderr).

    Without a CUDA device the kernels run in Triton's interpreter, which Triton reads when its own modules load
    (torch may have loaded them already): unless it is set, the check runs in a new process with it set. That
    process has a session of its own, so Ctrl-C reaches it once, through this one: it says it was interrupted
    (one line, exit 130) and this process returns its status."""
    try:
        mode_of()
    except ValueError as e:
        print(f"loglinear doctor: {e}", file=sys.stderr)
        return 2
    if not torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1":
        env = {**os.environ, "TRITON_INTERPRET": "1"}
        child = subprocess.Popen([sys.executable, "-m", "loglinear", "doctor"], env=env, start_new_session=True)
        try:
            return child.wait()
        except KeyboardInterrupt:
            child.send_signal(signal.SIGINT)
            return child.wait()
    return 0 if run_doctor() else 1


def run_doctor(emit: Callable[[str], None] = print) -> bool:
    """Report line by line through `emit`; True when every self-check run passed (or none could run).

    Without a CUDA device the check runs on the CPU in Triton's interpreter (TRITON_INTERPRET=1 must be set
    before the kernels are imported; `loglinear doctor` does so), in float32.
    """
    found = {**versions(), "lightning": package_version("lightning")}
    emit(f"Python {platform.python_version()}, " + ", ".join(
        f"{name} {found[name] or 'not installed'}" for name in ("torch", "triton", "lightning", "loglinear")))
    emit(f"self-check mode: {mode_of()} ({MODE_ENV}); verdicts stored in {cache_dir()} ({CACHE_ENV})")
    compiler = cpp_compiler()
    emit(f"C++ compiler for torch.compile on the CPU (train.compile): {compiler}" if compiler else
         "C++ compiler for torch.compile on the CPU (train.compile): none found (install g++ or set CXX); "
         "train.compile=true fails on the CPU")
    cpu = resolve_impl("auto", torch.zeros(1, 1, 1, 1)).name
    if not triton_available():
        emit(f"triton is not installed: nothing to check; auto uses {cpu} on the CPU and on any CUDA device")
        return True
    if not torch.cuda.is_available():
        well = _check(torch.device("cpu"), (torch.float32,), emit)
        emit(f"no CUDA device: auto uses {cpu}")
        return well
    emit(f"cpu: auto uses {cpu}")
    well = True
    for index in range(torch.cuda.device_count()):
        device = torch.device("cuda", index)
        major, minor = torch.cuda.get_device_capability(device)
        emit(f"{device}: {torch.cuda.get_device_name(device)}, compute capability {major}.{minor}")
        well = _check(device, CUDA_DTYPES, emit) and well
        kind = GpuKind.of(device, versions()["triton"])
        for dtype in CUDA_DTYPES:
            picked = resolve_impl("auto", torch.zeros(1, 1, 1, 1, device=device, dtype=dtype)).name
            emit(f"{device}: auto uses {picked} for {dtype_name(dtype)}")
            found = lifting_record(kind, dtype)
            emit(f"{device}: {dtype_name(dtype)} on this GPU kind: " + (
                f"verified by the check of {found.date} ({found.logs})" if found else no_record(kind, dtype)))
            for variant in Variant:
                refused = fault_on(device, variant, dtype)
                if refused is not None:
                    emit(f"{device}: {variant.value} in {dtype_name(dtype)} refused, auto uses chunk there: {refused}")
    return well


def _check(device: torch.device, dtypes: tuple[torch.dtype, ...], emit: Callable[[str], None]) -> bool:
    """The self-check of `device` in each dtype, run now (and stored); True when all passed and were stored."""
    well = True
    for dtype in dtypes:
        started = time.monotonic()
        found = verdict(device, dtype, "force")
        where = f"{found.key['device']}, {dtype_name(dtype)}"
        took = f"{time.monotonic() - started:.0f} s"
        stored = (f"stored in {found.path}" if found.path else
                  f"NOT stored: {cache_dir()} cannot be written, so every run checks again ({CACHE_ENV} moves it)")
        if found.status == "passed":
            emit(f"self-check on {where}: passed (closest: {found.closest}); {stored}; took {took}")
        else:
            emit(f"self-check on {where}: FAILED: {found.failure}; {stored}; took {took}")
        well = well and found.status == "passed" and found.path is not None
    return well
