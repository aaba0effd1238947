"""Every launch the fused kernels make compiles for an H100 (sm_90a) and an A100 (sm_80) and fits the shared
memory of a block there, with no GPU present.

The operator runs forward and backward over the variants that select different code (Mamba-2 and the
delta rule, lambda given or None, the paper's and MQAR's head dims, bf16 / fp16 / fp32, chunk sizes,
initial states); the launches it makes are recorded, then compiled by Triton down to machine code in a
process without the interpreter (tests/kernels/offline.py), which also reads the shared memory each
compiled kernel asks for. The interpreter tests check what the kernels compute; this checks that a GPU
build accepts them and that they can launch. The cases include the largest blocks the kernels use
(kernels/triton_limits.py: K = MAX_K of each variant, chunks of MAX_CHUNK, the widest block of V rows,
bf16 and float32): the blocks, not K and V themselves, are what a compiled kernel's size depends on.

Compiling a launch takes seconds of CPU, the more the larger its blocks (the launches of the three
largest-block cases took 127 CPU seconds for sm_80), and there are 66 distinct ones per architecture.
The default run compiles MQAR's cases, which launch every kernel, for the H100 with a launch its
compiler must reject, and for the A100 a launch over its shared memory alone; MQAR's cases for the A100,
and every case's launches, each kernel in every mode and the largest blocks, for both, are compiled by the
`slow` tests (CI runs them). The compiled kernels are kept in pytest's cache
folder, where Triton finds each again by a digest of its source, target and options: a later run
compiles only what changed.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from loglinear.kernels import LogLinearState, log_linear_attn, num_levels
from loglinear.kernels.triton_limits import MAX_CHUNK, MAX_K, SHARED_MEMORY
from loglinear.kernels.variant import Variant

from .. import child_process
from ..slow_cases import default_and_slow
from .helpers import make_inputs

pytest.importorskip("triton")
from .offline import Launch, distinct, recorded_launches  # noqa: E402  (after the importorskip)

# one worker under pytest-xdist: the recorded launches and the compiles (module fixtures) are made once
pytestmark = pytest.mark.xdist_group("fused_compile")
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
KERNELS = {"intra.intra_fwd_kernel", "intra.intra_bwd_kernel", "scan.scan_fwd_kernel", "scan.scan_bwd_kernel",
           "delta_prep._delta_prep_fwd_kernel", "delta_prep._delta_prep_bwd_kernel"}
COMPILE_CPU_S = 3600.0
"""The guard on one compiling process (tests/child_process.py), far above its work: 66 launches of a few CPU
seconds each."""


@dataclass(frozen=True)
class Case:
    delta: bool
    K: int
    V: int
    HK: int  # q/k heads of H = 2
    levels: bool
    dtype: torch.dtype
    chunk: int = 64
    initial_state: bool = False


CASES = [
    Case(False, 128, 64, 1, True, torch.bfloat16),  # the paper's Mamba-2 heads, q/k shared
    Case(False, 128, 64, 1, False, torch.bfloat16),
    Case(False, 16, 16, 1, True, torch.bfloat16, initial_state=True),  # MQAR
    Case(False, 16, 16, 2, True, torch.float32),
    Case(False, 16, 16, 2, False, torch.float32),
    Case(False, 16, 16, 1, True, torch.float16, chunk=16),
    Case(True, 64, 64, 2, True, torch.bfloat16),  # the paper's Gated DeltaNet heads
    Case(True, 64, 64, 2, False, torch.bfloat16),
    Case(True, 16, 16, 2, True, torch.bfloat16, initial_state=True),
    Case(True, 16, 16, 2, True, torch.float32),
    Case(True, 16, 16, 2, False, torch.float32),
    Case(True, 16, 16, 1, True, torch.bfloat16, chunk=16),
    # the largest blocks: K = MAX_K, the scan's widest V block (4096 // 16 rows at K = 16), float32
    Case(False, 128, 128, 2, True, torch.float32),
    Case(False, 16, 256, 1, True, torch.bfloat16),
    Case(True, 64, 64, 2, True, torch.float32),
]


QUICK = [CASES[2], CASES[8]]
"""MQAR's Mamba-2 and Gated DeltaNet: every kernel, small blocks that compile in seconds (the default run's)."""


def run_case(case: Case, T: int = 70) -> None:
    """Forward and backward, with the final state, of one case (T spans a ragged second chunk)."""
    H = 2
    xs = make_inputs(1, T, H, case.K, case.V, delta=case.delta, levels=case.levels, offset=5 * case.initial_state,
                     dtype=case.dtype)
    q, k = xs.q[:, :, :case.HK], xs.k[:, :, :case.HK]
    inputs = [x if x is None else x.to(DEVICE).requires_grad_(True) for x in (q, k, xs.v, xs.g, xs.lam, xs.beta)]
    state = None
    if case.initial_state:
        levels = num_levels(5) if case.levels else 1
        state = LogLinearState(torch.zeros(1, H, levels, case.V, case.K, dtype=case.dtype, device=DEVICE),
                               torch.tensor([5], device=DEVICE))
    o, final = log_linear_attn(*inputs, initial_state=state, output_final_state=True, impl="triton",
                               chunk_size=case.chunk)
    (o.float().sum() + final.levels.float().sum()).backward()


def record(cases: list[Case]) -> list[Launch]:
    with recorded_launches() as recorded:
        for case in cases:
            run_case(case)
    return recorded


@dataclass(frozen=True)
class Compiled:
    """One compiling process: its exit status, its output and each launch's outcome (`shared`, `error`)."""

    returncode: int
    output: str
    outcomes: dict[Launch, dict]

    def of(self, launch: Launch) -> dict:
        return self.outcomes[Launch.from_json(launch.to_json())]


