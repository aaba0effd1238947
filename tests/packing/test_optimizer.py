"""PackedAdamW against torch's AdamW with clip_grad_norm_ and LambdaLR, run by run: the same update to the bit."""

from __future__ import annotations

import dataclasses

import torch

from loglinear.models.backbone import build_model
from loglinear.models.optim import param_groups
from loglinear.packing.optimizer import PackedAdamW
from loglinear.packing.stacked import StackedModel
from loglinear.runs.config import load_run_config

from .pairs import MQAR, SMALL


def test_each_run_is_updated_as_torch_adamw_updates_it_alone():
    cfg = load_run_config(None, [*MQAR, "model=model/log_linear_gated_deltanet.yaml", *SMALL, "out_dir=x"])
    settings = [(1e-2, 0.1, 1.0, 0.9), (3e-3, 0.0, 0.5, 0.95), (1e-3, 0.1, 0.0, 0.9)]  # lr, decay, clip, beta1
    trains = [dataclasses.replace(cfg.train, lr=lr, weight_decay=wd, grad_clip=clip, beta1=b1, warmup_steps=3,
                                  max_steps=20) for lr, wd, clip, b1 in settings]
    stacked = StackedModel([build_model(cfg.model, seed=s) for s in range(3)])
    alone = [build_model(cfg.model, seed=s) for s in range(3)]
    names = {id(p): n for n, p in stacked.models[0].named_parameters()}
    groups = [[names[id(p)] for p in g["params"]] for g in param_groups(stacked.models[0], 0.0)]
    packed = PackedAdamW(stacked.params, set(groups[0]), groups[0] + groups[1], trains)
    optimizers = []
    for model, train in zip(alone, trains, strict=True):
        optimizer = torch.optim.AdamW(param_groups(model, train.weight_decay), lr=train.lr,
                                      betas=(train.beta1, train.beta2))
        optimizers.append((optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, train.lr_factor)))
    generator = torch.Generator().manual_seed(0)
    frozen_from = 7  # run 1 stops being updated here (a stopped or diverged run)
    for step in range(12):
        grads = {n: torch.randn(p.shape, generator=generator) * (10.0 if step % 3 == 0 else 0.01)
                 for n, p in stacked.params.items()}
        for n, p in stacked.params.items():
            p.grad = grads[n].clone()
        packed.clip()
        packed.step([step] * 3, torch.tensor([True, step < frozen_from, True]))
        for r, (model, (optimizer, scheduler)) in enumerate(zip(alone, optimizers, strict=True)):
            if r == 1 and step >= frozen_from:
                continue
            for n, p in model.named_parameters():
                p.grad = grads[n][r].clone()
            if trains[r].grad_clip:
                torch.nn.utils.clip_grad_norm_([p for g in optimizer.param_groups for p in g["params"]],
                                               trains[r].grad_clip)
            optimizer.step()
            scheduler.step()
    for r, model in enumerate(alone):
        for n, p in model.named_parameters():
            assert torch.equal(stacked.params[n][r], p), (r, n)
        steps = frozen_from if r == 1 else 12
        mine, torchs = packed.run_state(r, steps, groups), optimizers[r][0].state_dict()
        assert mine["param_groups"] == torchs["param_groups"]
        for i, state in torchs["state"].items():
            assert all(torch.equal(state[k], mine["state"][i][k]) for k in ("step", "exp_avg", "exp_avg_sq"))


def test_a_run_state_loads_back():
    cfg = load_run_config(None, [*MQAR, "model=model/mamba2.yaml", *SMALL, "out_dir=x"])
    stacked = StackedModel([build_model(cfg.model, seed=s) for s in range(2)])
    names = {id(p): n for n, p in stacked.models[0].named_parameters()}
    groups = [[names[id(p)] for p in g["params"]] for g in param_groups(stacked.models[0], 0.0)]
    optimizer = PackedAdamW(stacked.params, set(groups[0]), groups[0] + groups[1], [cfg.train] * 2)
    for p in stacked.params.values():
        p.grad = torch.ones_like(p)
    optimizer.step([0, 0], torch.tensor([True, True]))
    state = optimizer.run_state(0, 1, groups)
    other = PackedAdamW({n: p.detach().clone() for n, p in stacked.params.items()}, set(groups[0]),
                        groups[0] + groups[1], [cfg.train] * 2)
    other.load_run_state(1, state, groups)
    assert all(torch.equal(other.exp_avg[n][1], optimizer.exp_avg[n][0]) for n in optimizer.exp_avg)
