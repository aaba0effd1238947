"""What one model scores on a batch, and the evaluation metrics of a pass over batches.

Shared by the Lightning module (runs/lit.py) and packed training (loglinear.packing), so that a run's
metrics are computed by the same lines however it trained. Metric names carry the split prefix:
`{val,test}/loss`, `{val,test}/acc` (zoology's: the mean over examples of each example's accuracy over its
scored positions), `{val,test}/acc_token` (over all scored tokens), `{val,test}/acc_seq` (the fraction of
examples with every scored position right), `{val,test}/tvd` for a task whose batches name the allowed answers
(`Batch.allowed`: the mean over scored positions of the total variation distance between the model's next-token
distribution and the uniform one over the allowed tokens), and per slice and evaluation set (`/num_kv_pairs=64`,
`/set=<name>`, ...); with `model.negative_eigenvalues`, `val/negative_transitions/layer=<i>/head=<h>`: the
fraction of the validation tokens on which that head's transition has a negative eigenvalue
(models/transition_counts.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from loglinear.models.backbone import LanguageModel
from loglinear.models.linear_cross_entropy import linear_cross_entropy
from loglinear.models.linear_mixer import LinearAttentionMixer
from loglinear.targets import IGNORE_INDEX, allowed_tokens


def logged(value: Any) -> float:
    """`value` as a logged metric holds it: Lightning logs every metric as a float32 tensor."""
    return float(torch.as_tensor(value, dtype=torch.float32))


def score(model: LanguageModel, batch: dict[str, Any], counts: bool = True,
          fused: bool = False) -> tuple[Tensor, dict[str, Tensor]]:
    """The loss over a batch's scored positions (0, with a zero gradient, for a batch without one: the mean over no
    position is not a number) and per-example (correct, scored) counts (none without `counts`). A batch with `allowed`
    bitmasks counts a prediction right when it is any allowed token, and adds each example's summed `tvd`.

    `fused` (`train.fused_loss`): the loss fused with the LM head, in chunks of positions (`linear_cross_entropy`:
    the same to float32's rounding, without the logits of every scored position), the predictions from the same
    pass; the counts then have no `tvd`, which needs every position's distribution."""
    inputs, targets = batch["inputs"], batch["targets"]
    mask = targets != IGNORE_INDEX  # (B, T)
    scored = targets[mask]  # (n_scored,)
    if fused:
        logits = None
        loss, predicted = linear_cross_entropy(model.features(inputs, mask), model.lm_head.weight, scored,
                                               predict=counts)
    else:
        logits = model(inputs, mask)  # (n_scored, vocab)
        loss = F.cross_entropy(logits.float(), scored) if len(scored) else logits.float().sum()
        predicted = logits.argmax(-1) if counts else None
    if not counts:
        return loss, {}
    example = mask.nonzero()[:, 0]  # (n_scored,) which example each scored position belongs to
    B = inputs.shape[0]

    def per_example(values: Tensor) -> Tensor:
        return torch.zeros(B, dtype=torch.float64, device=inputs.device).index_add_(0, example, values)

    found = {"scored": torch.bincount(example, minlength=B).to(torch.float64)}
    if "allowed" not in batch:
        return loss, {"correct": per_example((predicted == scored).to(torch.float64)), **found}
    vocab = model.lm_head.weight.shape[0] if logits is None else logits.shape[-1]
    allowed = allowed_tokens(batch["allowed"][mask], vocab)  # (n_scored, vocab)
    found["correct"] = per_example(allowed.gather(1, predicted[:, None])[:, 0].to(torch.float64))
    if logits is not None:
        truth = allowed.to(torch.float64) / allowed.sum(-1, keepdim=True).clamp_min(1)
        found["tvd"] = per_example(0.5 * (logits.double().softmax(-1) - truth).abs().sum(-1))
    return loss, found


def example_accuracy(counts: dict[str, Tensor]) -> Tensor:
    """Each example's accuracy over its scored positions (0 for an example with none)."""
    return counts["correct"] / counts["scored"].clamp_min(1)


@dataclass
class MetricSums:
    """Running sums of one group of evaluation examples (all of them, a slice value or an evaluation set).

    Examples without a scored position are left out. `loss` is summed for the group of all examples only.
    """

    example_acc: float = 0.0  # sum of each example's accuracy over its scored positions
    examples: float = 0.0
    exact: float = 0.0  # examples with every scored position right
    correct: float = 0.0  # scored positions right
    scored: float = 0.0  # scored positions
    loss: float = 0.0  # cross-entropy summed over scored positions
    tvd: float | None = None  # total variation distance summed over scored positions (tasks with `allowed` only)


class Evaluation:
    """The sums of one pass over a stage's batches; `set_names` names the stage's evaluation sets."""

    def __init__(self, set_names: list[str]) -> None:
        self.set_names = set_names
        self.sums: dict[str, MetricSums] = {}  # "" (all examples), "/num_kv_pairs=8", "/set=<name>", ...

    def add(self, batch: dict[str, Any], loss: Tensor, counts: dict[str, Tensor]) -> None:
        """Add a batch's sums to every group it belongs to: all examples, each slice value, each set."""
        has_scores = counts["scored"] > 0
        acc = example_accuracy(counts)
        exact = (counts["correct"] == counts["scored"]).to(torch.float64)
        groups = {"": torch.ones_like(has_scores)}
        for name, values in batch.get("slices", {}).items():
            if name == "eval_set":
                if len(self.set_names) > 1:
                    for i in values.unique().tolist():
                        groups[f"/set={self.set_names[i]}"] = values == i
                continue
            for value in values.unique().tolist():
                groups[f"/{name}={value}"] = values == value
        for suffix, member in groups.items():
            m = member & has_scores
            sums = self.sums.setdefault(suffix, MetricSums())
            sums.example_acc += float(acc[m].sum())
            sums.examples += float(m.sum())
            sums.exact += float(exact[m].sum())
            sums.correct += float(counts["correct"][m].sum())
            sums.scored += float(counts["scored"][m].sum())
            if "tvd" in counts:
                sums.tvd = (sums.tvd or 0.0) + float(counts["tvd"][m].sum())
        self.sums[""].loss += float(loss) * float(counts["scored"].sum())

    def metrics(self, stage: str) -> tuple[dict[str, float], dict[str, float]]:
        """(the headline `{stage}/acc`, every other metric) of the batches added."""
        metrics = {}
        for suffix, sums in sorted(self.sums.items()):
            if sums.examples == 0:
                continue
            metrics[f"{stage}/acc{suffix}"] = sums.example_acc / sums.examples
            metrics[f"{stage}/acc_seq{suffix}"] = sums.exact / sums.examples
            if sums.tvd is not None:
                metrics[f"{stage}/tvd{suffix}"] = sums.tvd / sums.scored
            if suffix == "":
                metrics[f"{stage}/acc_token"] = sums.correct / sums.scored
                metrics[f"{stage}/loss"] = sums.loss / sums.scored
        headline = {k: metrics.pop(k) for k in [f"{stage}/acc"] if k in metrics}
        return headline, metrics


def _signed_mixers(model: LanguageModel) -> list[LinearAttentionMixer]:
    """The mixers whose transitions may have negative eigenvalues (none without `negative_eigenvalues`)."""
    if not model.cfg.negative_eigenvalues:
        return []
    return [b.mixer for b in model.blocks if isinstance(b.mixer, LinearAttentionMixer)]


def count_transitions(model: LanguageModel) -> None:
    """Start counting negative-eigenvalue transitions in the model's forward passes (afresh)."""
    for mixer in _signed_mixers(model):
        mixer.count_transitions(True)


def transition_fractions(model: LanguageModel) -> dict[str, float]:
    """The fractions counted since `count_transitions`, by layer and head; counting stops."""
    fractions = {}
    for layer, mixer in enumerate(_signed_mixers(model)):
        for head, fraction in enumerate(mixer.transition_counts.fractions()):
            fractions[f"val/negative_transitions/layer={layer}/head={head}"] = fraction
        mixer.count_transitions(False)
    return fractions
