"""A study re-read from its `results.csv` and its spec, for when its run folders are gone: the same `Sweep` of
`Record`s that `results.load_sweep` reads from the folders, so every table, test and plot is computed the same way.

The CSV must hold the whole study the spec plans, each run once: its first stage; under a two-stage protocol its
grid extensions, each on every selection seed, and exactly the confirmation runs that its selection rows pick
(sweeps/plan.py). Each row's varied values (the CSV's last columns) must be those of its run, its stage the one
the protocol gives its seed, its status one a report writes. Anything else (a row deleted, a CSV cut short,
another spec's CSV, a selection row edited so that the pick moves, a blank stage, a number that is not finite,
an accuracy outside [0, 1]) is refused with one line naming
the line or the run, never half-read. A run's result is rebuilt from its columns; what the CSV does not hold is
left out, never filled in, and named in `Sweep.unavailable`, which the report prints under its protocol line.

results.csv does not say at which thresholds its `solved`, `escaped`, `passage_*` and `convergence` columns were
counted, so a re-report counts them again at the spec's, from the run's own columns: solved from
`steps_to_threshold` at the run's stopping threshold; at another threshold from the best validation accuracy
(`val_accuracy`: never above the threshold, not solved; above it, solved when one validation above it solves the
run, `train.threshold_evals` 1, or when the run was solved at a higher threshold of its own); a run whose solving
cannot be told so is refused, naming the run and the threshold. The steps to a threshold other than the run's
own need its validation history: left out, and named. Escaped follows from solved and the final validation
accuracy; a run neither solved nor diverged nor failed ended as its `convergence` cell says (`plateau`,
`improving`) when the cell was labelled with the spec's plateau window and minimum rise (files.py, `LABELS`),
else `unknown`.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

from loglinear.protocol.confirmation import confirmation_runs
from loglinear.protocol.results import Record, Sweep, arrange, labels
from loglinear.reports.files import ERROR, LABELS, MACHINE, RECALL, SELFCHECKS, read_csv
from loglinear.reports.recall_levels import RECALL_COLUMNS
from loglinear.runs.config import ID_LABELS, ConfigError, RunConfig
from loglinear.runs.folder import FINISHED, STATUSES
from loglinear.runs.state_size import train_seq_len
from loglinear.runs.stopping import BUDGET_ENDS, budget_label
from loglinear.sweeps.plan import configuration, stray
from loglinear.sweeps.spec import Run, SpecError, SweepSpec, describe, expand, load_spec
from loglinear.sweeps.spec_keys import CONFIRMATION, LR_KEY, SELECTION

REQUIRED = ("run_id", "stage", "status", "val_score", "test_score", "steps_to_threshold", "step")
ROW_STATUSES = (*STATUSES, "missing", "unreadable")
"""The statuses a report writes (`Record.status`)."""
NUMBERS = {"val_accuracy": float, "steps_to_threshold": int, "step": int, "params": int, "wall_time_s": float}
"""result.json's numbers that results.csv holds under the same name."""
ACCURACIES = ("val_accuracy", "val_score", "test_score")
"""The columns besides the test metrics `test/acc...` that hold an accuracy: a hand-edited 1.7 or nan is refused."""
TRUE, FALSE = ("true", "1"), ("false", "0")
"""How a boolean cell may be spelled, in any case (Python, spreadsheets and R write True, TRUE, 1)."""
TEST_PREFIX, STATE_PREFIX, RECALL_STATE = "test/", "state_size_", "state_at_recall_"
UNKNOWN = "unknown"
OPTIONAL = (SELFCHECKS, MACHINE, RECALL, ERROR)
"""Columns whose empty cell means "none": a re-report of a CSV without them leaves them out (Sweep.absent_columns)."""


class ResultsCsvError(ConfigError):
    """A results.csv that cannot be re-reported with the spec given: one line naming the file and why."""


