"""Our operator against an independent implementation, flash-linear-attention's plain PyTorch references:
`naive_log_linear_attn` (log-linear Mamba-2: its own Fenwick masks, grouped query/key heads),
`naive_recurrent_gated_delta_rule` (the gated delta rule, token by token, with initial and final state), and
log-linear Gated DeltaNet as the paper defines it, O = (A ⊙ M^H) V, with A the gated delta rule's matrix read
off fla's recurrence and M^H built from fla's level masks; and the decays of the other bases, with and without
levels: none (`naive_chunk_linear_attn`, `delta_rule_recurrence`) and RetNet's fixed one per head
(`naive_retention`). Forward and gradients, every implementation of ours that runs on the CPU in float64."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from loglinear.kernels import LogLinearState, log_linear_attn

from .helpers import make_inputs, rel_err

fla_log_linear = pytest.importorskip("fla.ops.log_linear_attn.naive", reason="fla-core not installed")
fla_delta_rule = pytest.importorskip("fla.ops.gated_delta_rule.naive", reason="fla-core not installed")
fla_linear_attn = pytest.importorskip("fla.ops.linear_attn.naive", reason="fla-core not installed")
fla_retention = pytest.importorskip("fla.ops.retention.naive", reason="fla-core not installed")
fla_deltanet = pytest.importorskip("fla.ops.delta_rule.naive", reason="fla-core not installed")

IMPLS = ["naive", "recurrent", "chunk"]
DELTA_TOL = 1e-5
"""fla's delta-rule reference computes in float32 whatever its inputs' dtype: agreement to float32's rounding."""


def assert_computes(o_ref, leaves, names, dy, tol, chunk):
    """Each of our implementations on `leaves` (q, k, v, g, lam[, beta]) gives o_ref and its gradients within tol."""
    g_ref = torch.autograd.grad(o_ref, leaves, dy)
    for impl in IMPLS:
        o, _ = log_linear_attn(*leaves, impl=impl, chunk_size=chunk)
        assert rel_err(o, o_ref) < tol, impl
        for name, a, r in zip(names, torch.autograd.grad(o, leaves, dy), g_ref, strict=True):
            assert rel_err(a, r) < tol, (impl, name)


@settings(max_examples=15, deadline=None)
@given(T=st.integers(1, 70), H=st.sampled_from([1, 2, 4]), groups=st.sampled_from([1, 2]),
       K=st.sampled_from([1, 4, 8]), V=st.sampled_from([1, 6]), chunk=st.sampled_from([8, 16]))
