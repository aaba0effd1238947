"""Which runs can share a pack: the same model, task and shapes, differing only in what is per run.

Per run: where the run lives and how it is logged; its seeds (initial weights and data stream); the learning rate
and the optimiser's other scalars; its schedule (warm-up, decay floor, step budget) and stopping rule; the initial
weights it starts from; and the init options, which change the initial values only (a pack also checks that
every run's model has the same parameters: `StackedModel`). Everything else (the model's architecture, the task
and its shapes, batch size, validation schedule, precision, device) is shared.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from loglinear.models.config import INIT_OPTIONS
from loglinear.runs.config import ConfigError, RunConfig, identity_difference, to_container

PER_RUN = (
    "out_dir", "logger", "data.seed", "model.init", *(f"model.{name}" for name in INIT_OPTIONS),
    *(f"train.{name}" for name in (
        "seed", "lr", "weight_decay", "beta1", "beta2", "warmup_steps", "min_lr_ratio", "max_steps", "grad_clip",
        "early_stop_threshold", "threshold_evals", "plateau_window", "plateau_min_delta", "init_from")),
)
"""The keys whose values may differ between the runs of one pack."""

PACKED_PRECISIONS = ("auto", "32-true", "bf16-mixed")
"""`train.precision` a pack trains with (16-mixed needs a loss scaler per run; the others are not supported)."""


class PackError(ConfigError):
    """Runs that cannot be trained together; the message is one line naming the difference."""


def shared_part(cfg: RunConfig, here: bool = False) -> dict[str, Any]:
    """What the runs of one pack must share: the configuration without the PER_RUN keys; `here`: with
    `train.precision` as this machine resolves it (`auto` is 32-true without a GPU)."""
    config = to_container(cfg)
    if here:
        from loglinear.runs.train import resolved_precision  # the training libraries: for the pack's process only

        config["train"]["precision"] = resolved_precision(cfg.train.precision)
    for key in PER_RUN:
        group, _, name = key.partition(".")
        if not name:
            config.pop(group, None)
        elif isinstance(config.get(group), dict):
            config[group].pop(name, None)
    return config


def check_trainable_packed(cfg: RunConfig) -> None:
    """Refuse, in one line, a run that no pack can train."""
    train = cfg.train
    refusals = [
        (train.precision not in PACKED_PRECISIONS,
         f"train.precision={train.precision} (a pack trains with {', '.join(PACKED_PRECISIONS)})"),
        (train.patience is not None, f"train.patience={train.patience} (a pack stops a run when it is solved, not "
                                     "on a plateau)"),
        (train.devices not in (1, "auto") or train.strategy != "auto",
         f"train.devices={train.devices} train.strategy={train.strategy} (a pack trains on one device)"),
        (train.compile or train.cuda_graphs, "train.compile / train.cuda_graphs (a pack runs eagerly)"),
        (train.fused_loss, "train.fused_loss (a pack computes each run's loss from its logits)"),
    ]
    for refused, what in refusals:
        if refused:
            raise PackError(f"{cfg.out_dir}: cannot train in a pack: {what}; train it alone (without --pack)")


def check_packable(cfgs: Sequence[RunConfig]) -> None:
    """Refuse runs that cannot share a pack, naming the first two that differ and the first difference (on the
    machine that trains them: `auto` and `32-true` are one precision without a GPU; a sweep groups its runs by the
    precision they name, `pack_groups`, for they may train elsewhere)."""
    if not cfgs:
        raise PackError("a pack needs at least one run")
    for cfg in cfgs:
        check_trainable_packed(cfg)
    first = shared_part(cfgs[0], here=True)
    for cfg in cfgs[1:]:
        found = identity_difference(first, shared_part(cfg, here=True))
        if found:
            raise PackError(f"{cfgs[0].out_dir} and {cfg.out_dir} cannot share a pack: they differ in {found} "
                            f"(a pack's runs differ only in {', '.join(PER_RUN)})")
    folders = [cfg.out_dir for cfg in cfgs]
    if len(set(folders)) < len(folders):
        raise PackError(f"a pack names the run folder {next(f for f in folders if folders.count(f) > 1)} twice")


def pack_groups(cfgs: Sequence[RunConfig], size: int) -> list[list[int]]:
    """Indices of `cfgs` in packs of at most `size` runs that can share a pack, in the order of their first run;
    runs no pack can train are left alone, each in a pack of one."""
    groups: dict[str, list[list[int]]] = {}
    order: list[list[int]] = []
    for i, cfg in enumerate(cfgs):
        try:
            check_trainable_packed(cfg)
        except PackError:
            order.append([i])
            continue
        key = repr(shared_part(cfg))
        packs = groups.setdefault(key, [])
        if not packs or len(packs[-1]) >= size:
            packs.append([])
            order.append(packs[-1])
        packs[-1].append(i)
    return order
