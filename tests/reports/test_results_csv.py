"""A study re-reported from its results.csv and its spec (reports/results_csv.py, `sweep report DIR --spec SPEC`):
the same report as from its run folders, but for the line that says what was not available; an older CSV without
the columns added for it; a committed study; and the input it refuses."""

from __future__ import annotations

import csv
import json
import re
import shutil
from pathlib import Path

import pytest

from loglinear.cli import sweep_main
from loglinear.reports.files import CSV, ERROR, MACHINE, PASSAGE_REACHED, PASSAGE_STEPS, RECALL, SELFCHECKS
from loglinear.reports.recall_levels import TABLE as RECALL_TABLE
from loglinear.reports.report import REREPORTED, TABLE, write_report
from loglinear.reports.results_csv import load_sweep_from_csv
from loglinear.reports.spread import resolve_spread
from loglinear.runs.folder import write_json_atomic, write_text_atomic
from loglinear.sweeps import runner
from loglinear.sweeps.manifest import run_dir, write_manifest
from loglinear.sweeps.spec import expand, load_spec

from ..protocol.test_two_stage import extending_stand_in, two_stage_spec
from ..slow_cases import default_and_slow

ROOT = Path(__file__).resolve().parents[2]
VERDICT = {"status": "passed", "device": "CPU", "dtype": "float32", "failure": None, "path": None}


def tiny_spec(folder: Path, name: str = "tiny", report: dict | None = None, **base) -> Path:
    spec = {"name": "tiny", "base": {"data.task": "mqar", "data.task_args": {"vocab_size": 16, "seq_len": 8,
                                                                             "num_kv_pairs": 1},
                                     "model.d_model": 16, "logger.wandb.mode": "disabled", **base},
            "grid": {"model.mixer": ["mamba2", "log_linear_mamba2"], "train.lr": [1.0e-3, 1.0e-2],
                     "train.seed": [0, 1, 2]},
            "report": {"plateau": 0.5} if report is None else report}
    path = folder / f"{name}.yaml"
    path.write_text(json.dumps(spec))
    return path


def planted_sweep(folder: Path, **base) -> Path:
    """A sweep folder of `tiny_spec` with planted results: curves whose first value above 99% gives
    `steps_to_threshold`, state sizes, recall records, implementations with a self-check, a failed and a missing
    run; the Mamba-2 run at lr 1e-3 and seed 1 peaks at 95% on validation and ends at 60%."""
    path = tiny_spec(folder, **base)
    spec = load_spec(path)
    runs = expand(spec)
    out = folder / "out"
    write_manifest(out, spec, runs)
    for i, run in enumerate(runs):
        log_linear = run.point["model.mixer"] == "log_linear_mamba2"
        seed, lr = run.point["train.seed"], run.point["train.lr"]
        if (log_linear, lr, seed) == (False, 1.0e-2, 2):
            continue  # missing: no result yet
        if (log_linear, lr, seed) == (False, 1.0e-2, 1):
            write_json_atomic(run_dir(out, run.run_id) / "result.json",
                              {"status": "failed", "error": "RuntimeError: boom"})
            continue
        final = 0.995 if log_linear and seed != 1 else 0.3 + 0.1 * seed + (0.2 if lr == 1.0e-3 else 0.0)
        curve = [(100, 0.2), (200, 0.95 if (log_linear, lr, seed) == (False, 1.0e-3, 1) else 0.4 + 0.01 * i),
                 (300, final)]
        reached = next((steps for steps, acc in curve if acc > 0.99), None)
        uses = [{"impl": "chunk", "selfcheck": VERDICT}] if log_linear else []
        result = {
            "status": "early_stopped" if reached else "max_steps", "val_accuracy": max(a for _, a in curve),
            "step": 300, "steps_to_threshold": reached, "params": 1000 + i, "wall_time_s": 1.5,
            "final_val": {"val/acc": final}, "test": {"test/acc": final - 0.001, "test/acc/seq_len=8": final},
            "implementations": {"blocks.0.mixer": uses} if uses else {},
            "machine": {"processor": "AMD EPYC", "cpu_capability": "AVX512" if seed else "AVX2", "gpu": None,
                        "torch": "2.13.0+cpu", "threads": 1},
            "state_size": {"train_seq_len": 8, "test_seq_lens": [8, 16], "per_layer": {"8": 40 + i, "16": 80 + i},
                           "total": {"8": 80 + i, "16": 160 + i}},
            "recall": {"by_level": {"1": [3, 4], "2-3": [1, 4]}, "by_distance": {"1": [2, 2], "2-3": [2, 6]},
                       "state_at_recall": {"per_layer": 12.5 + i, "total": 25.0 + i}},
        }
        write_json_atomic(run_dir(out, run.run_id) / "result.json", result)
        rows = "".join(f"{steps - 1},{acc}\n" for steps, acc in curve)
        write_text_atomic(run_dir(out, run.run_id) / "metrics.csv", "step,val/acc\n" + rows)
    write_report(out)
    return path


