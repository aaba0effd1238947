"""A sweep's results as records, and the selection protocol: per cell, the learning rate with the best
mean *validation* accuracy, reported by the *test* accuracy of its runs. With `report.select` naming more
training keys (MAD's learning rate and weight decay), a cell selects over their combinations instead: a
candidate is a tuple of their values, and wherever the report says learning rate, it means that tuple.

A cell (an arm of the comparisons) is one table row (architecture, λ parameterisation when it varies, and
every other varied key that is not d_model, a selected key or a seed) at one d_model, so every arm
chooses among the same candidates: λ is never selected together with the lr (each λ is its own row,
compared with the default λ). Single-stage protocol: the selection and the report use the same runs.
Two-stage protocol (`sweeps.spec_keys.TwoStage`): the lr is chosen on the selection seeds' runs only and
the cell reports the confirmation seeds' runs at that lr.

A run is scored by its final weights, the weights the test set sees: `final_val["val/acc"]` for selection,
`test["test/acc"]` for the report. Runs that failed or have no result yet are kept in their cell as
missing (`[4/5]`), never dropped silently; a diverged run scores 0 on both (its final weights are not a
model). A run is *solved* when its validation accuracy met the threshold under the stopping rule
(runs/stopping.py), the event that stops it: `Record.passage` is that event (when, or censored where the run
ended), and every table, test, survival curve and results.csv reads it from there. It is *escaped* when solved
or when its final validation accuracy is above the plateau threshold. Test accuracy is reported beside them,
never used to decide them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from loglinear.models import MIXERS, ModelConfig
from loglinear.models.config import INIT_OPTIONS
from loglinear.runs.config import GROUPS, ID_LABELS, SOLVED, ConfigError, TrainConfig, identity, identity_difference
from loglinear.runs.folder import FINISHED, RESULT, read_result
from loglinear.runs.machine import machine_label
from loglinear.runs.metrics_rows import METRICS, read_rows, validation_history
from loglinear.runs.stopping import BUDGET_ENDS, budget_label, budget_validations, convergence, crossing_step
from loglinear.sweeps.manifest import manifest_of, read_manifest
from loglinear.sweeps.spec import Run, SweepSpec
from loglinear.sweeps.spec_keys import CONFIRMATION, LR_KEY, ReportConfig, TwoStage, report_config, two_stage

MIXER_KEY, LAMBDA_KEY, COLUMN_KEY = "model.mixer", "model.lambda_param", "model.d_model"
SIZED_BY_SOME = frozenset().union(*(mixer.size_fields for _, mixer in MIXERS.items()))
"""Model fields that size some mixers only: `-` in the row of a mixer that does not read them."""
SEED_KEYS = ("train.seed", "data.seed")
DEFAULT_LAMBDA = ModelConfig.lambda_param
VAL_METRIC, TEST_METRIC = "val/acc", "test/acc"
Candidate = tuple[Any, ...]
"""What a cell selects among: the values of the selected keys (`report.select`), `(lr,)` by default."""
HEADERS = {MIXER_KEY: "Architecture", LAMBDA_KEY: "λ", "model.negative_eigenvalues": "eigenvalues", "data": "task"}


@dataclass(frozen=True)
class Event:
    """When a run first passed a threshold: `steps` trained, `reached` False if it had not when it ended
    (right-censored at `steps`)."""

    steps: float
    reached: bool


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
    stage: str | None = None
    directory: Path | None = None

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

    def passage(self, threshold: float) -> Event | None:
        """When the run became solved at `threshold`: validation accuracy strictly above it on the run's
        `train.threshold_evals` consecutive validations (steps trained, runs/stopping.py), else censored at the
        step the run ended. At the run's own threshold it is result.json's `steps_to_threshold`, the event the
        run stopped on; at another, it is read from the run's metrics.csv. None for a run that did not finish,
        or whose event is not recorded (another threshold and no metrics.csv)."""
        if self.status not in FINISHED:
            return None
        if threshold == self.stop_threshold and "steps_to_threshold" in self.result:
            steps = self.result["steps_to_threshold"]
        elif self.validation_curve is not None:
            steps = crossing_step(self.validation_curve, threshold, self.threshold_evals)
        else:
            return None
        return Event(int(self.result.get("step") or 0), False) if steps is None else Event(int(steps), True)

    def solved(self, threshold: float) -> bool | None:
        """Whether the run is solved at `threshold` (`passage`); None when that is not known."""
        event = self.passage(threshold)
        return None if event is None else event.reached

    def escaped(self, plateau: float, threshold: float) -> bool | None:
        """Whether the run escaped the plateau: solved at `threshold`, or its final validation accuracy strictly
        above `plateau`; None when neither is known."""
        solved, score = self.solved(threshold), self.val_score
        if solved or (score is not None and score > plateau):
            return True
        return None if solved is None or score is None else False

    def convergence(self, threshold: float) -> str | None:
        """How the run ended (runs/stopping.py): `threshold` when solved at `threshold`, `diverged`, `failed`, else
        `plateau` or `improving` under the record's `labels`: as result.json records it when the run was labelled
        with those, else as its metrics.csv shows, `unknown` without either; None for a run without a result."""
        if self.status not in (*FINISHED, "failed"):
            return None
        solved = bool(self.solved(threshold))
        recorded = self.result.get("convergence")
        ran = self.result.get("config")
        if not solved and recorded in BUDGET_ENDS and (not isinstance(ran, dict) or labels(ran) == self.labels):
            return budget_label(recorded, self.budget_validations, self.labels[0])
        if solved or self.status in ("diverged", "failed"):
            return convergence(self.status, solved, None, *self.labels)
        return convergence(self.status, solved, self.validation_curve, *self.labels)

    @property
    def labels(self) -> tuple[int, float]:
        """(plateau_window, plateau_min_delta): what tells a plateau from a run still improving (runs/stopping.py),
        the study's (the manifest's config; no part of the run's id)."""
        return labels(self.config)

    @property
    def budget_validations(self) -> int:
        """The validations of the run's whole budget (runs/stopping.py)."""
        train = self.config.get("train") or {}
        return budget_validations(int(train.get("max_steps", TrainConfig.max_steps)),
                                  int(train.get("val_every", TrainConfig.val_every)))

    @property
    def stop_threshold(self) -> float:
        """The threshold the run itself recorded its solving at (`runs.config.solved_threshold`)."""
        threshold = (self.config.get("train") or {}).get("early_stop_threshold", SOLVED)
        return SOLVED if threshold is None else float(threshold)

    @property
    def threshold_evals(self) -> int:
        return int((self.config.get("train") or {}).get("threshold_evals", 1))

    @cached_property
    def validation_curve(self) -> list[tuple[int, float]] | None:
        """[(steps trained, val/acc)] from metrics.csv (read once), None without one; one that does not read is a
        ConfigError naming it."""
        path = None if self.directory is None else self.directory / METRICS
        if path is None or not path.is_file():
            return None
        try:
            return validation_history(read_rows(path))
        except ValueError as e:  # a cell that is not a number too
            raise ConfigError(f"{path} does not read ({e}); the report needs run {self.run_id}'s validations: "
                              f"restore the file, or move the run's folder aside to report it as missing") from None

    @property
    def seed(self) -> tuple[Any, ...]:
        """What pairs runs of different mixers: (train.seed, data.seed)."""
        return tuple(self.get(k) for k in SEED_KEYS)

    @property
    def lambda_param(self) -> str | None:
        """The λ parameterisation of a log-linear run, None for the other mixers."""
        return str(self.get(LAMBDA_KEY) or DEFAULT_LAMBDA) if is_log_linear(self.mixer) else None

    def state_at(self, seq_len: int | None = None, per: str = "total") -> int | None:
        """Numbers the decoder holds per sequence after `seq_len` tokens (default: the training length),
        `total` over the layers or `per_layer`, from result.json (runs/state_size.py); None without it."""
        state = self.result.get("state_size") or {}
        seq_len = state.get("train_seq_len") if seq_len is None else seq_len
        value = (state.get(per) or {}).get(str(seq_len))
        return None if value is None else int(value)

    @property
    def test_seq_lens(self) -> list[int]:
        """The test sets' sequence lengths, as result.json's state sizes list them ([] without them)."""
        return list((self.result.get("state_size") or {}).get("test_seq_lens") or [])

    def get(self, key: str) -> Any:
        return self.point[key] if key in self.point else lookup(self.config, key)

    @property
    def implementations(self) -> tuple[str, ...] | None:
        """The log-linear operator's implementations the run's mixers ran, sorted (() for a run without such a
        mixer); None when its result does not record them."""
        used = self.result.get("implementations")
        if used is None:
            return None
        return tuple(sorted({use["impl"] for uses in used.values() for use in uses}))

    @property
    def machine(self) -> str | None:
        """The machine the run's result was written on, as one line (runs/machine.py); None when not recorded."""
        found = self.result.get("machine")
        return machine_label(found) if found else None

    @property
    def selfchecks(self) -> list[dict[str, Any]]:
        """The distinct self-check verdicts (result.json records) the run's implementations relied on."""
        found: list[dict[str, Any]] = []
        for uses in (self.result.get("implementations") or {}).values():
            found += [use["selfcheck"] for use in uses if use["selfcheck"] and use["selfcheck"] not in found]
        return found

    @property
    def mixer(self) -> str:
        return str(self.get(MIXER_KEY))

    @property
    def d_model(self) -> int:
        return int(self.get(COLUMN_KEY))

    @property
    def lr(self) -> float:
        return float(self.get(LR_KEY))

    def candidate(self, keys: Sequence[str]) -> Candidate:
        """The values of the selected keys `keys` (`report.select`): what the run is a candidate of."""
        return tuple(self.get(key) for key in keys)

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
    report: ReportConfig = field(default_factory=ReportConfig)
    protocol: TwoStage | None = None
    unavailable: list[str] = field(default_factory=list)
    """What a report cannot show, in words: empty for a sweep read from its run folders, what results.csv does not
    hold for one re-read from it (reports/results_csv.py)."""
    absent_columns: list[str] = field(default_factory=list)
    """The results.csv columns that the older results.csv this sweep was re-read from lacked: its report leaves
    them out rather than write them empty, so that a re-report of the re-report still knows they are unknown."""

    @property
    def selected_keys(self) -> tuple[str, ...]:
        """The keys each cell selects over (`report.select`): the learning rate unless the spec names more."""
        return tuple(self.report.select)

    @property
    def protocol_text(self) -> str:
        """Which protocol produced the tables, in one sentence (two with several selected keys)."""
        if self.protocol is None:
            text = ("Single-stage protocol: each cell's learning rate is selected on its runs' validation accuracy "
                    "and reported by the same runs' test accuracy.")
        else:
            seeds = ", ".join(map(str, self.protocol.selection_seeds))
            fresh = ", ".join(map(str, self.protocol.confirmation_seeds))
            text = (f"Two-stage protocol: each cell's learning rate is selected on the validation accuracy of the "
                    f"selection seeds ({seeds}); every table and comparison reports the test accuracy of the "
                    f"confirmation seeds ({fresh}) at that learning rate, which never took part in the selection.")
        if self.selected_keys == (LR_KEY,):
            return text
        names = ", ".join(self.selected_keys)
        return (f"{text} The selection is over every combination of ({names}) in the grid, the same for every cell: "
                f"wherever this report says learning rate, it means that combination.")

    def cells(self) -> dict[Hashable, Cell]:
        """The main table's cells: {(row, d_model): Cell} under the sweep's protocol."""
        return self.select(self.records, lambda r: (r.row, r.d_model))

    def select(self, records: Iterable[Record], key: Callable[[Record], Hashable]) -> dict[Hashable, Cell]:
        return selected_cells(records, key, two_stage=self.protocol is not None, keys=self.selected_keys)