@dataclasses.dataclass
class CsvRecord(Record):
    """A run re-read from a row of results.csv (`columns`, as text, `line` its line). Its validation history is
    gone: its passage of a threshold is known at its own stopping threshold only (`Record.passage`), its solving
    as the module says; `labelled` are the (plateau window, minimum rise) its `convergence` cell was labelled
    with."""

    columns: dict[str, str] = dataclasses.field(default_factory=dict)
    line: int = 0
    labelled: tuple[int, float] = tuple(ID_LABELS.values())  # type: ignore[assignment]

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
        """`Record.solved` at the run's own threshold; at another, from its best validation accuracy where that
        tells (the module docstring), else None."""
        event = self.passage(threshold)
        if event is not None or self.status not in FINISHED:
            return None if event is None else event.reached
        if "val_accuracy" not in self.columns:
            return None
        best = self.result.get("val_accuracy")
        if best is None or best <= threshold:  # no validation above the threshold (an empty cell: none at all)
            return False
        below_own = threshold < self.stop_threshold and self.result.get("steps_to_threshold") is not None
        return True if below_own or self.threshold_evals == 1 else None

    def convergence(self, threshold: float) -> str | None:
        """`threshold` when solved, `diverged` or `failed` by status, else the `convergence` cell's `plateau` or
        `improving` when it was labelled as the spec labels runs, `unknown` otherwise; None for a run without a
        result."""
        if self.status not in (*FINISHED, "failed"):
            return None
        if self.solved(threshold):
            return "threshold"
        if self.status in ("diverged", "failed"):
            return self.status
        written = self.columns.get("convergence")
        if written not in BUDGET_ENDS or self.labelled != self.labels:
            return UNKNOWN
        return budget_label(written, self.budget_validations, self.labels[0])


def load_sweep_from_csv(path: str | Path, spec_path: str | Path | SweepSpec, out: str | Path) -> Sweep:
    """The sweep of the spec at `spec_path` (or of that spec already read) as the results.csv at `path` records it,
    to be reported into `out`."""
    path = Path(path)
    if not path.is_file():
        raise ResultsCsvError(f"{path} not found: --from-results takes the results.csv of an earlier report")
    spec = spec_path if isinstance(spec_path, SweepSpec) else load_spec(spec_path)
    spec_path = spec.path or spec.name
    try:
        header, rows = read_csv(path)
    except ValueError as e:
        raise ResultsCsvError(f"{path} is not the results.csv of a report: {e}") from None
    absent = [c for c in REQUIRED if c not in header]
    if absent or not rows:
        raise ResultsCsvError(f"{path} is not the results.csv of a report: "
                              + (f"no column {absent[0]!r}" if absent else "no rows"))
    study = _Study(path, spec, spec_path, header, rows)
    records = study.records()
    for record in records:
        if record.status in FINISHED and record.solved(spec.report.threshold) is None:
            raise ResultsCsvError(
                f"{path}, line {record.line}: run {record.run_id}: solved at threshold {spec.report.threshold} "
                f"cannot be told from results.csv (it was counted at {record.stop_threshold}, held on "
                f"{record.threshold_evals} consecutive validations, and the validation history is gone); re-report "
                f"from the run folders, or at threshold {record.stop_threshold}")
    manifest = {"varied_keys": spec.varied_keys, "zip": [list(group) for group in spec.zip]}
    return arrange(spec.name, Path(out), records, manifest, spec.report, spec.protocol,
                   unavailable(spec, header, records), [c for c in OPTIONAL if c not in header])