@pytest.fixture(scope="module")
def planted_folders() -> dict[str, Path]:
    return {}


@pytest.fixture
def planted(tmp_path, tmp_path_factory, planted_folders):
    """planted(**base): `planted_sweep(tmp_path, **base)` as a copy of the one made once in this module for that
    `base` (its report draws every figure: about a CPU second)."""
    def make(**base) -> Path:
        key = json.dumps(base, sort_keys=True)
        if key not in planted_folders:
            planted_folders[key] = planted_sweep(tmp_path_factory.mktemp("planted"), **base)
        spec = planted_folders[key]
        shutil.copytree(spec.parent, tmp_path, dirs_exist_ok=True)
        return tmp_path / spec.name

    return make


def without_note(table: str) -> str:
    """`table` without the re-report's line (and the blank line after it)."""
    return re.sub(f"^{re.escape(REREPORTED)}.*\n\n", "", table, flags=re.M)


def read_rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def write_rows(path: Path, rows: list[dict[str, str]], drop: tuple[str, ...] = ()) -> Path:
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, [k for k in rows[0] if k not in drop], extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    return path


def test_a_rereport_from_results_csv_is_the_report_from_the_run_folders(planted, tmp_path, capsys):
    spec = planted()
    out, again = tmp_path / "out", tmp_path / "again"
    assert sweep_main(["report", str(again), "--spec", str(spec), "--from-results", str(out / CSV)]) == 0
    table = (again / TABLE).read_text()
    note = next(line for line in table.splitlines() if line.startswith(REREPORTED))
    assert "the validation histories" in note and "λ by level" in note
    assert "recall" not in note and "self-check" not in note and "errors" not in note  # the CSV holds them
    assert without_note(table) == without_note((out / TABLE).read_text())
    for name in (CSV, "paired.csv", RECALL_TABLE):
        assert (again / name).read_text() == (out / name).read_text(), name
    assert "passed on CPU (float32)" in table and "RuntimeError: boom" in table
    assert "(2/3 reached)" in table  # the steps to the threshold, from passage_steps / passage_reached
    assert "| AMD EPYC (AVX512), torch 2.13.0+cpu, 1 thread | 6 |" in table and "on 2 machines" in table


def test_an_older_results_csv_gives_what_it_holds_and_names_the_rest(planted, tmp_path):
    spec = planted()
    out = tmp_path / "out"
    rows = read_rows(out / CSV)
    old = write_rows(tmp_path / "old.csv", rows,
                     drop=(PASSAGE_STEPS, PASSAGE_REACHED, SELFCHECKS, MACHINE, RECALL, ERROR))
    sweep = load_sweep_from_csv(old, spec, tmp_path / "again")
    report = write_report(tmp_path / "again", sweep)
    note = next(line for line in report.table.splitlines() if line.startswith(REREPORTED))
    assert "recall.md" in note and "self-check" in note and "errors of the failed runs" in note
    assert not (tmp_path / "again" / RECALL_TABLE).exists() and "recall.md" in report.skipped
    original = (out / TABLE).read_text()
    steps = "## Steps to 99% validation accuracy"
    assert report.table.split(steps)[1].split("##")[0] == original.split(steps)[1].split("##")[0]
    assert report.table.split("## Paired comparisons")[1] == original.split("## Paired comparisons")[1]
    header = read_rows(tmp_path / "again" / CSV)[0]
    assert PASSAGE_STEPS in header and not {SELFCHECKS, MACHINE, RECALL, ERROR} & set(header)  # unknown, not "none"
    assert "## Machines\n\nNot recorded in the finished runs' results." in report.table
    twice = write_report(tmp_path / "twice", load_sweep_from_csv(tmp_path / "again" / CSV, spec, tmp_path / "twice"))
    assert twice.table == report.table
    by_id = {r.run_id: r for r in sweep.records}
    for row in rows:
        record = by_id[row["run_id"]]
        solved = record.solved(0.99)
        assert solved == (None if row["status"] in ("failed", "missing") else bool(row["steps_to_threshold"]))
        if solved is not None:
            assert record.escaped(0.5, 0.99) == (solved or float(row["val_score"]) > 0.5)
            assert record.convergence(0.99) == (row.get("convergence") or ("threshold" if solved else "unknown"))


