"""The needle in a haystack read by context length and depth: each run's test sets that fix the depth become a grid,
each arm's heatmap its runs' mean there; runs of other tasks, or without such sets, draw nothing."""

from __future__ import annotations

import pytest

from loglinear.protocol.results import load_sweep
from loglinear.reports.needles import depth_grid, mean_grids, niah_heatmap

from .report_helpers import finished, make_sweep, run_entry

EVAL_SETS = [{}, *({"seq_len": n, "depth": d} for n in (64, 128) for d in (0.0, 1.0)), {"name": "far", "seq_len": 256,
                                                                                     "depth": 0.5}]


def needle_run(mixer: str, seed: int, accuracy: float) -> dict:
    test = {f"test/acc/set=seq_len={n},depth={d}": accuracy * (d + 1) / 2 for n in (64, 128) for d in (0.0, 1.0)}
    entry = run_entry(mixer, 32, 1e-3, seed, finished(accuracy, test={**test, "test/acc/set=far": 0.25}),
                      task="niah")
    entry["config"]["data"].update(task_args={"seq_len": 64}, eval_sets=EVAL_SETS)
    return entry


def test_a_run_s_depth_sets_read_as_a_grid_by_length_and_depth(tmp_path):
    sweep = load_sweep(make_sweep(tmp_path, [needle_run("gated_deltanet", 0, 0.8)]))
    (record,) = sweep.records
    assert depth_grid(record) == {(64, 0.0): 0.4, (64, 1.0): 0.8, (128, 0.0): 0.4, (128, 1.0): 0.8, (256, 0.5): 0.25}


def test_each_arm_s_heatmap_is_its_runs_mean(tmp_path):
    entries = [needle_run("gated_deltanet", 0, 0.8), needle_run("gated_deltanet", 1, 0.4),
               needle_run("attention", 0, 1.0)]
    sweep = load_sweep(make_sweep(tmp_path, entries))
    grids = {str(key): value for key, value in mean_grids(sweep).items()}
    (gdn,) = [v for k, v in grids.items() if "Gated DeltaNet" in k]
    assert gdn[1] == 2 and gdn[0][128, 1.0] == pytest.approx(0.6) and gdn[0][128, 0.0] == pytest.approx(0.3)
    figure = niah_heatmap(sweep)
    panels = [ax for ax in figure.axes if ax.get_title()]
    assert len(panels) == 2 and all(ax.get_xlabel() == "context length (tokens)" for ax in panels)
    gdn_panel = next(ax for ax in panels if "Gated DeltaNet" in ax.get_title())
    assert "mean of 2 runs" in gdn_panel.get_title()
    assert [t.get_text() for t in gdn_panel.get_xticklabels()] == ["64", "128", "256"]
    assert {t.get_text() for t in gdn_panel.texts} == {"30", "60", "25"}  # the cells' means, in percent


def test_runs_of_other_tasks_or_without_depth_sets_draw_nothing(tmp_path):
    other = run_entry("mamba2", 32, 1e-3, 0, finished(0.5, test={"test/acc/set=x": 0.5}))
    plain = needle_run("mamba2", 1, 0.5)
    plain["config"]["data"]["eval_sets"] = [{}]
    sweep = load_sweep(make_sweep(tmp_path, [other, plain]))
    assert niah_heatmap(sweep) == "no finished niah run tested at fixed needle depths (test sets with a depth)"
