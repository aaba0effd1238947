"""Selection over several training keys (`report.select`, MAD's learning rate x weight decay): each cell picks the
best combination on validation, every arm compared chooses among the same combinations (a grid extension adds the
same one to both), the selected keys make no rows of their own, and the tables and plots show the combination."""

from __future__ import annotations

import json

import pytest

from loglinear.cli import sweep_main
from loglinear.protocol.results import load_sweep
from loglinear.reports.plots import acc_vs_lr
from loglinear.runs.folder import write_json_atomic
from loglinear.sweeps import runner
from loglinear.sweeps.manifest import MANIFEST, RUNS
from loglinear.sweeps.runner import SweepOutcome
from loglinear.sweeps.spec import SpecError, parse_spec, planned_runs

from .report_helpers import finished, row, section_rows, table_rows

SELECT = ["train.lr", "train.weight_decay"]
VALIDATION = {  # (mixer, lr, weight decay): validation accuracy on the selection seeds
    ("mamba2", 1e-3, 0.0): 0.30, ("mamba2", 1e-3, 0.1): 0.35, ("mamba2", 1e-2, 0.0): 0.50,
    ("mamba2", 1e-2, 0.1): 0.55, ("mamba2", 1e-1, 0.0): 0.60, ("mamba2", 1e-1, 0.1): 0.70,
    ("mamba2", 1.0, 0.1): 0.40,  # beyond the grid: Mamba-2's pick (0.1, 0.1) sits at its highest edge
    ("log_linear_mamba2", 1e-3, 0.0): 0.40, ("log_linear_mamba2", 1e-3, 0.1): 0.20,
    ("log_linear_mamba2", 1e-2, 0.0): 0.80, ("log_linear_mamba2", 1e-2, 0.1): 0.30,
    ("log_linear_mamba2", 1e-1, 0.0): 0.50, ("log_linear_mamba2", 1e-1, 0.1): 0.10,
    ("log_linear_mamba2", 1.0, 0.1): 0.05,
}
PROTOCOL = {"selection_seeds": [0, 1], "confirmation_seeds": [2, 3, 4], "allow_few_selection_seeds": True,
            "extensions": 1}


def raw_spec(select=SELECT, **report):
    return {"name": "pairs", "base": {"data.task": "mqar", "data.task_args": {"vocab_size": 16, "seq_len": 8,
                                                                                "num_kv_pairs": 1},
                                      "model.d_model": 16, "logger.wandb.mode": "disabled"},
            "grid": {"model.mixer": ["mamba2", "log_linear_mamba2"], "train.lr": [1e-3, 1e-2, 1e-1],
                     "train.weight_decay": [0.0, 0.1]},
            "report": {"select": select, **report}, "protocol": PROTOCOL}


def run_pairs(tmp_path, monkeypatch):
    path, out = tmp_path / "pairs.yaml", tmp_path / "out"
    path.write_text(json.dumps(raw_spec()))
    started: list[list[tuple]] = []

    def train_stand_in(runs, out, workers=None, progress=None, grace_s=0.0, runs_per_gpu=None, pack=None,
                   deadline=None):
        todo = [r for r in runs if not (out / RUNS / r.run_id / "result.json").is_file()]
        started.append([(r.stage, r.point["model.mixer"], r.point["train.lr"], r.point["train.weight_decay"])
                         for r in todo])
        for r in todo:
            key = (r.point["model.mixer"], r.point["train.lr"], r.point["train.weight_decay"])
            write_json_atomic(out / RUNS / r.run_id / "result.json",
                              finished(VALIDATION[key] if r.stage == "selection" else 0.9))
        return SweepOutcome({r.run_id: "max_steps" for r in runs})

    monkeypatch.setattr(runner, "run_local", train_stand_in)
    assert sweep_main(["run", str(path), "--out", str(out), "--quiet"]) == 0
    return out, started


def test_each_cell_picks_a_combination_and_both_arms_compare_the_same_ones(tmp_path, monkeypatch):
    out, started = run_pairs(tmp_path, monkeypatch)
    # Mamba-2's edge pick adds (1.0, 0.1) on the selection seeds, to the arm compared with it too
    assert sorted(started[1]) == sorted([("selection", m, 1.0, 0.1) for m in ("mamba2", "log_linear_mamba2")] * 2)
    assert sorted(started[2]) == sorted([("confirmation", "mamba2", 1e-1, 0.1)] * 3
                                        + [("confirmation", "log_linear_mamba2", 1e-2, 0.0)] * 3)
    table = (out / "table.md").read_text()
    assert table_rows(table)[0] == ["Architecture", "d_model 16"]  # weight decay makes no rows of its own
    picks = section_rows(table, "Selected learning rate")
    assert row(picks, "Mamba-2") == ["lr 0.1, weight_decay 0.1 (of 7)"]
    assert row(picks, "Log-Linear Mamba-2") == ["lr 0.01, weight_decay 0 (of 7)"]
    assert "(learning rates 7 vs 7)" in table
    assert ("The selection is over every combination of (train.lr, train.weight_decay) in the grid, the same for "
            "every cell: wherever this report says learning rate, it means that combination.") in table
    stability = section_rows(table, "Selection stability")
    assert row(stability, "Mamba-2") == ["lr 0.1, weight_decay 0.1 by +10.0 over lr 0.1, weight_decay 0, kept 2/2"]
    assert json.loads((out / MANIFEST).read_text())["report"]["select"] == SELECT


def test_the_learning_rate_plot_has_a_panel_per_weight_decay(tmp_path, monkeypatch):
    out, _ = run_pairs(tmp_path, monkeypatch)
    figure = acc_vs_lr(load_sweep(out))
    titles = [ax.get_title() for ax in figure.axes if "selection runs" in ax.get_title()]
    assert len(titles) == 2
    assert [t.split("\n")[-2] for t in sorted(titles)] == ["weight_decay=0.0", "weight_decay=0.1"]


def test_the_plan_counts_one_confirmation_per_configuration_without_the_selected_keys():
    # 2 mixers x 3 rates x 2 weight decays x 2 selection seeds, then 2 configurations x 3 confirmation seeds
    assert planned_runs(parse_spec(raw_spec())) == 24 + 6
    assert planned_runs(parse_spec(raw_spec(select=["train.lr"]))) == 24 + 12  # weight decay then makes rows


@pytest.mark.parametrize(("select", "said"), [
    (["train.weight_decay"], "select must list train.lr"),
    (["train.lr", "model.d_model"], "'model.d_model' is not a training key to select over"),
    (["train.lr", "train.seed"], "'train.seed' is not a training key to select over"),
    (["train.lr", "train.lr"], "select lists train.lr more than once"),
])
def test_a_bad_selection_is_refused_naming_the_key(select, said):
    with pytest.raises(SpecError, match="report") as error:
        parse_spec(raw_spec(select=select))
    assert said in str(error.value) and "\n" not in str(error.value)
