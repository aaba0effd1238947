"""States: prefill + decode and prefill in pieces reproduce one full pass, from any implementation."""

import itertools

import pytest
import torch

from loglinear.kernels import LogLinearState, log_linear_attn, log_linear_attn_step, num_levels

from .helpers import make_inputs, rel_err

IMPLS = ["naive", "recurrent", "chunk"]


def decode(x, start, stop, state):
    outputs = []
    for t in range(start, stop):
        o_t, state = log_linear_attn_step(*x.at(t), state=state)
        outputs.append(o_t)
    return torch.stack(outputs, dim=1), state


@pytest.mark.parametrize("delta", [False, True], ids=["mamba2", "gdn"])
@pytest.mark.parametrize("levels", [True, False], ids=["lam", "single"])
@pytest.mark.parametrize("prefill_impl", IMPLS)
def test_prefill_then_decode_equals_full_pass(prefill_impl, delta, levels):
    T = 77
    x = make_inputs(2, T, 2, 5, 3, delta=delta, levels=levels, seed=5)
    o_full, s_full = log_linear_attn(*x.args(), impl="naive", output_final_state=True)
    for cut in (1, 16, 33):
        o_pre, state = log_linear_attn(
            *x.slice(0, cut).args(), impl=prefill_impl, output_final_state=True, chunk_size=8
        )
        o_dec, state = decode(x, cut, T, state)
        assert rel_err(torch.cat([o_pre, o_dec], 1), o_full) < 1e-10
        assert rel_err(state.levels, s_full.levels) < 1e-10
        assert state.position.tolist() == [T, T]


def test_decode_from_scratch_equals_full_pass():
    x = make_inputs(1, 40, 1, 4, 4, delta=True)
    o_full, _ = log_linear_attn(*x.args(), impl="naive")
    o_dec, state = decode(x, 0, 40, None)
    assert rel_err(o_dec, o_full) < 1e-10
    assert state.levels.shape[2] == num_levels(40)


@pytest.mark.parametrize("delta", [False, True], ids=["mamba2", "gdn"])
@pytest.mark.parametrize("impl", IMPLS)
def test_prefill_in_pieces_across_implementations(impl, delta):
    T = 150
    x = make_inputs(2, T, 2, 6, 4, delta=delta, seed=9)
    o_full, s_full = log_linear_attn(*x.args(), impl="naive", output_final_state=True)
    cuts = [0, 5, 6, 64, 99, T]
    state, outputs = None, []
    for i, (a, b) in enumerate(itertools.pairwise(cuts)):
        piece_impl = IMPLS[(IMPLS.index(impl) + i) % 3]  # hand the state from one implementation to the next
        o, state = log_linear_attn(
            *x.slice(a, b).args(), impl=piece_impl, initial_state=state, output_final_state=True, chunk_size=16
        )
        outputs.append(o)
    assert rel_err(torch.cat(outputs, 1), o_full) < 1e-10
    assert rel_err(state.levels, s_full.levels) < 1e-10


@pytest.mark.parametrize("delta", [False, True], ids=["mamba2", "gdn"])
@pytest.mark.parametrize("impl", IMPLS)
def test_sequences_at_different_positions_in_one_batch(impl, delta):
    """Per-sequence positions: two prompts of different lengths continue together in one call."""
    T, cuts = 90, (13, 40)
    x = make_inputs(2, T, 2, 4, 3, delta=delta, seed=21)
    states, expected = [], []
    for b, cut in enumerate(cuts):
        xb = x.slice(0, T)
        xb = type(xb)(*(None if t is None else t[b : b + 1] for t in xb.args()))
        o_full, s_full = log_linear_attn(*xb.args(), impl="naive", output_final_state=True)
        _, s = log_linear_attn(*xb.slice(0, cut).args(), impl="naive", output_final_state=True)
        states.append(s)
        expected.append((o_full[:, cut : cut + 40], xb.slice(cut, cut + 40)))
    state = LogLinearState(torch.cat([s.levels for s in states]), torch.cat([s.position for s in states]))
    rest = type(x)(
        *(None if t is None else torch.cat([e[1].args()[i] for e in expected]) for i, t in enumerate(x.args()))
    )
    o, final = log_linear_attn(*rest.args(), impl=impl, initial_state=state, output_final_state=True, chunk_size=16)
    assert rel_err(o, torch.cat([e[0] for e in expected])) < 1e-10
    assert final.position.tolist() == [cuts[0] + 40, cuts[1] + 40]
    o_step, _ = decode(rest, 0, 40, state)
    assert rel_err(o_step, o) < 1e-10


