"""A sweep's results as records, and the paper's selection protocol: per cell, the configuration
(learning rate, and λ parameterisation for a log-linear mixer) with the best mean *validation*
accuracy, reported by the *test* accuracy of its runs (mean and std over seeds).

A cell is one table row (architecture, and every other varied key that is not d_model, the learning
rate, λ or a seed) at one d_model. A run is scored by its final weights, the weights the test set
sees: `final_val["val/acc"]` for selection, `test["test/acc"]` for the report. Runs that failed or
have no result yet are kept in their cell as missing (`[4/5]`), never dropped silently; a diverged
run scores 0 on both (its final weights are not a model).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loglinear.models import MIXERS, ModelConfig
from loglinear.runs.config import GROUPS, SOLVED
from loglinear.runs.folder import FINISHED, read_result
from loglinear.sweeps.manifest import read_manifest

MIXER_KEY, LAMBDA_KEY, COLUMN_KEY, LR_KEY = "model.mixer", "model.lambda_param", "model.d_model", "train.lr"
SEED_KEYS = ("train.seed", "data.seed")
DEFAULT_LAMBDA = ModelConfig.lambda_param
VAL_METRIC, TEST_METRIC = "val/acc", "test/acc"
THRESHOLD = SOLVED
HEADERS = {MIXER_KEY: "Architecture", LAMBDA_KEY: "λ", "model.negative_eigenvalues": "eigenvalues", "data": "task"}


def is_log_linear(mixer: str) -> bool:
    return mixer in MIXERS and MIXERS[mixer].log_linear


def table_order() -> list[str]:
    """The mixers in the paper's row order: each base mixer (in `MIXERS` order) followed by the
    log-linear mixers that extend it."""
    bases = [name for name, mixer in MIXERS.items() if mixer.base is None]
    return [name for base in bases for name, mixer in MIXERS.items() if base in (name, mixer.base)]


def mixer_rank(mixer: str) -> int:
    """Position of a mixer in `table_order()` (unknown mixers last)."""
    names = table_order()
    return names.index(mixer) if mixer in names else len(names)


def base_mixer(mixer: str) -> str | None:
    """The mixer a log-linear mixer extends (log_linear_mamba2 -> mamba2); None for a base mixer."""
    return MIXERS[mixer].base if mixer in MIXERS else None


def display_name(mixer: str) -> str:
    """A mixer's row label in tables ("Mamba-2"); an unknown name stands for itself."""
    return MIXERS[mixer].display_name if mixer in MIXERS else mixer


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
        """early_stopped, max_steps, diverged, failed, missing (no result yet) or unreadable (a bad result.json)."""
        return self.result.get("status", "failed") if self.result else "missing"

    @property
    def val_score(self) -> float | None:
        """Validation accuracy of the final weights (selection); 0 if diverged, None if not finished.
        Results without `final_val` fall back to the best validation accuracy."""
        if self.status not in FINISHED:
            return None
        if self.status == "diverged":
            return 0.0
        final = (self.result.get("final_val") or {}).get(VAL_METRIC)
        value = final if final is not None else self.result.get("val_accuracy")
        return None if value is None else float(value)

    @property
    def test_score(self) -> float | None:
        """Test accuracy of the final weights (the report); 0 if diverged, None if not finished or not tested."""
        return self.test_value(TEST_METRIC)

    def test_value(self, metric: str) -> float | None:
        """Test metric `metric` of the final weights; 0 if diverged, None if not finished or without it."""
        if self.status not in FINISHED:
            return None
        if self.status == "diverged":
            return 0.0
        value = self.test.get(metric)
        return None if value is None else float(value)

    @property
    def test(self) -> dict[str, float]:
        return self.result.get("test") or {}

    @property
    def seed(self) -> tuple[Any, ...]:
        """What pairs runs of different mixers: (train.seed, data.seed)."""
        return tuple(self.get(k) for k in SEED_KEYS)

    @property
    def lambda_param(self) -> str | None:
        """The λ parameterisation of a log-linear run, None for the other mixers."""
        return str(self.get(LAMBDA_KEY) or DEFAULT_LAMBDA) if is_log_linear(self.mixer) else None

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

    @property
    def table_keys(self) -> list[str]:
        """The row keys of the main table: λ is not one (it is selected per cell, like the lr)."""
        return [k for k in self.row_keys if k != LAMBDA_KEY]

    def table_row(self, record: Record) -> tuple[str, ...]:
        return tuple(label for key, label in zip(self.row_keys, record.row, strict=True) if key != LAMBDA_KEY)

    def cells(self) -> dict[Hashable, Cell]:
        """The main table's cells: {(table row, d_model): Cell} under the selection protocol."""
        return selected_cells(self.records, lambda r: (self.table_row(r), r.d_model))


