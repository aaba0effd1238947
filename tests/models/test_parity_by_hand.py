"""Signed decays can express parity: a 1-layer model with hand-set weights computes the running parity of 512 bits
exactly (every position's argmax), through the dense operator, the chunk path and the decoding step.

The construction, in words. The embedding puts bit b on axis b (axes 0, 1); every projection that must not depend
on the bit reads both axes equally, the ones that must read axis 1 only. Bit 1 is a reflection of the state with a
write, bit 0 the identity:
- Mamba-2 (signed alpha = 2 exp(dt A) - 1): bit 1 gives dt = 100 (alpha = -1 exactly, value x dt), bit 0 gives
  dt = softplus(-800) = 0 (alpha = 1, no write). The state h_t = alpha_t h_{t-1} + v_t k_t^T is parity_t v k^T.
- Gated DeltaNet (beta = 2 sigmoid(b), no decay): bit 1 gives beta = 2 (I - 2 k k^T reflects along k, and 2 v k^T is
  written), bit 0 gives beta = sigmoid(-800) = 0. The state is 2 parity_t v k^T.
The readout is 0 for even parity and, through the output norm, a unit-size vector on axis 2 for odd parity; the LM
head compares axis 2 with half the bit axes. Nothing is trained: this shows the machinery can represent the
solution before any training (Grazzi et al. 2025's construction).
"""

from __future__ import annotations

import pytest
import torch

from loglinear.models import build_model
from loglinear.models.config import ModelConfig

T = 512
D_MODEL = 4
BIG = 100.0  # a pre-activation that saturates: softplus(100) = 100, sigmoid(100) = 1 in float64
OFF = -800.0  # softplus(-800) = sigmoid(-800) = 0 in float64


def running_parity(bits: torch.Tensor) -> torch.Tensor:
    return bits.cumsum(dim=1) % 2


def reads_both(value: float, x_norm: float) -> torch.Tensor:
    """An in_proj row giving `value` for either bit (inputs are x_norm on axis 0 or 1)."""
    return torch.tensor([value, value, 0.0, 0.0]) / x_norm


def reads_bit(if_0: float, if_1: float, x_norm: float) -> torch.Tensor:
    return torch.tensor([if_0, if_1, 0.0, 0.0]) / x_norm


def set_shared(model) -> float:
    """Embedding, norms and LM head common to both mixers; returns the size of a normalised input."""
    with torch.no_grad():
        model.embedding.weight.copy_(10.0 * torch.eye(2, D_MODEL, dtype=torch.float64))
        block = model.blocks[0]
        block.mixer_norm.weight.fill_(1.0)
        model.norm.weight.fill_(1.0)
        model.lm_head.weight.copy_(torch.tensor([[0.5, 0.5, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0]], dtype=torch.float64))
        x = block.mixer_norm(model.embedding.weight[:1])
    return float(x.norm())


def set_current_tap_only(conv) -> None:
    with torch.no_grad():
        conv.weight.zero_()
        conv.weight[:, -1] = 1.0
        if conv.bias is not None:
            conv.bias.zero_()


def mamba2_by_hand(impl: str):
    cfg = ModelConfig(mixer="mamba2", d_model=D_MODEL, n_layers=1, vocab_size=2, max_len=T, head_dim=4, state_dim=1,
                      expand=1, tie_embeddings=False, negative_eigenvalues=True, impl=impl, chunk_size=64)
    model = build_model(cfg).double()
    x_norm = set_shared(model)
    mixer = model.blocks[0].mixer
    rows = (
        [reads_both(1.0, x_norm)] * 4  # x: silu(1) on every channel
        + [reads_both(1.0, x_norm), reads_both(1.0, x_norm)]  # B, C
        + [reads_both(5.0, x_norm)] * 4  # z: the output gate, open
        + [reads_bit(OFF, BIG, x_norm)]  # dt: 0 for bit 0, 100 for bit 1
    )
    with torch.no_grad():
        mixer.in_proj.weight.copy_(torch.stack(rows).double())
        set_current_tap_only(mixer.conv)
        mixer.dt_bias.zero_()
        mixer.A_log.zero_()  # A = 1: dt A = -100 makes alpha = 2 exp(-100) - 1 = -1 exactly
        mixer.D.zero_()
        mixer.norm.weight.fill_(1.0)
        mixer.out_proj.weight.zero_()
        mixer.out_proj.weight[2] = 10.0 / 4  # the normalised readout (4 channels of 1) becomes 10 on axis 2
    return model