def compile_all(launches: list[Launch], folder: Path, arch: str, cache: Path) -> Compiled:
    folder.mkdir(parents=True, exist_ok=True)
    path, report = folder / "launches.json", folder / "report.json"
    path.write_text(json.dumps([launch.to_json() for launch in launches]))
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = str(cache)
    done = child_process.run([sys.executable, "-m", "tests.kernels.offline", str(path), "--arch", arch, "--report",
                              str(report)], env=env, cpu_s=COMPILE_CPU_S)
    assert report.is_file(), f"the compiling process wrote no report (exit {done.returncode}): {done.stderr[-3000:]}"
    return Compiled(done.returncode, done.stdout + done.stderr,
                    {Launch.from_json(o["launch"]): o for o in json.loads(report.read_text())})


@pytest.fixture(scope="module")
def compiled(request, tmp_path_factory):
    """compiled(launches, arch): one compiling process per set of launches and architecture, shared by the tests;
    Triton's cache is pytest's (kept between runs), or a temporary folder without one."""
    cache = request.config.cache.mkdir("triton") if getattr(request.config, "cache", None) else (
        tmp_path_factory.mktemp("triton"))
    done: dict[tuple, Compiled] = {}

    def compiled_(launches: list[Launch], arch: str) -> Compiled:
        key = (tuple(launches), arch)
        if key not in done:
            done[key] = compile_all(launches, tmp_path_factory.mktemp(f"sm_{arch}"), arch, cache)
        return done[key]

    return compiled_


@pytest.fixture(scope="module")
def quick() -> list[Launch]:
    return record(QUICK)


@pytest.fixture(scope="module")
def launches() -> list[Launch]:
    return record(CASES)


def over_the_shared_memory(quick: list[Launch]) -> Launch:
    """Mamba-2's scan backward at K = 256 (beyond MAX_K): 167,936 bytes with Triton 3.9, over an A100's block."""
    launch = next(la for la in quick if la.kernel == "scan.scan_bwd_kernel" and dict(la.constants)["HAS_LAM"]
                  and not dict(la.constants)["MATRIX"] and dict(la.constants)["PREC"] == "tf32")
    constants = tuple((n, {"BK": 256, "BV": 16}.get(n, v)) for n, v in launch.constants)
    return Launch(launch.kernel, launch.types, constants, launch.options)


def rejected_by_the_compiler(quick: list[Launch]) -> Launch:
    """A q/k block of 4 columns: the interpreter computes it correctly, the GPU's dot refuses it."""
    launch = next(la for la in quick if la.kernel == "intra.intra_fwd_kernel")
    constants = tuple((n, 4 if n == "BK" else v) for n, v in launch.constants)
    return Launch(launch.kernel, launch.types, constants, launch.options)


def with_a_rejected_one(quick: list[Launch]) -> list[Launch]:
    return [*quick, rejected_by_the_compiler(quick)]


def test_the_cases_reach_the_largest_blocks():
    for variant in Variant:
        assert max(c.K for c in CASES if c.delta == (variant is Variant.DELTA_RULE)) == MAX_K[variant]
    assert max(c.chunk for c in CASES) == MAX_CHUNK and {torch.bfloat16, torch.float32} <= {c.dtype for c in CASES}


@pytest.mark.parametrize("arch", default_and_slow(sorted(SHARED_MEMORY), ["90a"]))
def test_mqars_launches_compile_and_fit_a_block(quick, compiled, arch):
    result = compiled(with_a_rejected_one(quick), arch)
    assert {launch.kernel for launch in quick} == KERNELS
    for launch in distinct(quick):
        outcome = result.of(launch)
        assert outcome["error"] is None, (launch, outcome["error"], result.output)
        assert outcome["shared"] <= SHARED_MEMORY[arch]


def test_a_launch_over_the_shared_memory_fails_the_check(quick, compiled):
    result = compiled([over_the_shared_memory(quick)], "80")
    assert result.returncode == 1
    assert "FAILED scan.scan_bwd_kernel" in result.output
    error = result.of(over_the_shared_memory(quick))["error"]
    assert error.startswith("MemoryError: asks for") and error.endswith("bytes of shared memory, sm_80 has 166912")


def test_a_launch_the_compiler_rejects_fails_the_check(quick, compiled):
    result = compiled(with_a_rejected_one(quick), "90a")
    assert result.returncode == 1
    assert "FAILED intra.intra_fwd_kernel" in result.output
    assert result.of(rejected_by_the_compiler(quick))["error"] is not None
    n = len(distinct(with_a_rejected_one(quick)))
    assert f"{n - 1} of {n} launches compiled for sm_90a" in result.output


@pytest.mark.slow
def test_the_cases_launch_every_kernel_in_every_mode(launches):
    assert {launch.kernel for launch in launches} == KERNELS
    modes = {(la.kernel, dict(la.constants).get("HAS_LAM"), dict(la.constants).get("PREC")) for la in launches}
    for kernel in ("intra.intra_fwd_kernel", "scan.scan_bwd_kernel"):
        assert {(kernel, lam, prec) for lam in (True, False) for prec in ("tf32", "ieee")} <= modes
    # constexprs tell compiled kernels apart: both chunk sizes stay after removing repeated launches
    assert {dict(la.constants)["C"] for la in distinct(launches) if la.kernel == "intra.intra_fwd_kernel"} == {16, 64}


@pytest.mark.slow
@pytest.mark.parametrize("arch", sorted(SHARED_MEMORY))
def test_every_launch_compiles_and_fits_a_block(launches, compiled, arch):
    result = compiled(launches, arch)
    assert result.returncode == 0, result.output
    assert f"{len(distinct(launches))} of {len(distinct(launches))} launches compiled" in result.output
