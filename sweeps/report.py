"""`loglinear sweep report DIR`: `results.csv` (one row per run), `table.md` (the paper's table, the
learning rates behind it, the λ table, accuracy by test length, the missing or failed runs) and PNG plots."""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from loglinear.sweeps.plots import write_plots
from loglinear.sweeps.results import (
    HEADERS, LAMBDA_KEY, MIXER_KEY, MIXER_NAMES, Cell, Record, Sweep, best_lr_cells, is_log_linear, load_sweep,
    lookup, mean_std, slice_values,
)
from loglinear.sweeps.spec import describe
from loglinear.sweeps.train import FINISHED

TABLE = "table.md"
CSV = "results.csv"
RESULT_COLUMNS = ("val_accuracy", "steps_to_threshold", "step", "params", "wall_time_s")
CSV_COLUMNS = ("run_id", "status", "mixer", "lambda_param", "d_model", "n_layers", "lr", "seed", "task", *RESULT_COLUMNS)
SEQ_LEN_PREFIX = "test/acc/seq_len="
NOTE = (
    "Best validation accuracy (%): mean (sample standard deviation) over seeds, at the learning rate with "
    "the best mean in each cell (listed below). `>=99`: every seed above 99%. `[k/n]`: only k of the "
    "cell's n runs finished (the others are listed at the end). Diverged runs count with their best "
    "accuracy before diverging (0 if they diverged before the first validation)."
)


@dataclass
class Report:
    """What `write_report` produced: the Markdown tables, the files written, and the plots skipped (with why)."""

    table: str
    written: list[Path] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)


def write_report(out: str | Path) -> Report:
    out = Path(out)
    sweep = load_sweep(out)
    table = render_tables(sweep)
    (out / TABLE).write_text(table)
    write_csv(sweep, out / CSV)
    written, skipped = write_plots(sweep, out)
    return Report(table, [out / CSV, out / TABLE, *written], skipped)


def render_tables(sweep: Sweep) -> str:
    cells = best_lr_cells(sweep.records, lambda r: (r.row, r.d_model))
    parts = [f"# {sweep.name}\n", accuracy_table(sweep, cells), NOTE, "## Learning rate of each cell\n", lr_table(sweep, cells)]
    if sweep.lambda_varies:
        parts += ["## λ parameterisations (log-linear mixers)\n", lambda_table(sweep)]
    lengths = length_table(sweep, cells)
    if lengths:
        parts += ["## Test accuracy by sequence length (%)\n", lengths]
    parts += ["## Missing or failed runs\n", missing_runs(sweep)]
    return "\n".join(p.rstrip("\n") + "\n" for p in parts)


def accuracy_table(sweep: Sweep, cells: dict) -> str:
    return _pivot(sweep, cells, format_cell)


def lr_table(sweep: Sweep, cells: dict) -> str:
    return _pivot(sweep, cells, lambda c: "-" if c.lr is None else f"{c.lr:.3g}")


def format_cell(cell: Cell) -> str:
    """`55.9 (3.1)`, `>=99`, `55.9` (one seed) or `-`, with ` [k/n]` when runs are missing."""
    values = cell.values
    if not values:
        text = "-"
    elif cell.solved:
        text = ">=99"
    else:
        text = _mean_text(values)
    return text if cell.complete else f"{text} [{len(values)}/{len(cell.runs)}]"


def _pivot(sweep: Sweep, cells: dict, fmt) -> str:
    rows = list(dict.fromkeys(r.row for r in sweep.records))
    columns = sorted({r.d_model for r in sweep.records})
    header = [_header(k) for k in sweep.row_keys] + [f"d_model {d}" for d in columns]
    body = [list(row) + [fmt(cells[(row, d)]) if (row, d) in cells else "" for d in columns] for row in rows]
    return markdown_table(header, body)


