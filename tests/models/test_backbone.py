"""The language model: score_mask, tied head, MLP, parameter report, weight-decay groups, the paper's MQAR sizes."""

import pytest
import torch

from loglinear.models import MIXERS, ModelConfig, build_model, no_weight_decay, param_groups
from loglinear.models.lambda_params import LambdaParam

from .helpers import BASE_OF, LOG_LINEAR

# Parameter counts at the paper's MQAR sizes (vocab 8192, 2 layers, no MLP, tied head, max_len 256:
# 9 lambda levels), as printed by test_paper_mqar_sizes_build_and_report (-s to see them):
#   d_model  mixer                       total    mixers  lambda  +% mixers  +% model
#   16       log_linear_mamba2         136,608     5,488     612      12.55      0.45
#   16       log_linear_gated_deltanet 136,166     5,046     306       6.46      0.23
#   32       log_linear_mamba2         280,320    18,080   2,376      15.13      0.85
#   32       log_linear_gated_deltanet 281,164    18,924   1,188       6.70      0.42
#   64       log_linear_mamba2         590,016    65,536   9,360      16.66      1.61
#   64       log_linear_gated_deltanet 595,052    70,572   2,340       3.43      0.39
# Mamba-2 has d_inner / 16 heads at head dim 16, so its heads x levels lambda columns weigh more
# than at the paper's LM scale (48 heads of dim 64 at d_model 1536: < 3% there).


@pytest.mark.parametrize("mixer", MIXERS.names())
def test_score_mask_returns_the_scored_rows(tiny, mixer):
    torch.manual_seed(0)
    model = build_model(tiny(mixer=mixer)).double()
    inputs = torch.randint(0, 32, (3, 17))
    mask = torch.rand(3, 17) < 0.2
    mask[0, 0] = True
    with torch.no_grad():
        full, scored = model(inputs), model(inputs, score_mask=mask)
    assert full.shape == (3, 17, 32) and scored.shape == (int(mask.sum()), 32)
    torch.testing.assert_close(scored, full[mask])


def test_score_mask_is_checked(tiny):
    model = build_model(tiny(mixer="attention"))
    inputs = torch.zeros(2, 5, dtype=torch.long)
    with pytest.raises(ValueError, match="score_mask must be a bool tensor of the inputs' shape \\(2, 5\\)"):
        model(inputs, score_mask=torch.ones(2, 5))
    with pytest.raises(ValueError, match="score_mask"):
        model(inputs, score_mask=torch.ones(2, 4, dtype=torch.bool))


def test_tied_and_untied_heads(tiny):
    tied, untied = build_model(tiny(tie_embeddings=True)), build_model(tiny(tie_embeddings=False))
    assert tied.lm_head.weight is tied.embedding.weight
    assert untied.lm_head.weight is not untied.embedding.weight
    assert untied.param_report().total - tied.param_report().total == 32 * 16
    assert tied.param_report().embedding == 32 * 16


def test_param_report_adds_up(tiny):
    for mixer in MIXERS.names():
        model = build_model(tiny(mixer=mixer, mlp_ratio=4.0, tie_embeddings=False))
        r = model.param_report()
        assert r.total == sum(p.numel() for p in model.parameters())
        assert r.total == r.embedding + r.mixers + r.mlps + r.norms
        assert r.mlps == 2 * (16 * 128 + 64 * 16)  # SwiGLU: w_in d x 2h, w_out h x d, per layer
        assert r.norms == 16 * (2 * 2 + 1)  # two per block and the final norm
        assert (r.lambda_heads > 0) == (mixer in LOG_LINEAR)


@pytest.mark.parametrize("mixer", ["attention", "log_linear_gated_deltanet"])
def test_the_decoder_head_reads_every_position_from_the_last_one(tiny, mixer):
    model = build_model(tiny(mixer=mixer, output_head="decoder"), seed=0).double()
    inputs = torch.randint(0, 32, (2, 9))
    later = inputs.clone()
    later[:, 7] = (later[:, 7] + 1) % 32
    with torch.no_grad():
        logits, changed = model(inputs), model(later)
        states = model.embedding(inputs)
        for block in model.blocks:
            states = block(states)
    assert not torch.allclose(logits[:, 0], changed[:, 0])  # position 0 sees a later token: it reads the last state
    assert not torch.allclose(logits[:, 0], logits[:, 1])  # the positions are told apart
    features = model.head.positions[:9] + states[:, -1:]
    features = torch.nn.functional.gelu(model.head.proj_in(model.head.norm_in(features)))
    features = torch.nn.functional.gelu(model.head.proj_out(model.head.norm_out(features)))
    torch.testing.assert_close(logits, model.lm_head(model.norm(features)))
    report = model.param_report()
    assert report.output_head == 2 * (16 * 16 + 16) + 2 * 16 and report.total == sum(
        p.numel() for p in model.parameters())
    assert report.total == report.embedding + report.mixers + report.mlps + report.norms + report.output_head
    with pytest.raises(ValueError, match="output_head=decoder decodes every position .* no token-by-token decoding"):
        model.step(inputs[:, 0], model.init_cache(2))