def load_sweep(out: str | Path) -> Sweep:
    """Read `out/manifest.json` and every expected run's result.json (missing ones included). A result.json whose
    configuration is not its run's (a folder holding another run's files) is `unreadable`, never reported under
    the manifest's run."""
    return sweep_in(read_manifest(Path(out)), Path(out))


def sweep_at(spec: SweepSpec, runs: list[Run], out: Path) -> Sweep:
    """The sweep of `runs` of `spec` with the results their folders in `out` hold, whatever the manifest there
    lists: what `load_sweep` reads once the manifest expects exactly them."""
    return sweep_in(manifest_of(spec, runs, out), out)


def sweep_in(manifest: dict[str, Any], out: Path) -> Sweep:
    """The sweep that `manifest` expects in the sweep folder `out`, with the results of its runs' folders."""
    records = []
    for entry in manifest["runs"]:
        try:
            result = read_result(out / entry["dir"]) or {}
        except (OSError, ValueError) as e:  # named in the report's missing runs, never taken for a result
            result = {"status": "unreadable", "error": str(e)}
        config = entry.get("config") or result.get("config") or {}
        other = _another_run(result.get("config"), entry.get("config"))
        if other:
            result = {"status": "unreadable", "error": f"{out / entry['dir'] / RESULT} is the result of another "
                                                      f"run ({other}; its manifest entry's config)"}
        records.append(Record(entry["id"], config, entry.get("point", {}), result, stage=entry.get("stage"),
                              directory=out / entry["dir"]))
    return sweep_of(manifest, records, out)