def folder_report_at(tmp_path: Path, report: dict) -> tuple[Path, Path]:
    """The planted sweep reported again from its run folders under `report` (what a re-report must give), and the
    spec with that report."""
    out = tmp_path / "out"
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["report"] = {**manifest["report"], **report}
    (out / "manifest.json").write_text(json.dumps(manifest))
    write_report(out)
    return out, tiny_spec(tmp_path, name="other_thresholds", report=report)


@pytest.mark.parametrize("report", [{"threshold": 0.9, "plateau": 0.5}, {"threshold": 0.99, "plateau": 0.97},
                                    {"threshold": 0.9, "plateau": 0.9}, {"threshold": 0.5, "plateau": 0.3}])
@pytest.mark.parametrize("drop", [(), (PASSAGE_STEPS, PASSAGE_REACHED)])
def test_a_rereport_at_other_thresholds_counts_solved_and_escaped_again(planted, tmp_path, report, drop):
    """results.csv written at threshold 0.99 and plateau 0.5, re-reported at others: solved, escaped and how each
    run ended are the report's from the run folders (the run peaking at 95% is solved at 90%, not escaped at
    97%), never the columns written at the old values; the steps to a threshold that is not the runs' own are
    left out and named."""
    planted()
    csv_path = write_rows(tmp_path / "written.csv", read_rows(tmp_path / "out" / CSV), drop=drop)
    truth, spec = folder_report_at(tmp_path, report)
    again = tmp_path / "again"
    assert sweep_main(["report", str(again), "--spec", str(spec), "--from-results", str(csv_path)]) == 0
    expected = {r["run_id"]: r for r in read_rows(truth / CSV)}
    got = read_rows(again / CSV)
    for row in got:
        for column in ("solved", "escaped", "convergence", "val_score", "test_score"):
            assert row[column] == expected[row["run_id"]][column], (row["run_id"], column)
    steps = [(r[PASSAGE_STEPS], r[PASSAGE_REACHED]) for r in got if r["status"] in ("early_stopped", "max_steps")]
    if report["threshold"] == 0.99:
        assert steps == [(expected[r["run_id"]][PASSAGE_STEPS], expected[r["run_id"]][PASSAGE_REACHED]) for r in got
                         if r["status"] in ("early_stopped", "max_steps")]
    else:
        assert set(steps) == {("", "")}
        assert f"the steps to the threshold of {len(steps)} runs" in (again / TABLE).read_text()
    table = without_note((again / TABLE).read_text())
    for section in ("## Solve rate", "## Escaped the plateau", "## How the runs ended"):
        assert table.split(section)[1].split("\n## ")[0] == (truth / TABLE).read_text().split(section)[1].split(
            "\n## ")[0], section


def test_solved_that_results_csv_cannot_tell_at_another_threshold_is_refused(planted, tmp_path, capsys):
    """Runs solved on two consecutive validations: at another threshold, a run whose best validation is above it
    may or may not have held it twice; the re-report refuses, naming the run and the threshold."""
    spec = planted(**{"train.threshold_evals": 2})
    rows = read_rows(tmp_path / "out" / CSV)
    other = tiny_spec(tmp_path, name="at90", report={"threshold": 0.9}, **{"train.threshold_evals": 2})
    peaked = next(r for r in rows if r["val_accuracy"] == "0.95")
    err = refused(capsys, ["report", str(tmp_path / "x"), "--spec", str(other), "--from-results",
                           str(tmp_path / "out" / CSV)], f"run {peaked['run_id']}", "threshold 0.9", "cannot be told")
    assert f"line {rows.index(peaked) + 2}:" in err and not (tmp_path / "x").exists()
    assert sweep_main(["report", str(tmp_path / "y"), "--spec", str(spec), "--from-results",
                       str(tmp_path / "out" / CSV)]) == 0  # at the runs' own threshold it is known


