"""`LitLanguageModel`: the LightningModule around `build_model`, trained as `TrainConfig` says.

One shared step serves training, validation and test: logits only at the scored positions, the
cross-entropy there, and accuracies. Metric names carry the split prefix:

- `train/loss`, `train/acc` (over the examples with a scored position; not logged for a batch without one),
  `train/lr` each logged step;
- `{val,test}/loss`, `{val,test}/acc` (zoology's: the mean over examples of each example's accuracy over
  its scored positions), `{val,test}/acc_token` (over all scored tokens), `{val,test}/acc_seq` (the
  fraction of examples with every scored position right: full-sequence accuracy for state tracking);
- per slice: `val/acc/num_kv_pairs=64`, `val/acc/seq_len=512`, ... (and `acc_seq/...`), and per
  evaluation set `val/acc/set=<name>` when there are several;
- with `model.negative_eigenvalues`, `val/negative_transitions/layer=<i>/head=<h>`: the fraction of the
  validation tokens on which that head's transition has a negative eigenvalue (transition_counts.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import lightning as L
import torch
import torch.nn.functional as F
from torch import Tensor

from loglinear.models.backbone import LanguageModel, build_model
from loglinear.models.config import ModelConfig
from loglinear.models.linear_mixer import LinearAttentionMixer
from loglinear.models.optim import param_groups
from loglinear.runs.config import TrainConfig
from loglinear.targets import IGNORE_INDEX


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


def compile_blocks(model: LanguageModel, train_cfg: TrainConfig) -> None:
    """torch.compile each block of `model` in place when `train.compile` says so (with CUDA graphs when
    `train.cuda_graphs` does).

    The blocks, not the whole model: the model picks the scored positions by a boolean mask, whose
    data-dependent size would split its graph anyway. In place (`Module.compile`), so parameter names and
    checkpoints are those of an eager run."""
    if train_cfg.compile:
        for block in model.blocks:
            block.compile(mode="reduce-overhead" if train_cfg.cuda_graphs else None)


class LitLanguageModel(L.LightningModule):
    """Trains a `build_model(model_cfg, seed=train_cfg.seed)` language model on scored positions only."""

    def __init__(self, model_cfg: ModelConfig, train_cfg: TrainConfig, set_names: dict[str, list[str]] | None = None):
        super().__init__()
        self.model_cfg, self.train_cfg = model_cfg, train_cfg
        self.model = build_model(model_cfg, seed=train_cfg.seed)
        compile_blocks(self.model, train_cfg)
        self.set_names = set_names or {}  # stage -> names of its evaluation sets (the `eval_set` slice)
        self.diverged = False
        self._sums: dict[str, MetricSums] = {}  # "" (all examples), "/num_kv_pairs=8", "/set=<name>", ...

    def forward(self, inputs: Tensor, score_mask: Tensor | None = None) -> Tensor:
        return self.model(inputs, score_mask)

    def shared_step(self, batch: dict[str, Any]) -> tuple[Tensor, dict[str, Tensor]]:
        """Loss over the scored positions (0, with a zero gradient, for a batch without one: the mean over no
        position is not a number) and per-example (correct, scored) counts."""
        inputs, targets = batch["inputs"], batch["targets"]
        mask = targets != IGNORE_INDEX  # (B, T)
        logits = self.model(inputs, mask)  # (n_scored, vocab)
        scored = targets[mask]  # (n_scored,)
        loss = F.cross_entropy(logits.float(), scored) if len(scored) else logits.float().sum()
        example = mask.nonzero()[:, 0]  # (n_scored,) which example each scored position belongs to
        right = (logits.argmax(-1) == scored).to(torch.float64)
        B = inputs.shape[0]
        counts = {
            "correct": torch.zeros(B, dtype=torch.float64, device=inputs.device).index_add_(0, example, right),
            "scored": torch.bincount(example, minlength=B).to(torch.float64),
        }
        return loss, counts

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> Tensor | None:
        loss, counts = self.shared_step(batch)
        if not torch.isfinite(loss):
            self.diverged = True
            self.trainer.should_stop = True
            return None  # no backward on a non-finite loss; the run ends as `diverged`
        has_scores = counts["scored"] > 0
        logged = {"train/loss": loss}
        if has_scores.any():  # the accuracy of the examples that have a scored position
            logged["train/acc"] = _example_accuracy(counts)[has_scores].mean()
        self.log_dict(logged, prog_bar=True, batch_size=batch["inputs"].shape[0])
        self.log("train/lr", self.lr_schedulers().get_last_lr()[0], batch_size=1)
        return loss

    def validation_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        self._accumulate("val", batch)

    def test_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        self._accumulate("test", batch)

    def on_validation_epoch_start(self) -> None:
        for mixer in self._signed_mixers():
            mixer.count_transitions(True)

    def on_validation_epoch_end(self) -> None:
        self._log_accumulated("val")
        fractions = {}
        for layer, mixer in enumerate(self._signed_mixers()):
            for head, fraction in enumerate(mixer.transition_counts.fractions()):
                fractions[f"val/negative_transitions/layer={layer}/head={head}"] = fraction
            mixer.count_transitions(False)
        if fractions:
            self.log_dict(fractions)

    def _signed_mixers(self) -> list[LinearAttentionMixer]:
        """The mixers whose transitions may have negative eigenvalues (none without `negative_eigenvalues`)."""
        if not self.model_cfg.negative_eigenvalues:
            return []
        return [b.mixer for b in self.model.blocks if isinstance(b.mixer, LinearAttentionMixer)]

    def on_test_epoch_end(self) -> None:
        self._log_accumulated("test")

    def _accumulate(self, stage: str, batch: dict[str, Any]) -> None:
        """Add a batch's sums to every group it belongs to: all examples, each slice value, each set."""
        loss, counts = self.shared_step(batch)
        has_scores = counts["scored"] > 0
        acc = _example_accuracy(counts)
        exact = (counts["correct"] == counts["scored"]).to(torch.float64)
        groups = {"": torch.ones_like(has_scores)}
        for name, values in batch.get("slices", {}).items():
            if name == "eval_set":
                names = self.set_names.get(stage, [])
                if len(names) > 1:
                    for i in values.unique().tolist():
                        groups[f"/set={names[i]}"] = values == i
                continue
            for value in values.unique().tolist():
                groups[f"/{name}={value}"] = values == value
        for suffix, member in groups.items():
            m = member & has_scores
            sums = self._sums.setdefault(suffix, MetricSums())
            sums.example_acc += float(acc[m].sum())
            sums.examples += float(m.sum())
            sums.exact += float(exact[m].sum())
            sums.correct += float(counts["correct"][m].sum())
            sums.scored += float(counts["scored"][m].sum())
        self._sums[""].loss += float(loss) * float(counts["scored"].sum())

    def _log_accumulated(self, stage: str) -> None:
        metrics = {}
        for suffix, sums in sorted(self._sums.items()):
            if sums.examples == 0:
                continue
            metrics[f"{stage}/acc{suffix}"] = sums.example_acc / sums.examples
            metrics[f"{stage}/acc_seq{suffix}"] = sums.exact / sums.examples
            if suffix == "":
                metrics[f"{stage}/acc_token"] = sums.correct / sums.scored
                metrics[f"{stage}/loss"] = sums.loss / sums.scored
        self._sums = {}
        headline = {k: metrics.pop(k) for k in [f"{stage}/acc"] if k in metrics}
        self.log_dict(headline, prog_bar=True)
        self.log_dict(metrics)

    def configure_optimizers(self) -> dict[str, Any]:
        cfg = self.train_cfg
        optimizer = torch.optim.AdamW(
            param_groups(self.model, cfg.weight_decay), lr=cfg.lr, betas=(cfg.beta1, cfg.beta2)
        )
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, cfg.lr_factor)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


def _example_accuracy(counts: dict[str, Tensor]) -> Tensor:
    """Each example's accuracy over its scored positions (0 for an example with none)."""
    return counts["correct"] / counts["scored"].clamp_min(1)