def _another_run(ran: Any, planned: Any) -> str | None:
    """Where the configuration a result records differs from its run's, in what makes a run (`identity`)."""
    if not isinstance(ran, dict) or not isinstance(planned, dict):
        return None
    return identity_difference(identity(planned), identity(ran))


def labels(config: dict[str, Any]) -> tuple[int, float]:
    """A configuration's (train.plateau_window, train.plateau_min_delta), their defaults where it has none."""
    train = config.get("train") or {}
    return tuple(train.get(key.partition(".")[2], default)  # type: ignore[return-value]
                 for key, default in ID_LABELS.items())


def sweep_of(manifest: dict[str, Any], records: list[Record], out: Path) -> Sweep:
    """The Sweep of a manifest's records (with or without results): their row labels, in table order."""
    return arrange(manifest["name"], out, records, manifest, report_config(manifest.get("report")),
                   two_stage(manifest.get("protocol")))


def arrange(name: str, out: Path, records: list[Record], manifest: dict[str, Any], report: ReportConfig,
            protocol: TwoStage | None, unavailable: Iterable[str] = (), absent_columns: Iterable[str] = ()) -> Sweep:
    """The sweep of `records`, each labelled with its table row (from the manifest's `varied_keys` and `zip`), in
    table order."""
    _check_importable(out, records)
    selected = tuple(report.select)
    keys = _row_keys(manifest, records, selected)
    for record in records:
        record.row = tuple(_label(key, record) for key in keys)
    orders = _label_orders(keys, records)
    records.sort(key=lambda r: (tuple(orders[k].index(v) for k, v in zip(keys, r.row, strict=True)), r.d_model,
                                r.candidate(selected)))
    return Sweep(name, out, records, keys, report, protocol, list(unavailable), list(absent_columns))


