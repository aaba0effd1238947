"""A study re-read from its `results.csv` and its spec, for when its run folders are gone: the same `Sweep` of
`Record`s that `results.load_sweep` reads from the folders, so every table, test and plot is computed the same way.

Each row's varied values (the CSV's last columns) are resolved through the spec as `loglinear sweep run` resolved
them, and must give the row's run id: a CSV that the spec did not produce is refused, never half-read. A run's
result is rebuilt from its columns; what the CSV does not hold is left out, never filled in, and named in
`Sweep.unavailable`, which the report prints under its protocol line.

Columns an older results.csv lacks, and what the re-report does without them: `passage_steps` / `passage_reached`
(the steps to the report's threshold on validation: read from `steps_to_threshold`, censored at `step`, when the
runs stopped at that same threshold, else unavailable), `recall` (the MQAR accuracy by level and distance: no
recall.md), `selfchecks` (none shown), `error` (a failed run without its error), `solved` (`steps_to_threshold` is
set), `escaped` (the final validation accuracy is above the plateau) and `convergence` (`threshold` for a solved
run, else `unknown`).
"""

from __future__ import annotations

import csv
import dataclasses
import json
from pathlib import Path
from typing import Any

from loglinear.reports.files import ERROR, MACHINE, PASSAGE_REACHED, PASSAGE_STEPS, RECALL, SELFCHECKS
from loglinear.reports.recall_levels import RECALL_COLUMNS
from loglinear.reports.results import Record, Sweep, arrange
from loglinear.reports.statistics import Event
from loglinear.runs.config import SOLVED, ConfigError, RunConfig
from loglinear.runs.folder import FINISHED
from loglinear.runs.state_size import train_seq_len
from loglinear.sweeps.spec import SpecError, SweepSpec, expand, load_spec

REQUIRED = ("run_id", "stage", "status", "val_score", "test_score", "steps_to_threshold", "step")
NUMBERS = {"val_accuracy": float, "steps_to_threshold": int, "step": int, "params": int, "wall_time_s": float}
"""result.json's numbers that results.csv holds under the same name."""
TEST_PREFIX, STATE_PREFIX, RECALL_STATE = "test/", "state_size_", "state_at_recall_"
UNKNOWN = "unknown"
OPTIONAL = (SELFCHECKS, MACHINE, RECALL, ERROR)
"""Columns whose empty cell means "none": a re-report of a CSV without them leaves them out (Sweep.absent_columns)."""


class ResultsCsvError(ConfigError):
    """A results.csv that cannot be re-reported with the spec given: one line naming the file and why."""


@dataclasses.dataclass
class CsvRecord(Record):
    """A run re-read from a row of results.csv (`columns`, as text). Its validation history is gone: its passage
    of the report's threshold is what the row says (`known_passage`, None when it says nothing)."""

    columns: dict[str, str] = dataclasses.field(default_factory=dict)
    known_passage: tuple[float, Event] | None = None

    def passage(self, threshold: float) -> Event | None:
        if self.known_passage is None or self.known_passage[0] != threshold:
            return None
        return self.known_passage[1]

    @property
    def validation_curve(self) -> list[tuple[int, float]] | None:
        return None

    @property
    def implementations(self) -> tuple[str, ...] | None:
        """As results.csv lists them: an empty cell is no implementation (it also stood for "not recorded")."""
        return tuple(self.columns.get("implementations", "").split()) if self.status in FINISHED else None

    @property
    def machine(self) -> str | None:
        return self.columns.get(MACHINE) or None

    @property
    def selfchecks(self) -> list[dict[str, Any]]:
        return json.loads(self.columns[SELFCHECKS]) if self.columns.get(SELFCHECKS) else []

    def solved(self, threshold: float) -> bool | None:
        """`Record.solved` from the passage the CSV records, else its `solved` column (written at the report's
        threshold)."""
        event = self.passage(threshold)
        if event is not None:
            return event.reached
        if self.status not in FINISHED or not self.columns.get("solved"):
            return None
        return self.columns["solved"] == "True"

    def escaped(self, plateau: float, threshold: float) -> bool | None:
        """The `escaped` column (written at the report's thresholds), else `Record.escaped`."""
        if self.status in FINISHED and self.columns.get("escaped"):
            return self.columns["escaped"] == "True"
        return super().escaped(plateau, threshold)

    def convergence(self, threshold: float) -> str | None:
        """The `convergence` column, else `threshold` for a solved run and `unknown` for the others (their
        histories are gone), `failed` for a failed run; None for a run without a result."""
        if self.status not in (*FINISHED, "failed"):
            return None
        if self.columns.get("convergence"):
            return self.columns["convergence"]
        return "failed" if self.status == "failed" else "threshold" if self.solved(threshold) else UNKNOWN


