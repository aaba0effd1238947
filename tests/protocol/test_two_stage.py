"""The two-stage protocol: the learning rate of each cell is chosen on the selection seeds alone, and the tables
and comparisons report the confirmation seeds. A planted confirmation run that would change the choice if it
took part shows that it does not, in the report and in the runner's expansion of stage 2."""

from __future__ import annotations

import json

from loglinear.cli import sweep_main
from loglinear.protocol.confirmation import selected_points
from loglinear.protocol.results import load_sweep
from loglinear.reports.report import write_report
from loglinear.runs.folder import write_json_atomic
from loglinear.sweeps import runner
from loglinear.sweeps.manifest import MANIFEST, RUNS
from loglinear.sweeps.runner import SweepOutcome
from loglinear.sweeps.spec import confirmation_points, expand, load_spec

from ..reports.report_helpers import finished, make_sweep, row, run_entry, section_rows, table_rows

PROTOCOL = {"selection_seeds": [0, 1], "confirmation_seeds": [2, 3, 4], "allow_few_selection_seeds": True}


def planted_sweep(folder):
    """Mamba-2 selection runs: lr 1e-3 validates at 0.6, lr 1e-2 at 0.5. Confirmation runs at 1e-3 test at 0.7;
    planted confirmation runs at 1e-2 validate and test at 1.0: counted in the selection, they would make 1e-2
    the best (mean validation 0.8 over its five runs)."""
    entries = [run_entry("mamba2", 16, lr, s, finished(val), stage="selection")
               for lr, val in ((1e-3, 0.6), (1e-2, 0.5)) for s in (0, 1)]
    entries += [run_entry("mamba2", 16, 1e-3, s, finished(0.7), stage="confirmation") for s in (2, 3, 4)]
    entries += [run_entry("mamba2", 16, 1e-2, s, finished(1.0), stage="confirmation") for s in (2, 3, 4)]
    return make_sweep(folder, entries, protocol=PROTOCOL)


def test_the_report_selects_on_selection_seeds_and_reports_confirmation_seeds(tmp_path):
    report = write_report(planted_sweep(tmp_path))
    assert row(table_rows(report.table, 0), "Mamba-2") == ["70.0 (0.0)"]  # the confirmation runs at 1e-3
    assert row(section_rows(report.table, "Selected learning rate"), "Mamba-2") == ["0.001 (of 2, at the lowest edge)"]
    assert row(section_rows(report.table, "Solve rate"), "Mamba-2") == ["0/3 [0, 56]"]
    assert report.table.splitlines()[2].startswith("Two-stage protocol: each cell's learning rate is selected on "
                                                   "the validation accuracy of the selection seeds (0, 1)")
    points = selected_points(load_sweep(tmp_path))
    assert [(p["train.lr"], p["train.seed"]) for p in points] == [(1e-3, 0)]


def two_stage_spec(folder, extensions=0):
    spec = {"name": "two", "base": {"data.task": "mqar", "data.task_args": {"vocab_size": 16, "seq_len": 8,
                                                                            "num_kv_pairs": 1},
                                    "model.mixer": "mamba2", "model.d_model": 16, "logger.wandb.mode": "disabled"},
            "grid": {"train.lr": [1.0e-3, 1.0e-2]}, "protocol": {**PROTOCOL, "extensions": extensions}}
    path = folder / "two.yaml"
    path.write_text(json.dumps(spec))
    return path


def test_the_runner_expands_stage_two_from_the_selection_runs_alone(tmp_path, monkeypatch):
    """`sweep run` on a two-stage spec, with a stand-in for training: selection runs validate as in
    `planted_sweep`, and planted confirmation results at lr 1e-2 are already in the folder."""
    path, out = two_stage_spec(tmp_path), tmp_path / "out"
    spec = load_spec(path)
    planted = expand(spec, confirmation_points(spec, [{"train.lr": 1.0e-2}]))
    for run in planted:
        write_json_atomic(out / RUNS / run.run_id / "result.json", finished(1.0))
    started: list[list[str]] = []

    def train_stand_in(runs, out, workers=None, progress=None, grace_s=0.0, runs_per_gpu=None, pack=None,
                   deadline=None):
        todo = [r for r in runs if not (out / RUNS / r.run_id / "result.json").is_file()]
        started.append([r.stage for r in todo])
        for r in todo:
            val = {1.0e-3: 0.6, 1.0e-2: 0.5}[r.point["train.lr"]] if r.stage == "selection" else 0.7
            write_json_atomic(out / RUNS / r.run_id / "result.json", finished(val))
        return SweepOutcome({r.run_id: "max_steps" for r in runs})

    monkeypatch.setattr(runner, "run_local", train_stand_in)
    assert sweep_main(["run", str(path), "--out", str(out), "--quiet"]) == 0
    assert started == [["selection"] * 4, ["confirmation"] * 3]
    manifest = json.loads((out / MANIFEST).read_text())
    assert manifest["protocol"] == {**PROTOCOL, "extensions": 0}
    stages = [(e["stage"], e["point"]["train.lr"], e["point"]["train.seed"]) for e in manifest["runs"]]
    assert stages[4:] == [("confirmation", 1.0e-3, s) for s in (2, 3, 4)]
    assert not {r.run_id for r in planted} & {e["id"] for e in manifest["runs"]}
    # resumable: a second run trains nothing and expands the same stage 2
    assert sweep_main(["run", str(path), "--out", str(out), "--quiet"]) == 0
    assert started[2:] == [[], []]
    assert json.loads((out / MANIFEST).read_text())["runs"] == manifest["runs"]


