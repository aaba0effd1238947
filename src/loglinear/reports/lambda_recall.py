"""The effective weight of each Fenwick level at the moment of recall: at the query positions of an MQAR run,
grouped by the level that holds the recalled key (runs/recall_levels.py's rule), so a reader sees whether the
model weights the level holding the key.

`RecallWeights` collects, per (layer, key level), the mean over queries of each head's effective weight on every
level (models/lambda_levels.py: lambda times the level's readout norm, as a share of the output; an empty level
carries 0), and the same share with lambda = 1 on every level (the readout norms alone, same trained states). The
second is the control: the key's level is always occupied at its query while other levels may be empty, and a
recent level holds fewer decayed tokens, so the key's level can carry a large share without lambda favouring it;
what lambda adds is the difference. `loglinear inspect` writes both as `lambda_recall.csv` beside
lambda_levels.csv; `recall_section` turns the runs of one λ parameterisation into the sweep report's table.
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from loglinear.models.lambda_levels import effective_weights
from loglinear.reports.tables import markdown_table, mean_std_text
from loglinear.runs.folder import write_text_atomic
from loglinear.runs.recall_levels import key_levels, recalled_keys

RECALL_CSV = "lambda_recall.csv"
RECALL_SEQUENCES = 32
"""Validation sequences of each batch at whose queries the effective weights are measured."""
CSV_HEADER = ["layer", "head", "key_level", "level", "queries", "effective_mean", "uniform_mean"]


@dataclass(frozen=True)
class RecallRow:
    """One (layer, head, key level, level): the mean effective weight of `level` over the `queries` whose recalled
    key sat in `key_level`, and its mean share with lambda = 1 on every level."""

    layer: int
    head: int
    key_level: int
    level: int
    queries: int
    effective_mean: float
    uniform_mean: float


class RecallWeights:
    """Sums of effective weights at query positions per (layer, key level), in float64."""

    def __init__(self) -> None:
        self._sums: dict[tuple[int, int], Tensor] = {}  # (2, H, L): effective and uniform sums over queries
        self._counts: dict[tuple[int, int], Tensor] = {}  # (H,) queries with a defined weight

    def add(self, layer: int, lam: Tensor, norms: Tensor, inputs: Tensor, targets: Tensor) -> None:
        """lam (B, T, H, L) and the levels' readout norms (`level_output_norms`) of the sequences `inputs`,
        `targets` (B, T) of an MQAR batch; a head without any output at a query (weights NaN) is left out there."""
        row, t, s = recalled_keys(inputs.cpu(), targets.cpu())
        both = torch.stack([effective_weights(lam, norms), effective_weights(torch.ones_like(lam), norms)])
        at_queries = both.detach().to("cpu", torch.float64)[:, row, t]  # (2, Q, H, L)
        levels = key_levels(t, s)
        for key_level in levels.unique().tolist():
            chosen = at_queries[:, levels == key_level]
            defined = ~chosen.isnan().any(-1).any(0)  # (Q, H)
            key = (layer, key_level)
            total = torch.where(defined[..., None], chosen, torch.zeros_like(chosen)).sum(1)
            self._sums[key] = self._sums.get(key, 0) + total
            self._counts[key] = self._counts.get(key, 0) + defined.sum(0)

    def rows(self) -> list[RecallRow]:
        rows = []
        for (layer, key_level), sums in sorted(self._sums.items()):
            counts = self._counts[(layer, key_level)]
            for h in range(sums.shape[1]):
                n = int(counts[h])
                if n == 0:  # every such query of this head without output
                    continue
                for level in range(sums.shape[2]):
                    effective, uniform = (float(sums[i, h, level] / n) for i in range(2))
                    rows.append(RecallRow(layer, h, key_level, level, n, effective, uniform))
        return rows


def write_csv(rows: list[RecallRow], path: Path) -> None:
    text = io.StringIO()
    writer = csv.writer(text)
    writer.writerow(CSV_HEADER)
    for r in rows:
        writer.writerow([r.layer, r.head, r.key_level, r.level, r.queries,
                         *("" if math.isnan(v) else repr(v) for v in (r.effective_mean, r.uniform_mean))])
    write_text_atomic(path, text.getvalue())


def read_csv(path: Path) -> list[RecallRow]:
    """The rows of a lambda_recall.csv (as `write_csv` wrote them)."""
    with open(path, newline="") as f:
        return [RecallRow(int(d["layer"]), int(d["head"]), int(d["key_level"]), int(d["level"]), int(d["queries"]),
                          *(float(d[name]) if d[name] else math.nan for name in CSV_HEADER[-2:]))
                for d in csv.DictReader(f)]


def weight_matrix(rows: list[RecallRow], uniform: bool = False) -> dict[tuple[int, int], dict[int, float]]:
    """{(layer, key level): {level: mean over heads of the mean effective weight}} of one run (`uniform`: of the
    share with lambda = 1)."""
    grouped: dict[tuple[int, int], dict[int, list[float]]] = {}
    for r in rows:
        value = r.uniform_mean if uniform else r.effective_mean
        if not math.isnan(value):
            grouped.setdefault((r.layer, r.key_level), {}).setdefault(r.level, []).append(value)
    return {key: {lv: float(np.mean(v)) for lv, v in sorted(by_level.items())}
            for key, by_level in sorted(grouped.items())}


def recall_section(runs: list[list[RecallRow]], accuracy: dict[str, list[float]]) -> str:
    """The Markdown table of one λ parameterisation: a row per (layer, level of the recalled key) with the test
    accuracy at that key level (`accuracy`: {level label: one value per seed}, result.json `recall`), then the
    effective weight on each level at those queries (mean over seeds of each run's mean over heads and queries),
    the weight on the key's own level in bold, std over seeds beside it; last, the key level's share with
    lambda = 1 (the control)."""
    matrices = [weight_matrix(r) for r in runs]
    controls = [weight_matrix(r, uniform=True) for r in runs]
    keys = sorted({key for m in matrices for key in m})
    levels = sorted({lv for m in matrices for by_level in m.values() for lv in by_level})
    header = ["layer", "key in level", "test accuracy (%)", *(f"level {lv}" for lv in levels), "key's level at λ = 1"]
    rows = []
    for layer, key_level in keys:
        cells = []
        for lv in levels:
            values = [m[(layer, key_level)][lv] for m in matrices if lv in m.get((layer, key_level), {})]
            text = mean_std_text(values, scale=1.0, digits=2)
            cells.append(f"**{text}**" if lv == key_level and values else text)
        acc = mean_std_text(accuracy.get(str(key_level), []))
        control = [m[(layer, key_level)][key_level] for m in controls if key_level in m.get((layer, key_level), {})]
        cells.append(mean_std_text(control, scale=1.0, digits=2))
        rows.append([str(layer), str(key_level), acc, *cells])
    return markdown_table(header, rows)

