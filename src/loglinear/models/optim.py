"""Optimiser parameter groups: which parameters take weight decay."""

from __future__ import annotations

from torch import nn

from loglinear.models.lambda_params import LambdaParam


def no_weight_decay(model: nn.Module) -> set[int]:
    """ids of the parameters that take no weight decay.

    - every parameter with fewer than 2 dims: norm weights, biases, and the SSM parameters
      A_log, dt_bias and D (Mamba-2 / Gated DeltaNet convention);
    - embedding tables (and so a tied LM head);
    - every parameter of a lambda parameterisation (the level scales L and biases b, as in the
      peers; the lambda head's projection, a weight matrix, does take decay).
    """
    ids = {id(p) for p in model.parameters() if p.dim() < 2}
    for module in model.modules():
        if isinstance(module, (nn.Embedding, LambdaParam)):
            ids |= {id(p) for p in module.parameters()}
    return ids


def param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Two AdamW groups: {params, weight_decay} for the weights, and weight_decay 0 for `no_weight_decay(model)`."""
    exempt = no_weight_decay(model)
    params = [p for p in model.parameters() if p.requires_grad]
    return [
        {"params": [p for p in params if id(p) not in exempt], "weight_decay": weight_decay},
        {"params": [p for p in params if id(p) in exempt], "weight_decay": 0.0},
    ]
