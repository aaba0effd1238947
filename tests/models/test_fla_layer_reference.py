"""Linear attention, RetNet and DeltaNet against an independent implementation, flash-linear-attention's layers
(LinearAttention, MultiScaleRetention, DeltaNet) with their defaults: the same function on copied weights, forward
and every parameter's gradient in float64.

fla's layers run their Triton kernels, which need a GPU; here each kernel is swapped for fla's own plain PyTorch
reference of it (`naive_chunk_linear_attn`, `naive_retention`, `delta_rule_recurrence`, `rms_norm_ref`,
`rotary_embedding_ref`, the gated `rms_norm_ref`, and the short convolution's nn.Conv1d parent), so that the
projections, feature maps, positions, activations and norms are fla's code as it runs on a GPU.
"""

import warnings

import pytest
import torch
import torch.nn.functional as F

from loglinear.models import build_model
from loglinear.models.config import ModelConfig

from .helpers import rel_err

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    pytest.importorskip("fla.layers", reason="flash-linear-attention (the test extra) not installed")
    import fla.layers.delta_net
    import fla.layers.linear_attn
    import fla.layers.multiscale_retention
    import fla.modules.rotary.ops
    from fla.modules.norm import layernorm, layernorm_gated
    from fla.ops.delta_rule.naive import delta_rule_recurrence
    from fla.ops.linear_attn.naive import naive_chunk_linear_attn
    from fla.ops.retention.naive import naive_retention

D_MODEL, HEADS, EXPAND = 16, 2, 2
EXACT = 1e-10
"""fla's references compute in float64 here: agreement to float64's rounding."""
RETENTION_TOL = 2e-6
"""fla's retention references round two tables to float32 whatever the input's dtype: the decay mask
(`naive_retention`) and the rotary angles (`RotaryEmbedding`'s positions times inverse frequencies); measured at
most 2.1e-7 over these lengths; a different function differs by orders more."""
DELTA_TOL = 1e-10


@pytest.fixture
def keep_float64(monkeypatch):
    """fla's delta-rule and retention references cast their inputs to float32 (`.float()`) whatever their dtype: here
    `.float()` leaves a float64 tensor as it is, so that the comparison measures the function, not the rounding."""
    to_float = torch.Tensor.float

    def keep(x, *args, **kwargs):
        return x if x.dtype == torch.float64 else to_float(x, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "float", keep)


def plain_rms_norm(monkeypatch, norm):
    """fla's RMSNorm module `norm` through fla's reference `rms_norm_ref`."""
    monkeypatch.setattr(norm, "forward", lambda x, *a, **k: layernorm.rms_norm_ref(x, norm.weight, norm.bias,
                                                                                   eps=norm.eps))


def plain_short_conv(monkeypatch, conv):
    """fla's ShortConvolution `conv` (an nn.Conv1d padded by k - 1 on both sides) through its nn.Conv1d parent, cut to
    the causal outputs, then its activation (silu)."""
    assert conv.activation == "silu"

    def forward(x, *args, **kwargs):
        y = torch.nn.Conv1d.forward(conv, x.transpose(1, 2))[..., : x.shape[1]].transpose(1, 2)
        return F.silu(y), None

    monkeypatch.setattr(conv, "forward", forward)


def our_mixer(mixer: str, **options):
    cfg = ModelConfig(mixer=mixer, d_model=D_MODEL, n_layers=1, vocab_size=32, max_len=256, impl="chunk",
                      expand=EXPAND, **options)
    return build_model(cfg, seed=0).double().blocks[0].mixer


def copy_projections(ours, names: list[str], ref) -> None:
    """Our fused input projection's row blocks, in order, into the reference's projections `names`; the output
    projection into its o_proj."""
    with torch.no_grad():
        blocks = ours.in_proj.weight.split([getattr(ref, n).weight.shape[0] for n in names])
        for name, block in zip(names, blocks, strict=True):
            getattr(ref, name).weight.copy_(block)
        ref.o_proj.weight.copy_(ours.out_proj.weight)