@pytest.mark.parametrize("spelling", [("TRUE", "FALSE"), ("true", "false"), ("1", "0")])
def test_booleans_in_any_spelling_and_an_excel_csv_give_the_same_report(planted, tmp_path, spelling):
    """A results.csv saved by a spreadsheet (a byte-order mark, CRLF line ends, TRUE and FALSE) re-reports as the
    CSV the report wrote."""
    spec = planted()
    out = tmp_path / "out"
    rows = [{k: dict(zip(("True", "False"), spelling, strict=True)).get(v, v) for k, v in row.items()}
            for row in read_rows(out / CSV)]
    assert sum(v in spelling for row in rows for v in row.values()) > 10
    excel = tmp_path / "excel.csv"
    with excel.open("w", newline="", encoding="utf-8-sig") as f:
        writer = csv.DictWriter(f, list(rows[0]), lineterminator="\r\n")
        writer.writeheader()
        writer.writerows(rows)
    assert sweep_main(["report", str(tmp_path / "again"), "--spec", str(spec), "--from-results", str(excel)]) == 0
    assert (tmp_path / "again" / CSV).read_text() == (out / CSV).read_text()
    assert without_note((tmp_path / "again" / TABLE).read_text()) == without_note((out / TABLE).read_text())


def test_a_boolean_varied_value_reads_in_any_spelling_and_nothing_else(tmp_path, capsys):
    spec_path = tiny_spec(tmp_path)
    spec = json.loads(spec_path.read_text())
    spec["grid"] = {"model.mixer": ["gated_deltanet"], "model.negative_eigenvalues": [True, False]}
    spec_path.write_text(json.dumps(spec))
    runs = expand(load_spec(spec_path))
    out = tmp_path / "out"
    write_manifest(out, load_spec(spec_path), runs)
    write_report(out)
    rows = read_rows(out / CSV)
    for row, spelling in zip(rows, ("TRUE", "0"), strict=True):
        row["model.negative_eigenvalues"] = spelling
    assert sweep_main(["report", str(tmp_path / "a"), "--spec", str(spec_path), "--from-results",
                       str(write_rows(tmp_path / "spelled.csv", rows))]) == 0
    rows[1]["model.negative_eigenvalues"] = "yes"
    capsys.readouterr()
    refused(capsys, ["report", str(tmp_path / "b"), "--spec", str(spec_path), "--from-results",
                     str(write_rows(tmp_path / "yes.csv", rows))], "line 3", "model.negative_eigenvalues 'yes'",
            "not a boolean")


COMMITTED = sorted(p.name for p in (ROOT / "results").iterdir() if (p / CSV).is_file())
"""Every committed study: a folder of results/ with its results.csv (its spec is configs/sweeps/NAME.yaml)."""
SMALLEST = min(COMMITTED, key=lambda study: (ROOT / "results" / study / CSV).stat().st_size)
"""The default run re-reports this one; the `slow` tests every other."""


def test_the_committed_studies_are_found():
    assert "parity_gdn_confirm_cpu" in COMMITTED and len(COMMITTED) > 1


@pytest.mark.parametrize("study", default_and_slow(COMMITTED, [SMALLEST]))
def test_a_committed_study_rereported_from_its_results_csv_gives_its_committed_report(tmp_path, study):
    """The committed table.md, paired files and results.csv columns, number for number (apart from the line that
    says the re-report's source), for every committed study; a definition change shows here until the committed
    studies are re-reported."""
    committed = ROOT / "results" / study
    spec = ROOT / "configs" / "sweeps" / f"{study}.yaml"
    write_report(tmp_path, load_sweep_from_csv(committed / CSV, resolve_spread(load_spec(spec)), tmp_path))
    assert without_note((tmp_path / TABLE).read_text()) == without_note((committed / TABLE).read_text())
    for name in ("paired.csv", "paired_by_length.csv"):
        assert (tmp_path / name).is_file() == (committed / name).is_file(), name
        if (committed / name).is_file():
            assert (tmp_path / name).read_text() == (committed / name).read_text(), name
    again = {r["run_id"]: r for r in read_rows(tmp_path / CSV)}
    for row in read_rows(committed / CSV):
        assert {k: again[row["run_id"]][k] for k in row} == row


def refused(capsys, argv: list[str], *words: str) -> str:
    assert sweep_main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and all(w in err for w in words), err
    return err


