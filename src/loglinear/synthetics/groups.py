"""Finite permutation groups as token tables: elements, multiplication table, prefix products."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from functools import cache

import torch
from torch import Tensor


@dataclass(frozen=True)
class PermutationGroup:
    """A group of permutations of range(degree); token i is `elements[i]`.

    Elements are in `itertools.permutations(range(degree))` order (identity first), keeping only
    the even ones for an alternating group. `table[a, b]` is the token of a·b, where
    (p·q)(i) = p(q(i)): p·q first applies q, then p.
    """

    name: str
    degree: int
    elements: tuple[tuple[int, ...], ...]
    table: Tensor

    @property
    def order(self) -> int:
        return len(self.elements)

    def transpositions(self) -> list[int]:
        """Tokens of the elements that swap exactly two points."""
        return [i for i, p in enumerate(self.elements) if sum(p[j] != j for j in range(self.degree)) == 2]

    def prefix_products(self, tokens: Tensor) -> Tensor:
        """`(B, T)` tokens x -> `(B, T)` tokens of P_t = x_0 · x_1 · ... · x_t, i.e. P_0 = x_0 and
        P_t[i] = P_{t-1}[x_t[i]]. A Hillis-Steele scan: ceil(log2 T) table lookups over the batch."""
        flat_table = self.table.view(-1)
        prefix = tokens.clone()
        shift = 1
        while shift < prefix.shape[1]:
            # After this step prefix[t] is the product of x[t - 2*shift + 1 .. t] (clipped at 0).
            combined = flat_table.take(prefix[:, :-shift] * self.order + prefix[:, shift:])
            prefix = torch.cat([prefix[:, :shift], combined], dim=1)
            shift *= 2
        return prefix


def _is_even(permutation: tuple[int, ...]) -> bool:
    inversions = sum(a > b for a, b in itertools.combinations(permutation, 2))
    return inversions % 2 == 0


@cache
def permutation_group(degree: int, alternating: bool = False) -> PermutationGroup:
    """S_degree, or A_degree when `alternating`."""
    elements = tuple(
        p for p in itertools.permutations(range(degree)) if not alternating or _is_even(p)
    )
    index = {p: i for i, p in enumerate(elements)}
    table = torch.tensor(
        [[index[tuple(p[q[i]] for i in range(degree))] for q in elements] for p in elements], dtype=torch.int64
    )
    name = f"{'A' if alternating else 'S'}{degree}"
    return PermutationGroup(name, degree, elements, table)