def reference_gated_rule(x):
    """Plain gated linear attention / gated delta rule, one state: S <- alpha S (I - beta k k^T) + beta v k^T."""
    B, T, H, K = x.q.shape
    S = torch.zeros(B, H, x.v.shape[-1], K, dtype=x.q.dtype)
    out = []
    for t in range(T):
        q, k, v, g, _, beta = x.at(t)
        if beta is None:  # gated linear attention
            S = g.exp()[..., None, None] * S + v[..., None] * k[:, :, None, :]
        else:  # gated delta rule
            S = g.exp()[..., None, None] * (S - beta[..., None, None] * (S @ k[..., None]) * k[:, :, None, :])
            S = S + beta[..., None, None] * v[..., None] * k[:, :, None, :]
        out.append((S @ q[..., None])[..., 0])
    return torch.stack(out, 1), S


@pytest.mark.parametrize("delta", [False, True], ids=["gla", "gated_delta"])
@pytest.mark.parametrize("impl", IMPLS)
def test_lambda_one_is_plain_gated_rule(impl, delta):
    x = make_inputs(2, 70, 2, 5, 4, delta=delta, seed=4)
    o_ref, S_ref = reference_gated_rule(x)
    ones = torch.ones_like(x.lam)
    o_lam, s_lam = log_linear_attn(x.q, x.k, x.v, x.g, ones, x.beta, impl=impl, output_final_state=True, chunk_size=16)
    o_one, s_one = log_linear_attn(x.q, x.k, x.v, x.g, None, x.beta, impl=impl, output_final_state=True, chunk_size=16)
    assert rel_err(o_lam, o_ref) < 1e-10 and rel_err(o_one, o_ref) < 1e-10
    assert rel_err(s_lam.levels.sum(2), S_ref) < 1e-10
    assert s_one.levels.shape[2] == 1 and rel_err(s_one.levels[:, :, 0], S_ref) < 1e-10


@pytest.mark.parametrize("delta", [False, True], ids=["mamba2", "gdn"])
def test_strongly_negative_decay_over_long_sequences_stays_finite(delta):
    T = 16384
    x = make_inputs(1, T, 1, 4, 4, delta=delta, dtype=torch.float32, seed=1)
    x.g = torch.full_like(x.g, -60.0)
    x.g[:, ::7] = -1e4
    x.requires_grad_()
    o, s = log_linear_attn(*x.args(), impl="chunk", output_final_state=True)
    o.sum().backward()
    assert torch.isfinite(o).all() and torch.isfinite(s.levels).all()
    for t in x.args():
        if t is not None:
            assert torch.isfinite(t.grad).all()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("impl", IMPLS)
def test_low_precision_inputs_accumulate_in_float32(impl, dtype):
    x = make_inputs(1, 50, 2, 8, 8, delta=True, dtype=dtype, seed=2)
    o, s = log_linear_attn(*x.args(), impl=impl, output_final_state=True)
    assert o.dtype == dtype and s.levels.dtype == torch.float32
    x32 = type(x)(*(None if t is None else t.float() for t in x.args()))
    o32, _ = log_linear_attn(*x32.args(), impl="naive")
    assert rel_err(o.float(), o32) < 1e-2  # only the final rounding to the low-precision dtype
    o_step, s_step = log_linear_attn_step(*x.at(0))
    assert o_step.dtype == dtype and s_step.levels.dtype == torch.float32


from hypothesis import given, settings  # noqa: E402  (the property tests below need hypothesis)
from hypothesis import strategies as st  # noqa: E402  (the property tests below need hypothesis)


@settings(max_examples=30)
@given(
    cuts=st.lists(st.integers(0, 120), min_size=2, max_size=2), T=st.integers(1, 60), log_chunk=st.integers(0, 6),
    delta=st.booleans(), levels=st.booleans(), seed=st.integers(0, 2**16),
)
def test_fuzz_continuing_from_states_at_any_positions(cuts, T, log_chunk, delta, levels, seed):
    """Two sequences prefilled to arbitrary (different) positions continue through every implementation."""
    x = make_inputs(2, max(cuts) + T, 1, 3, 2, delta=delta, levels=levels, seed=seed, beta_max=2.0)
    o_full, _ = log_linear_attn(*x.args(), impl="naive")
    states, rest, expected = [], [], []
    for b, cut in enumerate(cuts):
        xb = type(x)(*(None if t is None else t[b : b + 1] for t in x.args()))
        states.append(log_linear_attn(*xb.slice(0, cut).args(), impl="naive", output_final_state=True)[1] if cut else
                      LogLinearState.zeros(1, 1, 1, 2, 3, dtype=torch.float64))
        rest.append(xb.slice(cut, cut + T))
        expected.append(o_full[b : b + 1, cut : cut + T])
    L = max(s.levels.shape[2] for s in states)
    padded = [torch.nn.functional.pad(s.levels, (0, 0, 0, 0, 0, L - s.levels.shape[2])) for s in states]
    state = LogLinearState(torch.cat(padded), torch.cat([s.position for s in states]))
    xr = type(x)(*(None if t is None else torch.cat([r.args()[i] for r in rest]) for i, t in enumerate(x.args())))
    for impl in IMPLS:
        o, _ = log_linear_attn(*xr.args(), impl=impl, initial_state=state, chunk_size=2**log_chunk)
        assert rel_err(o, torch.cat(expected)) < 1e-9, impl
