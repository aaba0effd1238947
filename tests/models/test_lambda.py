"""Lambda parameterisations: formulas and ranges, bias initialisations, level sharing, constant == base mixer."""

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import example, given, settings
from hypothesis import strategies as st

from loglinear.models import LAMBDA_PARAMS, MIXERS, LambdaHead, build_model
from loglinear.models.init import INIT_STD, init_from_seed

from .helpers import BASE_OF, LOG_LINEAR, decode

DATA_DEPENDENT = ["softplus", "bounded", "sigmoid", "softmax", "mlp"]
D = 6  # the heads' input width


def head_and_output(name, H=2, L=5, share=None, bias_init="none", lead=(3, 7), seed=0):
    """A float64 head, its projected inputs dl = W_lambda x (None without a projection) and its output."""
    torch.manual_seed(seed)
    head = LambdaHead(name, D, H, L, share_from=share, bias_init=bias_init).double()
    x = torch.randn(*lead, D, dtype=torch.float64)
    dl = None if head.proj is None else head.proj(x)
    return head, dl, head(x, torch.zeros(*lead, H, dtype=torch.float64))


def test_formulas():
    head, dl, lam = head_and_output("softplus", bias_init="decay")
    u = dl.unflatten(-1, (2, 5))
    p = head.param
    torch.testing.assert_close(lam, F.softplus(p.scale * u + p.bias))
    head, dl, lam = head_and_output("bounded")
    torch.testing.assert_close(lam, torch.exp(-head.param.scale.exp() * F.softplus(dl.unflatten(-1, (2, 5)))))
    head, dl, lam = head_and_output("sigmoid", bias_init="zero")
    torch.testing.assert_close(lam, torch.sigmoid(dl.unflatten(-1, (2, 5))))
    head, dl, lam = head_and_output("softmax")
    torch.testing.assert_close(lam, 5 * torch.softmax(dl.unflatten(-1, (2, 5)), -1))


