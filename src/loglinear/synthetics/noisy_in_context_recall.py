"""Noisy in-context recall: MAD's in-context recall with noise pairs mixed in (Poli et al. 2024)."""

from __future__ import annotations

from loglinear.synthetics.in_context_recall import InContextRecall


class NoisyInContextRecall(InContextRecall):
    """`in_context_recall` with MAD's noisy baseline as defaults: 16 of the 32 tokens are noise and each
    pair is noise with probability 0.2 (two uniform noise tokens, never scored). MAD's harder settings
    raise `frac_noise` (0.4, 0.6, 0.8) or the vocabulary (48, 80, 144, always 16 of them noise)."""

    name = "noisy_in_context_recall"

    def __init__(self, vocab_size: int = 32, seq_len: int = 128, noise_vocab_size: int = 16,
                 frac_noise: float = 0.2) -> None:
        super().__init__(vocab_size, seq_len, noise_vocab_size, frac_noise)