def assert_same_function(ours, ref, T: int, tol: float) -> None:
    """The forward on a random input, then the backward of both from the same random output gradient."""
    x = torch.randn(2, T, D_MODEL, dtype=torch.float64, generator=torch.Generator().manual_seed(T))
    y, y_ref = ours(x), ref(x)[0]
    assert rel_err(y.detach(), y_ref.detach()) < tol
    dy = torch.randn(y.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(T + 1))
    (y * dy).sum().backward()
    (y_ref * dy).sum().backward()


def assert_grads(pairs, tol: float) -> None:
    """Each (name, our gradient, the reference's) agrees within tol."""
    for name, ours, theirs in pairs:
        assert rel_err(ours, theirs) < tol, name


def projection_grads(ours, names, ref):
    """(name, ours, theirs) for the reference's projections `names` (our input projection's row blocks) and o_proj."""
    blocks = ours.in_proj.weight.grad.split([getattr(ref, n).weight.shape[0] for n in names])
    pairs = [(n, b, getattr(ref, n).weight.grad) for n, b in zip(names, blocks, strict=True)]
    return [*pairs, ("o_proj", ours.out_proj.weight.grad, ref.o_proj.weight.grad)]


@pytest.mark.parametrize("T", [64, 128])
def test_linear_attention_computes_flas_layer(T, monkeypatch):
    """T a multiple of 64: fla's `naive_chunk_linear_attn` works in chunks of 64 (and computes in the input's dtype)."""
    ours = our_mixer("linear_attention", linear_attention_heads=HEADS)
    ref = fla.layers.linear_attn.LinearAttention(hidden_size=D_MODEL, expand_v=EXPAND, num_heads=HEADS,
                                                 norm_eps=ours.norm.eps).double()

    def chunk_linear_attn(q, k, v, initial_state=None, output_final_state=False, normalize=False, **kwargs):
        assert initial_state is None and not output_final_state and not normalize
        return naive_chunk_linear_attn(q, k, v), None

    monkeypatch.setattr(fla.layers.linear_attn, "chunk_linear_attn", chunk_linear_attn)
    plain_rms_norm(monkeypatch, ref.norm)
    names = ["q_proj", "k_proj", "v_proj"]
    copy_projections(ours, names, ref)
    ref.load_state_dict({**ref.state_dict(), **{k: v for k, v in ours.state_dict().items() if "feature_map" in k},
                         "norm.weight": ours.norm.weight.detach()})
    assert_same_function(ours, ref, T, EXACT)
    pairs = projection_grads(ours, names, ref) + [("norm", ours.norm.weight.grad, ref.norm.weight.grad)]
    for fmap in ("feature_map_q", "feature_map_k"):
        for layer in ("layer1", "layer2"):
            for p in ("weight", "bias"):
                name = f"{fmap}.{layer}.{p}"
                pairs.append((name, ours.get_parameter(name).grad, ref.get_parameter(name).grad))
    assert_grads(pairs, EXACT)


def plain_rotary(monkeypatch):
    def rotary_embedding(x, cos, sin, interleaved=False, seqlen_offsets=0, cu_seqlens=None, **kwargs):
        assert isinstance(seqlen_offsets, int) and cu_seqlens is None
        T = x.shape[1]
        return fla.modules.rotary.ops.rotary_embedding_ref(
            x, cos[seqlen_offsets: seqlen_offsets + T], sin[seqlen_offsets: seqlen_offsets + T], interleaved)

    monkeypatch.setattr(fla.modules.rotary.ops, "rotary_embedding", rotary_embedding)