def test_an_unknown_output_head_names_the_valid_ones(tiny):
    with pytest.raises(ValueError, match=r"ModelConfig.output_head: unknown output head 'mlp'; valid: lm, decoder"):
        tiny(output_head="mlp")


def test_lambda_head_count_includes_its_projection(tiny):
    model = build_model(tiny(mixer="log_linear_mamba2", max_len=64, lambda_share_from_level=3))
    mixer = model.blocks[0].mixer
    H, distinct = mixer.n_heads, 4
    assert mixer.lambda_head.proj.weight.shape == (H * distinct, 16)
    own = 2 * H * distinct if mixer.lambda_head.param.bias is not None else H * distinct  # softplus scale (+ bias)
    assert mixer.lambda_parameter_count() == own + H * distinct * 16
    assert model.param_report().lambda_heads == 2 * mixer.lambda_parameter_count()


def test_param_groups_exempt_norms_biases_embeddings_ssm_and_lambda(tiny):
    model = build_model(tiny(mixer="log_linear_mamba2", lambda_bias_init="zero", mlp_ratio=2.0))
    decay, exempt = param_groups(model, 0.1)
    assert decay["weight_decay"] == 0.1 and exempt["weight_decay"] == 0.0
    names = {id(p): n for n, p in model.named_parameters()}
    exempt_names = {names[id(p)] for p in exempt["params"]}
    decay_names = {names[id(p)] for p in decay["params"]}
    assert not exempt_names & decay_names
    assert exempt_names | decay_names == set(names.values())
    for suffix in (
        "A_log",
        "dt_bias",
        "D",
        "conv.bias",
        "norm.weight",
        "lambda_head.param.scale",
        "lambda_head.param.bias",
    ):
        assert f"blocks.0.mixer.{suffix}" in exempt_names, suffix
    assert "embedding.weight" in exempt_names and "blocks.1.mixer_norm.weight" in exempt_names
    assert decay_names == {
        f"blocks.{i}.{n}"
        for i in range(2)
        for n in (
            "mixer.in_proj.weight",
            "mixer.lambda_head.proj.weight",
            "mixer.conv.weight",
            "mixer.out_proj.weight",
            "mlp.w_in.weight",
            "mlp.w_out.weight",
        )
    }
    lambda_params = {id(p) for m in model.modules() if isinstance(m, LambdaParam) for p in m.parameters()}
    assert lambda_params and lambda_params <= no_weight_decay(model)


def test_param_groups_survive_copies(tiny):
    import copy

    model = copy.deepcopy(build_model(tiny(mixer="log_linear_gated_deltanet", lambda_bias_init="zero")).double())
    exempt = {n for n, p in model.named_parameters() if id(p) in no_weight_decay(model)}
    assert "blocks.0.mixer.lambda_head.param.scale" in exempt


@pytest.mark.parametrize("d_model", [16, 32, 64])
def test_paper_mqar_sizes_build_and_report(d_model, capsys):
    """Mamba-2 state and head dim 16; Gated DeltaNet 2 heads (1 at d_model 16); overheads in the module comment."""
    base = dict(d_model=d_model, n_layers=2, vocab_size=8192, max_len=256, head_dim=16, state_dim=16)
    reports = {}
    for mixer in MIXERS.names():
        model = build_model(ModelConfig(mixer=mixer, **base))
        reports[mixer] = r = model.param_report()
        print(f"d_model {d_model:3d} {mixer:26s} {r}")
    gdn = build_model(ModelConfig(mixer="gated_deltanet", **base)).blocks[0].mixer
    assert gdn.n_heads == (1 if d_model == 16 else 2)
    m2 = build_model(ModelConfig(mixer="mamba2", **base)).blocks[0].mixer
    assert (m2.key_dim, m2.value_dim, m2.n_heads) == (16, 16, 2 * d_model // 16)
    for mixer, base_mixer in BASE_OF.items():
        r = reports[mixer]
        assert r.total - r.lambda_heads == reports[base_mixer].total  # the head is the only difference
        assert 0 < r.overhead_vs_model_pct < 2
    expected = {16: (612, 306), 32: (2376, 1188), 64: (9360, 2340)}[d_model]
    assert (reports["log_linear_mamba2"].lambda_heads, reports["log_linear_gated_deltanet"].lambda_heads) == expected


@pytest.mark.parametrize(
    "mixer, fields, paper_millions",
    [
        ("log_linear_mamba2", dict(head_dim=64, state_dim=128), 825 - 802),  # 48 heads
        ("log_linear_gated_deltanet", dict(deltanet_heads=6), 796 - 793),
    ],
)
def test_lambda_heads_match_the_paper_at_lm_scale(mixer, fields, paper_millions):
    """The paper's LM (21 layers, d_model 1536, 16K tokens: 15 levels) adds 23M (Mamba-2) and 3M (GDN) parameters."""
    cfg = ModelConfig(mixer=mixer, d_model=1536, max_len=16384, **fields)
    per_layer = MIXERS[mixer](cfg).lambda_parameter_count()
    assert abs(21 * per_layer / 1e6 - paper_millions) < 0.5
