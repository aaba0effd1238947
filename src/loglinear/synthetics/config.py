"""`DataConfig`: which task, with which arguments, how much data, from which seed.

A typed dataclass that OmegaConf accepts as a structured config (unknown keys are rejected with a
"did you mean" hint), plus the functions that turn it into tasks. Presets live in
`configs/data/*.yaml`; load one with `load_data_config`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, OmegaConf

from loglinear.identity import ADDED
from loglinear.synthetics.arguments import check_int
from loglinear.synthetics.registry import get_task
from loglinear.synthetics.task import Task

VALIDATE_ON = ("train", "eval_sets")


@dataclass
class DataConfig:
    """The data of a run.

    - `task`, `task_args`: the training task, `get_task(task, **task_args)`.
    - `mixture`: optional training mixture (zoology/Based's length mix). Each entry is a dict of
      argument overrides on top of `task_args` plus an optional `weight` (default 1, e.g. the
      number of examples zoology gives that component). Each training batch comes from one
      component, drawn from (seed, step) with probability proportional to its weight; all
      examples of a batch share that component's arguments (and so one seq_len).
    - `eval_sets`: the test sets, each a dict of argument overrides on top of `task_args` (e.g.
      `{seq_len: 512}` for length generalisation) and an optional `name`; the default name lists
      the overrides ("seq_len=512"), and `{}` is named "iid".
    - `validate_on`: "train" (one validation set from the training distribution, mixture
      included, named "train") or "eval_sets" (the eval sets, drawn from validation seeds; this
      is zoology's protocol, which validates on its test mix).
    - `batch_size`; `val_size` and `test_size`: examples per validation / test set.
    - `train_size`: None (fresh examples every step) or N: train on a fixed set of N examples cycled by
      epochs (MAD's protocol; `TrainStream`); with a mixture, each component holds its share of N by weight
      (zoology's fixed Based set). The set is drawn once from `seed` in draws of 256 examples
      (`streams.fixed_chunks`): the same set whatever `batch_size`.
    - `seed`: keys every batch (training step n, validation and test batches draw from separate,
      disjoint seed streams). `num_workers`: DataLoader worker processes.
    """

    task: str
    task_args: dict[str, Any] = field(default_factory=dict)
    mixture: list[dict[str, Any]] = field(default_factory=list)
    eval_sets: list[dict[str, Any]] = field(default_factory=lambda: [{}])
    validate_on: str = "train"
    batch_size: int = 64
    val_size: int = 1024
    test_size: int = 1024
    train_size: int | None = field(default=None, metadata=ADDED)
    seed: int = 0
    num_workers: int = 0


@dataclass(frozen=True)
class TaskSet:
    """A named source of batches: one task, or a weighted mixture of tasks (one per batch)."""

    name: str
    tasks: tuple[Task, ...]
    weights: tuple[float, ...]


def as_data_config(config: DataConfig | Mapping[str, Any] | DictConfig) -> DataConfig:
    """A checked `DataConfig` from a DataConfig, a plain mapping or an OmegaConf config; unknown
    keys and wrongly typed values are rejected by OmegaConf, bad sizes here."""
    merged = OmegaConf.merge(OmegaConf.structured(DataConfig), config)
    data: DataConfig = OmegaConf.to_object(merged)  # type: ignore[assignment]
    return check_data_config(data)


def check_data_config(data: DataConfig) -> DataConfig:
    """`data` if its sizes and choices are valid, else a ValueError naming the key (the tasks' arguments are
    checked when the tasks are built)."""
    check_int("batch_size", data.batch_size, minimum=1)
    check_int("val_size", data.val_size, minimum=1)
    check_int("test_size", data.test_size, minimum=1)
    check_int("num_workers", data.num_workers, minimum=0)
    if data.train_size is not None:
        check_int("train_size", data.train_size, minimum=1)
    if data.validate_on not in VALIDATE_ON:
        raise ValueError(f"validate_on must be one of {list(VALIDATE_ON)}, got {data.validate_on!r}")
    if not data.eval_sets:
        raise ValueError("eval_sets must list at least one test set ([{}]: one from the training task): "
                         "a run without one cannot be scored")
    return data


def load_data_config(path: str | Path, overrides: Sequence[str] = ()) -> DataConfig:
    """Load a YAML preset (e.g. configs/data/mqar_cpu.yaml) with optional `key=value` overrides; a ValueError
    naming `path` when it is not a file holding a YAML mapping."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"data preset {path} not found")
    try:
        preset = OmegaConf.load(path)
    except (UnicodeDecodeError, yaml.YAMLError) as e:
        raise ValueError(f"{path} is not a YAML data preset: {str(e).splitlines()[0]}") from None
    if not isinstance(preset, DictConfig):
        raise ValueError(f"{path} is not a data preset: a YAML mapping of data keys (task, task_args, ...)")
    return as_data_config(OmegaConf.merge(preset, OmegaConf.from_dotlist(list(overrides))))


def training_set(config: DataConfig) -> TaskSet:
    """The training distribution: the mixture's components, or the task itself (a ValueError when most of its
    batches would score no position, `check_scored_batches`)."""
    if not config.mixture:
        task = get_task(config.task, **config.task_args)
        check_scored_batches(task, config.batch_size)
        return TaskSet("train", (task,), (1.0,))
    tasks, weights = [], []
    for i, component in enumerate(config.mixture):
        overrides = dict(component)
        weight = overrides.pop("weight", 1.0)
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not 0 < weight < math.inf:
            raise ValueError(f"mixture[{i}].weight must be a positive number, got {weight!r}")
        tasks.append(get_task(config.task, **{**config.task_args, **overrides}))
        check_scored_batches(tasks[-1], config.batch_size)
        weights.append(float(weight))
    return TaskSet("train", tuple(tasks), tuple(weights))


def check_scored_batches(task: Task, batch_size: int) -> None:
    """A ValueError when more than half of `task`'s training batches of `batch_size` would have no scored position:
    such a batch's loss is 0 with no gradient (the step only moves the optimiser's momentum and weight decay), so
    training would mostly not train."""
    empty = task.unscored**batch_size
    if empty > 0.5:
        raise ValueError(f"{task!r} leaves {100 * empty:.0f}% of the training batches of batch_size {batch_size} "
                         f"without a scored position ({100 * task.unscored:.0f}% of examples have none): use longer "
                         "sequences, less noise or larger batches")


def evaluation_sets(config: DataConfig) -> list[TaskSet]:
    """One single-task set per entry of `eval_sets`, in order, with unique names."""
    sets = []
    for overrides in config.eval_sets:
        overrides = dict(overrides)
        name = str(overrides.pop("name", None) or eval_set_name(overrides))
        sets.append(TaskSet(name, (get_task(config.task, **{**config.task_args, **overrides}),), (1.0,)))
    names = [s.name for s in sets]
    duplicated = sorted({n for n in names if names.count(n) > 1})
    if duplicated:
        raise ValueError(f"eval_sets names must be unique, {duplicated} repeat: give each a `name`")
    return sets


def eval_set_name(overrides: Mapping[str, Any]) -> str:
    """The default name of an eval set: its overrides, e.g. `seq_len=512,num_kv_pairs=128`; `iid` if none."""
    return ",".join(f"{k}={v}" for k, v in overrides.items()) or "iid"


def validation_sets(config: DataConfig) -> list[TaskSet]:
    return [training_set(config)] if config.validate_on == "train" else evaluation_sets(config)


def check_same_vocabulary(sets: Sequence[TaskSet]) -> int:
    """The vocab_size every task shares (one model sees them all), or a ValueError naming the set."""
    vocab = sets[0].tasks[0].vocab_size
    for task_set in sets:
        for task in task_set.tasks:
            if task.vocab_size != vocab:
                raise ValueError(
                    f"set {task_set.name!r} has vocab_size {task.vocab_size} but the training task has "
                    f"{vocab}: one model must read every set"
                )
    return vocab
