"""`PackedAdamW`: each run's AdamW step, gradient clipping and learning-rate schedule, for all runs at once.

What a run alone gets from Lightning: `torch.optim.AdamW` over `models.optim.param_groups` (its weight decay on
the weights, none on the rest), stepped by a `LambdaLR` of `TrainConfig.lr_factor`, after
`torch.nn.utils.clip_grad_norm_` over its parameters in the optimiser's order. Here every state tensor carries the
runs' leading axis and every scalar is one value per run, formed on the host in double precision as torch forms
it and applied in the dtype torch's kernels apply it in, operation for operation as torch's single-tensor AdamW
runs them: on the CPU a run's update is the one it gets alone, to the bit. `update` (one flag per run, on the
device) leaves a run's weights and moments as they were: a stopped or diverged run stops changing without the
host having to look.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from loglinear.runs.config import TrainConfig

EPS = 1e-8  # torch.optim.AdamW's default, which the runs use
CLIP_EPS = 1e-6  # torch.nn.utils.clip_grad_norm_'s


def learning_rate(train: TrainConfig, step: int) -> float:
    """The learning rate of the training step after `step` steps, as LambdaLR gives it."""
    return train.lr * train.lr_factor(step)


class PackedAdamW:
    """AdamW over `params` (name -> (runs, ...) leaf tensor); `decayed` the names that take weight decay, `order` the
    names in the order of the runs' optimiser (decayed first), `trains` each run's TrainConfig."""

    def __init__(self, params: dict[str, Tensor], decayed: set[str], order: Sequence[str],
                 trains: Sequence[TrainConfig]) -> None:
        self.params, self.decayed, self.order, self.trains = params, decayed, list(order), list(trains)
        self.exp_avg = {n: torch.zeros_like(p) for n, p in params.items()}
        self.exp_avg_sq = {n: torch.zeros_like(p) for n, p in params.items()}
        device = next(iter(params.values())).device
        self._clips = [t.grad_clip for t in self.trains]
        self._clip_values = torch.tensor(self._clips, device=device)

    @torch.no_grad()
    def clip(self) -> None:
        """Each run's gradients scaled to norm at most its grad_clip (none where it is 0), as clip_grad_norm_."""
        if not any(self._clips):
            return
        grads = [self.params[n].grad for n in self.order]
        norms = torch.stack([torch.linalg.vector_norm(g.flatten(1), dim=1) for g in grads], dim=1)  # (runs, params)
        total = torch.linalg.vector_norm(norms, dim=1)  # (runs,), each run's row reduced as clip_grad_norm_ does
        coef = (total + CLIP_EPS).reciprocal() * self._clip_values.to(total.dtype)
        coef = torch.where(self._clip_values > 0, coef.clamp(max=1.0), 1.0)
        for g in grads:
            g.mul_(coef.view(-1, *[1] * (g.dim() - 1)))

    @torch.no_grad()
    def step(self, steps: Sequence[int], update: Tensor) -> None:
        """The AdamW update after each run's `steps` completed steps, applied where `update` (runs,) holds."""
        lrs = [learning_rate(t, s) for t, s in zip(self.trains, steps, strict=True)]
        counts = [float(s + 1) for s in steps]  # AdamW's step count after this step
        scalars = torch.tensor([
            [1 - lr * t.weight_decay if t.weight_decay != 0 else 1.0 for lr, t in zip(lrs, self.trains, strict=True)],
            [1 - t.beta1 for t in self.trains],
            [t.beta2 for t in self.trains],
            [1 - t.beta2 for t in self.trains],
            [(1 - t.beta2**k) ** 0.5 for t, k in zip(self.trains, counts, strict=True)],
            [-(lr / (1 - t.beta1**k)) for lr, t, k in zip(lrs, self.trains, counts, strict=True)],
        ], dtype=torch.float32)
        scalars = (scalars.pin_memory() if update.is_cuda else scalars).to(update.device, non_blocking=True)
        for name, p in self.params.items():
            decay, lerp_weight, beta2, one_minus_beta2, b2_sqrt, step_size = scalars.view(6, -1, *[1] * (p.dim() - 1))
            g, m, v = p.grad, self.exp_avg[name], self.exp_avg_sq[name]
            new_p = p * decay if name in self.decayed else p
            new_m = torch.lerp(m, g, lerp_weight)
            new_v = torch.addcmul(v * beta2, one_minus_beta2 * g, g)  # addcmul's fused multiply-add, as torch's
            denom = (new_v.sqrt() / b2_sqrt).add_(EPS)
            new_p = torch.addcdiv(new_p, step_size * new_m, denom)
            keep = update.view(-1, *[1] * (p.dim() - 1))
            p.copy_(torch.where(keep, new_p, p))
            m.copy_(torch.where(keep, new_m, m))
            v.copy_(torch.where(keep, new_v, v))

    def run_state(self, r: int, step: int, groups: list[list[str]]) -> dict[str, Any]:
        """Run r's optimiser state as `torch.optim.AdamW.state_dict()` of its model gives it after `step` steps,
        `groups` the parameter names of its two groups (`param_groups`)."""
        train = self.trains[r]
        flat = [n for group in groups for n in group]
        state = {} if step == 0 else {
            i: {"step": torch.tensor(float(step)), "exp_avg": self.exp_avg[n][r].clone(),
                "exp_avg_sq": self.exp_avg_sq[n][r].clone()}
            for i, n in enumerate(flat)
        }
        lr = learning_rate(train, step)
        param_groups, start = [], 0
        for group, decay in zip(groups, (train.weight_decay, 0.0), strict=True):
            param_groups.append({
                "weight_decay": decay, "lr": lr, "betas": (train.beta1, train.beta2), "eps": EPS, "amsgrad": False,
                "maximize": False, "foreach": None, "capturable": False, "differentiable": False, "fused": None,
                "decoupled_weight_decay": True, "initial_lr": train.lr,
                "params": list(range(start, start + len(group))),
            })
            start += len(group)
        return {"state": state, "param_groups": param_groups}

    @torch.no_grad()
    def load_run_state(self, r: int, state: dict[str, Any], groups: list[list[str]]) -> None:
        """Set run r's moments from a `torch.optim.AdamW.state_dict()` of its model (`run_state`'s form)."""
        flat = [n for group in groups for n in group]
        for i, n in enumerate(flat):
            entry = state["state"].get(i)
            self.exp_avg[n][r].copy_(entry["exp_avg"] if entry else 0)
            self.exp_avg_sq[n][r].copy_(entry["exp_avg_sq"] if entry else 0)
