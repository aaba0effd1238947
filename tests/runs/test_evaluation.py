"""A task with several right answers at a position (`Batch.allowed`): any allowed argmax is right, and the evaluation
adds the total variation distance to the uniform distribution over the allowed tokens, by hand here."""

from __future__ import annotations

import math

import pytest
import torch

from loglinear.runs.evaluation import Evaluation, score
from loglinear.targets import IGNORE_INDEX


class FixedLogits(torch.nn.Module):
    """Returns the same logits (n_scored, vocab) whatever the inputs: the scored positions' logits, in order."""

    def __init__(self, logits: torch.Tensor) -> None:
        super().__init__()
        self.logits = logits

    def forward(self, inputs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        assert int(mask.sum()) == len(self.logits)
        return self.logits


def test_an_allowed_argmax_is_right_and_the_distance_is_to_the_allowed_tokens():
    # two examples, vocabulary 4; example 0 scores positions 0 and 1, example 1 position 1
    targets = torch.tensor([[1, 2, IGNORE_INDEX], [IGNORE_INDEX, 0, IGNORE_INDEX]])
    allowed = torch.tensor([[0b0011, 0b0100, 0], [0, 0b1001, 0]])
    logits = torch.tensor([[0.0, 5.0, 0.0, 0.0],   # argmax 1: the target, allowed
                           [9.0, 0.0, 0.0, 0.0],   # argmax 0: not allowed (only 2 is)
                           [0.0, 0.0, 0.0, 7.0]])  # argmax 3: not the target 0, but allowed
    batch = {"inputs": torch.zeros(2, 3, dtype=torch.int64), "targets": targets, "allowed": allowed, "slices": {}}
    loss, counts = score(FixedLogits(logits), batch)
    assert loss == pytest.approx(float(torch.nn.functional.cross_entropy(logits, torch.tensor([1, 2, 0]))))
    assert counts["correct"].tolist() == [1.0, 1.0] and counts["scored"].tolist() == [2.0, 1.0]
    p = logits.double().softmax(-1)
    by_hand = [0.5 * (abs(p[0, 0] - 0.5) + abs(p[0, 1] - 0.5) + p[0, 2] + p[0, 3])
               + 0.5 * (p[1, 0] + p[1, 1] + abs(p[1, 2] - 1) + p[1, 3]),
               0.5 * (abs(p[2, 0] - 0.5) + p[2, 1] + p[2, 2] + abs(p[2, 3] - 0.5))]
    assert counts["tvd"].tolist() == pytest.approx([float(x) for x in by_hand])
    evaluation = Evaluation([])
    evaluation.add({**batch, "slices": {"seq_len": torch.tensor([3, 3])}}, loss, counts)
    headline, metrics = evaluation.metrics("test")
    assert headline == {"test/acc": pytest.approx((0.5 + 1.0) / 2)}
    assert metrics["test/acc_token"] == pytest.approx(2 / 3)
    assert metrics["test/tvd"] == pytest.approx(sum(float(x) for x in by_hand) / 3)
    assert metrics["test/tvd/seq_len=3"] == metrics["test/tvd"]


def test_a_task_with_one_answer_has_no_distance():
    targets = torch.tensor([[1, IGNORE_INDEX]])
    batch = {"inputs": torch.zeros(1, 2, dtype=torch.int64), "targets": targets, "slices": {}}
    loss, counts = score(FixedLogits(torch.tensor([[0.0, 1.0]])), batch)
    assert set(counts) == {"correct", "scored"} and counts["correct"].tolist() == [1.0]
    evaluation = Evaluation([])
    evaluation.add(batch, loss, counts)
    assert not any("tvd" in name for name in evaluation.metrics("val")[1]) and math.isfinite(float(loss))
