"""impl="triton" against impl="chunk" in float64 on the same GPU, at shapes larger than the CPU tests'.

Forward output, final state and every input gradient (q, k, v, g, lam, beta, initial_state.levels),
through a loss that weighs both the output and the final state. The triton run is inside
`poison_outputs()`, so an element a kernel forgets to write comes back as NaN. Inputs are fresh per
parametrisation (a seed from its id); float32 runs must match to ~1e-4, bf16 runs to ~2e-2 (relative
norm error, the reference seeing exactly the bf16-rounded inputs). Every test needs CUDA
(tests/conftest.py skips them without it); each takes seconds on an H100.

The kernels are called through `run_impl`, past the self-check and the known faults, so that every GPU kind is
tested in every dtype, refused or not (benchmarks/gpu_check.py verifies a GPU kind with these tests); a refusal's
own behaviour is tested apart. Run `pytest tests/kernels/test_fused_gpu.py -rP` to see the measured errors of the
passing tests too.
"""

from __future__ import annotations

import contextlib
import zlib
from dataclasses import dataclass

import pytest
import torch

from loglinear.kernels import LogLinearState, log_linear_attn, num_levels, resolve_impl, run_impl
from loglinear.kernels.selfcheck import SelfCheckFailed, fault_on
from loglinear.kernels.triton_limits import MAX_K
from loglinear.kernels.variant import Variant

from .helpers import make_inputs, rel_err

pytest.importorskip("triton")
from loglinear.kernels.fused.common import poison_outputs  # noqa: E402  (after the importorskip)

from .selfcheck_helpers import new_process  # noqa: E402

DEVICE = "cuda"
B, H, CHUNK = 2, 4, 64
# relative norm error bounds; bf16 gradients of g sum many terms of both signs, hence the looser bound
TOL = {torch.float32: {"default": 1e-4}, torch.bfloat16: {"default": 2e-2, "dg": 4e-2}}
LARGEST = 4.0
"""The largest elementwise error (relative to the reference's largest magnitude) may be this many times the norm
bound: a few elements computed from invalid memory are off by order 1, which the norm alone can let through."""


@dataclass(frozen=True)
class Case:
    T: int
    K: int
    V: int
    HK: int  # q/k heads (GQA when < H)
    levels: bool  # lam given (log-linear) or None (one state)
    prefix: tuple[int, ...] | None = None  # per-sequence position of an initial state (from a prefill)

    def __str__(self) -> str:
        at = "" if self.prefix is None else "-state@" + ",".join(map(str, self.prefix))
        return f"T{self.T}-K{self.K}-V{self.V}-HK{self.HK}-{'lam' if self.levels else 'lamNone'}{at}"


CASES = [
    Case(1000, 16, 16, 4, True),
    Case(2048, 64, 64, 1, True, (37, 100)),  # unaligned positions in different chunks
    Case(4095, 128, 64, 1, True),  # the paper's Mamba-2 head (state 128, head 64)
    Case(1000, 64, 128, 4, True, (37, 100)),
    Case(2048, 128, 128, 4, False, (37, 100)),
    Case(4095, 16, 64, 1, False),
    Case(1000, 128, 16, 1, True, (5, 64)),  # one sequence chunk-aligned, one not
]


@dataclass
class Problem:
    case: Case
    inputs: dict[str, torch.Tensor | None]  # on the GPU in the test dtype; q/k with HK heads
    levels0: torch.Tensor | None  # initial state levels, float32
    position: torch.Tensor | None
    w_o: torch.Tensor  # loss weights, float64 (exactly representable in the dtype of what they weigh)
    w_s: torch.Tensor


def seed_of(*parts: object) -> int:
    return zlib.crc32("/".join(map(str, parts)).encode()) % 2**31