VALIDATION = {1.0e-3: 0.3, 1.0e-2: 0.5, 1.0e-1: 0.8, 1.0: 0.6}
"""A cell whose optimum, 1e-1, lies a step beyond its grid {1e-3, 1e-2} (ratio 10)."""


def extending_stand_in(started):
    def train_stand_in(runs, out, workers=None, progress=None, grace_s=0.0, runs_per_gpu=None, pack=None,
                   deadline=None):
        todo = [r for r in runs if not (out / RUNS / r.run_id / "result.json").is_file()]
        started.append([(r.stage, r.point["train.lr"]) for r in todo])
        for r in todo:
            write_json_atomic(out / RUNS / r.run_id / "result.json", finished(VALIDATION[r.point["train.lr"]]))
        return SweepOutcome({r.run_id: "max_steps" for r in runs})
    return train_stand_in


def test_a_pick_at_the_grid_edge_extends_the_grid_until_interior_then_confirms(tmp_path, monkeypatch):
    path, out = two_stage_spec(tmp_path, extensions=2), tmp_path / "out"
    started: list[list[tuple[str, float]]] = []
    monkeypatch.setattr(runner, "run_local", extending_stand_in(started))
    assert sweep_main(["run", str(path), "--out", str(out), "--quiet"]) == 0
    selection = [("selection", lr) for lr in (1.0e-3, 1.0e-2) for _ in (0, 1)]
    assert started == [selection, [("selection", 1.0e-1)] * 2, [("selection", 1.0)] * 2,
                       [("confirmation", 1.0e-1)] * 3]
    table = (out / "table.md").read_text()
    assert row(section_rows(table, "Selected learning rate"), "Mamba-2") == ["0.1 (of 4)"]
    # resumable: the same decisions from the same results, nothing trained again, the same manifest
    manifest = json.loads((out / MANIFEST).read_text())["runs"]
    assert sweep_main(["run", str(path), "--out", str(out), "--quiet"]) == 0
    assert started[4:] == [[], [], [], []]
    assert json.loads((out / MANIFEST).read_text())["runs"] == manifest


def test_a_pick_still_at_an_edge_after_the_extensions_is_marked(tmp_path, monkeypatch):
    path, out = two_stage_spec(tmp_path, extensions=1), tmp_path / "out"
    started: list[list[tuple[str, float]]] = []
    monkeypatch.setattr(runner, "run_local", extending_stand_in(started))
    assert sweep_main(["run", str(path), "--out", str(out), "--quiet"]) == 0
    assert started[1:] == [[("selection", 1.0e-1)] * 2, [("confirmation", 1.0e-1)] * 3]
    table = (out / "table.md").read_text()
    assert row(section_rows(table, "Selected learning rate"), "Mamba-2") == ["0.1 (of 3, at the highest edge)"]


BY_MIXER = {"mamba2": {1.0e-3: 0.3, 1.0e-2: 0.5, 1.0e-1: 0.8, 1.0: 0.6},
            "log_linear_mamba2": {1.0e-3: 0.3, 1.0e-2: 0.7, 1.0e-1: 0.5, 1.0: 0.2},
            "attention": {1.0e-3: 0.3, 1.0e-2: 0.7, 1.0e-1: 0.5, 1.0: 0.2}}
"""Mamba-2 picks the top of {1e-3, 1e-2, 1e-1}; log-linear Mamba-2, compared with it, and attention, compared with
nothing, pick inside."""


def test_an_edge_pick_extends_the_cells_compared_with_it_so_both_sides_compare_the_same_rates(tmp_path, monkeypatch):
    spec = {"name": "pair", "base": {"data.task": "mqar", "data.task_args": {"vocab_size": 16, "seq_len": 8,
                                                                             "num_kv_pairs": 1},
                                     "model.d_model": 16, "logger.wandb.mode": "disabled"},
            "grid": {"model.mixer": list(BY_MIXER), "train.lr": [1.0e-3, 1.0e-2, 1.0e-1]},
            "protocol": {**PROTOCOL, "extensions": 2}}
    path, out = tmp_path / "pair.yaml", tmp_path / "out"
    path.write_text(json.dumps(spec))
    started: list[list[tuple[str, str, float]]] = []

    def train_stand_in(runs, out, workers=None, progress=None, grace_s=0.0, runs_per_gpu=None, pack=None,
                   deadline=None):
        todo = [r for r in runs if not (out / RUNS / r.run_id / "result.json").is_file()]
        started.append([(r.stage, r.point["model.mixer"], r.point["train.lr"]) for r in todo])
        for r in todo:
            score = BY_MIXER[r.point["model.mixer"]][r.point["train.lr"]] if r.stage == "selection" else 0.9
            write_json_atomic(out / RUNS / r.run_id / "result.json", finished(score))
        return SweepOutcome({r.run_id: "max_steps" for r in runs})

    monkeypatch.setattr(runner, "run_local", train_stand_in)
    assert sweep_main(["run", str(path), "--out", str(out), "--quiet"]) == 0
    assert sorted(started[1]) == sorted([("selection", m, 1.0) for m in ("mamba2", "log_linear_mamba2")] * 2)
    assert [stage for stage, _, _ in started[2]] == ["confirmation"] * 9 and len(started) == 3
    table = (out / "table.md").read_text()
    picks = section_rows(table, "Selected learning rate")
    assert row(picks, "Mamba-2") == ["0.1 (of 4)"]
    assert row(picks, "Log-Linear Mamba-2") == ["0.01 (of 4)"]
    assert row(picks, "Transformer") == ["0.01 (of 3)"]
    assert "(learning rates 4 vs 4)" in table