def lambda_table(sweep: Sweep) -> str:
    """Rows: λ (and the other row keys but the architecture); columns: (architecture, d_model)."""
    records = [r for r in sweep.records if is_log_linear(r.mixer)]
    drop = sweep.row_keys.index(MIXER_KEY)
    order = sweep.row_keys.index(LAMBDA_KEY)

    def row_of(r: Record) -> tuple[str, ...]:
        rest = [v for i, v in enumerate(r.row) if i not in (drop, order)]
        return (r.row[order], *rest)

    cells = best_lr_cells(records, lambda r: (row_of(r), r.mixer, r.d_model))
    columns = list(dict.fromkeys((r.mixer, r.d_model) for r in sorted(records, key=lambda r: (_mixer_rank(r.mixer), r.d_model))))
    keys = [LAMBDA_KEY] + [k for k in sweep.row_keys if k not in (MIXER_KEY, LAMBDA_KEY)]
    header = [_header(k) for k in keys] + [f"{MIXER_NAMES.get(m, m)} {d}" for m, d in columns]
    body = []
    for row in dict.fromkeys(row_of(r) for r in records):
        body.append(list(row) + [format_cell(cells[(row, *c)]) if (row, *c) in cells else "" for c in columns])
    return markdown_table(header, body)


def length_table(sweep: Sweep, cells: dict) -> Optional[str]:
    """State tracking: test accuracy at each sequence length of the chosen runs (the training length marked)."""
    records = [r for r in sweep.records if r.task != "mqar"]
    lengths = sorted({n for r in records for n in slice_values([r], SEQ_LEN_PREFIX)})
    if len(lengths) < 2:
        return None
    train_lengths = {lookup(r.config, "data.task_args.seq_len") for r in records}
    train = train_lengths.pop() if len(train_lengths) == 1 else None
    header = [_header(k) for k in sweep.row_keys] + ["d_model"] + [f"{n} (train)" if n == train else str(n) for n in lengths]
    body = []
    for (row, d_model), cell in cells.items():
        per_length = slice_values([r for r in cell.runs if r.status in FINISHED and r.task != "mqar"], SEQ_LEN_PREFIX)
        if not per_length:
            continue
        body.append([*row, str(d_model)] + [_mean_text(per_length.get(n, [])) for n in lengths])
    return markdown_table(header, body) if body else None


def missing_runs(sweep: Sweep) -> str:
    missing = [r for r in sweep.records if r.status not in FINISHED]
    if not missing:
        return f"None: all {len(sweep.records)} runs finished."
    lines = []
    for r in missing:
        error = r.result.get("error")
        reason = "no result yet (not run, running or interrupted)" if r.status == "missing" else r.status
        lines.append(f"- `runs/{r.run_id}` ({describe(r.point)}): {reason}" + (f": {error}" if error else ""))
    return f"{len(missing)} of {len(sweep.records)} runs:\n\n" + "\n".join(lines)


def write_csv(sweep: Sweep, path: Path) -> None:
    """One row per expected run: the fixed columns, every test metric, then the varied keys."""
    metrics = sorted({k for r in sweep.records for k in r.test})
    varied = list(dict.fromkeys(k for r in sweep.records for k in r.point))
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow([*CSV_COLUMNS, *metrics, *varied])
        for r in sweep.records:
            fixed = {
                "run_id": r.run_id, "status": r.status, "mixer": r.mixer, "lambda_param": r.get(LAMBDA_KEY),
                "d_model": r.d_model, "n_layers": r.get("model.n_layers"), "lr": r.lr, "seed": r.get("train.seed"),
                "task": r.task, **{k: r.result.get(k) for k in RESULT_COLUMNS},
            }
            writer.writerow([_csv(fixed[c]) for c in CSV_COLUMNS] + [_csv(r.test.get(m)) for m in metrics]
                            + [_csv(r.point.get(k)) for k in varied])


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def _header(key: str) -> str:
    return HEADERS.get(key, key.rsplit(".", 1)[-1])


def _mixer_rank(mixer: str) -> int:
    names = list(MIXER_NAMES)
    return names.index(mixer) if mixer in names else len(names)


def _mean_text(values: list[float]) -> str:
    if not values:
        return "-"
    mean, std = mean_std(values)
    return f"{100 * mean:.1f}" + ("" if std is None else f" ({100 * std:.1f})")


def _csv(value: Any) -> Any:
    if value is None:
        return ""
    return json.dumps(value) if isinstance(value, (list, dict)) else value
