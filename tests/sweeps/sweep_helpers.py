"""Tiny sweep specs for the sweep tests: 1 key-value pair at length 8, d_model 16, a few steps (seconds a run)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from .. import child_process

TINY_BASE: dict[str, Any] = {
    "data.task": "mqar",
    "data.task_args": {"vocab_size": 16, "seq_len": 8, "num_kv_pairs": 1},
    "data.eval_sets": [{}, {"seq_len": 16}],
    "data.batch_size": 32,
    "data.val_size": 64,
    "data.test_size": 64,
    "model.mixer": "attention",
    "model.d_model": 16,
    "train.lr": 1.0e-2,
    "train.warmup_steps": 2,
    "train.max_steps": 20,
    "train.val_every": 10,
    "logger.wandb.mode": "disabled",
}


def write_spec(folder: Path, grid: dict[str, list], name: str = "tiny", zip_groups: list | None = None,
               **base: Any) -> Path:
    """A spec file in `folder` on the tiny base (keys in `base` replace or extend it)."""
    merged = {**TINY_BASE, **base}
    for key in list(grid) + [k for group in zip_groups or [] for k in group]:
        merged.pop(key, None)
    spec: dict[str, Any] = {"name": name, "base": merged, "grid": grid}
    if zip_groups:
        spec["zip"] = zip_groups
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def sweep_cli(*args: str, cpu_s: float = 600, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`loglinear sweep ...` in a fresh process (guarded: tests/child_process.py)."""
    return child_process.run([sys.executable, "-m", "loglinear", "sweep", *args], cpu_s=cpu_s,
                             env={**os.environ, **(env or {})})
