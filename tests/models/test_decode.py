"""Token-by-token decoding reproduces the parallel logits (float64, 1e-8 relative) for every mixer."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from loglinear.models import LAMBDA_PARAMS, MIXERS, build_model

from .helpers import LOG_LINEAR, decode, rel_err

TOL = 1e-8


def _check(cfg, T, batch=2, seed=0):
    torch.manual_seed(seed)
    model = build_model(cfg).double()
    inputs = torch.randint(0, cfg.vocab_size, (batch, T))
    with torch.no_grad():
        assert rel_err(decode(model, inputs), model(inputs)) < TOL


@pytest.mark.parametrize("negative_eigenvalues", [False, True])
@pytest.mark.parametrize("mixer", MIXERS.names())
def test_decode_matches_parallel(tiny, mixer, negative_eigenvalues):
    """T = 21: not a power of two and longer than the chunk (8); MLP on to cover the whole block."""
    _check(tiny(mixer=mixer, negative_eigenvalues=negative_eigenvalues, mlp_ratio=2.0), T=21)


@pytest.mark.parametrize("lambda_param", LAMBDA_PARAMS.names())
@pytest.mark.parametrize("mixer", LOG_LINEAR)
def test_decode_matches_parallel_every_lambda(tiny, mixer, lambda_param):
    _check(tiny(mixer=mixer, lambda_param=lambda_param, lambda_bias_init="decay"), T=37)


@settings(max_examples=12)
@given(
    mixer=st.sampled_from(LOG_LINEAR),
    lambda_param=st.sampled_from(LAMBDA_PARAMS.names()),
    T=st.integers(1, 40),
    chunk_size=st.sampled_from([2, 4, 16, 64]),
    share=st.sampled_from([None, 1, 3]),
    negative=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_decode_matches_parallel_any_shape(mixer, lambda_param, T, chunk_size, share, negative, seed):
    from loglinear.models import ModelConfig

    cfg = ModelConfig(
        mixer=mixer, d_model=16, n_layers=1, vocab_size=16, max_len=64, chunk_size=chunk_size, impl="chunk",
        lambda_param=lambda_param, lambda_share_from_level=share, negative_eigenvalues=negative,
    )
    _check(cfg, T=T, batch=1, seed=seed)


def test_prefix_logits_do_not_depend_on_the_future(tiny):
    """Causality of the parallel path, for the decode contract's other half."""
    torch.manual_seed(0)
    for mixer in MIXERS.names():
        model = build_model(tiny(mixer=mixer)).double()
        inputs = torch.randint(0, 32, (2, 20))
        changed = inputs.clone()
        changed[:, 12:] = torch.randint(0, 32, (2, 8))
        with torch.no_grad():
            torch.testing.assert_close(model(inputs)[:, :12], model(changed)[:, :12], rtol=1e-12, atol=1e-12)


def test_cache_limits(tiny):
    model = build_model(tiny(mixer="log_linear_mamba2", max_len=16))
    with pytest.raises(ValueError, match="max_len=17 needs more lambda levels.*ModelConfig.max_len"):
        model.init_cache(1, 17)
    cache = model.init_cache(1, 2)
    for _ in range(2):
        _, cache = model.step(torch.zeros(1, dtype=torch.long), cache)
    with pytest.raises(ValueError, match="cache is full"):
        model.step(torch.zeros(1, dtype=torch.long), cache)
    with pytest.raises(ValueError, match="sequence length 17 needs 6 lambda levels.*ModelConfig.max_len"):
        model(torch.zeros(1, 17, dtype=torch.long))
    # base mixers have no level limit: a longer cache and sequence are fine
    build_model(tiny(mixer="mamba2", max_len=16)).init_cache(1, 1000)
