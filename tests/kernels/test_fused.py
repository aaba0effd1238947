"""impl="triton" against the chunk path (float64): outputs, final states and every gradient.

Without a GPU these run the Triton kernels on CPU tensors in Triton's interpreter (tests/conftest.py
sets TRITON_INTERPRET=1), at small shapes. Kernel outputs start as NaN (`poison_outputs`), so an
element a kernel forgets to write shows up.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from loglinear.kernels import LogLinearState, log_linear_attn, log_linear_attn_step, num_levels
from loglinear.kernels.api import resolve_impl
from loglinear.kernels.triton_limits import MAX_K
from loglinear.kernels.variant import Variant

pytest.importorskip("triton")
from loglinear.kernels.fused.common import poison_outputs  # noqa: E402  (after the importorskip)

TOL = 2e-5  # float32 kernels against the float64 reference, relative to the reference's norm


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30))


def make(B, T, H, HK, K, V, *, delta, levels=True, offset=0, seed=0, state_levels=None):
    """float64 inputs (q/k with HK heads), and an initial state at positions `offset` (int or list) if given."""
    gen = torch.Generator().manual_seed(seed)

    def rand(*shape):
        return torch.randn(*shape, generator=gen, dtype=torch.float64)

    offsets = [offset] * B if isinstance(offset, int) else offset
    L = num_levels(max(offsets) + T)
    k = rand(B, T, HK, K)
    xs = dict(
        q=rand(B, T, HK, K) / K**0.5, k=k / k.norm(dim=-1, keepdim=True), v=rand(B, T, H, V),
        g=-torch.rand(B, T, H, generator=gen, dtype=torch.float64) * 1.5,
        lam=torch.rand(B, T, H, L, generator=gen, dtype=torch.float64) + 0.1 if levels else None,
        beta=2 * torch.rand(B, T, H, generator=gen, dtype=torch.float64) if delta else None,
    )
    state = None
    if any(offsets):
        L0 = (L if levels else 1) if state_levels is None else state_levels
        state = LogLinearState(0.3 * rand(B, H, L0, V, K), torch.tensor(offsets))
    return xs, state


def run(impl, xs, state, dtype, grads=True, chunk_size=16):
    """Output, final state, and the gradients of a fixed random projection of both."""
    xs = {n: None if x is None else x.detach().to(dtype).requires_grad_(grads) for n, x in xs.items()}
    st_in = None
    if state is not None:
        st_in = LogLinearState(state.levels.detach().to(dtype).requires_grad_(grads), state.position)
    with poison_outputs():
        o, final = log_linear_attn(*xs.values(), initial_state=st_in, output_final_state=True, impl=impl,
                                   chunk_size=chunk_size)
    out = {"o": o.detach(), "final": final.levels.detach()}
    if grads:
        gen = torch.Generator().manual_seed(1)
        w_o = torch.randn(o.shape, generator=gen, dtype=torch.float64).to(o.dtype)
        w_f = torch.randn(final.levels.shape, generator=gen, dtype=torch.float64).to(final.levels.dtype)
        ((o * w_o).sum() + (final.levels * w_f).sum()).backward()
        out.update({f"d{n}": x.grad for n, x in xs.items() if x is not None})
        if st_in is not None:
            out["dstate"] = st_in.levels.grad
    return out


def assert_close(xs, state, grads=True, tol=TOL, **kw):
    got = run("triton", xs, state, torch.float32, grads, **kw)
    want = run("chunk", xs, state, torch.float64, grads, **kw)
    assert got.keys() == want.keys()
    for name in want:
        assert torch.isfinite(got[name]).all(), f"{name} has non-finite entries (unwritten output?)"
        assert rel(got[name], want[name]) < tol, f"{name}: relative error {rel(got[name], want[name]):.2e}"


SHAPES = [  # B, T, H, HK, K, V
    (1, 1, 1, 1, 16, 16),
    (1, 16, 2, 2, 16, 16),
    (2, 37, 2, 1, 16, 32),
    (1, 70, 2, 2, 20, 16),
    (2, 50, 4, 2, 32, 24),
    # the inter-chunk kernel splits V into two blocks (partial sums of dR, dKd, dlam), at each variant's largest K
    (1, 40, 1, 1, 128, 64),
    (1, 40, 1, 1, 64, 128),
]


@pytest.mark.parametrize("levels", [True, False], ids=["lam", "lam_none"])
@pytest.mark.parametrize("shape, delta", [(s, d) for s in SHAPES for d in (False, True)
                                          if s[4] <= MAX_K[Variant.DELTA_RULE if d else Variant.SCALAR_DECAY]],
                         ids=lambda x: ("gdn" if x else "mamba2") if isinstance(x, bool)
                         else "B{}T{}H{}HK{}K{}V{}".format(*x))
def test_forward_and_gradients_match_chunk(shape, levels, delta):
    xs, _ = make(*shape, delta=delta, levels=levels, seed=sum(shape))
    assert_close(xs, None)


@pytest.mark.parametrize("delta", [False, True], ids=["mamba2", "gdn"])
@pytest.mark.parametrize("levels", [True, False], ids=["lam", "lam_none"])
def test_initial_state_at_unaligned_positions_per_sequence(levels, delta):
    # sequences starting in different chunks, mid-chunk, and one at position 0 with a nonzero state
    xs, state = make(3, 29, 2, 1, 16, 16, delta=delta, levels=levels, offset=[5, 40, 0], seed=3)
    state = LogLinearState(state.levels, torch.tensor([5, 40, 0]))
    assert_close(xs, state)


def test_deeper_initial_state_than_lam_needs():
    xs, state = make(2, 20, 2, 2, 16, 16, delta=False, offset=[33, 7], seed=4, state_levels=num_levels(53) + 2)
    assert_close(xs, state)


@pytest.mark.parametrize("chunk_size", [16, 32, 64])
def test_chunk_sizes_agree(chunk_size):
    xs, _ = make(1, 100, 2, 1, 16, 16, delta=False, seed=5)
    assert_close(xs, None, grads=False, chunk_size=chunk_size)


@pytest.mark.parametrize("delta", [False, True], ids=["mamba2", "gdn"])
def test_prefill_then_decode_matches_one_pass(delta):
    xs, _ = make(2, 40, 2, 1, 16, 16, delta=delta, seed=6)
    xs32 = {n: None if x is None else x.float() for n, x in xs.items()}
    full, _ = log_linear_attn(*xs32.values(), impl="chunk")
    cut = 27
    head = {n: None if x is None else x[:, :cut] for n, x in xs32.items()}
    o_head, state = log_linear_attn(*head.values(), impl="triton", output_final_state=True, chunk_size=16)
    outs = [o_head]
    for t in range(cut, 40):
        o_t, state = log_linear_attn_step(*(None if x is None else x[:, t] for x in xs32.values()), state=state)
        outs.append(o_t[:, None])
    assert rel(torch.cat(outs, 1), full) < TOL


def test_bf16_inputs_return_bf16_close_to_float32():
    xs, _ = make(1, 64, 2, 1, 32, 32, delta=False, seed=7)
    bf = {n: None if x is None else x.bfloat16() for n, x in xs.items()}
    o, _ = log_linear_attn(*bf.values(), impl="triton", chunk_size=16)
    ref, _ = log_linear_attn(*(None if x is None else x.float() for x in bf.values()), impl="chunk")
    assert o.dtype == torch.bfloat16
    assert rel(o, ref) < 2e-2


@pytest.mark.parametrize("delta", [False, True], ids=["mamba2", "gdn"])
def test_half_precision_inputs_reach_the_kernels_as_float32_with_tf32_dots_and_exact_preparation(monkeypatch, delta):
    """bf16 inputs with lam and an initial state gave a wrong, changing o on an H100 (Triton 3.6) and the delta rule's
    tf32 preparation read out of bounds there; float32 copies and exact preparation dots were right."""
    from loglinear.kernels.fused import delta_prep, function

    seen = []
    real_apply = function._FusedCore.apply

    def apply(*args):  # (*core inputs, R, Kd, trans, v, lam, layout, L, prec)
        seen.append((args[-5].dtype, args[-4].dtype, args[-1]))
        return real_apply(*args)

    monkeypatch.setattr(function._FusedCore, "apply", apply)
    preps = []
    real_meta = delta_prep._meta

    def meta(q, beta, layout):
        preps.append((q.dtype, real_meta(q, beta, layout)["PREC"]))
        return real_meta(q, beta, layout)

    monkeypatch.setattr(delta_prep, "_meta", meta)
    for dtype, prec in ((torch.bfloat16, "tf32"), (torch.float32, "ieee")):
        seen.clear()
        xs, state = make(1, 40, 2, 1, 16, 16, delta=delta, offset=5, seed=3)
        run("triton", xs, state, dtype, grads=False)
        assert seen == [(torch.float32, torch.float32, prec)], seen
    assert preps == ([(torch.float32, "ieee")] * 2 if delta else [])


@settings(max_examples=12)
@given(
    T=st.integers(1, 90), K=st.sampled_from([16, 24, 32]), V=st.sampled_from([16, 40]),
    HK=st.sampled_from([1, 2]), offset=st.integers(0, 70), delta=st.booleans(), levels=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_fuzz_shapes_and_offsets(T, K, V, HK, offset, delta, levels, seed):
    xs, state = make(1, T, 2, HK, K, V, delta=delta, levels=levels, offset=offset, seed=seed)
    assert_close(xs, state, grads=False)


def test_float64_is_refused_and_auto_picks_chunk_on_cpu():
    xs, _ = make(1, 8, 1, 1, 16, 16, delta=False)
    with pytest.raises(TypeError, match="float32"):
        log_linear_attn(*xs.values(), impl="triton")
    assert resolve_impl("auto", xs["q"]).name == "chunk"


def test_cpu_tensors_need_the_interpreter(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    xs, _ = make(1, 8, 1, 1, 16, 16, delta=False)
    with pytest.raises(ValueError, match="TRITON_INTERPRET"):
        log_linear_attn(*(x.float() for x in xs.values() if x is not None), impl="triton")


def test_gqa_equals_expanded_heads_on_every_path():
    xs, _ = make(2, 20, 4, 2, 16, 16, delta=True, seed=8)
    expanded = {n: x.repeat_interleave(2, dim=2) if n in "qk" else x for n, x in xs.items()}
    for impl in ("naive", "recurrent", "chunk"):
        a, _ = log_linear_attn(*xs.values(), impl=impl)
        b, _ = log_linear_attn(*expanded.values(), impl=impl)
        assert rel(a, b) < 1e-12


def test_delta_rule_limits_are_clear():
    xs, _ = make(1, 8, 1, 1, 72, 16, delta=True)
    with pytest.raises(ValueError, match="K <= 64"):
        log_linear_attn(*(None if x is None else x.float() for x in xs.values()), impl="triton")
    # a chunk size above the delta rule's limit is lowered, not refused
    xs, _ = make(1, 150, 1, 1, 16, 16, delta=True, seed=9)
    assert_close(xs, None, grads=False, chunk_size=128)


@pytest.mark.parametrize("chunk_size", [512, 1024])
def test_chunk_sizes_above_the_level_limit_are_lowered(chunk_size):
    # the kernels use chunks of up to MAX_CHUNK = 64 tokens (shared memory): larger ones are lowered, not miscomputed
    xs, _ = make(1, 600, 1, 1, 16, 16, delta=False, seed=3)
    assert_close(xs, None, grads=True, chunk_size=chunk_size)


@pytest.mark.parametrize("delta", [False, True])
def test_the_fused_kernels_run_inside_a_compiled_function(delta):
    """Dynamo leaves the fused call alone (a graph break around it), so a compiled model can use the kernels:
    same output and gradients as the eager call."""
    xs, _ = make(1, 32, 2, 1, 16, 16, delta=delta)
    xs = {n: None if x is None else x.float() for n, x in xs.items()}

    def f(q, k, v, g, lam, beta):
        return (2 * log_linear_attn(q, k, v, g, lam, beta, impl="triton", chunk_size=16)[0]).sum(-1)

    def outputs(fn):
        leaves = {n: None if x is None else x.clone().requires_grad_() for n, x in xs.items()}
        out = fn(*leaves.values())
        out.square().sum().backward()
        return [out.detach()] + [x.grad for x in leaves.values() if x is not None]

    torch._dynamo.reset()
    for eager, compiled in zip(outputs(f), outputs(torch.compile(f, backend="eager")), strict=True):
        torch.testing.assert_close(compiled, eager, rtol=0, atol=0)