def load_sweep_from_csv(path: str | Path, spec_path: str | Path, out: str | Path) -> Sweep:
    """The sweep of the spec at `spec_path` as the results.csv at `path` records it, to be reported into `out`."""
    path = Path(path)
    if not path.is_file():
        raise ResultsCsvError(f"{path} not found: --from-results takes the results.csv of an earlier report")
    spec = load_spec(spec_path)
    try:
        with path.open(newline="") as f:
            rows = list(csv.DictReader(f, restval=""))
    except (UnicodeDecodeError, csv.Error) as e:
        raise ResultsCsvError(f"{path} is not the results.csv of a report: {e}") from None
    header = list(rows[0]) if rows else []
    absent = [c for c in REQUIRED if c not in header]
    if absent:
        raise ResultsCsvError(f"{path} is not the results.csv of a report: "
                              + (f"no column {absent[0]!r}" if rows else "no rows"))
    varied = [k for k in spec.varied_keys if k in header]
    try:
        runs = expand(spec, [(_point(spec, row, varied), row["stage"] or None) for row in rows])
    except SpecError as e:
        raise ResultsCsvError(f"{path} does not fit {spec_path}: {e}") from None
    records = []
    for line, (row, run) in enumerate(zip(rows, runs, strict=True), start=2):
        if run.run_id != row["run_id"]:
            raise ResultsCsvError(
                f"{path}, line {line}: the values of run {row['run_id']} resolve to run {run.run_id} under "
                f"{spec_path}: the spec did not produce this results.csv, or the runs' configuration has changed")
        config = dataclasses.asdict(run.config)
        config.pop("out_dir", None)
        try:
            result = _result(row, header, run.config)
            passage = _passage(row, run.config, spec.report.threshold)
        except ValueError as e:  # a number or a JSON cell that does not read
            raise ResultsCsvError(f"{path}, line {line}: run {run.run_id}: a cell does not read ({e})") from None
        records.append(CsvRecord(run.run_id, config, run.point, result, stage=run.stage, columns=row,
                                 known_passage=passage))
    manifest = {"varied_keys": spec.varied_keys, "zip": [list(group) for group in spec.zip]}
    return arrange(spec.name, Path(out), records, manifest, spec.report, spec.protocol,
                   unavailable(spec, header, records), [c for c in OPTIONAL if c not in header])


def _point(spec: SweepSpec, row: dict[str, str], varied: list[str]) -> dict[str, Any]:
    """A row's varied values, typed as the spec gives them (one of a grid's values), else read as JSON (a learning
    rate added beyond the grid, a seed), else the text itself."""
    given = {**spec.grid, **{key: values for group in spec.zip for key, values in group.items()}}
    point = {}
    for key in varied:
        text = row[key]
        same = [v for v in given.get(key, []) if _text(v) == text]
        point[key] = same[0] if same else _parse(text)
    return point


def _text(value: Any) -> str:
    """A value as results.csv writes it (files._csv)."""
    if value is None:
        return ""
    return json.dumps(value) if isinstance(value, (list, dict)) else str(value)


def _parse(text: str) -> Any:
    if text == "":
        return None
    if text in ("True", "False"):
        return text == "True"
    try:
        return json.loads(text)
    except ValueError:
        return text


