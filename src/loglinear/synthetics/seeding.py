"""Seeds and random generators: every batch is a pure function of its key, never of global RNG state.

A key is a tuple of integers, e.g. `(seed, TRAIN, step)`. `derive_seed` hashes it with SplitMix64
(Steele, Lea, Flood 2014), a stable 64-bit mixer: unlike Python's `hash()` it is the same in every
process and every run, and neighbouring keys give unrelated seeds. Training, validation and test
draw from separate streams (the second key element), so their seeds are disjoint (up to a 64-bit
hash collision, which the tests check does not happen over the ranges used).
"""

from __future__ import annotations

import torch

MASK64 = (1 << 64) - 1

TRAIN = 1
VALIDATION = 2
TEST = 3
COMPONENT = 4
EPOCH = 5
FIXED = 6
"""Stream ids: the second element of a key. COMPONENT keys pick a mixture component, EPOCH keys the order of a
fixed training set in each epoch, FIXED the draws that make that set."""


def splitmix64(x: int) -> int:
    """One SplitMix64 step: a bijective, well-mixing map of 64-bit integers."""
    x = (x + 0x9E3779B97F4A7C15) & MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
    return x ^ (x >> 31)


def derive_seed(*key: int) -> int:
    """A 64-bit seed from a key of integers (any sign, any size modulo 2**64)."""
    h = 0
    for k in key:
        h = splitmix64(h ^ (int(k) & MASK64))
    return h


def unit_interval(*key: int) -> float:
    """A deterministic number in [0, 1) from a key (53 bits of `derive_seed`)."""
    return (derive_seed(*key) >> 11) / float(1 << 53)


def make_generator(seed: int) -> torch.Generator:
    """A fresh CPU generator seeded with `seed` (taken modulo 2**64); global RNG state is untouched."""
    return torch.Generator().manual_seed(int(seed) & MASK64)
