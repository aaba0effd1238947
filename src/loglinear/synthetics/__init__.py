"""Synthetic sequence tasks (pure torch) and their LightningDataModule.

`task = get_task(name, **kwargs)`; `batch = task.sample(batch_size, seed)` gives `inputs` and
`targets` `(B, T)` int64 (-100 where nothing is scored) and per-example `slices`, deterministically
from (arguments, batch_size, seed) without touching global RNG state. Tasks: `mqar` (zoology's
multi-query associative recall) and its `forgetting_mqar` and `compositional_mqar`, `parity`, `cycle_nav`, `mod_arith`,
`mod_arith_brackets`, the group word problems `s3`, `s5`, `a5`, `s5_transpositions`, `flip_flop`, and
MAD's `in_context_recall`, `fuzzy_in_context_recall`, `noisy_in_context_recall`, `selective_copying` and
`memorization`; the needle in a haystack `niah` (RULER's needle tasks), `regbench` (in-context language learning from
random automata) and zoology's `stacked_mqar`. `DataConfig` and
`SyntheticDataModule` turn a preset (configs/data/*.yaml) into training, validation and test loaders.
The DataModule is imported lazily, so the tasks alone never import Lightning.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from loglinear.synthetics.batch import IGNORE_INDEX, Batch
from loglinear.synthetics.config import DataConfig, as_data_config, load_data_config
from loglinear.synthetics.registry import TASKS, get_task
from loglinear.synthetics.task import Task

if TYPE_CHECKING:
    from loglinear.synthetics.datamodule import SyntheticDataModule

__all__ = [
    "IGNORE_INDEX",
    "TASKS",
    "Batch",
    "DataConfig",
    "SyntheticDataModule",
    "Task",
    "as_data_config",
    "get_task",
    "load_data_config",
]


def __getattr__(name: str) -> Any:
    if name == "SyntheticDataModule":
        from loglinear.synthetics.datamodule import SyntheticDataModule

        return SyntheticDataModule
    raise AttributeError(f"module 'loglinear.synthetics' has no attribute {name!r}")
