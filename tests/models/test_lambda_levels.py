"""Per-level statistics of lambda: occupied levels, hooks, the level readouts against the operator, statistics."""

import math

import numpy as np
import pytest
import torch

from loglinear.kernels import fenwick_level, log_linear_attn, num_levels
from loglinear.models import build_model
from loglinear.models.lambda_levels import (
    QUANTILES,
    LevelStatistics,
    capture_lambda,
    effective_weights,
    lambda_heads,
    level_output_norms,
    occupied_levels,
)

from .helpers import LOG_LINEAR


def test_occupied_levels_are_the_levels_that_hold_earlier_tokens():
    T, L = 37, 8
    mask = occupied_levels(T, L)
    for t in range(T):
        present = {fenwick_level(t, s) for s in range(t + 1)}
        assert {lv for lv in range(L) if mask[t, lv]} == present
        assert max(present) == t.bit_length()


def test_statistics_count_only_occupied_levels():
    """lambda_t^(l) = t + 100 l: the mean of level l is the mean position of the tokens where it is occupied."""
    B, T, H, L = 3, 13, 2, 6  # L above num_levels(13) = 5: the extra level is never occupied
    t = torch.arange(T, dtype=torch.float32)
    lam = (t[:, None, None] + 100 * torch.arange(L)[None, None, :]).expand(B, T, H, L).clone()
    lam[:, :, 1] += 0.5  # head 1 differs
    stats = LevelStatistics()
    stats.add(0, lam)
    rows = stats.rows()
    assert {r.level for r in rows} == set(range(num_levels(T)))
    for r in rows:
        positions = [p for p in range(T) if r.level == 0 or (p >> (r.level - 1)) & 1]
        values = np.tile(positions, B) + 100 * r.level + 0.5 * r.head
        assert r.tokens == len(values)
        assert r.mean == pytest.approx(values.mean(), abs=1e-9)
        assert r.std == pytest.approx(values.std(), abs=1e-9)
        assert [r.quantiles[q] for q in QUANTILES] == pytest.approx(list(np.quantile(values, QUANTILES)), abs=1e-9)
        assert math.isnan(r.effective_mean) and r.effective_tokens == 0


def test_batches_of_different_lengths_pool_by_level():
    stats = LevelStatistics()
    stats.add(0, torch.full((2, 4, 1, 8), 1.0))  # positions 0..3: levels 0, 1, 2 occupied
    stats.add(0, torch.full((1, 1, 1, 8), 3.0))  # one token: level 0 only
    rows = {r.level: r for r in stats.rows()}
    assert sorted(rows) == [0, 1, 2]
    assert rows[0].tokens == 9 and rows[0].mean == pytest.approx(11 / 9)
    assert rows[1].tokens == 4 and rows[1].mean == 1.0  # positions 1 and 3 of two sequences
    assert rows[2].tokens == 4 and rows[2].std == 0.0


def test_effective_weights_share_the_output():
    lam = torch.tensor([[1.0, 2.0, 0.5], [1.0, 1.0, 1.0]])
    norms = torch.tensor([[1.0, 1.0, 4.0], [0.0, 0.0, 0.0]], dtype=torch.float64)
    w = effective_weights(lam, norms)
    torch.testing.assert_close(w[0], torch.tensor([0.2, 0.4, 0.4], dtype=torch.float64))
    assert torch.isnan(w[1]).all()


def test_capture_lambda_records_every_layer_and_removes_its_hooks(tiny):
    model = build_model(tiny(mixer="log_linear_gated_deltanet", n_layers=3)).eval()
    heads = lambda_heads(model)
    assert len(heads) == 3
    inputs = torch.randint(0, 32, (2, 11))
    with torch.no_grad(), capture_lambda(model) as captured:
        model(inputs)
    assert [len(c) for c in captured] == [1, 1, 1]
    assert captured[0][0].shape == (2, 11, heads[0].n_heads, heads[0].n_levels)
    model(inputs)
    assert [len(c) for c in captured] == [1, 1, 1]  # nothing recorded after the block
    assert not any(h._forward_hooks for h in heads)
    assert lambda_heads(build_model(tiny(mixer="mamba2"))) == []


def _reference_readouts(mixer, x):
    """||S^(l) q_t|| from the operator with a one-hot lambda, on the mixer's own operator inputs (float64)."""
    mixer = mixer.double()
    x = x.double()
    inp, _, _ = mixer.sequence_inputs(x)
    q, k = inp.q, inp.k
    B, T, H = inp.v.shape[:3]
    L = num_levels(T)
    norms = []
    for level in range(L):
        lam = torch.zeros(B, T, H, L, dtype=torch.float64)
        lam[..., level] = 1
        o, _ = log_linear_attn(q, k, inp.v, inp.g, lam, inp.beta, impl="naive")
        norms.append(o.norm(dim=-1))
    return torch.stack(norms, -1)


@pytest.mark.parametrize("mixer_name", LOG_LINEAR)
@pytest.mark.parametrize("negative", [False, True])
def test_level_readouts_match_the_operator(tiny, mixer_name, negative):
    torch.manual_seed(0)
    model = build_model(tiny(mixer=mixer_name, negative_eigenvalues=negative, lambda_param="softmax"))
    mixer = model.blocks[0].mixer
    x = torch.randn(2, 21, 16)
    norms = level_output_norms(mixer, x)
    L = num_levels(21)
    assert norms.shape == (2, 21, mixer.lambda_head.n_heads, mixer.lambda_head.n_levels)
    torch.testing.assert_close(norms[..., :L], _reference_readouts(mixer, x), rtol=1e-9, atol=1e-12)
    assert (norms[..., L:] == 0).all()
    empty = ~occupied_levels(21, norms.shape[-1])
    assert (norms.transpose(2, 3)[:, empty] == 0).all()  # a level that holds no token reads nothing


def test_quantiles_beyond_the_sample_size_come_from_a_uniform_sample():
    stats = LevelStatistics(quantile_sample=500)
    values = torch.linspace(0, 1, 4000, dtype=torch.float64)[
        torch.randperm(4000, generator=torch.Generator().manual_seed(1))
    ]
    for chunk in values.float().reshape(8, 500):
        stats.add(0, chunk.reshape(500, 1, 1, 1))  # 500 sequences of one token: level 0 only
    (row,) = stats.rows()
    assert row.tokens == 4000
    assert row.mean == pytest.approx(float(values.float().double().mean()), abs=1e-12)  # mean and std over every token
    assert row.std == pytest.approx(float(values.float().double().std(unbiased=False)), abs=1e-9)
    assert [row.quantiles[q] for q in QUANTILES] == pytest.approx(list(QUANTILES), abs=0.05)
