"""naive, recurrent and chunk agree: forward, final state and gradients, float64 and float32."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from loglinear.kernels import log_linear_attn

from .helpers import make_inputs, rel_err

IMPLS = ["recurrent", "chunk"]
LENGTHS = [1, 2, 3, 63, 64, 65, 100, 257]
DIMS = [(1, 1), (16, 32), (32, 16), (64, 64), (16, 1)]  # (K, V), K != V included


def run(inputs, impl, **kw):
    return log_linear_attn(*inputs.args(), impl=impl, output_final_state=True, **kw)


@pytest.mark.parametrize("delta", [False, True], ids=["mamba2", "gdn"])
@pytest.mark.parametrize("T", LENGTHS)
def test_float64_agreement_over_lengths(T, delta):
    x = make_inputs(2, T, 2, 8, 4, delta=delta, seed=T)
    o_ref, s_ref = run(x, "naive")
    for impl in IMPLS:
        o, s = run(x, impl, chunk_size=16)
        assert rel_err(o, o_ref) < 1e-10, impl
        assert rel_err(s.levels, s_ref.levels) < 1e-10, impl
        assert torch.equal(s.position, s_ref.position)


@pytest.mark.parametrize("delta", [False, True], ids=["mamba2", "gdn"])
@pytest.mark.parametrize("K,V", DIMS)
@pytest.mark.parametrize("levels", [True, False], ids=["lam", "single"])
def test_float64_agreement_over_dims(K, V, delta, levels):
    x = make_inputs(1, 65, 2, K, V, delta=delta, levels=levels, seed=K * 100 + V)
    o_ref, s_ref = run(x, "naive")
    for impl in IMPLS:
        o, s = run(x, impl)
        assert rel_err(o, o_ref) < 1e-10, impl
        assert rel_err(s.levels, s_ref.levels) < 1e-10, impl


@pytest.mark.parametrize("delta", [False, True], ids=["mamba2", "gdn"])
@pytest.mark.parametrize("T", [3, 64, 100, 257])
def test_float32_matches_float64_reference(T, delta):
    x64 = make_inputs(2, T, 2, 16, 32, delta=delta, seed=7 + T)
    x32 = make_inputs(2, T, 2, 16, 32, delta=delta, seed=7 + T, dtype=torch.float32)
    o_ref, _ = run(x64, "naive")
    for impl in ["naive", *IMPLS]:
        o, s = run(x32, impl)
        assert o.dtype == torch.float32 and s.levels.dtype == torch.float32
        assert rel_err(o, o_ref) < 1e-5, impl


@pytest.mark.parametrize("chunk_size", [1, 2, 4, 8, 32, 64, 128])
def test_every_power_of_two_chunk_size(chunk_size):
    for delta in (False, True):
        x = make_inputs(1, 37, 1, 4, 3, delta=delta, seed=chunk_size)
        o_ref, s_ref = run(x, "naive")
        o, s = run(x, "chunk", chunk_size=chunk_size)
        assert rel_err(o, o_ref) < 1e-10
        assert rel_err(s.levels, s_ref.levels) < 1e-10


def test_extra_levels_never_touch_the_output():
    x = make_inputs(1, 40, 2, 4, 4, delta=True, extra_levels=3)
    needed = x.lam.shape[-1] - 3
    zeroed = x.lam.clone()
    zeroed[..., needed:] = 0
    for impl in ["naive", *IMPLS]:
        o, _ = log_linear_attn(*x.args(), impl=impl)
        o0, _ = log_linear_attn(x.q, x.k, x.v, x.g, zeroed, x.beta, impl=impl)
        assert torch.equal(o, o0) or rel_err(o, o0) < 1e-14


@pytest.mark.parametrize("delta", [False, True], ids=["mamba2", "gdn"])
@pytest.mark.parametrize("levels", [True, False], ids=["lam", "single"])
def test_chunk_gradients_match_naive(delta, levels):
    def grads(impl):
        x = make_inputs(2, 45, 2, 8, 4, delta=delta, levels=levels, seed=3).requires_grad_()
        o, s = log_linear_attn(*x.args(), impl=impl, chunk_size=8, output_final_state=True)
        weights = torch.randn(o.shape, generator=torch.Generator().manual_seed(1), dtype=o.dtype)
        sweights = torch.randn(s.levels.shape, generator=torch.Generator().manual_seed(2), dtype=o.dtype)
        ((o * weights).sum() + (s.levels * sweights).sum()).backward()
        return {n: getattr(x, n).grad for n in ("q", "k", "v", "g", "lam", "beta") if getattr(x, n) is not None}

    ref = grads("naive")
    for impl in IMPLS:
        got = grads(impl)
        for name in ref:
            assert rel_err(got[name], ref[name]) < 1e-10, (impl, name)


@pytest.mark.parametrize("delta", [False, True], ids=["mamba2", "gdn"])
def test_gradcheck_float64(delta):
    x = make_inputs(1, 6, 1, 3, 2, delta=delta, seed=11).requires_grad_()
    for impl in ["naive", "chunk"]:

        def output(*args, impl=impl):
            return log_linear_attn(*args, impl=impl, chunk_size=2)[0]

        assert torch.autograd.gradcheck(output, x.args(), eps=1e-6, atol=1e-8)


@settings(max_examples=40)
@given(
    B=st.integers(1, 3), T=st.integers(1, 80), H=st.integers(1, 3), K=st.integers(1, 20), V=st.integers(1, 20),
    log_chunk=st.integers(0, 7), delta=st.booleans(), levels=st.booleans(), extra=st.integers(0, 2),
    seed=st.integers(0, 2**16),
)
def test_fuzz_chunk_and_recurrent_against_naive(B, T, H, K, V, log_chunk, delta, levels, extra, seed):
    x = make_inputs(B, T, H, K, V, delta=delta, levels=levels, extra_levels=extra, seed=seed, beta_max=2.0)
    o_ref, s_ref = run(x, "naive")
    for impl in IMPLS:
        o, s = run(x, impl, chunk_size=2**log_chunk)
        assert rel_err(o, o_ref) < 1e-9, impl
        assert rel_err(s.levels, s_ref.levels) < 1e-9, impl
        o_only, _ = log_linear_attn(*x.args(), impl=impl, chunk_size=2**log_chunk)  # the loop-free paths
        assert rel_err(o_only, o_ref) < 1e-9, impl


@pytest.mark.parametrize("delta", [False, True], ids=["mamba2", "gdn"])
@pytest.mark.parametrize("levels", [True, False], ids=["lam", "single"])
@pytest.mark.parametrize("T", [1, 16, 37, 100, 257])
def test_output_only_paths_match_naive(T, delta, levels):
    """Without the final state chunk takes shortcuts (the dense form for one chunk, the loop-free inter-chunk pass
    for a scalar decay and for the delta rule with lam) and reads one shared q/k head by broadcasting: forward and
    gradients against naive."""

    def run(impl):
        x = make_inputs(2, T, 3, 8, 4, delta=delta, levels=levels, seed=T)
        x.q, x.k = x.q[:, :, :1].clone(), x.k[:, :, :1].clone()  # one q/k head shared by the 3 v heads
        x.requires_grad_()
        o, s = log_linear_attn(*x.args(), impl=impl, chunk_size=16)
        assert s is None
        weights = torch.randn(o.shape, generator=torch.Generator().manual_seed(1), dtype=o.dtype)
        (o * weights).sum().backward()
        return o, {n: getattr(x, n).grad for n in ("q", "k", "v", "g", "lam", "beta") if getattr(x, n) is not None}

    o_ref, g_ref = run("naive")
    o, got = run("chunk")
    assert rel_err(o, o_ref) < 1e-10
    for name in g_ref:
        assert rel_err(got[name], g_ref[name]) < 1e-10, name