def _check_importable(out: Path, records: list[Record]) -> None:
    """Every mixer the runs name by import path imports here, so its rows carry its display name and its kind
    (log-linear, its base); else a ConfigError naming the mixer and the reason."""
    for mixer in dict.fromkeys(r.mixer for r in records):
        if ":" in mixer:
            try:
                MIXERS[mixer]
            except ValueError as e:
                raise ConfigError(f"{out}: {e}; put the folder that holds it on PYTHONPATH, as when the sweep "
                                  f"ran") from None


def _row_keys(manifest: dict[str, Any], records: list[Record], selected: Sequence[str]) -> list[str]:
    """Architecture, λ when it varies among log-linear runs, then the other varied keys, except d_model,
    the selected keys (the learning rate), seeds and keys zipped with them (those follow the column, the
    selection or the seed). Of the keys zipped with a selected key only the training ones follow it: a model
    key zipped with the learning rate (`state_dim` with a rate per size) makes rows of its own, so different
    models never share a cell."""
    follows = {COLUMN_KEY, *SEED_KEYS}
    tied = {*follows, *selected}
    for group in manifest.get("zip", []):
        if follows & set(group):
            tied |= set(group)
        elif set(selected) & set(group):
            tied |= {k for k in group if k.startswith("train.")}
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
    group, _, field = key.partition(".")
    if group == "model" and record.mixer in MIXERS and (
            (field in SIZED_BY_SOME and field not in MIXERS[record.mixer].size_fields)
            or (field in INIT_OPTIONS and field not in MIXERS[record.mixer].init_fields)):
        return "-"
    if group == "model" and value is None:  # an optional size left to the mixer's own rule
        return "default"
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
    """The runs a table cell reports, at its selected candidate `pick` (the values of the selected `keys`; None:
    no selection run finished).

    `candidates` is how many candidates the selection compared, `options` which ones (ascending)."""

    pick: Candidate | None
    runs: list[Record]
    candidates: int = 1
    options: tuple[Candidate, ...] = ()
    keys: tuple[str, ...] = (LR_KEY,)

    @property
    def lr(self) -> float | None:
        """The learning rate of the pick (None without one)."""
        return None if self.pick is None else float(self.pick[self.keys.index(LR_KEY)])

    @property
    def rates(self) -> tuple[float, ...]:
        """The learning rates compared at the pick's other selected values (all of them with the lr alone)."""
        if self.pick is None:
            return ()
        at = self.keys.index(LR_KEY)
        return tuple(sorted({float(c[at]) for c in self.options if _others(c, at) == _others(self.pick, at)}))

    def with_lr(self, lr: float) -> Candidate:
        """The pick with its learning rate replaced by `lr`."""
        assert self.pick is not None
        return tuple(lr if key == LR_KEY else value for key, value in zip(self.keys, self.pick, strict=True))

    @property
    def pick_text(self) -> str:
        """The pick as the tables write it (`candidate_text`)."""
        return "-" if self.pick is None else candidate_text(self.keys, self.pick)

    @property
    def edge(self) -> str | None:
        """`lowest` or `highest` when the selected learning rate is at that edge of several compared at the pick's
        other selected values, else None."""
        rates = self.rates
        if self.lr is None or len(rates) < 2:
            return None
        return "lowest" if self.lr == rates[0] else "highest" if self.lr == rates[-1] else None

    @property
    def lambda_param(self) -> str | None:
        return self.runs[0].lambda_param if self.runs else None

    @property
    def values(self) -> list[float]:
        """Test accuracies of the runs that have one."""
        return [v for v in (r.test_score for r in self.runs) if v is not None]

    @property
    def complete(self) -> bool:
        return len(self.values) == len(self.runs)

    def solved(self, threshold: float) -> list[bool]:
        """Whether each run is solved at `threshold` (`Record.solved`; runs where it is not known left out)."""
        return [s for s in (r.solved(threshold) for r in self.runs) if s is not None]

    def escaped(self, plateau: float, threshold: float) -> list[bool]:
        """Whether each run escaped the plateau (`Record.escaped`; runs where it is not known left out)."""
        return [e for e in (r.escaped(plateau, threshold) for r in self.runs) if e is not None]

    def all_solved(self, threshold: float) -> bool:
        solved = self.solved(threshold)
        return bool(solved) and all(solved) and len(solved) == len(self.runs)

    def endings(self, threshold: float) -> list[str]:
        """How each run with a result ended (`Record.convergence`)."""
        return [c for c in (r.convergence(threshold) for r in self.runs) if c is not None]

    def passages(self, threshold: float) -> list[Event]:
        """The runs' times to `threshold` on validation (runs without a metrics.csv left out)."""
        return [e for e in (r.passage(threshold) for r in self.runs) if e is not None]


