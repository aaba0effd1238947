"""`StackedModel`: the models of a pack's runs as one, each parameter stacked over a leading run axis.

The forward maps one model over the run axis with `torch.func.vmap` (`functional_call` on the first run's module
with the stacked parameters): every linear layer becomes a batched matmul, and the calls vmap cannot look into
(the log-linear operator, fused attention) run once on all runs' sequences folded into their batch axis
(kernels/folded.py). Runs never mix: the gradient of the sum of the runs' losses with respect to run r's slice is
run r's own gradient.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor
from torch.func import functional_call, vmap

from loglinear.models.backbone import LanguageModel
from loglinear.packing.compatibility import PackError


def _shapes(model: LanguageModel) -> dict[str, tuple[int, ...]]:
    return {name: tuple(p.shape) for name, p in model.named_parameters()}


class StackedModel:
    """Parameters (runs, ...) of `models`, each run's slice starting as its model's weights.

    `models` keep their own parameters: `store(r)` copies run r's slice into its model (to evaluate or save it),
    `load(r)` the other way. Buffers must not change during training (the suite's models have none that do).
    """

    def __init__(self, models: Sequence[LanguageModel]) -> None:
        self.models = list(models)
        self.skeleton = self.models[0]
        shapes = _shapes(self.skeleton)
        for model in self.models[1:]:
            other = _shapes(model)
            if other != shapes:
                name = next(n for n in sorted(set(shapes) | set(other)) if shapes.get(n) != other.get(n))
                raise PackError(f"the runs' models differ in parameter {name}: {shapes.get(name)} against "
                                f"{other.get(name)}; such runs cannot share a pack")
        self.names = list(shapes)
        with torch.no_grad():
            self.params = {n: torch.stack([dict(m.named_parameters())[n] for m in self.models]).requires_grad_()
                           for n in self.names}
        self.buffers = {n: torch.stack([dict(m.named_buffers())[n] for m in self.models])
                        for n, _ in self.skeleton.named_buffers()}

    @property
    def runs(self) -> int:
        return len(self.models)

    def scored_logits(self, inputs: Tensor, index: Tensor) -> Tensor:
        """Logits (runs, P, vocab) at the scored positions: inputs (runs, B, T) int64, index (runs, P) positions in
        each run's flattened (B * T) batch (`LanguageModel.forward_at`)."""

        def one_run(params: dict[str, Tensor], buffers: dict[str, Tensor], x: Tensor, i: Tensor) -> Tensor:
            return functional_call(self.skeleton, (params, buffers), (x,), {"at": i})

        return vmap(one_run)(self.params, self.buffers, inputs, index)

    def store(self, r: int) -> LanguageModel:
        """Run r's model holding run r's current weights."""
        with torch.no_grad():
            for name, p in self.models[r].named_parameters():
                p.copy_(self.params[name][r])
        return self.models[r]

    def load(self, r: int) -> None:
        """Run r's slice set to its model's weights."""
        with torch.no_grad():
            for name, p in self.models[r].named_parameters():
                self.params[name][r].copy_(p)