def _result(row: dict[str, str], header: list[str], config: RunConfig) -> dict[str, Any]:
    """The parts of a run's result.json that its row holds ({} for a run without a result)."""
    if row["status"] == "missing":
        return {}
    result: dict[str, Any] = {"status": row["status"]}
    result |= {key: kind(float(row[key])) for key, kind in NUMBERS.items() if row.get(key)}
    if row["val_score"]:
        result["final_val"] = {"val/acc": float(row["val_score"])}
    result["test"] = {k: float(row[k]) for k in header if k.startswith(TEST_PREFIX) and row[k]}
    sizes = _state_sizes(row, header, config)
    if sizes:
        result["state_size"] = sizes
    recall = json.loads(row[RECALL]) if row.get(RECALL) else {}
    state = {column.removeprefix(RECALL_STATE): float(row[column]) for column in RECALL_COLUMNS if row.get(column)}
    if recall or state:
        result["recall"] = {**recall, **({"state_at_recall": state} if state else {})}
    if row.get(ERROR):
        result["error"] = row[ERROR]
    return result


def _state_sizes(row: dict[str, str], header: list[str], config: RunConfig) -> dict[str, Any]:
    """result.json's `state_size` (runs/state_size.py) from the columns `state_size_{kind}` (at the training length,
    which the run's data config gives) and `state_size_{kind}/seq_len=L` (at each test length L)."""
    sizes: dict[str, dict[str, int]] = {"per_layer": {}, "total": {}}
    tests = set()
    for column in header:
        kind, _, length = column.removeprefix(STATE_PREFIX).partition("/seq_len=")
        if column.startswith(STATE_PREFIX) and kind in sizes and length and row[column]:
            sizes[kind][length] = int(row[column])
            tests.add(int(length))
    train = train_seq_len(config.data)
    for kind in sizes:
        if row.get(STATE_PREFIX + kind):
            sizes[kind][str(train)] = int(row[STATE_PREFIX + kind])
    if not any(sizes.values()):
        return {}
    return {"train_seq_len": train, "test_seq_lens": sorted(tests), **sizes}


def _passage(row: dict[str, str], config: RunConfig, threshold: float) -> tuple[float, Event] | None:
    """(threshold, when validation first passed it): the `passage_*` columns when the CSV has them; else, for a run
    whose own stopping threshold was `threshold`, `steps_to_threshold`, censored at `step` when it is empty;
    else None."""
    if row["status"] not in FINISHED:
        return None
    if PASSAGE_STEPS in row:
        steps = row[PASSAGE_STEPS]
        return (threshold, Event(int(steps), row[PASSAGE_REACHED] == "True")) if steps else None
    own = config.train.early_stop_threshold
    if (SOLVED if own is None else own) != threshold:
        return None
    reached = row["steps_to_threshold"]
    return threshold, Event(int(reached), True) if reached else Event(int(row["step"] or 0), False)


def unavailable(spec: SweepSpec, header: list[str], records: list[CsvRecord]) -> list[str]:
    """What the re-report cannot show for lack of the run folders, in words."""
    gaps = ["the validation histories (each run's metrics.csv)"]
    finished = [r for r in records if r.status in FINISHED]
    if any(r.passage(spec.report.threshold) is None for r in finished):
        gaps.append(f"the steps to the threshold of {sum(r.passage(spec.report.threshold) is None for r in finished)}"
                    " runs")
    if RECALL not in header and any(r.result.get("recall") for r in records):
        gaps.append("the MQAR accuracy by Fenwick level and key distance (recall.md, mqar_recall.png)")
    if SELFCHECKS not in header and any(r.implementations for r in finished):
        gaps.append("the fused kernels' self-check verdicts")
    if ERROR not in header and any(r.status == "failed" for r in records):
        gaps.append("the errors of the failed runs")
    return [*gaps, "λ by level (`--lambda`: the checkpoints)"]
