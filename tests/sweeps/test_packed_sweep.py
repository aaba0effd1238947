"""`sweep run --pack N`: the same runs, folders and report as the sweep run one process per run."""

from __future__ import annotations

import csv
import math

from loglinear.cli import sweep_main

from .sweep_helpers import write_spec

TIMING = ("wall_time_s", "machine")


def _rows(path) -> dict[str, dict[str, str]]:
    with open(path, newline="") as f:
        return {row["run_id"]: row for row in csv.DictReader(f)}


def _same(a: str, b: str) -> bool:
    try:
        return math.isclose(float(a), float(b), rel_tol=1e-4, abs_tol=1e-6)
    except ValueError:
        return a == b


def test_a_packed_sweep_reports_what_the_sweep_of_single_runs_reports(tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    # each mixer's pack holds runs of another seed and another rate: a process per run alone, a pack per mixer
    spec = write_spec(tmp_path, {"model.mixer": ["gated_deltanet", "mamba2"]},
                      zip_groups=[{"train.seed": [0, 1], "train.lr": [3.0e-3, 1.0e-2]}])
    alone, packed = tmp_path / "alone", tmp_path / "packed"
    assert sweep_main(["run", str(spec), "--out", str(alone), "--quiet", "--workers", "2"]) == 0
    assert sweep_main(["run", str(spec), "--out", str(packed), "--quiet", "--workers", "2", "--pack", "4"]) == 0
    logs = [(packed / "runs" / d.name / "train.log").read_text() for d in (packed / "runs").iterdir()]
    assert sum("--pack" in log and "trained in a pack" not in log for log in logs) == 2  # 2 mixers, a pack each
    rows_a, rows_p = _rows(alone / "results.csv"), _rows(packed / "results.csv")
    assert rows_a.keys() == rows_p.keys() and len(rows_a) == 4
    for run_id, row in rows_a.items():
        for key, value in row.items():
            if key not in TIMING:
                assert _same(value, rows_p[run_id][key]), (run_id, key, value, rows_p[run_id][key])


def test_a_dry_run_lists_the_packs_and_keeps_apart_what_cannot_share_one(tmp_path, capsys):
    spec = write_spec(tmp_path, {"model.mixer": ["gated_deltanet", "attention"], "train.seed": [0, 1, 2]})
    assert sweep_main(["run", str(spec), "--out", str(tmp_path / "out"), "--dry-run", "--pack", "2"]) == 0
    assert "with --pack 2: 4 processes for 6 unfinished runs (pack sizes 2, 2, 1, 1)" in capsys.readouterr().out
    patience = write_spec(tmp_path, {"train.patience": [None, 3], "train.seed": [0, 1]}, name="patience")
    assert sweep_main(["run", str(patience), "--out", str(tmp_path / "p"), "--dry-run", "--pack", "4"]) == 0
    assert "with --pack 4: 3 processes for 4 unfinished runs (pack sizes 2, 1, 1)" in capsys.readouterr().out
    assert not (tmp_path / "out" / "runs").exists()