class _Study:
    """The rows of a results.csv matched with the runs of the study its spec plans; every check that refuses it."""

    def __init__(self, path: Path, spec: SweepSpec, spec_path: str | Path, header: list[str],
                 rows: list[dict[str, str]]) -> None:
        self.path, self.spec, self.spec_path, self.header = path, spec, spec_path, header
        self.varied = [k for k in spec.varied_keys if k in header]
        self.lines: dict[str, int] = {}
        self.rows: dict[str, dict[str, str]] = {}
        for line, row in enumerate(rows, start=2):
            if row["status"] not in ROW_STATUSES:
                raise self.error(line, f"status {row['status']!r} is not one a report writes "
                                       f"({', '.join(ROW_STATUSES)}; they are case-sensitive)")
            if row["run_id"] in self.rows:
                raise self.error(line, f"run {row['run_id']} has a row already, on line {self.lines[row['run_id']]}")
            self.lines[row["run_id"]], self.rows[row["run_id"]] = line, row
        self._records: dict[str, CsvRecord] = {}

    def error(self, line: int, why: str) -> ResultsCsvError:
        return ResultsCsvError(f"{self.path}, line {line}: {why}")

    def records(self) -> list[CsvRecord]:
        """A record for each run of the study, in the spec's order; a ResultsCsvError unless the rows are exactly
        those runs."""
        stage_one = expand(self.spec)
        resolved = self._resolve()
        for rid, run in resolved.items():
            reason = stray(self.spec, stage_one, run)
            if reason is not None:
                raise self.error(self.lines[rid], f"run {rid} ({describe(run.point)}) is no run of {self.spec_path}: "
                                                  f"{reason}; the spec did not produce this results.csv")
        self._check_complete(stage_one, "of the first stage")
        if self.spec.protocol is None:
            return [self.record(run) for run in stage_one]
        selection = [run for run in resolved.values() if run.stage == SELECTION]
        self._check_extensions(selection, stage_one)
        confirmation = confirmation_runs(self.spec, self.sweep(selection))
        picked = {i for run in confirmation for i in run.ids}
        for rid, run in resolved.items():
            if run.stage == CONFIRMATION and rid not in picked:
                raise self.error(self.lines[rid], f"confirmation run {rid} ({describe(run.point)}) is not at the "
                                                  f"learning rate the selection rows pick for its cell: a selection "
                                                  f"row edited, or rows of another study")
        self._check_complete(confirmation, "of the second stage, at the rates the selection rows pick")
        return [self.record(run) for run in [*selection, *confirmation]]

    def _resolve(self) -> dict[str, Run]:
        """Each row's run: its varied values resolved through the spec with its stage, which must give its id."""
        staged = [({key: self._value(key, row[key], self.lines[rid]) for key in self.varied}, row["stage"] or None)
                  for rid, row in self.rows.items()]
        distinct = {json.dumps(s, sort_keys=True, default=str): s for s in staged}  # rows alike: one is not its run
        try:
            found = dict(zip(distinct, expand(self.spec, list(distinct.values())), strict=True))
        except SpecError as e:
            raise ResultsCsvError(f"{self.path} does not fit {self.spec_path}: {e}") from None
        runs = [found[json.dumps(s, sort_keys=True, default=str)] for s in staged]
        for rid, run in zip(self.rows, runs, strict=True):
            if rid not in run.ids:
                raise self.error(self.lines[rid], f"the values of run {rid} resolve to run {run.run_id} under "
                                                  f"{self.spec_path}: the spec did not produce this results.csv, or "
                                                  f"the runs' configuration has changed")
        return dict(zip(self.rows, runs, strict=True))

    def _value(self, key: str, text: str, line: int) -> Any:
        """A varied value, typed as the spec gives it (one of a grid's values, a boolean in any spelling where the
        spec's values are booleans), else read as JSON (a learning rate beyond the grid, a seed), else the text."""
        given = {**self.spec.grid, **{k: values for group in self.spec.zip for k, values in group.items()}}
        values = given.get(key, [])
        same = [v for v in values if _text(v) == text]
        if same:
            return same[0]
        if values and all(isinstance(v, bool) for v in values):
            return boolean(text, key, f"{self.path}, line {line}")
        if text == "":
            return None
        try:
            return json.loads(text)
        except ValueError:
            return text

    def _check_complete(self, runs: list[Run], which: str) -> None:
        lacking = [run for run in runs if not any(i in self.rows for i in run.ids)]
        if lacking:
            first = lacking[0]
            raise ResultsCsvError(
                f"{self.path} lacks {len(lacking)} of the {len(runs)} runs {which} that {self.spec_path} plans (first: "
                f"run {first.run_id}, {describe(first.point)}): rows deleted or cut off, or another study's CSV")

    def _check_extensions(self, selection: list[Run], stage_one: list[Run]) -> None:
        """Each grid extension (a selection run beyond its configuration's rates) on every selection seed."""
        first = {i for run in stage_one for i in run.ids}
        targets = {(configuration(run.point), run.point[LR_KEY]): run.point
                   for run in selection if not first & set(run.ids)}
        assert self.spec.protocol is not None
        seeds = self.spec.protocol.selection_seeds
        wanted = expand(self.spec, [({**point, "train.seed": seed, "data.seed": seed}, SELECTION)
                                    for point in targets.values() for seed in seeds])
        self._check_complete(wanted, "of the grid extensions (each on every selection seed)")

    def record(self, run: Run) -> CsvRecord:
        rid = next(i for i in run.ids if i in self.rows)
        if rid not in self._records:
            row, line = self.rows[rid], self.lines[rid]
            config = dataclasses.asdict(run.config)
            config.pop("out_dir", None)
            try:
                result = _result(row, self.header, run.config)
            except ValueError as e:  # a number or a JSON cell that does not read
                raise self.error(line, f"run {rid}: a cell does not read ({e})") from None
            self._records[rid] = CsvRecord(rid, config, run.point, result, stage=run.stage, columns=row, line=line,
                                           labelled=self._labelled(row, line, rid == run.alias, labels(config)))
        return self._records[rid]

    def _labelled(self, row: dict[str, str], line: int, legacy: bool, spec: tuple[int, float]) -> tuple[int, float]:
        """What the row's `convergence` cell was labelled with: its LABELS cells; else what its id says: the spec's
        values under an id they were part of (`legacy`), the defaults under an id they are not."""
        cells = [row.get(column, "") for column in LABELS]
        if any(cells):
            try:
                return int(cells[0]), float(cells[1])
            except ValueError as e:
                raise self.error(line, f"{'/'.join(LABELS)} do not read ({e})") from None
        return spec if legacy else tuple(ID_LABELS.values())  # type: ignore[return-value]

    def sweep(self, runs: list[Run]) -> Sweep:
        manifest = {"varied_keys": self.spec.varied_keys, "zip": [list(group) for group in self.spec.zip]}
        return arrange(self.spec.name, self.path.parent, [self.record(run) for run in runs], manifest,
                       self.spec.report, self.spec.protocol)


