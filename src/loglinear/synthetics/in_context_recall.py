"""In-context recall, as MAD defines it (Poli et al. 2024, "Mechanistic Design and Scaling of Hybrid
Architectures"; generator of athms/mad-lab, restated here and vectorised over the batch)."""

from __future__ import annotations

import torch

from loglinear.synthetics.arguments import check_answers, check_even, check_float, check_int
from loglinear.synthetics.batch import IGNORE_INDEX, Batch
from loglinear.synthetics.task import Task


class InContextRecall(Task):
    """A sequence of T/2 key-value pairs whose keys repeat; every repeated key is a query for its value.

    With V = vocab_size and S = V - noise_vocab_size: keys are tokens [0, S/2), values [S/2, S), noise
    tokens [S, V). Per example each key gets one value, uniform over the values (two keys may share
    one); pair j is `k_j v_j` with k_j uniform over the keys, or, with probability `frac_noise`, two
    uniform noise tokens. The last pair's key is uniform over the distinct keys of the earlier pairs,
    and one of the earlier pairs (uniform) is never noise, so the last pair is always a query.
    Scored: the position of every key that already appeared in an earlier (non-noise) pair, with the
    key's value (the next token) as target; MAD's `multi_query` protocol, which all its configs use.
    Example, V = 16 (keys 0..7, values 8..15), T = 10::

        inputs   3 12 5  9 3 12 6 8 5  9
        targets  -  - -  - 12 - - - 9  -

    MAD trains on the next token at every position and tests on these positions only; we score them in
    both: the other next tokens (a fresh key, the value of a new key, noise) are uniform draws that no
    model can predict, so their loss only adds a constant. `num_classes` is the number of values.
    """

    name = "in_context_recall"

    def __init__(self, vocab_size: int = 16, seq_len: int = 128, noise_vocab_size: int = 0,
                 frac_noise: float = 0.0) -> None:
        self.vocab_size = check_int("vocab_size", vocab_size, minimum=2)
        self.seq_len = check_even("seq_len", check_int("seq_len", seq_len, minimum=4))
        self.noise_vocab_size = check_int("noise_vocab_size", noise_vocab_size, minimum=0,
                                          maximum=vocab_size - 2)
        self.frac_noise = check_float("frac_noise", frac_noise, minimum=0.0, below=1.0)
        if frac_noise > 0 and noise_vocab_size == 0:
            raise ValueError(f"frac_noise = {frac_noise} needs noise_vocab_size >= 1, got 0")
        signal = vocab_size - noise_vocab_size
        self._keys, self._signal = signal // 2, signal
        self.num_classes = check_answers(signal - signal // 2,
                                         f"vocab_size {vocab_size} with noise_vocab_size {noise_vocab_size}",
                                         "vocab_size - noise_vocab_size must be >= 3")

    def _sample(self, batch_size: int, generator: torch.Generator) -> Batch:
        rows, pairs, keys_n = batch_size, self.seq_len // 2, self._keys
        keys = torch.randint(0, keys_n, (rows, pairs), generator=generator)
        table = torch.randint(keys_n, self._signal, (rows, keys_n), generator=generator)
        noise = torch.zeros(rows, pairs, dtype=torch.bool)
        if self.frac_noise > 0:
            noise = torch.rand(rows, pairs, generator=generator) < self.frac_noise
            kept = torch.randint(0, pairs - 1, (rows,), generator=generator)
            noise[torch.arange(rows), kept] = False
            noise[:, -1] = False
            noise_tokens = torch.randint(self._signal, self.vocab_size, (rows, pairs, 2), generator=generator)
        # Distinct keys of the earlier pairs: the last pair queries one of them, uniformly.
        shown = torch.zeros(rows, pairs, keys_n, dtype=torch.int64).scatter_(2, keys.unsqueeze(2), 1)
        shown.masked_fill_(noise.unsqueeze(2), 0)
        earlier = shown[:, :-1].any(dim=1)
        pick = torch.rand(rows, keys_n, generator=generator).masked_fill_(~earlier, -1.0)
        keys[:, -1] = pick.argmax(dim=1)
        shown[:, -1] = 0
        shown[:, -1].scatter_(1, keys[:, -1:], 1)
        values = table.gather(1, keys)
        seen_before = (shown.cumsum(dim=1) - shown).gather(2, keys.unsqueeze(2)).squeeze(2) > 0
        scored = seen_before & ~noise
        inputs = torch.stack([keys, values], dim=2)
        if self.frac_noise > 0:
            inputs = inputs.where(~noise.unsqueeze(2), noise_tokens)
        targets = torch.full((rows, pairs, 2), IGNORE_INDEX, dtype=torch.int64)
        targets[:, :, 0] = values.where(scored, IGNORE_INDEX)
        return self._batch(inputs.view(rows, self.seq_len), targets.view(rows, self.seq_len))
