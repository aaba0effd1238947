"""The summary `sweep run` prints: cut from the report's own table.md (every line of it is one of the report's),
with the tables a reader compares, the primary comparison and the Holm sentence, and without the definitions;
`sweep report` still prints the whole report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loglinear.cli import sweep_main
from loglinear.reports.report import Report
from loglinear.runs.folder import write_json_atomic
from loglinear.sweeps import runner
from loglinear.sweeps.manifest import RUNS
from loglinear.sweeps.runner import SweepOutcome

from .report_helpers import finished

RESULTS = Path(__file__).resolve().parents[2] / "results"
STUDIES = sorted(p.name for p in RESULTS.iterdir() if (p / "table.md").is_file())
DEFINITIONS = ("Test accuracy (%): mean (sample standard deviation)", "`k/n [low, high]`: k of the cell's n runs",
               "Each comparison: the learning rates each side chose among")


@pytest.mark.parametrize("study", STUDIES)
def test_the_summary_is_lines_of_the_committed_report(study):
    folder = RESULTS / study
    table = (folder / "table.md").read_text()
    summary = Report(table).summary(folder)
    *cut, pointer = summary.rstrip("\n").splitlines()
    assert set(cut) <= set(table.splitlines())
    assert pointer.startswith(f"The whole report, with the definitions and every table: {folder / 'table.md'}")
    assert cut[0] == f"# {study}" and "## Test accuracy" in cut and len(summary) < len(table) / 2
    holm = next(line for line in table.splitlines() if line.startswith("Of the "))
    assert holm in cut
    primary = [line for line in table.splitlines() if line.startswith(("**Primary comparison**", "- **Primary**",
                                                                       "**Limitation**", "**Exploratory primary**"))]
    assert [line for line in cut if line in primary] == primary
    assert not any(definition in summary for definition in DEFINITIONS)


def demo_like_spec(folder: Path) -> Path:
    spec = {"name": "small", "base": {"data.task": "mqar", "data.task_args": {"vocab_size": 16, "seq_len": 8,
                                                                              "num_kv_pairs": 1},
                                      "model.d_model": 16, "train.lr": 1.0e-2, "logger.wandb.mode": "disabled"},
            "grid": {"model.mixer": ["gated_deltanet", "log_linear_gated_deltanet"], "train.seed": [0, 1, 2]},
            "report": {"primary": {"mixer": "log_linear_gated_deltanet", "baseline": "gated_deltanet",
                                   "test": "steps", "exploratory": True}}}
    path = folder / "small.yaml"
    path.write_text(json.dumps(spec))
    return path


def test_sweep_run_prints_the_summary_and_sweep_report_the_whole_report(tmp_path, monkeypatch, capsys):
    """`sweep run` with a stand-in for training (each run finishes at the budget), then `sweep report`."""

    def train_stand_in(runs, out, *_, **__):
        for r in runs:
            write_json_atomic(out / RUNS / r.run_id / "result.json", finished(0.5 + 0.1 * r.point["train.seed"]))
        return SweepOutcome({r.run_id: "max_steps" for r in runs})

    monkeypatch.setattr(runner, "run_local", train_stand_in)
    out = tmp_path / "out"
    assert sweep_main(["run", str(demo_like_spec(tmp_path)), "--out", str(out), "--quiet"]) == 0
    printed = capsys.readouterr().out
    table = (out / "table.md").read_text()
    assert printed == Report(table).summary(out) + "\n"
    assert "**Primary comparison**" in printed and "## Solve rate" in printed and "Of the " in printed
    assert "## Selection stability" not in printed and not any(d in printed for d in DEFINITIONS)
    assert f"{out / 'table.md'} (`loglinear sweep report {out}` prints it)" in printed
    assert sweep_main(["report", str(out)]) == 0
    assert capsys.readouterr().out == table + "\n"