def boolean(text: str, column: str, where: str) -> bool:
    """A boolean cell in any of the spellings TRUE and FALSE list; anything else is a ResultsCsvError."""
    if text.lower() in TRUE + FALSE:
        return text.lower() in TRUE
    raise ResultsCsvError(f"{where}: {column} {text!r} is not a boolean (True or False, 1 or 0, in any case)")


def _text(value: Any) -> str:
    """A value as results.csv writes it (files._csv)."""
    if value is None:
        return ""
    return json.dumps(value) if isinstance(value, (list, dict)) else str(value)


def _result(row: dict[str, str], header: list[str], config: RunConfig) -> dict[str, Any]:
    """The parts of a run's result.json that its row holds ({} for a run without a result); a number that is not
    finite, or an accuracy outside [0, 1], is a ValueError naming its column."""
    if row["status"] == "missing":
        return {}
    for column in header:
        if row.get(column) and (column in NUMBERS or column.startswith((TEST_PREFIX, RECALL_STATE))
                                or _is_accuracy(column)):
            _number(column, row[column])
    result: dict[str, Any] = {"status": row["status"], "steps_to_threshold": None}
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


def _is_accuracy(column: str) -> bool:
    """Whether results.csv's `column` holds an accuracy (a fraction): the validation scores and every test accuracy."""
    return column in ACCURACIES or column.startswith(f"{TEST_PREFIX}acc")


def _is_loss(column: str) -> bool:
    """Whether results.csv's `column` holds a test loss (`test/loss...`)."""
    return column.startswith(f"{TEST_PREFIX}loss")


def _number(column: str, text: str) -> float:
    """The number in a cell of `column`; an accuracy outside [0, 1], or a number not finite where only a finite one
    can be recorded (every column but a test loss, which a run that did not diverge may end with at inf or nan), is a
    ValueError saying so."""
    value = float(text)
    if not math.isfinite(value) and not _is_loss(column):
        raise ValueError(f"{column} {text!r} is not a finite number")
    if _is_accuracy(column) and not 0 <= value <= 1:
        raise ValueError(f"{column} {text} is not an accuracy, a fraction in [0, 1]")
    return value


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


def unavailable(spec: SweepSpec, header: list[str], records: list[CsvRecord]) -> list[str]:
    """What the re-report cannot show for lack of the run folders, in words."""
    gaps = ["the validation histories (each run's metrics.csv)"]
    finished = [r for r in records if r.status in FINISHED]
    threshold = spec.report.threshold
    unknown = sum(r.passage(threshold) is None for r in finished)
    if unknown:
        gaps.append(f"the steps to the threshold of {unknown} runs")
    relabelled = [r for r in finished if r.columns.get("convergence") in BUDGET_ENDS and r.labelled != r.labels
                  and not r.solved(threshold)]
    if relabelled:
        window, delta = relabelled[0].labels
        gaps.append(f"how {len(relabelled)} runs ended under plateau_window {window} and plateau_min_delta {delta} "
                    f"(results.csv labelled them with other values)")
    if RECALL not in header and any(r.result.get("recall") for r in records):
        gaps.append("the MQAR accuracy by Fenwick level and key distance (recall.md, mqar_recall.png)")
    if SELFCHECKS not in header and any(r.implementations for r in finished):
        gaps.append("the fused kernels' self-check verdicts")
    if ERROR not in header and any(r.status == "failed" for r in records):
        gaps.append("the errors of the failed runs")
    return [*gaps, "λ by level (`--lambda`: the checkpoints)"]
