"""Every linear mixer gives the same logits and parameter gradients on the fused kernels as on the chunk path.

On CPU the kernels run in Triton's interpreter (tests/conftest.py), so the models are tiny.
"""

import pytest
import torch

from loglinear.models import ModelConfig, build_model

from .helpers import LINEAR

pytest.importorskip("triton")


@pytest.mark.parametrize("negative_eigenvalues", [False, True], ids=["positive", "negative_eig"])
@pytest.mark.parametrize("mixer", LINEAR)
def test_fused_impl_matches_chunk(mixer, negative_eigenvalues):
    logits, grads = {}, {}
    for impl in ("chunk", "triton"):
        torch.manual_seed(0)
        cfg = ModelConfig(mixer=mixer, d_model=32, n_layers=1, vocab_size=64, max_len=64, impl=impl, chunk_size=16,
                          negative_eigenvalues=negative_eigenvalues)
        model = build_model(cfg)
        tokens = torch.randint(0, 64, (2, 40), generator=torch.Generator().manual_seed(1))
        out = model(tokens)
        out.square().mean().backward()
        logits[impl] = out.detach()
        grads[impl] = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    assert torch.allclose(logits["triton"], logits["chunk"], rtol=1e-4, atol=1e-5)
    assert grads["triton"].keys() == grads["chunk"].keys()
    for name, g in grads["chunk"].items():
        err = (grads["triton"][name] - g).norm() / g.norm().clamp_min(1e-12)
        assert err < 1e-3, f"{name}: relative gradient error {err:.2e}"
