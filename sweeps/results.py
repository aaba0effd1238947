"""A sweep's results as records, and the paper's aggregation: per cell, mean and std over seeds at the
learning rate with the best mean.

A cell is one table row (architecture, and every other varied key that is not d_model, the learning
rate or a seed) at one d_model. Runs that failed or have no result yet are kept in their cell as
missing (`[4/5]`), never dropped silently; diverged runs count with their best validation accuracy
(0 if they diverged before the first validation).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from loglinear.sweeps.config import GROUPS
from loglinear.sweeps.manifest import read_manifest, result_of
from loglinear.sweeps.train import FINISHED

MIXER_NAMES = {
    "attention": "Transformer",
    "mamba2": "Mamba-2",
    "log_linear_mamba2": "Log-Linear Mamba-2",
    "gated_deltanet": "Gated DeltaNet",
    "log_linear_gated_deltanet": "Log-Linear Gated DeltaNet",
}
"""Display names, in the paper's row order."""
MIXER_KEY, LAMBDA_KEY, COLUMN_KEY, LR_KEY = "model.mixer", "model.lambda_param", "model.d_model", "train.lr"
SEED_KEYS = ("train.seed", "data.seed")
THRESHOLD = 0.99
HEADERS = {MIXER_KEY: "Architecture", LAMBDA_KEY: "λ", "model.negative_eigenvalues": "eigenvalues", "data": "task"}


def is_log_linear(mixer: str) -> bool:
    return mixer.startswith("log_linear")


def lookup(config: dict[str, Any], key: str) -> Any:
    """`config["a"]["b"]` for key `a.b` (None when absent)."""
    value: Any = config
    for part in key.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


@dataclass
class Record:
    """One expected run: its configuration, its varied values, its result (empty when it has none)."""

    run_id: str
    config: dict[str, Any]
    point: dict[str, Any]
    result: dict[str, Any] = field(default_factory=dict)
    row: tuple[str, ...] = ()

    @property
    def status(self) -> str:
        """early_stopped, max_steps, diverged, failed, or missing (no result yet)."""
        return self.result.get("status", "failed") if self.result else "missing"

    @property
    def accuracy(self) -> Optional[float]:
        """Best validation accuracy of a finished run (0 for a run that diverged before validating)."""
        if self.status not in FINISHED:
            return None
        value = self.result.get("val_accuracy")
        return 0.0 if value is None else float(value)

    @property
    def test(self) -> dict[str, float]:
        return self.result.get("test") or {}

    def get(self, key: str) -> Any:
        return self.point[key] if key in self.point else lookup(self.config, key)

    @property
    def mixer(self) -> str:
        return str(self.get(MIXER_KEY))

    @property
    def d_model(self) -> int:
        return int(self.get(COLUMN_KEY))

    @property
    def lr(self) -> float:
        return float(self.get(LR_KEY))

    @property
    def task(self) -> str:
        return str(lookup(self.config, "data.task"))


@dataclass
class Sweep:
    """A sweep folder's manifest and records, with the keys that label table rows."""

    name: str
    out: Path
    records: list[Record]
    row_keys: list[str]

    @property
    def lambda_varies(self) -> bool:
        return LAMBDA_KEY in self.row_keys


def load_sweep(out: str | Path) -> Sweep:
    """Read `out/manifest.json` and every expected run's result.json (missing ones included)."""
    out = Path(out)
    manifest = read_manifest(out)
    records = []
    for entry in manifest["runs"]:
        result = result_of(out / entry["dir"])
        config = result.get("config") or entry["config"]
        records.append(Record(entry["id"], config, entry.get("point", {}), result))
    keys = _row_keys(manifest, records)
    for record in records:
        record.row = tuple(_label(key, record) for key in keys)
    orders = _label_orders(keys, records)
    records.sort(key=lambda r: (tuple(orders[k].index(v) for k, v in zip(keys, r.row)), r.d_model, r.lr))
    return Sweep(manifest["name"], out, records, keys)