def test_log_linear_mamba2_is_flas_reference(T, H, groups, K, V, chunk):
    """Same output and gradients (q, k, v, g, lam) to float64 rounding, with fewer query/key heads than heads."""
    HK = max(H // groups, 1)
    x = make_inputs(2, T, H, K, V, delta=False, seed=T * 31 + H)
    q, k = x.q[:, :, :HK].clone(), x.k[:, :, :HK].clone()
    leaves = [t.requires_grad_() for t in (q, k, x.v, x.g, x.lam)]
    dy = torch.randn(2, T, H, V, dtype=torch.float64, generator=torch.Generator().manual_seed(T))
    o_ref = fla_log_linear.naive_log_linear_attn(*leaves, scale=1.0)
    assert_computes(o_ref, leaves, "q k v g lam".split(), dy, 1e-10, chunk)


@pytest.mark.parametrize("T", [1, 37, 100])
def test_gated_delta_rule_is_flas_reference(T):
    """lam None: our single-state operator is fla's gated delta rule, from a given initial state to the final one,
    forward and gradients (q, k, v, g, beta, initial state)."""
    B, H, K, V = 2, 3, 8, 6
    x = make_inputs(B, T, H, K, V, delta=True, levels=False, seed=T)
    h0 = 0.3 * torch.randn(B, H, K, V, dtype=torch.float64, generator=torch.Generator().manual_seed(T + 1))
    leaves = [t.requires_grad_() for t in (x.q, x.k, x.v, x.g, x.beta, h0)]
    q, k, v, g, beta, h0 = leaves
    dy = torch.randn(B, T, H, V, dtype=torch.float64, generator=torch.Generator().manual_seed(T + 2))
    dh = torch.randn(B, H, K, V, dtype=torch.float64, generator=torch.Generator().manual_seed(T + 3))
    o_ref, h_ref = fla_delta_rule.naive_recurrent_gated_delta_rule(q, k, v, beta, g, scale=1.0, initial_state=h0,
                                                                   output_final_state=True)
    o_ref, h_ref = o_ref.double(), h_ref.double()
    g_ref = torch.autograd.grad((o_ref * dy).sum() + (h_ref * dh).sum(), leaves)
    state = LogLinearState(h0.transpose(-1, -2)[:, :, None], torch.zeros(B, dtype=torch.int64))
    for impl in IMPLS:
        o, final = log_linear_attn(q, k, v, g, None, beta, initial_state=state, output_final_state=True, impl=impl,
                                   chunk_size=16)
        h = final.levels[:, :, 0].transpose(-1, -2)
        assert rel_err(o, o_ref) < DELTA_TOL, impl
        assert rel_err(h, h_ref) < DELTA_TOL, impl
        ours = torch.autograd.grad((o * dy).sum() + (h * dh).sum(), leaves)
        for name, a, r in zip("q k v g beta h0".split(), ours, g_ref, strict=True):
            assert rel_err(a, r) < DELTA_TOL, (impl, name)


def fla_log_linear_delta_rule(q, k, v, g, lam, beta):
    """(A ⊙ M^H) V: A_ts, the weight of v_s in o_t under the gated delta rule, is fla's recurrence run on the
    values e_s (one-hot); M^H_ts = lam_t^(level of s seen from t), from fla's masks of each level."""
    B, T, H, _ = v.shape
    eye = torch.eye(T, dtype=v.dtype).expand(B, H, T, T).transpose(1, 2)  # (B, T, H, T): token s carries e_s
    A, _ = fla_delta_rule.naive_recurrent_gated_delta_rule(q, k, eye, beta, g, scale=1.0)  # (B, T, H, T)
    lam_bhlt = lam.permute(0, 2, 3, 1)  # (B, H, L, T), as fla's masks take it
    MH = sum(fla_log_linear.construct_level_mask(level, lam_bhlt) for level in range(lam.shape[-1]))  # (B,H,T,T)
    return torch.einsum("bths,bhts,bshv->bthv", A.double(), MH, v)


@pytest.mark.parametrize("T", [1, 2, 37, 64, 70])
def test_log_linear_gated_deltanet_is_the_papers_form_on_flas_parts(T):
    """Output and gradients (q, k, v, g, lam, beta) to float32's rounding (fla's recurrence computes in float32)."""
    B, H, K, V = 2, 2, 8, 5
    x = make_inputs(B, T, H, K, V, delta=True, seed=T + 7)
    leaves = [t.requires_grad_() for t in x.args()]
    dy = torch.randn(B, T, H, V, dtype=torch.float64, generator=torch.Generator().manual_seed(T))
    assert_computes(fla_log_linear_delta_rule(*leaves), leaves, "q k v g lam beta".split(), dy, DELTA_TOL, 16)


BASES, BASE_IDS = [("none", False), ("retention", False), ("none", True)], ["linear_attention", "retnet", "deltanet"]
"""The decay (none, or RetNet's fixed one) and whether the delta rule applies, of each new base."""


def retention_decay(B, T, H):
    """RetNet's log decay log(1 - 2^(-5 - h)) per head, at every token."""
    return (1 - 2.0 ** (-5.0 - torch.arange(H, dtype=torch.float64))).log().expand(B, T, H)


def fixed_decay(kind, B, T, H):
    return torch.zeros(B, T, H, dtype=torch.float64) if kind == "none" else retention_decay(B, T, H)


def single_state_reference(kind, q, k, v, beta):
    """fla's reference of the base whose decay is `kind`, for our single-state operator's inputs (whose q carries
    the scale K^-0.5 that fla's references apply themselves); (B, T, H, ...) layout."""
    K = q.shape[-1]
    if beta is not None:
        bhtd = [t.transpose(1, 2) for t in (q * K**0.5, k, v, beta)]
        return fla_deltanet.delta_rule_recurrence(*bhtd)[0].transpose(1, 2).double()
    if kind == "none":
        return fla_linear_attn.naive_chunk_linear_attn(q * K**0.5, k, v)
    bhtd = [t.transpose(1, 2) for t in (q * K**0.5, k, v)]
    return fla_retention.naive_retention(*bhtd).transpose(1, 2).double()


@pytest.mark.parametrize("kind, delta", BASES, ids=BASE_IDS)
def test_the_new_bases_decays_are_flas_references(kind, delta):
    """lam None: linear attention (no decay), RetNet (fixed decay) and DeltaNet (delta rule, no decay) are fla's
    references of them; to float32's rounding where those compute in float32 (retention's decay mask, the delta
    rule), else to float64's. T = 128: fla's chunked linear attention takes multiples of 64."""
    B, T, H, K, V = 2, 128, 3, 8, 6
    x = make_inputs(B, T, H, K, V, delta=delta, levels=False, seed=11)
    g = fixed_decay(kind, B, T, H)
    leaves = [t.requires_grad_() for t in (x.q, x.k, x.v)] + ([x.beta.requires_grad_()] if delta else [])
    q, k, v, *beta = leaves
    dy = torch.randn(B, T, H, V, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    o_ref = single_state_reference(kind, q, k, v, beta[0] if delta else None)
    g_ref = torch.autograd.grad(o_ref, leaves, dy)
    tol = 1e-10 if (kind, delta) == ("none", False) else DELTA_TOL
    for impl in IMPLS:
        o, _ = log_linear_attn(q, k, v, g, None, beta[0] if delta else None, impl=impl, chunk_size=16)
        assert rel_err(o, o_ref) < tol, impl
        for name, a, r in zip("q k v beta".split(), torch.autograd.grad(o, leaves, dy), g_ref, strict=False):
            assert rel_err(a, r) < tol, (impl, name)


@pytest.mark.parametrize("kind, delta", BASES, ids=BASE_IDS)
def test_the_new_bases_log_linear_variants_are_flas_forms(kind, delta):
    """With levels, the fixed decays through fla's log-linear reference (beta None) or the paper's form on fla's
    delta rule (`fla_log_linear_delta_rule`, g fixed), gradients of q, k, v, lam (and beta)."""
    B, T, H, K, V = 2, 45, 2, 8, 5
    x = make_inputs(B, T, H, K, V, delta=delta, seed=13)
    g = fixed_decay(kind, B, T, H)
    names = "q k v lam beta".split() if delta else "q k v lam".split()
    leaves = [getattr(x, n).requires_grad_() for n in names]
    q, k, v, lam, *beta = leaves
    dy = torch.randn(B, T, H, V, dtype=torch.float64, generator=torch.Generator().manual_seed(T))
    if delta:
        o_ref = fla_log_linear_delta_rule(q, k, v, g, lam, beta[0])
    else:
        o_ref = fla_log_linear.naive_log_linear_attn(q, k, v, g, lam, scale=1.0)
    g_ref = torch.autograd.grad(o_ref, leaves, dy)
    tol = DELTA_TOL if delta else 1e-10
    for impl in IMPLS:
        o, _ = log_linear_attn(q, k, v, g, lam, beta[0] if delta else None, impl=impl, chunk_size=16)
        assert rel_err(o, o_ref) < tol, impl
        for name, a, r in zip(names, torch.autograd.grad(o, leaves, dy), g_ref, strict=True):
            assert rel_err(a, r) < tol, (impl, name)
