"""Group word problems: the running product of a word of group elements."""

from __future__ import annotations

from typing import ClassVar

import torch

from loglinear.synthetics.arguments import check_int
from loglinear.synthetics.batch import Batch
from loglinear.synthetics.groups import PermutationGroup, permutation_group
from loglinear.synthetics.scoring import check_scored, keep_scored
from loglinear.synthetics.task import Task


class WordProblem(Task):
    """The word problem of a finite group (Merrill, Petty, Sabharwal 2024, "The Illusion of State
    in State-Space Models"; their code: jopetty/word-problem).

    Token i is the i-th element of the group in `itertools.permutations(range(n))` order (identity
    first; for A_n the even permutations, in that order). Inputs are uniform random elements; the
    target at every position t is the token of the prefix product P_t = x_0 · ... · x_t, with
    P_0 = x_0 and P_t[i] = P_{t-1}[x_t[i]] (composition (p·q)(i) = p(q(i))). No special tokens.
    Example in S3 (tokens: 0 = (0,1,2), 1 = (0,2,1), 2 = (1,0,2), 3 = (1,2,0), 4 = (2,0,1),
    5 = (2,1,0))::

        inputs   1 2 2 3
        targets  1 4 1 5      # e.g. P_1 = (0,2,1)·(1,0,2) = (2,0,1) = token 4

    `scored="last"` scores only the product of the whole word (a test set at length L then measures
    length L exactly); `"every"` (default) every prefix, so training at length T teaches 1..T.
    `vocab_size` = `num_classes` = the group order. S5 and A5 are NC1-complete: no fixed-depth
    Transformer or diagonal SSM solves them at every length.
    """

    degree: ClassVar[int]
    alternating: ClassVar[bool] = False

    def __init__(self, seq_len: int = 64, scored: str = "every") -> None:
        self.seq_len = check_int("seq_len", seq_len, minimum=1)
        self.scored = check_scored(scored)
        self.group: PermutationGroup = permutation_group(self.degree, self.alternating)
        self.vocab_size = self.num_classes = self.group.order
        self._input_tokens = torch.arange(self.group.order)

    def _sample(self, batch_size: int, generator: torch.Generator) -> Batch:
        choice = torch.randint(0, len(self._input_tokens), (batch_size, self.seq_len), generator=generator)
        inputs = self._input_tokens[choice]
        return self._batch(inputs, keep_scored(self.group.prefix_products(inputs), self.scored))


class S3WordProblem(WordProblem):
    """Word problem of S3 (order 6, solvable: a cascade of Z3 and Z2)."""

    name = "s3"
    degree = 3


class S5WordProblem(WordProblem):
    """Word problem of S5 (order 120)."""

    name = "s5"
    degree = 5


class A5WordProblem(WordProblem):
    """Word problem of A5 (order 60, the smallest non-solvable group)."""

    name = "a5"
    degree = 5
    alternating = True


class S5TranspositionsWordProblem(S5WordProblem):
    """S5 word problem whose inputs are only the 10 transpositions (tokens still index all of S5,
    and targets are prefix products in S5). One Householder reflection per token can represent a
    transposition, so a delta-rule layer with eigenvalues in [-1, 1] can solve it in principle
    (Grazzi et al. 2025; Siems et al. 2025, "DeltaProduct")."""

    name = "s5_transpositions"

    def __init__(self, seq_len: int = 64, scored: str = "every") -> None:
        super().__init__(seq_len, scored)
        self._input_tokens = torch.tensor(self.group.transpositions())
