"""Modular arithmetic: evaluate an expression mod m (5 by default), with or without brackets."""

from __future__ import annotations

import torch
from torch import Tensor

from loglinear.synthetics.arguments import check_bool, check_even, check_int
from loglinear.synthetics.batch import IGNORE_INDEX, Batch
from loglinear.synthetics.task import Task

PLUS, MINUS, TIMES, OPEN, CLOSE, EQUALS = range(6)
"""Offsets of the symbol tokens after the m digit tokens: token m + PLUS is '+', and so on."""


class ModularArithmetic(Task):
    """An expression over the digits 0 .. m-1 (m = `modulus`) with binary `+`, `-` and, when
    `mult`, `*` (usual precedence: `*` before `+`/`-`, left to right), followed by `=`. Only the
    `=` position (the last) is scored: its target is the expression's value mod m.

    Tokens: 0 .. m-1 the digits; m `+`, m+1 `-`, m+2 `*`, m+3 `(`, m+4 `)`, m+5 `=`
    (`vocab_size` = m + 6 in both variants; `num_classes` = m). Every expression has odd length,
    so `seq_len` must be even. Example (m = 5; `-` shown as `-`)::

        inputs   3 + 4 * 2 - 1 =         tokens 3 5 4 7 2 6 1 10
        targets  - - - - - - - 0         (3 + 8 - 1 = 10 = 0 mod 5)

    Digits and operators are uniform. Deletang et al. 2023 ("Neural Networks and the Chomsky
    Hierarchy") define the task, without brackets (regular) and with them (context-free);
    Grazzi et al. 2025 use both with modulus 5 and a `mult` switch.
    """

    name = "mod_arith"
    brackets = False

    def __init__(self, seq_len: int = 64, modulus: int = 5, mult: bool = True) -> None:
        self.seq_len = check_even("seq_len", check_int("seq_len", seq_len, minimum=2))
        self.modulus = check_int("modulus", modulus, minimum=2)
        self.mult = check_bool("mult", mult)
        self.num_classes = modulus
        self.vocab_size = modulus + 6

    def _sample(self, batch_size: int, generator: torch.Generator) -> Batch:
        rows, length, modulus = batch_size, self.seq_len, self.modulus
        digits = torch.randint(0, modulus, (rows, length), generator=generator)
        operators = torch.randint(0, 3 if self.mult else 2, (rows, length), generator=generator)
        coins = torch.rand(rows, length, generator=generator) < 0.5
        inputs = torch.empty(rows, length, dtype=torch.int64)
        inputs[:, -1] = modulus + EQUALS
        expression = _Expression(rows, length, modulus, self.brackets)
        for t in range(length - 1):
            inputs[:, t] = expression.step(length - 2 - t, digits[:, t], operators[:, t], coins[:, t])
        targets = torch.full_like(inputs, IGNORE_INDEX)
        targets[:, -1] = expression.value()
        return self._batch(inputs, targets)


class ModularArithmeticBrackets(ModularArithmetic):
    """`mod_arith` with brackets: an operand may be a bracketed sub-expression. `mult` has no
    default on purpose: one version of Grazzi et al.'s generator silently leaves `*` out, so
    every config must say whether it wants it.

    Expressions are grown left to right: where an operand starts, `(` opens a bracket with
    probability 1/2; after an operand, `)` closes one with probability 1/2; both only while the
    expression can still be closed exactly at the `=` position (so the last brackets close in a
    run when length runs out). Example (m = 5)::

        inputs   ( 2 - ( 4 * 3 ) ) + 1 =
        targets  - - - - - - - - - - - 1     ((2 - 12) + 1 = -9 = 1 mod 5)
    """

    name = "mod_arith_brackets"
    brackets = True

    def __init__(self, seq_len: int = 64, *, mult: bool, modulus: int = 5) -> None:
        super().__init__(seq_len=seq_len, modulus=modulus, mult=mult)


