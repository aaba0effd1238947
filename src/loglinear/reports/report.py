"""`loglinear sweep report DIR`: `results.csv` (one row per run), `paired.csv` (paired differences with
intervals), `table.md` (the paper's table, runs above 99% and steps to 99%, the configurations behind it,
the λ table, accuracy by test length, the missing or failed runs, then the paired differences ending
with one sentence of what is significant) and PNG plots."""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loglinear.reports.paired import COLUMNS as PAIRED_COLUMNS
from loglinear.reports.paired import MINUS, Pairing, paired_comparisons, signed, summary_sentence, unpairable_reason
from loglinear.reports.plots import write_plots
from loglinear.reports.results import (
    HEADERS,
    LAMBDA_KEY,
    MIXER_KEY,
    THRESHOLD,
    Cell,
    Record,
    Sweep,
    display_name,
    is_log_linear,
    load_sweep,
    mean_std_text,
    mixer_rank,
    selected_cells,
    slice_values,
)
from loglinear.reports.state_tracking import (
    SEQ_ACC_PREFIX,
    SEQ_LEN_PREFIX,
    accuracy_at,
    num_classes,
    scaled,
    training_lengths,
)
from loglinear.runs.folder import FINISHED, write_text_atomic
from loglinear.sweeps.spec import describe

TABLE = "table.md"
CSV = "results.csv"
PAIRED_CSV = "paired.csv"
PAIRED_LENGTH_CSV = "paired_by_length.csv"
RESULT_COLUMNS = ("val_accuracy", "steps_to_threshold", "step", "params", "wall_time_s")
CSV_COLUMNS = (
    "run_id", "status", "mixer", "lambda_param", "d_model", "n_layers", "lr", "seed", "task", *RESULT_COLUMNS,
    "val_score", "test_score",
)
"""`val_score` / `test_score`: what the selection and the tables use (`results.Record`), as fractions."""
NOTE = (
    "Test accuracy (%): mean (sample standard deviation) over seeds, at the configuration (learning rate, and λ "
    "for a log-linear mixer) with the best mean validation accuracy in each cell (listed below): selected on "
    "validation, reported on test. Both are the final weights' (after early stopping or at the budget). "
    "`>=99`: every seed above 99%. `[k/n]`: only k of the cell's n runs finished (the others are listed at "
    "the end). Diverged runs count as 0."
)
PAIRED_NOTE = (
    "Mixer − baseline test accuracy in percentage points, mean over the seeds both sides ran (each side at "
    "its own selected configuration), with a 95% Student-t interval over the seeds; `k of n seeds`: the "
    "mixer was better on k of the n shared seeds. Significant only when the interval excludes 0."
)

LENGTH_NOTE = (
    "Per test length L: `scaled`, Grazzi et al.'s scaled accuracy (acc - 1/C) / (1 - 1/C) of the test accuracy "
    "(C classes: chance 0, perfect 1), mean (std) over seeds; `seq %`, full-sequence accuracy (every scored "
    "position right), mean (std). `(train)` marks lengths inside the training range. With only the final "
    "position scored (`scored: last`, for parity and the word problems) both measure the task's answer at length L."
)

SEVERAL_LENGTHS_NOTE = (
    "With several test lengths, the test accuracy above is the mean over the examples of every test set, so over "
    "the lengths {lengths} when the sets have the same size: read the tables by test length below."
)

