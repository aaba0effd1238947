"""The report's accuracy at the moment of recall, on a hand-made MQAR sweep whose runs carry `recall` records:
the tables' means over seeds, the plot, the state columns of results.csv, and nothing for runs without them."""

from __future__ import annotations

import csv

from matplotlib.backends.backend_agg import FigureCanvasAgg

from loglinear.protocol.results import load_sweep
from loglinear.reports.recall_levels import PLOT, TABLE, recall_plot, recall_tables
from loglinear.reports.report import CSV, write_report

from .report_helpers import finished, make_sweep, row, run_entry, section_rows


def recall(state: float, near: tuple[int, int], far: tuple[int, int]) -> dict:
    return {"by_level": {"2": list(near), "6": list(far)}, "by_distance": {"2-3": list(near), "32-63": list(far)},
            "state_at_recall": {"per_layer": state, "total": 2 * state}}


def sweep_with_recall(tmp_path):
    entries = [
        run_entry("gated_deltanet", 16, 1e-2, 1, finished(0.8, recall=recall(448, (9, 10), (5, 10)))),
        run_entry("gated_deltanet", 16, 1e-2, 2, finished(0.8, recall=recall(448, (10, 10), (6, 10)))),
        run_entry("log_linear_gated_deltanet", 16, 1e-2, 1, finished(0.9, recall=recall(1200, (10, 10), (8, 10)))),
        run_entry("log_linear_gated_deltanet", 16, 1e-2, 2, finished(0.9, recall=recall(1300, (10, 10), (9, 10)))),
    ]
    return make_sweep(tmp_path, entries)


def test_the_tables_average_each_bucket_over_the_seeds(tmp_path):
    text = recall_tables(load_sweep(sweep_with_recall(tmp_path)))
    by_distance = section_rows(text, "By key-to-query distance")
    assert by_distance[0] == ["arm", "state at recall / layer", "2-3", "32-63"]
    assert row(by_distance, "Gated DeltaNet") == ["448 (0)", "95.0 (7.1)", "55.0 (7.1)"]
    assert row(by_distance, "Log-Linear Gated DeltaNet") == ["1250 (71)", "100.0 (0.0)", "85.0 (7.1)"]
    by_level = section_rows(text, "By Fenwick level")
    assert by_level[0][2:] == ["2", "6"]


def test_the_plot_draws_every_seed_with_each_arm_in_one_colour_in_both_panels_and_the_query_counts(tmp_path):
    fig = recall_plot(load_sweep(sweep_with_recall(tmp_path)))
    by_distance, by_level = fig.axes[:2]

    def points(ax):
        return sorted(y for c in ax.collections for y in c.get_offsets()[:, 1].round(1).tolist())

    assert points(by_distance) == [50.0, 60.0, 80.0, 90.0, 90.0, 100.0, 100.0, 100.0]  # 2 buckets x 2 seeds x 2 arms
    assert points(by_level) == [80.0, 90.0, 100.0, 100.0]
    colour = {line.get_label(): line.get_color() for line in by_distance.get_lines()}
    assert [line.get_color() for line in by_level.get_lines()] == [colour["Log-Linear Gated DeltaNet"]]
    assert sorted(t.get_text() for t in by_distance.texts) == ["n=10"] * 4  # queries behind each bucket's points
    assert sorted(t.get_text() for t in by_level.texts) == ["n=10"] * 2


def test_the_report_writes_the_recall_files_and_the_state_columns(tmp_path):
    written = write_report(sweep_with_recall(tmp_path)).written
    assert {tmp_path / TABLE, tmp_path / PLOT} <= set(written)
    rows = list(csv.DictReader((tmp_path / CSV).open()))
    assert sorted(float(r["state_at_recall_per_layer"]) for r in rows) == [448, 448, 1200, 1300]
    assert sorted(float(r["state_at_recall_total"]) for r in rows) == [896, 896, 2400, 2600]


def test_runs_without_recall_records_give_no_recall_files(tmp_path):
    folder = make_sweep(tmp_path, [run_entry("gated_deltanet", 16, 1e-2, 1, finished(0.8))])
    assert recall_tables(load_sweep(folder)) is None
    write_report(folder)
    assert not (tmp_path / TABLE).exists() and not (tmp_path / PLOT).exists()
    assert next(csv.DictReader((tmp_path / CSV).open()))["state_at_recall_total"] == ""


def test_the_query_count_above_a_bucket_gives_its_range_when_the_seeds_differ(tmp_path):
    entries = [run_entry("log_linear_gated_deltanet", 16, 1e-2, seed, finished(0.9, recall=recall(1200, near, far)))
               for seed, (near, far) in enumerate([((9, 10), (5, 31)), ((10, 10), (6, 45))])]
    by_distance, by_level = recall_plot(load_sweep(make_sweep(tmp_path, entries))).axes[:2]
    assert sorted(t.get_text() for t in by_level.texts) == ["n=10", "n=31-45"]


def test_long_query_counts_stay_below_the_panel_titles(tmp_path):
    entries = [run_entry("log_linear_gated_deltanet", 16, 1e-2, seed, finished(0.9, recall=recall(1200, near, far)))
               for seed, (near, far) in enumerate([((9, 10), (5, 20133)), ((10, 10), (6, 22341))])]
    fig = recall_plot(load_sweep(make_sweep(tmp_path, entries)))
    renderer = FigureCanvasAgg(fig).get_renderer()
    for ax in fig.axes[:2]:
        assert "n=20133-22341" in [t.get_text() for t in ax.texts]
        title = ax.title.get_window_extent(renderer)
        assert all(t.get_window_extent(renderer).y1 < title.y0 for t in ax.texts)