class _Expression:
    """A batch of expressions generated and evaluated together, one token per `step`.

    Generation state per row: whether an operand or an operator comes next, and the bracket
    depth. Evaluation state per open bracket (a stack): the sum of finished terms `total`, the
    current product `term` and the operator waiting for the next operand; the value of a bracket
    is total + term.
    """

    def __init__(self, rows: int, length: int, modulus: int, brackets: bool) -> None:
        self.modulus, self.brackets = modulus, brackets
        self.wants_operand = torch.ones(rows, dtype=torch.bool)
        self.depth = torch.zeros(rows, dtype=torch.int64)
        self.total = torch.zeros(rows, dtype=torch.int64)
        self.term = torch.zeros(rows, dtype=torch.int64)
        self.pending = torch.full((rows,), PLUS, dtype=torch.int64)
        if brackets:  # saved (total, term, pending) of the enclosing brackets, by depth
            self.saved = torch.zeros(3, rows, length // 2 + 1, dtype=torch.int64)

    def step(self, remaining: int, digit: Tensor, operator: Tensor, coin: Tensor) -> Tensor:
        """Choose and apply the next token, with `remaining` tokens left after it before `=`."""
        m, depth = self.modulus, self.depth
        is_digit, is_operator = self.wants_operand.clone(), ~self.wants_operand
        if self.brackets:
            # Invariant: the rest can always be completed (tokens left minus depth has the right
            # parity); opening needs room for an operand and two more closings.
            is_open = is_digit & coin & (remaining >= depth + 2)
            is_close = is_operator & (depth > 0) & (coin | (remaining < depth + 1))
            is_digit &= ~is_open
            is_operator &= ~is_close
            token = torch.where(is_open, m + OPEN, torch.where(is_close, m + CLOSE, 0))
        else:
            is_open = is_close = None
            token = torch.zeros_like(digit)
        token = torch.where(is_digit, digit, torch.where(is_operator, m + operator, token))
        self._evaluate(token, is_digit, is_operator, is_open, is_close)
        self.wants_operand = is_operator | (is_open if is_open is not None else False)
        return token

    def _evaluate(
        self, token: Tensor, is_digit: Tensor, is_operator: Tensor, is_open: Tensor | None, is_close: Tensor | None
    ) -> None:
        m = self.modulus
        total, term, pending, operand = self.total, self.term, self.pending, token
        applies = is_digit
        if is_close is not None:
            # A closing bracket is an operand: its value, applied to the enclosing bracket.
            operand = torch.where(is_close, (total + term) % m, token)
            parent = self.saved.gather(2, (self.depth - 1).clamp_(min=0).expand(3, -1).unsqueeze(2)).squeeze(2)
            total = torch.where(is_close, parent[0], total)
            term = torch.where(is_close, parent[1], term)
            pending = torch.where(is_close, parent[2], pending)
            applies = is_digit | is_close
        starts_term = pending != TIMES
        applied_total = torch.where(starts_term, total + term, total) % m
        signed = torch.where(pending == MINUS, -operand, operand)
        applied_term = torch.where(starts_term, signed, term * operand) % m
        total = torch.where(applies, applied_total, total)
        term = torch.where(applies, applied_term, term)
        pending = torch.where(is_operator, token - m, pending)
        if is_open is not None:
            index = torch.where(is_open, self.depth, self.saved.shape[2] - 1).expand(3, -1).unsqueeze(2)
            current = torch.stack([total, term, pending]).unsqueeze(2)
            slot = self.saved.gather(2, index)
            self.saved.scatter_(2, index, torch.where(is_open.unsqueeze(1), current, slot))
            total = torch.where(is_open, 0, total)
            term = torch.where(is_open, 0, term)
            pending = torch.where(is_open, PLUS, pending)
            self.depth = self.depth + is_open.long() - is_close.long()
        self.total, self.term, self.pending = total, term, pending

    def value(self) -> Tensor:
        return (self.total + self.term) % self.modulus
