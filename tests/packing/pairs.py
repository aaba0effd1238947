"""Runs trained in a pack against the same runs trained alone: configs and the comparison of their folders."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path

from loglinear.runs.config import RunConfig, load_run_config
from loglinear.runs.metrics_rows import read_rows

MQAR = ["data=data/mqar_cpu.yaml", "data.task_args.vocab_size=32", "data.task_args.seq_len=16",
        "data.task_args.num_kv_pairs=2", "data.eval_sets=[{},{seq_len: 32, num_kv_pairs: 4}]"]
SMALL = ["data.batch_size=8", "data.val_size=16", "data.test_size=16", "model.d_model=16", "train.max_steps=60",
         "train.val_every=20", "train.warmup_steps=5", "logger.wandb.mode=disabled", "logger.progress=false"]
GRID = [(seed, lr) for seed in (0, 1) for lr in (1e-3, 3e-3)]
"""The runs of a test pack: 2 seeds x 2 learning rates."""

IGNORED = ("wall_time_s", "machine", "config", "peak_memory_bytes")
"""result.json keys that differ between any two sessions of a run."""
RTOL = 1e-4
"""Values are compared to float32 rounding, as it grows over a run's steps: most runs agree to the bit on the CPU,
but a pack's batched matmuls may add in another order than a run's own (torch's CPU bmm has a kernel of its own
for small matrices), and training carries a last-bit difference forward."""


def overrides(root: Path, kind: str, model: str, extra: Sequence[str], seed: int, lr: float,
              data: Sequence[str] = MQAR) -> list[str]:
    """The `key=value` list of one test run, in `root/kind/<seed>_<lr>`."""
    return [*data, f"model=model/{model}.yaml", *SMALL, f"train.seed={seed}", f"data.seed={seed}", f"train.lr={lr}",
            *extra, f"out_dir={root / kind / f'{seed}_{lr}'}"]


def configs(root: Path, kind: str, model: str, extra: Sequence[str] = (), grid=GRID, data=MQAR) -> list[RunConfig]:
    return [load_run_config(None, overrides(root, kind, model, extra, seed, lr, data)) for seed, lr in grid]


def _number(x):
    try:
        return float(x) if isinstance(x, str) and x else x
    except ValueError:
        return x


def _close(a, b) -> bool:
    a, b = _number(a), _number(b)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=RTOL, abs_tol=1e-6)
    return a == b


def assert_same_run(alone: Path, packed: Path) -> None:
    """The same result (but for timing and machine) and the same metrics rows, to float32 rounding."""
    a, p = (json.loads((d / "result.json").read_text()) for d in (alone, packed))
    for key in sorted(set(a) | set(p)):
        if key not in IGNORED:
            assert _close(a.get(key), p.get(key)), f"{packed.name}: result {key}: {a.get(key)} != {p.get(key)}"
    rows_a, rows_p = read_rows(alone / "metrics.csv"), read_rows(packed / "metrics.csv")
    assert [(r.get("epoch"), r.get("step")) for r in rows_a] == [(r.get("epoch"), r.get("step")) for r in rows_p]
    for row_a, row_p in zip(rows_a, rows_p, strict=True):
        assert _close(row_a, row_p), f"{packed.name}: metrics row {row_a} != {row_p}"