LENGTH_PAIRED_NOTE = (
    "Mixer − baseline test accuracy at each test length in percentage points, mean over the shared seeds (each "
    "side at its own selected configuration) with a 95% Student-t interval; `k/n`: the mixer was better on k of "
    "the n shared seeds; `*`: significant (the interval excludes 0). `paired_by_length.csv` has every figure."
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
    pairings = paired_comparisons(sweep)
    by_length = length_pairings(sweep)
    table = render_tables(sweep, pairings, by_length)
    write_text_atomic(out / TABLE, table)
    write_csv(sweep, out / CSV)
    write_paired_csv(pairings, out / PAIRED_CSV)
    files = [out / CSV, out / PAIRED_CSV, out / TABLE]
    if by_length:
        write_paired_csv([p for ps in by_length.values() for p in ps], out / PAIRED_LENGTH_CSV,
                         lengths=[n for n, ps in by_length.items() for _ in ps])
        files.append(out / PAIRED_LENGTH_CSV)
    written, skipped = write_plots(sweep, out)
    return Report(table, [*files, *written], skipped)


def length_pairings(sweep: Sweep) -> dict[int, list[Pairing]]:
    """State tracking: the paired comparisons at each test length ({} for a sweep without several lengths)."""
    lengths = test_lengths(sweep)
    if len(lengths) < 2:
        return {}
    by_length = {n: paired_comparisons(sweep, score=accuracy_at(n)) for n in lengths}
    return by_length if any(by_length.values()) else {}


def render_tables(sweep: Sweep, pairings: list[Pairing], by_length: dict[int, list[Pairing]] | None = None) -> str:
    cells = sweep.cells()
    parts = [
        f"# {sweep.name}\n", accuracy_table(sweep, cells), _note(sweep),
        f"## Runs above {100 * THRESHOLD:.0f}% (test) and median steps to {100 * THRESHOLD:.0f}% (validation)\n",
        threshold_table(sweep, cells), THRESHOLD_NOTE,
        "## Selected configuration of each cell\n", config_table(sweep, cells),
    ]
    if sweep.lambda_varies:
        parts += ["## λ parameterisations (log-linear mixers)\n", lambda_table(sweep)]
    lengths = length_table(sweep, cells)
    if lengths:
        parts += ["## State tracking by test length\n", lengths, LENGTH_NOTE]
    if by_length:
        parts += ["## Paired differences by test length\n", length_paired_table(sweep, by_length), LENGTH_PAIRED_NOTE]
    parts += ["## Missing or failed runs\n", missing_runs(sweep)]
    parts += ["## Paired differences (test accuracy)\n", paired_lines(sweep, pairings)]
    return "\n".join(p.rstrip("\n") + "\n" for p in parts)


def accuracy_table(sweep: Sweep, cells: dict) -> str:
    return _pivot(sweep, cells, format_cell)


def threshold_table(sweep: Sweep, cells: dict) -> str:
    return _pivot(sweep, cells, format_threshold)


def config_table(sweep: Sweep, cells: dict) -> str:
    def fmt(c: Cell) -> str:
        if c.lr is None:
            return "-"
        text = f"{c.lr:.3g}" + ("" if c.lambda_param is None else f", {c.lambda_param}")
        return text + (f" (of {c.candidates})" if c.candidates > 1 else "")

    return _pivot(sweep, cells, fmt)


THRESHOLD_NOTE = (
    "`k/n, m`: k of the cell's n runs above 99% test accuracy; m the median over the n runs of the steps to "
    "reach 99% validation accuracy (a run that never did counts as never: `never` when half or more did not)."
)


def format_cell(cell: Cell) -> str:
    """`55.9 (3.1)`, `>=99`, `55.9` (one seed) or `-`, with ` [k/n]` when runs are missing."""
    values = cell.values
    if not values:
        text = "-"
    elif cell.solved:
        text = ">=99"
    else:
        text = mean_std_text(values)
    return text if cell.complete else f"{text} [{len(values)}/{len(cell.runs)}]"


def format_threshold(cell: Cell) -> str:
    """`3/5, 1200` (3 of 5 runs above 99%, median steps 1200) or `0/5, never`."""
    median = cell.median_steps
    steps = "-" if median is None else ("never" if median == float("inf") else f"{median:.0f}")
    return f"{cell.above_threshold}/{len(cell.runs)}, {steps}"


def paired_lines(sweep: Sweep, pairings: list[Pairing]) -> str:
    """One line per comparison, then one sentence of what is and is not significant."""
    if not pairings:
        return f"No paired comparison: {unpairable_reason(sweep)}."
    lines = [PAIRED_NOTE, ""] + [f"- {p.cell}: {p.sentence()}" for p in pairings]
    paired = [p for p in pairings if p.reason is None]
    if paired:
        lines += ["", summary_sentence(paired)]
    else:
        lines += ["", "No comparison has a pair of runs (the reasons are above), so nothing here is significant."]
    return "\n".join(lines)


def length_paired_table(sweep: Sweep, by_length: dict[int, list[Pairing]]) -> str:
    """Rows: each comparison in each cell; columns: test lengths; cells `+1.2 [−3.4, +5.8] 2/3` (`*` significant)."""
    header = ["comparison", "cell", *length_labels(sweep, list(by_length))]
    rows: dict[tuple[str, str], list[str]] = {}
    for column, pairings in enumerate(by_length.values()):
        for p in pairings:
            line = rows.setdefault((f"{p.mixer_label} {MINUS} {p.baseline_label}", p.cell), [""] * len(by_length))
            line[column] = _length_cell(p)
    return markdown_table(header, [[*key, *line] for key, line in rows.items()])


def _length_cell(p: Pairing) -> str:
    if p.reason is not None:
        return "no pair"
    ci = p.interval
    interval = f" [{signed(ci[0])}, {signed(ci[1])}]" if ci else ""
    return f"{signed(p.mean_diff)}{interval} {p.wins}/{p.n_pairs}" + (" *" if p.significant else "")  # type: ignore[arg-type]


def _pivot(sweep: Sweep, cells: dict, fmt) -> str:
    rows = list(dict.fromkeys(sweep.table_row(r) for r in sweep.records))
    columns = sorted({r.d_model for r in sweep.records})
    header = [_header(k) for k in sweep.table_keys] + [f"d_model {d}" for d in columns]
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

    cells = selected_cells(records, lambda r: (row_of(r), r.mixer, r.d_model))
    ordered = sorted(records, key=lambda r: (mixer_rank(r.mixer), r.d_model))
    columns = list(dict.fromkeys((r.mixer, r.d_model) for r in ordered))
    keys = [LAMBDA_KEY] + [k for k in sweep.row_keys if k not in (MIXER_KEY, LAMBDA_KEY)]
    header = [_header(k) for k in keys] + [f"{display_name(m)} {d}" for m, d in columns]
    body = []
    for row in dict.fromkeys(row_of(r) for r in records):
        body.append(list(row) + [format_cell(cells[(row, *c)]) if (row, *c) in cells else "" for c in columns])
    return markdown_table(header, body)


def _note(sweep: Sweep) -> str:
    lengths = test_lengths(sweep)
    if len(lengths) < 2:
        return NOTE
    return f"{NOTE} {SEVERAL_LENGTHS_NOTE.format(lengths=', '.join(map(str, lengths)))}"


def test_lengths(sweep: Sweep) -> list[int]:
    """The state-tracking test lengths of the sweep (test/acc/seq_len=N), ascending."""
    return sorted(slice_values([r for r in sweep.records if r.task != "mqar"], SEQ_LEN_PREFIX))


def length_labels(sweep: Sweep, lengths: list[int]) -> list[str]:
    """Column labels of test lengths: `40 (train)` inside the training range (when all runs share one), else `80`."""
    trained = {training_lengths(r) for r in sweep.records if r.task != "mqar"}
    low, high = trained.pop() if len(trained) == 1 and None not in trained else (0, -1)
    return [f"{n} (train)" if low <= n <= high else str(n) for n in lengths]


def length_table(sweep: Sweep, cells: dict) -> str | None:
    """State tracking: per test length, the scaled accuracy and the full-sequence accuracy of the selected runs."""
    lengths = test_lengths(sweep)
    if len(lengths) < 2:
        return None
    header = [_header(k) for k in sweep.row_keys] + ["d_model"]
    for n, label in zip(lengths, length_labels(sweep, lengths), strict=True):
        header += [f"{label} scaled", f"{n} seq %"]
    body = []
    for (row, d_model), cell in cells.items():
        runs = [r for r in cell.runs if r.status in FINISHED and r.task != "mqar"]
        if not slice_values(runs, SEQ_LEN_PREFIX):
            continue
        classes = num_classes(runs[0])
        per_length = slice_values(runs, SEQ_LEN_PREFIX)
        per_length_seq = slice_values(runs, SEQ_ACC_PREFIX)
        line = [*row, str(d_model)]
        for n in lengths:
            scores = [scaled(a, classes) for a in per_length.get(n, [])]
            line += [mean_std_text(scores, scale=1.0, digits=2), mean_std_text(per_length_seq.get(n, []))]
        body.append(line)
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
    text = io.StringIO()
    writer = csv.writer(text)
    writer.writerow([*CSV_COLUMNS, *metrics, *varied])
    for r in sweep.records:
        fixed = {
            "run_id": r.run_id, "status": r.status, "mixer": r.mixer, "lambda_param": r.get(LAMBDA_KEY),
            "d_model": r.d_model, "n_layers": r.get("model.n_layers"), "lr": r.lr, "seed": r.get("train.seed"),
            "task": r.task, **{k: r.result.get(k) for k in RESULT_COLUMNS},
            "val_score": r.val_score, "test_score": r.test_score,
        }
        writer.writerow([_csv(fixed[c]) for c in CSV_COLUMNS] + [_csv(r.test.get(m)) for m in metrics]
                        + [_csv(r.point.get(k)) for k in varied])
    write_text_atomic(path, text.getvalue())


def write_paired_csv(pairings: list[Pairing], path: Path, lengths: list[int] | None = None) -> None:
    """One row per comparison (the columns of `paired.PAIRED_COLUMNS`); empty intervals for fewer than 2 pairs.
    With `lengths` (one per pairing) a first column `test_length` says which test length each row compares."""
    text = io.StringIO()
    writer = csv.writer(text)
    writer.writerow((["test_length"] if lengths is not None else []) + list(PAIRED_COLUMNS))
    for i, pairing in enumerate(pairings):
        values = pairing.row()
        first = [lengths[i]] if lengths is not None else []
        writer.writerow(first + [_csv(values[c]) for c in PAIRED_COLUMNS])
    write_text_atomic(path, text.getvalue())


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def _header(key: str) -> str:
    return HEADERS.get(key, key.rsplit(".", 1)[-1])


def _csv(value: Any) -> Any:
    if value is None:
        return ""
    return json.dumps(value) if isinstance(value, (list, dict)) else value