def _row_keys(manifest: dict[str, Any], records: list[Record]) -> list[str]:
    """Architecture, λ when it varies among log-linear runs, then the other varied keys, except d_model,
    the learning rate, seeds and keys zipped with them (those follow the column, lr or seed)."""
    tied = {COLUMN_KEY, LR_KEY, *SEED_KEYS}
    for group in manifest.get("zip", []):
        if tied & set(group):
            tied |= set(group)
    keys = [MIXER_KEY]
    lambdas = {r.get(LAMBDA_KEY) for r in records if is_log_linear(r.mixer)}
    if len(lambdas) > 1:
        keys.append(LAMBDA_KEY)
    keys += [k for k in manifest.get("varied_keys", []) if k not in tied and k not in keys]
    return keys


def _label(key: str, record: Record) -> str:
    value = record.get(key)
    if key == MIXER_KEY:
        return MIXER_NAMES.get(str(value), str(value))
    if key == LAMBDA_KEY and not is_log_linear(record.mixer):
        return "-"
    if key == "model.negative_eigenvalues":
        return "[-1, 1]" if value else "[0, 1]"
    if key in GROUPS and isinstance(value, str):  # a group file: its name (data/parity.yaml -> parity)
        return Path(value).stem
    return str(value)


def _label_orders(keys: list[str], records: list[Record]) -> dict[str, list[str]]:
    """Each row key's labels in display order: architectures in the paper's order, others as they appear."""
    orders: dict[str, list[str]] = {}
    for i, key in enumerate(keys):
        seen = list(dict.fromkeys(r.row[i] for r in records))
        if key == MIXER_KEY:
            known = [n for n in MIXER_NAMES.values() if n in seen]
            seen = known + [s for s in seen if s not in known]
        orders[key] = seen
    return orders


@dataclass
class Cell:
    """The runs of one table cell at its chosen learning rate (None: no run of the cell finished)."""

    lr: Optional[float]
    runs: list[Record]

    @property
    def values(self) -> list[float]:
        return [r.accuracy for r in self.runs if r.accuracy is not None]

    @property
    def complete(self) -> bool:
        return len(self.values) == len(self.runs)

    @property
    def solved(self) -> bool:
        """Every seed with a result is above the threshold."""
        return bool(self.values) and all(v > THRESHOLD for v in self.values)


def mean_std(values: list[float]) -> tuple[float, Optional[float]]:
    """Mean and sample standard deviation (None for fewer than two values)."""
    mean = sum(values) / len(values)
    if len(values) < 2:
        return mean, None
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


def best_lr_cells(records: Iterable[Record], key: Callable[[Record], Hashable]) -> dict[Hashable, Cell]:
    """Group records by `key`, then keep each group's runs at the learning rate with the best mean accuracy
    (over the runs that finished; ties go to the smaller learning rate)."""
    groups: dict[Hashable, dict[float, list[Record]]] = {}
    for record in records:
        groups.setdefault(key(record), {}).setdefault(record.lr, []).append(record)
    cells = {}
    for cell_key, by_lr in groups.items():
        candidates = [Cell(lr, runs) for lr, runs in by_lr.items()]
        scored = {c.lr: mean_std(c.values)[0] for c in candidates if c.values}
        if scored:
            lr = max(sorted(scored), key=lambda x: scored[x])
            cells[cell_key] = Cell(lr, by_lr[lr])
        else:
            cells[cell_key] = Cell(None, [r for runs in by_lr.values() for r in runs])
    return cells


def slice_values(records: Iterable[Record], prefix: str) -> dict[int, list[float]]:
    """Test accuracy per slice value, e.g. prefix `test/acc/num_kv_pairs=`: {4: [...], 8: [...]} over `records`."""
    values: dict[int, list[float]] = {}
    for record in records:
        for metric, value in record.test.items():
            if metric.startswith(prefix) and metric[len(prefix):].lstrip("-").isdigit():
                values.setdefault(int(metric[len(prefix):]), []).append(float(value))
    return dict(sorted(values.items()))
