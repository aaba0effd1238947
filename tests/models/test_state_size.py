"""`Mixer.state_size(T)` equals the numbers the real decoding cache holds for one sequence after T tokens."""

import pytest
import torch

from loglinear.kernels import occupied_levels
from loglinear.models import MIXERS, build_model
from loglinear.models.attention import KVCache
from loglinear.models.linear_mixer import RecurrentCache

LENGTHS = (1, 63, 64, 65, 256)


def held_per_sequence(cache, batch_size: int) -> int:
    """Elements of the tensors a layer's cache holds, divided by the batch: the filled part of a KV cache;
    a recurrent cache's convolution window (if any), sign and the level states that are not all zero."""
    if isinstance(cache, KVCache):
        held = cache.k[:, :, : cache.length].numel() + cache.v[:, :, : cache.length].numel()
    else:
        assert isinstance(cache, RecurrentCache)
        levels = cache.state.levels  # (B, H, L, V, K)
        occupied = levels.flatten(3).ne(0).any(-1)  # (B, H, L)
        held = (0 if cache.conv is None else cache.conv.numel()) + int(occupied.sum()) * levels[0, 0, 0].numel()
        held += 0 if cache.sign is None else cache.sign.numel()
    assert held % batch_size == 0
    return held // batch_size


WIDER_KEYS = {"deltanet_key_dim": 11}  # Gated DeltaNet's key dim set apart from d_model / heads


@pytest.mark.parametrize("negative_eigenvalues", [False, True])
@pytest.mark.parametrize("mixer, options", [(m, {}) for m in MIXERS.names()]
                         + [(m, WIDER_KEYS) for m in ("gated_deltanet", "log_linear_gated_deltanet")])
def test_state_size_counts_the_decoding_cache(tiny, mixer, options, negative_eigenvalues):
    torch.manual_seed(0)
    cfg = tiny(mixer=mixer, max_len=1024, negative_eigenvalues=negative_eigenvalues, **options)
    model = build_model(cfg)
    batch = 2
    cache = model.init_cache(batch)
    tokens = torch.randint(0, cfg.vocab_size, (batch, max(LENGTHS)))
    counted = {}
    with torch.no_grad():
        for t in range(max(LENGTHS)):
            _, cache = model.step(tokens[:, t], cache)
            if t + 1 in LENGTHS:
                counted[t + 1] = [held_per_sequence(layer, batch) for layer in cache.layers]
    assert counted == {T: model.state_sizes(T) for T in LENGTHS}


def test_log_linear_state_grows_with_the_occupied_levels(tiny):
    """At T = 64 the Fenwick hierarchy holds 7 levels, at T = 65 two (64 keys merged into one level, one new),
    at T = 256 nine (255 has eight bits set)."""
    assert [occupied_levels(T) for T in LENGTHS] == [1, 6, 7, 2, 9]
    model = build_model(tiny(mixer="log_linear_mamba2", max_len=1024))
    base = build_model(tiny(mixer="mamba2", max_len=1024))
    mixer, base_mixer = model.blocks[0].mixer, base.blocks[0].mixer
    per_level = mixer.n_heads * mixer.key_dim * mixer.value_dim
    for T in LENGTHS:
        assert mixer.state_size(T) - base_mixer.state_size(T) == (occupied_levels(T) - 1) * per_level


def test_attention_state_grows_linearly(tiny):
    mixer = build_model(tiny(mixer="attention", max_len=1024)).blocks[0].mixer
    assert [mixer.state_size(T) for T in LENGTHS] == [2 * 16 * T for T in LENGTHS]


@pytest.mark.parametrize("mixer", MIXERS.names())
def test_state_size_needs_a_token(tiny, mixer):
    with pytest.raises(ValueError, match="seq_len"):
        build_model(tiny(mixer=mixer)).blocks[0].mixer.state_size(0)
