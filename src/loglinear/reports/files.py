"""The report's files beside its table: `results.csv` (one row per expected run) and `paired.csv` /
`paired_by_length.csv` (one row per comparison, every test with its Holm-adjusted p-value)."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

from loglinear.protocol.results import LAMBDA_KEY, Event, Record, Sweep
from loglinear.reports.paired import COLUMNS as PAIRED_COLUMNS
from loglinear.reports.paired import Pairing, TestResult
from loglinear.reports.recall_levels import RECALL_COLUMNS, recall_groups, recall_state
from loglinear.runs.config import ID_LABELS, config_id
from loglinear.runs.folder import write_text_atomic

TABLE = "table.md"
CSV = "results.csv"
PAIRED_CSV = "paired.csv"
PAIRED_LENGTH_CSV = "paired_by_length.csv"
STATE_KINDS = ("per_layer", "total")
RESULT_COLUMNS = ("val_accuracy", "steps_to_threshold", "step", "params", "wall_time_s")
PASSAGE_STEPS, PASSAGE_REACHED = "passage_steps", "passage_reached"
SELFCHECKS, MACHINE, RECALL, ERROR = "selfchecks", "machine", "recall", "error"
LABELS = ("plateau_window", "plateau_min_delta")
"""Columns after `convergence` holding the values a run's `plateau` / `improving` was labelled with, written only
for the runs whose id does not carry them (runs/config.py, ID_LABELS: at their defaults, or part of an earlier
id), and only when some run has them."""
CSV_COLUMNS = (
    "run_id", "stage", "status", "mixer", "lambda_param", "d_model", "n_layers", "lr", "seed", "task",
    *RESULT_COLUMNS, PASSAGE_STEPS, PASSAGE_REACHED, "val_score", "test_score", "solved", "escaped", "convergence",
    "implementations", SELFCHECKS, MACHINE, *(f"state_size_{kind}" for kind in STATE_KINDS), *RECALL_COLUMNS, RECALL,
    ERROR,
)
"""`val_accuracy`: the best validation accuracy of the run; `steps_to_threshold`: the step it became solved at
(result.json's); `passage_steps` / `passage_reached`: the steps until validation accuracy first passed the report's
threshold and True, else the step where the run ended and False (the Kaplan-Meier time; empty without a metrics.csv);
`val_score` / `test_score`: what the selection and the tables use (`results.Record`: the final
weights' validation and test accuracy), as fractions; `solved` / `escaped` (True or False; empty where not known,
`escaped` empty without a plateau threshold) and `convergence` (threshold, plateau, improving, diverged, failed,
unknown; empty for a run without a result): what every table and test of the report counts (`Record.solved`,
`Record.escaped`, `Record.convergence`, at the report's thresholds, which the file does not record: a re-report
counts them again); `plateau_window` / `plateau_min_delta` (`LABELS`, only where some run needs them): what a
run's `plateau` or `improving` was labelled with;
`implementations`: the log-linear operator's implementations the run ran, space-separated (empty: none or not
recorded), `selfchecks` the fused kernels' self-check verdicts they relied on (JSON, empty: none);
`machine`: what the run's result was written on, one line (runs/machine.py; empty: not recorded);
`state_size_per_layer` / `state_size_total`: what the decoder holds per sequence at the training length (then
`.../seq_len=L` at each test length L, after the test metrics); `state_at_recall_*`: what it holds at the MQAR test
queries, `recall` the test accuracy by the recalled key's level and distance (JSON; reports/recall_levels.py);
`error`: why a failed run failed. With the spec, these columns are what `loglinear sweep report --from-results`
re-reports a study from (reports/results_csv.py)."""


def read_csv(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    """The header and rows of a CSV as this suite or a spreadsheet writes it (a byte-order mark and CRLF line ends
    are read, as Excel's "CSV UTF-8" has them; a short row's missing cells are empty); one that does not read is a
    ValueError saying why."""
    try:
        with path.open(newline="", encoding="utf-8-sig") as f:
            reader = csv.DictReader(f, restval="")
            rows = list(reader)
            return list(reader.fieldnames or []), rows
    except UnicodeDecodeError as e:
        raise ValueError(f"not UTF-8 text (byte {e.start}: {e.object[e.start:e.start + 1]!r})") from None
    except csv.Error as e:
        raise ValueError(str(e)) from None


def write_csv(sweep: Sweep, path: Path) -> None:
    """One row per expected run: the fixed columns (but those an older results.csv it was re-read from lacked),
    every test metric, the state sizes at each test length, then the varied keys."""
    metrics = sorted({k for r in sweep.records for k in r.test})
    lengths = sorted({n for r in sweep.records for n in r.test_seq_lens})
    states = [(kind, n) for n in lengths for kind in STATE_KINDS]
    varied = list(dict.fromkeys(k for r in sweep.records for k in r.point))
    report = sweep.report
    text = io.StringIO()
    writer = csv.writer(text)
    columns = [c for c in CSV_COLUMNS if c not in sweep.absent_columns]
    labelled = {r.run_id: dict(zip(LABELS, r.labels, strict=True)) for r in sweep.records if not _id_carries_labels(r)}
    if labelled:
        columns[columns.index("convergence") + 1:columns.index("convergence") + 1] = LABELS
    writer.writerow([*columns, *metrics, *(f"state_size_{kind}/seq_len={n}" for kind, n in states), *varied])
    for r in sweep.records:
        fixed = {
            "run_id": r.run_id, "stage": r.stage, "status": r.status, "mixer": r.mixer,
            "lambda_param": r.get(LAMBDA_KEY),
            "d_model": r.d_model, "n_layers": r.get("model.n_layers"), "lr": r.lr, "seed": r.get("train.seed"),
            "task": r.task, **{k: r.result.get(k) for k in RESULT_COLUMNS},
            **_passage_columns(r.passage(sweep.report.threshold)),
            "val_score": r.val_score, "test_score": r.test_score, "solved": r.solved(report.threshold),
            "escaped": None if report.plateau is None else r.escaped(report.plateau, report.threshold),
            "convergence": r.convergence(report.threshold), **labelled.get(r.run_id, dict.fromkeys(LABELS)),
            **{f"state_size_{kind}": r.state_at(per=kind) for kind in STATE_KINDS},
            "implementations": " ".join(r.implementations or ()), SELFCHECKS: r.selfchecks or None,
            MACHINE: r.machine,
            **recall_state(r), RECALL: recall_groups(r), ERROR: r.result.get("error"),
        }
        writer.writerow([_csv(fixed[c]) for c in columns] + [_csv(r.test.get(m)) for m in metrics]
                        + [_csv(r.state_at(n, kind)) for kind, n in states]
                        + [_csv(r.point.get(k)) for k in varied])
    write_text_atomic(path, text.getvalue())


def _id_carries_labels(record: Record) -> bool:
    """Whether the run's id tells the values its end is labelled with: they are the defaults, or it is the id they
    were part of."""
    return record.labels == tuple(ID_LABELS.values()) or config_id(record.config, legacy=True) == record.run_id


def _passage_columns(event: Event | None) -> dict[str, Any]:
    return {PASSAGE_STEPS: None if event is None else event.steps,
            PASSAGE_REACHED: None if event is None else event.reached}


def write_paired_csv(pairings: list[Pairing], family: list[TestResult], path: Path) -> None:
    """One row per comparison (`paired.COLUMNS`, empty where a test does not apply); comparisons at a test length
    have a first column `test_length`."""
    lengths = any(p.length is not None for p in pairings)
    text = io.StringIO()
    writer = csv.writer(text)
    writer.writerow((["test_length"] if lengths else []) + list(PAIRED_COLUMNS))
    for pairing in pairings:
        values = pairing.row(family)
        writer.writerow(([pairing.length] if lengths else []) + [_csv(values[c]) for c in PAIRED_COLUMNS])
    write_text_atomic(path, text.getvalue())


def _csv(value: Any) -> Any:
    if value is None:
        return ""
    return json.dumps(value) if isinstance(value, (list, dict)) else value
