from collections.abc import Callable

import pytest

from loglinear.models import ModelConfig


@pytest.fixture
def tiny() -> Callable[..., ModelConfig]:
    """ModelConfig factory at test sizes: d_model 16, 2 layers, vocab 32, max_len 64, chunk 8 (so T > chunk
    is cheap)."""

    def make(**overrides: object) -> ModelConfig:
        fields = dict(d_model=16, n_layers=2, vocab_size=32, max_len=64, chunk_size=8, impl="chunk")
        fields.update(overrides)
        return ModelConfig(**fields)

    return make