def test_a_rereport_refuses_what_it_cannot_read_and_writes_nothing(planted, tmp_path, capsys):
    spec = planted()
    out, target = tmp_path / "out", tmp_path / "target"
    other = json.loads(spec.read_text())
    other["base"]["model.d_model"] = 32
    (tmp_path / "other.yaml").write_text(json.dumps(other))
    refused(capsys, ["report", str(target), "--spec", str(tmp_path / "other.yaml"), "--from-results", str(out / CSV)],
            "line 2", "the spec did not produce this results.csv")
    rows = read_rows(out / CSV)
    rows[3]["step"] = "many"
    bad = write_rows(tmp_path / "bad.csv", rows)
    refused(capsys, ["report", str(target), "--spec", str(spec), "--from-results", str(bad)], "line 5", "does not read")
    refused(capsys, ["report", str(target), "--spec", str(spec), "--from-results", str(tmp_path / "none.csv")],
            "not found")
    refused(capsys, ["report", str(target), "--spec", str(spec), "--from-results", str(spec)],
            "not the results.csv of a report")
    (tmp_path / "binary.csv").write_bytes(b"run_id,\xff\xfe\n")
    refused(capsys, ["report", str(target), "--spec", str(spec), "--from-results", str(tmp_path / "binary.csv")],
            "not the results.csv of a report")
    refused(capsys, ["report", str(target), "--from-results", str(out / CSV)], "--from-results needs --spec")
    refused(capsys, ["report", str(target), "--spec", str(spec), "--from-results", str(out / CSV), "--lambda"],
            "--lambda")
    refused(capsys, ["report", str(out), "--spec", str(spec)], "manifest.json", "another folder")
    assert not target.exists()
    target.mkdir()
    (target / CSV).write_text((out / CSV).read_text())
    refused(capsys, ["report", str(target)], "no manifest.json", "--spec")
    assert sorted(p.name for p in target.iterdir()) == [CSV]


@pytest.mark.parametrize("column, value, words", [
    ("test/acc", "1.7", "test/acc 1.7 is not an accuracy, a fraction in [0, 1]"),
    ("test/acc", "nan", "test/acc 'nan' is not a finite number"),
    ("test_score", "-0.2", "test_score -0.2 is not an accuracy"),
    ("val_score", "inf", "val_score 'inf' is not a finite number"),
    ("wall_time_s", "NaN", "wall_time_s 'NaN' is not a finite number"),
    ("step", "inf", "step 'inf' is not a finite number"),
])
def test_a_rereport_refuses_an_accuracy_outside_0_1_or_a_number_not_finite_naming_the_row(planted, tmp_path, capsys,
                                                                                          column, value, words):
    spec = planted()
    rows = read_rows(tmp_path / "out" / CSV)
    row = next(i for i, r in enumerate(rows) if r["status"] == "max_steps")
    rows[row][column] = value
    bad = write_rows(tmp_path / "bad.csv", rows)
    refused(capsys, ["report", str(tmp_path / "target"), "--spec", str(spec), "--from-results", str(bad)],
            f"line {row + 2}: run {rows[row]['run_id']}", words)
    assert not (tmp_path / "target").exists()


@pytest.mark.parametrize("value", ["inf", "nan"])
def test_a_test_loss_not_finite_is_what_a_run_recorded_and_rereports(planted, tmp_path, value):
    """A run that did not diverge may end with an infinite (or nan) test loss: its results.csv re-reports, the value
    kept, and its report is written."""
    spec = planted()
    rows = read_rows(tmp_path / "out" / CSV)
    row = next(i for i, r in enumerate(rows) if r["status"] == "max_steps")
    rows = [{**r, "test/loss": "0.5" if r["status"] == "max_steps" else ""} for r in rows]
    rows[row]["test/loss"] = value
    sweep = load_sweep_from_csv(write_rows(tmp_path / "lossy.csv", rows), resolve_spread(load_spec(spec)), tmp_path)
    loss = next(r for r in sweep.records if r.run_id == rows[row]["run_id"]).result["test"]["test/loss"]
    assert repr(loss) == value
    write_report(tmp_path, sweep)
    assert (tmp_path / TABLE).is_file()