def mean_std(values: list[float]) -> tuple[float, float | None]:
    """Mean and sample standard deviation (None for fewer than two values)."""
    mean = sum(values) / len(values)
    if len(values) < 2:
        return mean, None
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


def selected_cells(records: Iterable[Record], key: Callable[[Record], Hashable], two_stage: bool = False,
                   keys: Sequence[str] = (LR_KEY,)) -> dict[Hashable, Cell]:
    """Group records by `key`, then keep each group's runs at the candidate (values of the selected `keys`) with
    the best mean validation score over its selection runs that finished (ties go to the smaller candidate). With
    `two_stage`, only the selection-stage runs choose and the cell holds the confirmation-stage runs at the
    chosen candidate."""
    keys = tuple(keys)
    groups: dict[Hashable, dict[Candidate, list[Record]]] = {}
    for record in records:
        groups.setdefault(key(record), {}).setdefault(record.candidate(keys), []).append(record)
    cells = {}
    for cell_key, by_candidate in groups.items():
        choosing = {c: [r for r in runs if r.stage != CONFIRMATION] for c, runs in by_candidate.items()}
        scored = mean_val_scores(choosing)
        options = tuple(sorted(c for c, runs in choosing.items() if runs))
        reported = {c: [r for r in runs if (r.stage == CONFIRMATION) == two_stage] for c, runs in by_candidate.items()}
        if scored:
            best = best_candidate(scored)
            cells[cell_key] = Cell(best, reported[best], len(options), options, keys)
        else:
            cells[cell_key] = Cell(None, [r for runs in reported.values() for r in runs], len(options), options, keys)
    return cells