def expand(x: torch.Tensor) -> torch.Tensor:
    """q/k (B, T, HK, K) -> (B, T, H, K): v head h reads q/k head h // (H // HK)."""
    return x.repeat_interleave(H // x.shape[2], dim=2)


def make_problem(case: Case, delta: bool, dtype: torch.dtype, seed: int, *, g_scale: float = 1.0,
                 batch: int = B) -> Problem:
    P = max(case.prefix) if case.prefix else 0
    L = num_levels(P + case.T)
    x = make_inputs(batch, case.T, H, case.K, case.V, delta=delta, levels=case.levels, offset=P, seed=seed,
                    beta_max=2.0)
    raw = dict(q=x.q[:, :, :case.HK], k=x.k[:, :, :case.HK], v=x.v, g=x.g * g_scale, lam=x.lam, beta=x.beta)
    inputs = {n: None if t is None else t.to(DEVICE, dtype).contiguous() for n, t in raw.items()}

    levels0 = position = None
    if case.prefix:
        pre = make_inputs(batch, P, H, case.K, case.V, delta=delta, levels=case.levels, offset=0, seed=seed + 1,
                          extra_levels=L - num_levels(P), beta_max=2.0)
        states = []
        for b, Pb in enumerate(case.prefix):
            q, k, v, g, lam, beta = (None if t is None else t[b:b + 1, :Pb].to(DEVICE) for t in pre.args())
            q, k = expand(q[:, :, :case.HK]), expand(k[:, :, :case.HK])
            _, s = log_linear_attn(q, k, v, g, lam, beta, impl="chunk", output_final_state=True, chunk_size=CHUNK)
            states.append(s)
        levels0 = torch.cat([s.levels for s in states]).float()  # states are float32 whatever the inputs
        position = torch.cat([s.position for s in states])

    gen = torch.Generator().manual_seed(seed + 2)
    L_out = L if case.levels else 1
    w_o = torch.randn(batch, case.T, H, case.V, generator=gen, dtype=torch.float64).to(dtype)
    w_s = torch.randn(batch, H, L_out, case.V, case.K, generator=gen, dtype=torch.float64).float()
    return Problem(case, inputs, levels0, position, w_o.double().to(DEVICE), w_s.double().to(DEVICE))


def run(p: Problem, impl: str, *, grads: bool = True) -> dict[str, torch.Tensor]:
    """o, the final state (levels, position) and the gradients of sum(w_o * o) + sum(w_s * final levels).

    impl "chunk" is the reference: float64 copies of the same (rounded) inputs, q/k expanded to H heads
    here (independently of the operator's own GQA handling). The triton run is poisoned. Both run through
    `run_impl`: no self-check, no refusal.
    """
    ref = impl == "chunk"

    def leaf(t: torch.Tensor) -> torch.Tensor:
        return (t.double() if ref else t).detach().clone().requires_grad_(grads)

    leaves = {n: leaf(t) for n, t in p.inputs.items() if t is not None}
    state = None
    if p.levels0 is not None:
        leaves["initial_state.levels"] = leaf(p.levels0)
        state = LogLinearState(leaves["initial_state.levels"], p.position.clone())
    q, k = leaves["q"], leaves["k"]
    if ref:
        q, k = expand(q), expand(k)
    with contextlib.nullcontext() if ref else poison_outputs(), torch.set_grad_enabled(grads):
        o, final = run_impl(impl, q, k, leaves["v"], leaves["g"], leaves.get("lam"), leaves.get("beta"),
                            initial_state=state, output_final_state=True, chunk_size=CHUNK)
        out = {"o": o.detach(), "final_state.levels": final.levels.detach(), "final_state.position": final.position}
        if grads:
            ((o.double() * p.w_o).sum() + (final.levels.double() * p.w_s).sum()).backward()
            out.update({f"d{n}": x.grad for n, x in leaves.items()})
    return out


def rel_norm(got: torch.Tensor, want: torch.Tensor) -> float:
    want = want.detach().double()
    return float((got.detach().double() - want).norm() / want.norm().clamp_min(1e-30))


def compare(got: dict, want: dict, dtype: torch.dtype, label: str) -> None:
    """Every entry finite and within tolerance; all failures reported at once, the errors printed."""
    tol = TOL[dtype]
    assert got.keys() == want.keys(), f"{label}: got {sorted(got)} but the reference has {sorted(want)}"
    assert torch.equal(got["final_state.position"].cpu(), want["final_state.position"].cpu()), label
    errors, failures = {}, []
    for name, w in want.items():
        if name == "final_state.position":
            continue
        x = got[name]
        if x is None or w is None:
            failures.append(f"{name}: gradient is None (triton {x is None}, reference {w is None})")
            continue
        if x.shape != w.shape:
            failures.append(f"{name}: shape {tuple(x.shape)}, reference {tuple(w.shape)}")
            continue
        if not torch.isfinite(x).all():
            bad = int((~torch.isfinite(x)).sum())
            failures.append(f"{name}: {bad} of {x.numel()} entries not finite (unwritten under poison_outputs?)")
            continue
        errors[name] = rel_norm(x, w)
        bound = tol.get(name, tol["default"])
        if not errors[name] < bound:
            failures.append(f"{name}: relative norm error {errors[name]:.2e} >= {bound:g}")
        largest = rel_err(x.double(), w.double())
        if not largest < LARGEST * bound:
            failures.append(f"{name}: largest element error {largest:.2e} >= {LARGEST * bound:g}")
    print(f"{label}: " + ", ".join(f"{n} {e:.1e}" for n, e in errors.items()))
    assert not failures, f"{label}:\n  " + "\n  ".join(failures)


# ------------------------------------------------------------------------------------------------ tests

def refused(delta: bool, dtype: torch.dtype) -> bool:
    """Whether a known fault stands for the variant and dtype on this GPU kind (no record lifts it)."""
    variant = Variant.DELTA_RULE if delta else Variant.SCALAR_DECAY
    return fault_on(torch.device(DEVICE), variant, dtype) is not None


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("case, delta", [(c, d) for c in CASES for d in (False, True)
                                         if c.K <= MAX_K[Variant.DELTA_RULE if d else Variant.SCALAR_DECAY]],
                         ids=lambda x: str(x) if isinstance(x, Case) else ("gdn" if x else "mamba2"))
def test_triton_matches_chunk(case, delta, dtype):
    p = make_problem(case, delta, dtype, seed_of(case, delta, dtype))
    got, want = run(p, "triton"), run(p, "chunk")
    assert got["o"].dtype == dtype and got["final_state.levels"].dtype == torch.float32
    compare(got, want, dtype, f"{case} {'gdn' if delta else 'mamba2'} {dtype}")


@pytest.mark.gpu
@pytest.mark.parametrize("delta", [False, True], ids=["mamba2", "gdn"])
def test_gqa_groups_are_consecutive_heads(delta):
    # HK=2 of H=4: heads 0,1 read q/k head 0 and heads 2,3 head 1 (SDPA's enable_gqa and fla's grouping)
    case = Case(1000, 64, 64, 2, True, (37, 100))
    p = make_problem(case, delta, torch.float32, seed_of("gqa", delta))
    compare(run(p, "triton"), run(p, "chunk"), torch.float32, f"{case} gqa")


@pytest.mark.gpu
@pytest.mark.parametrize("delta", [False, True], ids=["mamba2", "gdn"])
def test_forward_is_deterministic(delta):
    p = make_problem(Case(2048, 64, 128, 1, True, (37, 100)), delta, torch.bfloat16, seed_of("det-fwd", delta))
    a, b = run(p, "triton", grads=False), run(p, "triton", grads=False)
    for name in a:
        assert torch.equal(a[name], b[name]), f"{name} differs between two identical runs"


@pytest.mark.gpu
@pytest.mark.parametrize("delta", [False, True], ids=["mamba2", "gdn"])
def test_backward_is_deterministic(delta):
    p = make_problem(Case(2048, 64, 128, 1, True, (37, 100)), delta, torch.bfloat16, seed_of("det-bwd", delta))
    a, b = run(p, "triton"), run(p, "triton")
    for name in a:
        assert torch.equal(a[name], b[name]), f"{name} differs between two identical runs"


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("delta", [False, True], ids=["mamba2", "gdn"])
def test_long_sequence_strong_decays_stay_finite(delta, dtype):
    # T = 16384 (15 levels), g in (-20, 0]: in-chunk log decays reach about -640, far beyond float32's exp range
    case = Case(16384, 64, 64, 1, True)
    p = make_problem(case, delta, dtype, seed_of("long", delta, dtype), g_scale=20.0, batch=1)
    got = run(p, "triton")
    for name, x in got.items():
        assert torch.isfinite(x).all(), f"{name}: {int((~torch.isfinite(x)).sum())} non-finite entries"
    want = run(p, "chunk", grads=False)
    err = rel_norm(got["o"], want["o"])
    print(f"long {case} {dtype}: o {err:.1e}")
    assert err < TOL[dtype]["default"], f"o: relative norm error {err:.2e}"


@pytest.mark.gpu
def test_auto_picks_triton_on_cuda_after_a_passed_self_check_and_chunk_for_float64():
    q = torch.zeros(1, 4, 1, 16, device=DEVICE)
    choice = resolve_impl("auto", q)
    assert (choice.name, choice.verdict.status) == ("triton", "passed"), choice.verdict
    assert resolve_impl("auto", q.double()).name == "chunk"


@pytest.mark.gpu
@pytest.mark.parametrize("delta", [False, True], ids=["mamba2", "gdn"])
def test_a_standing_fault_refuses_the_operator_and_auto_uses_chunk(delta, monkeypatch):
    if not refused(delta, torch.bfloat16):
        pytest.skip("no known fault stands for bf16 on this GPU kind")
    new_process(monkeypatch)  # the warning not yet given in this worker
    q = torch.zeros(1, 4, 1, 16, device=DEVICE, dtype=torch.bfloat16)
    beta = torch.zeros(1, 4, 1, device=DEVICE, dtype=torch.bfloat16) if delta else None
    with pytest.warns(UserWarning, match="refused"):
        assert resolve_impl("auto", q, beta).name == "chunk"
    with pytest.raises(SelfCheckFailed, match="refused"):
        resolve_impl("triton", q, beta)