def two_stage_study(folder: Path, monkeypatch) -> tuple[Path, Path]:
    """A two-stage study (test_two_stage.py) run with a stand-in for training: two grid extensions (0.1 and 1 on
    both selection seeds, the pick 0.1) and three confirmation runs at 0.1; its spec and results.csv."""
    folder.mkdir(exist_ok=True)
    spec, out = two_stage_spec(folder, extensions=2), folder / "out"
    monkeypatch.setattr(runner, "run_local", extending_stand_in([]))
    assert sweep_main(["run", str(spec), "--out", str(out), "--quiet"]) == 0
    return spec, out / CSV


def edited(rows: list[dict[str, str]], **cells: str) -> list[dict[str, str]]:
    return [{**row, **cells} for row in rows]


TWO_STAGE_DAMAGE = {
    "a row deleted": (lambda rows: rows[1:], ["lacks 1 of the 4 runs of the first stage"]),
    "cut at a line boundary": (lambda rows: rows[:5], ["lacks 1 of the 2 runs of the grid extensions",
                                                       "rows deleted or cut off"]),
    "an extension row deleted": (lambda rows: [r for r in rows if (r["lr"], r["seed"]) != ("1.0", "1")],
                                 ["lacks 1 of the 4 runs of the grid extensions"]),
    "no confirmation rows": (lambda rows: [r for r in rows if r["stage"] != "confirmation"],
                             ["lacks 3 of the 3 runs of the second stage"]),
    "the pick moved": (lambda rows: [{**r, "val_score": "0.95"} if r["lr"] == "1.0" else r for r in rows],
                       ["confirmation run", "is not at the learning rate the selection rows pick"]),
    "a blank stage": (lambda rows: edited(rows, stage=""), ["line 2:", "its stage is blank where the spec gives "
                                                                       "'selection'"]),
    "an edited status": (lambda rows: rows[:2] + edited(rows[2:3], status="Early_Stopped") + rows[3:],
                         ["line 4:", "status 'Early_Stopped' is not one a report writes", "case-sensitive"]),
    "a row twice": (lambda rows: rows + rows[:1], [f"line {2 + 11}:", "has a row already, on line 2"]),
}


@pytest.mark.parametrize("damage", sorted(TWO_STAGE_DAMAGE))
def test_a_rereport_refuses_a_csv_that_is_not_the_whole_study(tmp_path, capsys, monkeypatch, damage):
    """A two-stage study's results.csv with rows lost, cut, edited so that the pick moves, a blank stage column, an
    unknown status or a row twice: refused with one line naming what is missing or inconsistent, and nothing
    written; whole, it re-reports."""
    spec, results = two_stage_study(tmp_path, monkeypatch)
    rows = read_rows(results)
    assert [(r["stage"], r["lr"]) for r in rows].count(("confirmation", "0.1")) == 3 and len(rows) == 11
    change, words = TWO_STAGE_DAMAGE[damage]
    target = tmp_path / "target"
    capsys.readouterr()
    refused(capsys, ["report", str(target), "--spec", str(spec), "--from-results",
                     str(write_rows(tmp_path / "damaged.csv", change(rows)))], *words)
    assert not target.exists()
    assert sweep_main(["report", str(target), "--spec", str(spec), "--from-results", str(results)]) == 0


def test_another_specs_csv_is_refused(planted, tmp_path, capsys, monkeypatch):
    """A single-stage study's CSV under a two-stage spec whose grid overlaps it, and the other way round."""
    tiny = planted()
    spec, results = two_stage_study(tmp_path / "two", monkeypatch)
    capsys.readouterr()
    refused(capsys, ["report", str(tmp_path / "a"), "--spec", str(spec), "--from-results", str(tmp_path / "out" / CSV)],
            ", line ", "the spec did not produce this results.csv")
    refused(capsys, ["report", str(tmp_path / "b"), "--spec", str(tiny), "--from-results", str(results)],
            "line 2:", "the spec did not produce this results.csv")