def load_sweep(out: str | Path) -> Sweep:
    """Read `out/manifest.json` and every expected run's result.json (missing ones included)."""
    out = Path(out)
    manifest = read_manifest(out)
    records = []
    for entry in manifest["runs"]:
        try:
            result = read_result(out / entry["dir"]) or {}
        except (OSError, ValueError) as e:  # named in the report's missing runs, never taken for a result
            result = {"status": "unreadable", "error": str(e)}
        config = result.get("config") or entry["config"]
        records.append(Record(entry["id"], config, entry.get("point", {}), result))
    keys = _row_keys(manifest, records)
    for record in records:
        record.row = tuple(_label(key, record) for key in keys)
    orders = _label_orders(keys, records)
    records.sort(key=lambda r: (tuple(orders[k].index(v) for k, v in zip(keys, r.row, strict=True)), r.d_model, r.lr))
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
        return display_name(str(value))
    if key == LAMBDA_KEY and not is_log_linear(record.mixer):
        return "-"
    if key == "model.negative_eigenvalues":
        if not MIXERS[record.mixer].transitions:
            return "-"
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
            known = [n for n in map(display_name, table_order()) if n in seen]
            seen = known + [s for s in seen if s not in known]
        orders[key] = seen
    return orders


@dataclass
class Cell:
    """The runs of one table cell at its selected configuration (lr and λ; None: no run of the cell finished).

    `candidates` is how many configurations the selection compared."""

    lr: float | None
    lambda_param: str | None
    runs: list[Record]
    candidates: int = 1

    @property
    def values(self) -> list[float]:
        """Test accuracies of the runs that have one."""
        return [v for v in (r.test_score for r in self.runs) if v is not None]

    @property
    def val_values(self) -> list[float]:
        return [v for v in (r.val_score for r in self.runs) if v is not None]

    @property
    def complete(self) -> bool:
        return len(self.values) == len(self.runs)

    @property
    def solved(self) -> bool:
        """Every seed with a result is above the threshold on the test set."""
        return bool(self.values) and all(v > THRESHOLD for v in self.values)

    @property
    def above_threshold(self) -> int:
        return sum(v > THRESHOLD for v in self.values)

    @property
    def median_steps(self) -> float | None:
        """Median over the cell's runs of the steps to the validation threshold, counting a run that never
        reached it as infinitely many (inf when at least half never did); None without runs."""
        if not self.runs:
            return None
        steps = sorted(
            math.inf if r.result.get("steps_to_threshold") is None else float(r.result["steps_to_threshold"])
            for r in self.runs
        )
        middle = len(steps) // 2
        return steps[middle] if len(steps) % 2 else (steps[middle - 1] + steps[middle]) / 2


def mean_std(values: list[float]) -> tuple[float, float | None]:
    """Mean and sample standard deviation (None for fewer than two values)."""
    mean = sum(values) / len(values)
    if len(values) < 2:
        return mean, None
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


def mean_std_text(values: list[float], scale: float = 100.0, digits: int = 1) -> str:
    """`mean (std)` of `values` times `scale` (percent by default), `-` for none, no std for one value."""
    if not values:
        return "-"
    mean, std = mean_std(values)
    return f"{scale * mean:.{digits}f}" + ("" if std is None else f" ({scale * std:.{digits}f})")


def selected_cells(records: Iterable[Record], key: Callable[[Record], Hashable]) -> dict[Hashable, Cell]:
    """Group records by `key`, then keep each group's runs at the configuration (lr, λ) with the best mean
    validation score over the runs that finished (ties go to the smaller lr, then to λ's name)."""
    groups: dict[Hashable, dict[tuple[float, str], list[Record]]] = {}
    for record in records:
        config = (record.lr, record.lambda_param or "")
        groups.setdefault(key(record), {}).setdefault(config, []).append(record)
    cells = {}
    for cell_key, by_config in groups.items():
        scored = {}
        for config, runs in by_config.items():
            values = Cell(config[0], config[1], runs).val_values
            if values:
                scored[config] = mean_std(values)[0]
        if scored:
            best = max(sorted(scored), key=lambda c: scored[c])
            cells[cell_key] = Cell(best[0], best[1] or None, by_config[best], len(by_config))
        else:
            cells[cell_key] = Cell(None, None, [r for runs in by_config.values() for r in runs], len(by_config))
    return cells


def slice_values(records: Iterable[Record], prefix: str) -> dict[int, list[float]]:
    """Test accuracy per slice value, e.g. prefix `test/acc/num_kv_pairs=`: {4: [...], 8: [...]} over `records`."""
    values: dict[int, list[float]] = {}
    for record in records:
        for metric, value in record.test.items():
            if metric.startswith(prefix) and metric[len(prefix):].lstrip("-").isdigit():
                values.setdefault(int(metric[len(prefix):]), []).append(float(value))
    return dict(sorted(values.items()))