def gated_deltanet_by_hand(impl: str):
    cfg = ModelConfig(mixer="gated_deltanet", d_model=D_MODEL, n_layers=1, vocab_size=2, max_len=T, deltanet_heads=1,
                      expand=1, tie_embeddings=False, negative_eigenvalues=True, impl=impl, chunk_size=64)
    model = build_model(cfg).double()
    x_norm = set_shared(model)
    mixer = model.blocks[0].mixer
    K, V = mixer.key_dim, mixer.value_dim
    rows = (
        [reads_both(20.0, x_norm)] * (2 * K)  # q, k: one fixed direction (k is unit length to 3e-10)
        + [reads_both(1.0, x_norm)] * V  # v
        + [reads_both(OFF, x_norm)]  # a: softplus(-800) = 0, no decay
        + [reads_bit(OFF, BIG, x_norm)]  # b: beta = 0 for bit 0, 2 for bit 1
        + ([reads_both(5.0, x_norm)] * V if mixer.use_output_gate else [])
    )
    with torch.no_grad():
        mixer.in_proj.weight.copy_(torch.stack(rows).double())
        set_current_tap_only(mixer.conv)
        mixer.dt_bias.zero_()
        mixer.A_log.zero_()
        mixer.norm.weight.fill_(1.0)
        mixer.out_proj.weight.zero_()
        mixer.out_proj.weight[2] = 10.0 / V
    return model


BUILDERS = {"mamba2": mamba2_by_hand, "gated_deltanet": gated_deltanet_by_hand}


@pytest.fixture(scope="module")
def bits() -> torch.Tensor:
    return torch.randint(0, 2, (3, T), generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("impl", ["naive", "chunk"])
@pytest.mark.parametrize("mixer", sorted(BUILDERS))
def test_parallel_paths_compute_parity_exactly(mixer, impl, bits):
    model = BUILDERS[mixer](impl)
    with torch.no_grad():
        logits = model(bits)
    assert torch.equal(logits.argmax(-1), running_parity(bits))
    assert (logits[..., 1] - logits[..., 0]).abs().min() > 0.5  # decided by a wide margin, not by rounding


@pytest.mark.parametrize("mixer", sorted(BUILDERS))
def test_decoding_step_computes_parity_exactly(mixer, bits):
    model = BUILDERS[mixer]("chunk")
    cache = model.init_cache(bits.shape[0])
    predictions = []
    with torch.no_grad():
        for t in range(T):
            logits, cache = model.step(bits[:, t], cache)
            predictions.append(logits.argmax(-1))
    assert torch.equal(torch.stack(predictions, dim=1), running_parity(bits))


@pytest.mark.parametrize("mixer", sorted(BUILDERS))
def test_the_same_weights_without_negative_eigenvalues_cannot(mixer, bits):
    """With transitions in [0, 1] the same construction only counts: it is wrong on about half the positions."""
    model = BUILDERS[mixer]("chunk")
    for block in model.blocks:
        mixer_module = block.mixer
        if hasattr(mixer_module, "beta_max"):
            mixer_module.beta_max = 1.0
        else:
            mixer_module.signed_decay = False
    with torch.no_grad():
        accuracy = (model(bits).argmax(-1) == running_parity(bits)).double().mean()
    assert accuracy < 0.75
