"""A study re-reported from its results.csv and its spec (reports/results_csv.py, `sweep report DIR --spec SPEC`):
the same report as from its run folders, but for the line that says what was not available; an older CSV without
the columns added for it; a committed study; and the input it refuses."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest

from loglinear.cli import sweep_main
from loglinear.reports.files import CSV, ERROR, MACHINE, PASSAGE_REACHED, PASSAGE_STEPS, RECALL, SELFCHECKS
from loglinear.reports.recall_levels import TABLE as RECALL_TABLE
from loglinear.reports.report import REREPORTED, TABLE, write_report
from loglinear.reports.results_csv import load_sweep_from_csv
from loglinear.runs.folder import write_json_atomic, write_text_atomic
from loglinear.sweeps.manifest import run_dir, write_manifest
from loglinear.sweeps.spec import expand, load_spec

ROOT = Path(__file__).resolve().parents[2]
VERDICT = {"status": "passed", "device": "CPU", "dtype": "float32", "failure": None, "path": None}


def tiny_spec(folder: Path) -> Path:
    spec = {"name": "tiny", "base": {"data.task": "mqar", "data.task_args": {"vocab_size": 16, "seq_len": 8,
                                                                             "num_kv_pairs": 1},
                                     "model.d_model": 16, "logger.wandb.mode": "disabled"},
            "grid": {"model.mixer": ["mamba2", "log_linear_mamba2"], "train.lr": [1.0e-3, 1.0e-2],
                     "train.seed": [0, 1, 2]},
            "report": {"plateau": 0.5}}
    path = folder / "tiny.yaml"
    path.write_text(json.dumps(spec))
    return path


def planted_sweep(folder: Path) -> Path:
    """A sweep folder of `tiny_spec` with planted results: curves whose first value above 99% gives
    `steps_to_threshold`, state sizes, recall records, implementations with a self-check, a failed and a missing
    run."""
    path = tiny_spec(folder)
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
        curve = [(100, 0.2), (200, 0.4 + 0.01 * i), (300, final)]
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


def test_a_rereport_from_results_csv_is_the_report_from_the_run_folders(tmp_path, capsys):
    spec = planted_sweep(tmp_path)
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


def test_an_older_results_csv_gives_what_it_holds_and_names_the_rest(tmp_path):
    spec = planted_sweep(tmp_path)
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


def test_the_solved_escaped_and_convergence_columns_are_read_when_present(tmp_path):
    spec = planted_sweep(tmp_path)
    rows = read_rows(tmp_path / "out" / CSV)
    finished = [r for r in rows if r["status"] in ("early_stopped", "max_steps")]
    for r in rows:
        r.update(solved="", escaped="", convergence="", passage_steps="", passage_reached="")
    finished[0].update(solved="False", escaped="True", convergence="plateau")
    newer = write_rows(tmp_path / "newer.csv", rows)
    record = next(r for r in load_sweep_from_csv(newer, spec, tmp_path / "x").records
                  if r.run_id == finished[0]["run_id"])
    assert (record.solved(0.99), record.escaped(0.5, 0.99), record.convergence(0.99)) == (False, True, "plateau")


@pytest.mark.parametrize("study", ["parity_gdn_confirm_cpu"])
def test_a_committed_study_rereported_from_its_results_csv_gives_its_committed_report(tmp_path, study):
    """The committed table.md, paired files and results.csv columns, number for number (apart from the line that
    says the re-report's source); a definition change shows here until the committed studies are re-reported."""
    committed = ROOT / "results" / study
    spec = ROOT / "configs" / "sweeps" / f"{study}.yaml"
    write_report(tmp_path, load_sweep_from_csv(committed / CSV, spec, tmp_path))
    assert without_note((tmp_path / TABLE).read_text()) == without_note((committed / TABLE).read_text())
    for name in ("paired.csv", "paired_by_length.csv"):
        assert (tmp_path / name).read_text() == (committed / name).read_text(), name
    again = {r["run_id"]: r for r in read_rows(tmp_path / CSV)}
    for row in read_rows(committed / CSV):
        assert {k: again[row["run_id"]][k] for k in row} == row


def refused(capsys, argv: list[str], *words: str) -> str:
    assert sweep_main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and all(w in err for w in words), err
    return err


def test_a_rereport_refuses_what_it_cannot_read_and_writes_nothing(tmp_path, capsys):
    spec = planted_sweep(tmp_path)
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