@pytest.mark.parametrize("damage", ["a row deleted", "cut at a line boundary", "a status edited"])
def test_a_rereport_in_place_of_a_csv_that_lost_runs_keeps_the_report(planted, tmp_path, capsys, damage):
    """`sweep report REP --spec` on the folder of an earlier re-report whose results.csv lost rows (deleted, cut at
    a line boundary) or had a finished run's status edited: refused, every file of the report left as it was."""
    spec = planted()
    rep = tmp_path / "rep"
    assert sweep_main(["report", str(rep), "--spec", str(spec), "--from-results", str(tmp_path / "out" / CSV)]) == 0
    rows = read_rows(rep / CSV)
    finished = next(i for i, r in enumerate(rows) if r["status"] == "max_steps")
    damaged = {"a row deleted": rows[:finished] + rows[finished + 1:], "cut at a line boundary": rows[:4],
               "a status edited": rows[:finished] + edited(rows[finished:finished + 1], status="missing")
               + rows[finished + 1:]}[damage]
    write_rows(rep / CSV, damaged)
    before = {p.name: p.read_bytes() for p in rep.iterdir()}
    capsys.readouterr()
    assert sweep_main(["report", str(rep), "--spec", str(spec)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and ("lacks" in err or "table.md reports 10 finished runs" in err), err
    assert {p.name: p.read_bytes() for p in rep.iterdir()} == before


@pytest.mark.parametrize("study", COMMITTED)
def test_every_committed_study_is_the_whole_study_its_spec_plans(study):
    """Each committed results.csv holds every run its spec plans, under its id or its earlier one, and the manifest
    of a folder that keeps one lists the same runs."""
    folder = ROOT / "results" / study
    sweep = load_sweep_from_csv(folder / CSV, ROOT / "configs" / "sweeps" / f"{study}.yaml", folder)
    assert sorted(r.run_id for r in sweep.records) == sorted(r["run_id"] for r in read_rows(folder / CSV))
    if (folder / "manifest.json").is_file():
        manifest = json.loads((folder / "manifest.json").read_text())
        assert sorted(e["id"] for e in manifest["runs"]) == sorted(r.run_id for r in sweep.records)


def test_how_runs_ended_is_reread_only_under_the_labels_it_was_written_with(planted, tmp_path, capsys):
    """A study with a plateau window of its own (no part of its runs' ids): results.csv records the window and
    minimum rise its `convergence` was labelled with; re-reported under them, plateau and improving stand; under
    another window they cannot be told without the histories: `unknown`, and the line says so."""
    spec = planted(**{"train.plateau_window": 2})
    rows = read_rows(tmp_path / "out" / CSV)
    assert {(r["plateau_window"], r["plateau_min_delta"]) for r in rows} == {("2", "0.01")}
    ended = {r["run_id"]: r["convergence"] for r in rows}
    assert {"plateau", "improving"} & set(ended.values())
    assert sweep_main(["report", str(tmp_path / "same"), "--spec", str(spec), "--from-results",
                       str(tmp_path / "out" / CSV)]) == 0
    assert {r["run_id"]: r["convergence"] for r in read_rows(tmp_path / "same" / CSV)} == ended
    other = tiny_spec(tmp_path, name="window8", **{"train.plateau_window": 8})
    assert sweep_main(["report", str(tmp_path / "other"), "--spec", str(other), "--from-results",
                       str(tmp_path / "out" / CSV)]) == 0
    again = {r["run_id"]: r["convergence"] for r in read_rows(tmp_path / "other" / CSV)}
    relabelled = [rid for rid, label in ended.items() if label in ("plateau", "improving")]
    assert {again[rid] for rid in relabelled} == {"unknown"}
    assert {rid: label for rid, label in again.items() if rid not in relabelled} == \
        {rid: label for rid, label in ended.items() if rid not in relabelled}
    assert f"how {len(relabelled)} runs ended under plateau_window 8 and plateau_min_delta 0.01" in \
        (tmp_path / "other" / TABLE).read_text()


def test_a_budget_end_labelled_before_the_window_rule_is_read_as_too_short(planted, tmp_path):
    """A 300-step budget validated every 100 steps has 3 validations, fewer than the plateau window of 10: the report
    labels its budget ends `too short`, and a results.csv written before the rule (`improving` there) is read so."""
    spec = planted(**{"train.max_steps": 300, "train.val_every": 100})
    path = tmp_path / "out" / CSV
    rows = read_rows(path)
    short = {r["run_id"] for r in rows if r["convergence"] == "too short"}
    assert short and not {"plateau", "improving"} & {r["convergence"] for r in rows}
    text = path.read_text()
    path.write_text(text.replace(",too short,", ",improving,"))
    assert text.count(",too short,") == len(short)
    assert sweep_main(["report", str(tmp_path / "again"), "--spec", str(spec), "--from-results", str(path)]) == 0
    assert {r["run_id"] for r in read_rows(tmp_path / "again" / CSV) if r["convergence"] == "too short"} == short