@pytest.mark.parametrize("T", [1, 37, 100])
def test_retnet_computes_flas_layer(T, monkeypatch, keep_float64):
    ours = our_mixer("retnet", retnet_heads=HEADS)
    ref = fla.layers.multiscale_retention.MultiScaleRetention(hidden_size=D_MODEL, expand_v=EXPAND, num_heads=HEADS,
                                                              norm_eps=ours.norm.eps).double()

    def chunk_retention(q, k, v, initial_state=None, output_final_state=False, **kwargs):
        assert initial_state is None and not output_final_state
        return naive_retention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)).transpose(1, 2), None

    monkeypatch.setattr(fla.layers.multiscale_retention, "chunk_retention", chunk_retention)
    plain_rotary(monkeypatch)
    gate_norm = ref.g_norm_swish_gate
    assert gate_norm.activation == "swish"
    monkeypatch.setattr(gate_norm, "forward", lambda x, g, *a, **k: layernorm_gated.rms_norm_ref(
        x, gate_norm.weight, gate_norm.bias, z=g, eps=gate_norm.eps, norm_before_gate=True, upcast=False))
    names = ["q_proj", "k_proj", "v_proj", "g_proj"]
    copy_projections(ours, names, ref)
    with torch.no_grad():
        gate_norm.weight.copy_(ours.norm.weight)
    assert_same_function(ours, ref, T, RETENTION_TOL)
    assert_grads(projection_grads(ours, names, ref) + [("norm", ours.norm.weight.grad, gate_norm.weight.grad)],
                 RETENTION_TOL)


def l2_normalise(x):
    """fla's l2norm kernel (`l2norm_fwd`): x / sqrt(sum(x^2) + 1e-6) over the last axis."""
    return x / torch.sqrt(x.pow(2).sum(-1, keepdim=True) + 1e-6)


@pytest.mark.parametrize("negative", [False, True])
@pytest.mark.parametrize("T", [1, 37, 100])
def test_deltanet_computes_flas_layer(T, negative, monkeypatch, keep_float64):
    """Lengths on both sides of 64, where the layer switches from its recurrent kernel to its chunked one."""
    ours = our_mixer("deltanet", deltanet_heads=HEADS, negative_eigenvalues=negative)
    ref = fla.layers.delta_net.DeltaNet(hidden_size=D_MODEL, expand_v=EXPAND, num_heads=HEADS, norm_eps=ours.norm.eps,
                                        conv_size=ours.conv.kernel_size, allow_neg_eigval=negative).double()

    def delta_rule(q, k, v, beta, initial_state=None, output_final_state=False, use_qk_l2norm_in_kernel=False,
                   **kwargs):
        assert initial_state is None and use_qk_l2norm_in_kernel
        q, k, v, beta = (t.transpose(1, 2) for t in (l2_normalise(q), l2_normalise(k), v, beta))
        o, _ = delta_rule_recurrence(q, k, v, beta)
        return o.transpose(1, 2), None

    for kernel in ("chunk_delta_rule", "fused_recurrent_delta_rule"):
        monkeypatch.setattr(fla.layers.delta_net, kernel, delta_rule)
    convs = [ref.q_conv1d, ref.k_conv1d, ref.v_conv1d]
    for conv in convs:
        plain_short_conv(monkeypatch, conv)
    plain_rms_norm(monkeypatch, ref.o_norm)
    names = ["q_proj", "k_proj", "v_proj", "b_proj"]
    copy_projections(ours, names, ref)
    with torch.no_grad():
        for conv, w in zip(convs, ours.conv.weight.split([c.weight.shape[0] for c in convs]), strict=True):
            conv.weight.copy_(w[:, None])
        ref.o_norm.weight.copy_(ours.norm.weight)
    assert_same_function(ours, ref, T, DELTA_TOL)
    conv_grads = ours.conv.weight.grad.split([c.weight.shape[0] for c in convs])
    pairs = [(f"conv{i}", g, c.weight.grad[:, 0]) for i, (g, c) in enumerate(zip(conv_grads, convs, strict=True))]
    assert_grads(projection_grads(ours, names, ref) + pairs + [("norm", ours.norm.weight.grad, ref.o_norm.weight.grad)],
                 DELTA_TOL)