def mean_val_scores(by_candidate: dict[Candidate, list[Record]]) -> dict[Candidate, float]:
    """{candidate: mean validation score of its finished runs}, for the candidates that have one."""
    scored = {}
    for candidate, runs in by_candidate.items():
        values = [v for v in (r.val_score for r in runs) if v is not None]
        if values:
            scored[candidate] = mean_std(values)[0]
    return scored


def best_candidate(scored: dict[Candidate, float]) -> Candidate:
    """The selection rule: the candidate with the best mean validation score, ties to the smaller candidate (the
    smaller learning rate when it is the only selected key)."""
    return max(sorted(scored), key=lambda c: scored[c])


def candidate_text(keys: Sequence[str], candidate: Candidate) -> str:
    """A candidate as the tables write it: the learning rate alone (`0.003`), or each selected key's last part
    and value (`lr 0.003, weight_decay 0.1`)."""
    if tuple(keys) == (LR_KEY,):
        return f"{candidate[0]:.3g}"
    return ", ".join(f"{key.rsplit('.', 1)[-1]} {_value_text(value)}" for key, value in zip(keys, candidate,
                                                                                               strict=True))


def _value_text(value: Any) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def _others(candidate: Candidate, at: int) -> Candidate:
    return candidate[:at] + candidate[at + 1:]


def selection_cells(sweep: Sweep) -> dict[Hashable, Cell]:
    """Each table cell's selection, from the selection runs alone (confirmation runs, whatever their results, take
    no part), holding its selection runs at the chosen candidate."""
    choosing = [r for r in sweep.records if r.stage != CONFIRMATION]
    return selected_cells(choosing, lambda r: (r.row, r.d_model), keys=sweep.selected_keys)