def test_the_mlp_formula_by_hand():
    """mlp: lambda = softplus(W_out silu(W_hidden x + b_hidden) + b_out + b_l), hidden width d_model, one weight per
    (head, level) from the MLP's outputs; its layers start as the suite's linear layers (N(0, 0.02^2), biases 0)."""
    head = LambdaHead("mlp", D, 2, 5, share_from=None, bias_init="decay").double()
    mlp = head.proj
    assert (mlp.hidden.in_features, mlp.hidden.out_features, mlp.out.out_features) == (D, D, 2 * 5)
    x = torch.randn(3, D, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    hidden = x @ mlp.hidden.weight.T + mlp.hidden.bias
    u = (hidden * torch.sigmoid(hidden)) @ mlp.out.weight.T + mlp.out.bias
    expected = torch.log1p(torch.exp(u.unflatten(-1, (2, 5)) + head.param.bias))
    torch.testing.assert_close(head(x, torch.zeros(3, 2, dtype=torch.float64)), expected)
    init_from_seed(head, 0)
    assert (mlp.hidden.bias == 0).all() and (mlp.out.bias == 0).all()
    assert abs(mlp.hidden.weight.std().item() / INIT_STD - 1) < 0.5
    start = LambdaHead("mlp", D, 2, 5, share_from=None, bias_init="none")
    init_from_seed(start, 0)
    lam = start(torch.randn(4, D, generator=torch.Generator().manual_seed(2)), torch.zeros(4, 2))
    torch.testing.assert_close(lam, torch.full_like(lam, math.log(2)), rtol=0, atol=1e-2)  # near softplus(0)


@pytest.mark.parametrize("name", LAMBDA_PARAMS.names())
def test_ranges_and_data_dependence(name):
    head, dl, lam = head_and_output(name, bias_init="zero")
    assert lam.shape == (3, 7, 2, 5) and lam.dtype == torch.float64 and torch.isfinite(lam).all()
    assert (lam >= 0).all()
    if name in ("bounded", "sigmoid"):
        assert (lam > 0).all() and (lam < 1).all()
    if name == "softmax":
        torch.testing.assert_close(lam.sum(-1), torch.full((3, 7, 2), 5.0, dtype=torch.float64))
    if name == "constant":
        assert (lam == 1).all() and not list(head.parameters())
    varies = (lam - lam[:1, :1]).abs().amax() > 0
    assert bool(varies) == (name in DATA_DEPENDENT) == (head.proj is not None)


def test_paper_initialisation():
    """softplus with L = 1 and no bias: lambda = softplus(dl), ln 2 on every level where dl = 0 (the paper's head)."""
    head = LambdaHead("softplus", D, 3, 4, share_from=None, bias_init="none")
    assert head.param.bias is None and (head.param.scale == 1).all()
    lam = head(torch.zeros(1, D), torch.zeros(1, 3))
    torch.testing.assert_close(lam, torch.full((1, 3, 4), math.log(2)))


@pytest.mark.parametrize("name", [n for n in LAMBDA_PARAMS.names() if n != "constant"])
@pytest.mark.parametrize("bias_init", ["zero", "ones", "decay"])
def test_bias_initialisations_hit_their_targets(name, bias_init):
    L = 6
    head = LambdaHead(name, D, 2, L, share_from=None, bias_init=bias_init)
    with torch.no_grad():
        for p in [] if head.proj is None else head.proj.parameters():
            p.zero_()  # dl = 0 whatever x (an MLP's biases too)
    lam = head(torch.zeros(1, D), torch.zeros(1, 2))[0]  # where dl = 0
    if bias_init == "zero":
        assert (head.param.bias == 0).all()
        return
    target = torch.ones(L) if bias_init == "ones" else 2.0 ** -torch.arange(L)
    if name == "softmax":
        target = L * target / target.sum()
    elif name in ("bounded", "sigmoid"):
        target = target.clamp(0.05, 0.95)
    torch.testing.assert_close(lam, target.expand(2, L), rtol=1e-5, atol=1e-6)


@settings(max_examples=25)
@given(
    name=st.sampled_from(LAMBDA_PARAMS.names()), H=st.integers(1, 4), L=st.integers(1, 10),
    share=st.one_of(st.none(), st.integers(1, 12)), bias_init=st.sampled_from(["none", "zero", "decay"]),
)
@example(name="softplus", H=1, L=10, share=1, bias_init="none")  # once tied levels rounded apart by 1 ulp
def test_level_sharing_ties_parameters(name, H, L, share, bias_init):
    head, dl, lam = head_and_output(name, H=H, L=L, share=share, bias_init=bias_init, lead=(2, 3))
    distinct = L if share is None else min(L, share + 1)
    outputs = None if head.proj is None else head.proj(torch.zeros(1, D, dtype=torch.float64)).shape[-1]
    assert outputs == (H * distinct if name in DATA_DEPENDENT else None)
    for p in head.param.parameters():
        assert p.shape == (H, distinct)
    if distinct < L:
        # every level from `share` on holds the same value (softmax: the tied logits' equal probabilities)
        assert (lam[..., share:] == lam[..., share : share + 1]).all()
        # the deepest level trains the shared slot
        if list(head.param.parameters()):
            lam[..., -1].sum().backward()
            assert any(p.grad[:, share].abs().sum() > 0 for p in head.param.parameters())


def test_levels_for_cuts_to_the_sequence():
    head = LambdaHead("softplus", D, 1, 9, share_from=None, bias_init="none")  # sequences up to 256
    lam = torch.rand(1, 5, 1, 9)
    assert head.max_len == 256
    assert head.levels_for(lam, 5).shape[-1] == 4 and head.levels_for(lam, 256).shape[-1] == 9
    with pytest.raises(ValueError, match="sequence length 257 needs 10 lambda levels"):
        head.levels_for(lam, 257)


@pytest.mark.parametrize("negative_eigenvalues", [False, True])
@pytest.mark.parametrize("mixer", LOG_LINEAR)
def test_constant_lambda_equals_base_mixer(tiny, mixer, negative_eigenvalues):
    """Built at the same seed, with constant lambda 1 (and without the official GDN's lambda scale, which
    makes the constant lambda sqrt(K)), a log-linear model has its base's weights bitwise (same keys,
    shapes and values) and its outputs to 1e-12 in float64, parallel and decoding."""
    common = dict(negative_eigenvalues=negative_eigenvalues)
    base = build_model(tiny(mixer=BASE_OF[mixer], **common), seed=7).double()
    loglin = build_model(tiny(mixer=mixer, lambda_param="constant", scale_lambda=False, **common), seed=7).double()
    base_state, loglin_state = base.state_dict(), loglin.state_dict()
    assert base_state.keys() == loglin_state.keys()
    for key, value in base_state.items():
        assert torch.equal(loglin_state[key], value), key
    inputs = torch.randint(0, 32, (2, 29))
    with torch.no_grad():
        torch.testing.assert_close(loglin(inputs), base(inputs), rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(decode(loglin, inputs[:, :9]), decode(base, inputs[:, :9]), rtol=1e-12, atol=1e-12)
    assert loglin.param_report().lambda_heads == 0


def test_log_linear_mixers_only_add_a_lambda_head(tiny):
    """The log-linear mixer is its base class plus `lambda_head`: every parameter of the base has its shape."""
    for mixer in LOG_LINEAR:
        base, loglin = MIXERS[BASE_OF[mixer]], MIXERS[mixer]
        assert issubclass(loglin, base)
        b, ll = base(tiny(mixer=BASE_OF[mixer])), loglin(tiny(mixer=mixer))
        extra = {k: v.shape for k, v in ll.state_dict().items()}
        for key, value in b.state_dict().items():
            assert extra.pop(key) == value.shape, key
        assert extra and all(k.startswith("lambda_head.") for k in extra)
