"""Compression: the whole sequence decoded back from its last position, as MAD defines it (Poli et al. 2024)."""

from __future__ import annotations

import torch

from loglinear.synthetics.arguments import check_float, check_int
from loglinear.synthetics.batch import IGNORE_INDEX, Batch
from loglinear.synthetics.task import Task


class Compression(Task):
    """Reconstruct every token of the sequence from the model's state at its last position.

    With V = vocab_size and S = V - 1 - noise_vocab_size: tokens are uniform over [0, S), noise tokens
    [S, V-1), V-1 is the compression token. Positions 0 .. T-2 hold tokens, each replaced with
    probability `frac_noise` by a uniform noise token; position T-1 holds the compression token. The
    target at each position 0 .. T-2 is its token, except at noise (unscored), and the compression
    token is not scored. Example, V = 6 (tokens 0..4, compression 5), T = 6::

        inputs   3 0 4 4 1 5
        targets  3 0 4 4 1 -

    The targets sit at the positions of the very tokens they name, so a model reading position p
    would copy them: the task is meant for the `decoder` output head (`output_head`), which decodes
    every position's logits from the last position's state alone (MAD's AutoEncoder backbone).

    Differences from MAD (mad-lab 0f49a45): its generator builds masked targets for the noise and then
    returns the inputs as the targets, so noise tokens and the compression token are scored too (with
    noise off, as in all its configs, only the compression token differs: MAD's accuracy is
    ((T-1) acc + 1) / T once the model reproduces that constant token). `num_classes` is S.
    """

    name = "compression"
    output_head = "decoder"

    def __init__(self, vocab_size: int = 16, seq_len: int = 32, noise_vocab_size: int = 0,
                 frac_noise: float = 0.0) -> None:
        self.vocab_size = check_int("vocab_size", vocab_size, minimum=3)
        self.seq_len = check_int("seq_len", seq_len, minimum=2)
        self.noise_vocab_size = check_int("noise_vocab_size", noise_vocab_size, minimum=0, maximum=vocab_size - 3)
        self.frac_noise = check_float("frac_noise", frac_noise, minimum=0.0, below=1.0)
        if frac_noise > 0 and noise_vocab_size == 0:
            raise ValueError(f"frac_noise = {frac_noise} needs noise_vocab_size >= 1, got 0")
        self.num_classes = vocab_size - 1 - noise_vocab_size

    @property
    def unscored(self) -> float:
        """Every one of the T - 1 tokens replaced by noise."""
        return self.frac_noise ** (self.seq_len - 1)

    def _sample(self, batch_size: int, generator: torch.Generator) -> Batch:
        tokens = torch.randint(0, self.num_classes, (batch_size, self.seq_len - 1), generator=generator)
        targets = tokens.clone()
        inputs = tokens
        if self.frac_noise > 0:
            noise = torch.rand(tokens.shape, generator=generator) < self.frac_noise
            noise_tokens = torch.randint(self.num_classes, self.vocab_size - 1, tokens.shape, generator=generator)
            inputs = tokens.where(~noise, noise_tokens)
            targets.masked_fill_(noise, IGNORE_INDEX)
        end = torch.full((batch_size, 1), self.vocab_size - 1, dtype=torch.int64)
        ignored = torch.full((batch_size, 1), IGNORE_INDEX, dtype=torch.int64)
        return self._batch(torch.cat([inputs, end], dim=1), torch.cat([targets, ignored], dim=1))
