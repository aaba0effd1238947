"""`PackedStep`: one training step of a pack's runs, and what the device keeps of each run between reads.

The step stacks the runs' models (packing/stacked.py), computes each run's loss at its scored positions, masks
the runs whose loss is not finite, backpropagates the sum, clips and updates each run with its own optimiser
(packing/optimizer.py). Nothing in it waits for the device: whether each run is alive, the step where its loss was
first not finite, the train metrics Lightning logs once more at a divergence and the rows to log stay on the device
until `read`. The accuracy is computed on logged steps only, as a run alone computes it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor

from loglinear.models.backbone import LanguageModel
from loglinear.models.optim import param_groups
from loglinear.packing.batches import PackedBatch, logged_losses, run_accuracies, run_losses
from loglinear.packing.optimizer import PackedAdamW
from loglinear.packing.stacked import StackedModel
from loglinear.runs.config import TrainConfig


class PackedStep:
    """The step of `models` (moved to `device`) trained as `trains` say, each optimiser starting from its
    `torch.optim.AdamW` state dict in `optimizer_states` (None: a fresh one)."""

    def __init__(self, models: Sequence[LanguageModel], trains: Sequence[TrainConfig], device: torch.device,
                 optimizer_states: Sequence[dict[str, Any] | None] = ()) -> None:
        self.device = device
        self.stacked = StackedModel(models)
        names = {id(p): n for n, p in models[0].named_parameters()}
        self.groups = [[names[id(p)] for p in g["params"]] for g in param_groups(models[0], 0.0)]
        self.optimizer = PackedAdamW(self.stacked.params, set(self.groups[0]), self.groups[0] + self.groups[1], trains)
        for i, state in enumerate(optimizer_states):
            if state is not None:
                self.optimizer.load_run_state(i, state, self.groups)
        A = len(models)
        self.alive = torch.ones(A, dtype=torch.bool, device=device)
        self.first_bad = torch.full((A,), -1, dtype=torch.int64, device=device)
        # the train metrics Lightning still holds when a run's loss is not finite (it then logs them once more):
        # (loss of the last finite step, accuracy of the last logged step, whether each was logged this session)
        self.last = torch.zeros(A, 4, dtype=torch.float64, device=device)
        self.stale = torch.zeros(A, 4, dtype=torch.float64, device=device)
        self.pending: list[tuple[int, Tensor]] = []  # (step, (runs, 2) loss and accuracy) rows to log

    def __call__(self, t: int, batch: PackedBatch, autocast: Callable[[], Any], logging: bool) -> None:
        """Train every run one step from `t` completed steps on `batch` (host tensors); `logging`: keep the step's
        train metrics as a row to log."""
        batch = batch.to(self.device)
        with autocast():
            logits = self.stacked.scored_logits(batch.inputs, batch.at)
        losses = run_losses(logits, batch)
        finite = torch.isfinite(losses.detach())
        newly_bad = self.alive & ~finite
        self.first_bad = torch.where(newly_bad, t, self.first_bad)
        self.stale = torch.where(newly_bad[:, None], self.last, self.stale)
        self.alive = self.alive & finite
        torch.where(self.alive, losses, 0.0).sum().backward()
        self.optimizer.clip()
        self.optimizer.step([t] * self.stacked.runs, self.alive)
        for p in self.stacked.params.values():
            p.grad = None
        ones = torch.ones_like(losses, dtype=torch.float64)
        if logging:  # the accuracy (an argmax over the vocabulary) only where it is logged, as a run alone
            acc = run_accuracies(logits.detach(), batch, batch.inputs.shape[1])
            # a batch without a scored position logs no accuracy: Lightning writes the one it holds again, if any
            held = torch.where(self.last[:, 3] > 0, self.last[:, 1], torch.nan)
            acc = torch.where(acc.isnan(), held, acc)
            values = torch.stack([logged_losses(logits.detach(), batch).double(), acc], 1)
            self.pending.append((t, values))
            has_acc = (~acc.isnan()).double()
            latest = torch.stack([values[:, 0], torch.where(has_acc > 0, acc, self.last[:, 1]), ones, has_acc], 1)
        else:
            latest = torch.stack([losses.detach().double(), self.last[:, 1], ones, self.last[:, 3]], 1)
        self.last = torch.where(self.alive[:, None], latest, self.last)

    def read(self) -> dict[str, Any]:
        """What the device kept since the last read, on the host (one transfer): per run whether it is alive, the
        step where it diverged (-1), the train metrics Lightning logs once more there (`stale`: the loss and the
        accuracy, each None where none was logged in this session), and the rows to log (step, the runs' (loss,
        acc) flattened)."""
        flat = torch.cat([self.alive.double(), self.first_bad.double(), self.stale.flatten(),
                          *(v.flatten() for _, v in self.pending)]).cpu().tolist()
        A = self.stacked.runs
        rows = [(step, flat[6 * A + 2 * A * k:][: 2 * A]) for k, (step, _) in enumerate(self.pending)]
        self.pending = []
        stale = [flat[2 * A + 4 * i: 2 * A + 4 * i + 4] for i in range(A)]
        return {"alive": [bool(x) for x in flat[:A]], "first_bad": [int(x) for x in flat[A:2 * A]],
                "stale": [(loss if has_loss else None, acc if has_acc else None) for loss, acc, has_loss, has_acc
                          in stale], "rows": rows}

    def optimizer_state(self, i: int, step: int) -> dict[str, Any]:
        """Run i's optimiser state after `step` steps, as `torch.optim.AdamW.state_dict()`."""
        return self.optimizer.run_state(i, step, self.groups)
