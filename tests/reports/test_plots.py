"""Outcome plots draw every seed as a point (none hidden behind another), filled when its run is solved by the
tables' own count, with the cell's counts above it and no median line; the selection runs stay apart from the
reported runs; an arm keeps one colour in every figure of a report folder; coinciding survival curves stay visible."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import to_hex

from loglinear.protocol.results import load_sweep
from loglinear.reports.figures import Palette, row_label
from loglinear.reports.plots import (
    KM_NUDGE,
    acc_vs_d_model,
    acc_vs_lr,
    kaplan_meier_plot,
    mad_tasks,
    mqar_acc_vs_kv_pairs,
)
from loglinear.reports.recall_levels import recall_plot
from loglinear.reports.report import write_report
from loglinear.reports.tables import format_rate

from .report_helpers import finished, make_sweep, run_entry

BIMODAL = {"mamba2": [0.25, 0.25, 0.995, 0.25, 0.995], "log_linear_mamba2": [0.995, 0.995, 0.995, 0.25, 0.6]}
"""Plateau or solved: a median line through Mamba-2's would run at 25% beside two solved runs."""


def ran(acc: float, **extra):
    """A finished run whose validation (and test) accuracy is `acc`: solved at step 50 when above 99%."""
    return finished(acc, steps_to_threshold=50 if acc > 0.99 else None, **extra)


@pytest.fixture
def sweep(tmp_path):
    entries = [run_entry(mixer, d_model, 1e-3, seed, ran(acc))
               for d_model in (16, 32) for mixer, values in BIMODAL.items() for seed, acc in enumerate(values)]
    return load_sweep(make_sweep(tmp_path, entries))


def seeds(ax) -> list[tuple[float, float, bool, str]]:
    """(x, y, filled, colour) of every point drawn on `ax`."""
    found = []
    for collection in ax.collections:
        faces = collection.get_facecolors()
        filled = len(faces) > 0 and faces[0][3] > 0
        colour = to_hex((faces if filled else collection.get_edgecolors())[0], keep_alpha=False) \
            if len(collection.get_offsets()) else ""
        found += [(x, y, filled, colour) for x, y in collection.get_offsets()]
    return found


def legend_styles(fig) -> dict[str, tuple[str, str]]:
    """{series label: (colour, marker)} of the series' legend entries (empty lines) in every panel."""
    return {line.get_label(): (to_hex(line.get_color()), line.get_marker()) for ax in fig.axes
            for line in ax.get_lines() if not line.get_label().startswith("_") and not len(line.get_xdata())}


def test_each_seed_is_a_point_filled_when_solved_with_the_tables_counts_and_no_line(sweep):
    (ax,) = acc_vs_d_model(sweep).axes
    assert all(len(line.get_xdata()) == 0 for line in ax.get_lines() if line.get_marker() != "|")  # no median line
    points = seeds(ax)
    colours = {label: colour for label, (colour, _) in legend_styles(ax.figure).items()}
    for mixer, label in (("mamba2", "Mamba-2"), ("log_linear_mamba2", "Log-Linear Mamba-2")):
        mine = [p for p in points if p[3] == colours[label]]
        assert sorted(y for _, y, _, _ in mine) == pytest.approx(sorted(100 * v for v in BIMODAL[mixer] * 2))
        assert all(filled == (y > 99) for _, y, filled, _ in mine)
        for d_model in (16, 32):  # every seed near its d_model, within the spread, never on top of another
            near = [(x, y) for x, y, _, _ in mine if abs(np.log2(x / d_model)) < 0.5]
            assert len(near) == len(set(near)) == len(BIMODAL[mixer])
    assert len({(x, y) for x, y, _, _ in points}) == len(points)  # no seed of one arm hides one of the other
    counts = sorted(text.get_text() for text in ax.texts)
    assert counts == sorted(format_rate(cell, 0.99).split()[0] for cell in sweep.cells().values())
    assert counts == ["2/5", "2/5", "3/5", "3/5"]


def test_the_counts_add_the_escaped_runs_when_the_report_has_a_plateau(tmp_path):
    entries = [run_entry("mamba2", d_model, 1e-3, seed, ran(acc))
               for d_model in (16, 32) for seed, acc in enumerate(BIMODAL["mamba2"])]
    plateau = load_sweep(make_sweep(tmp_path, entries, report={"plateau": 0.5}))
    (ax,) = acc_vs_d_model(plateau).axes
    assert [text.get_text() for text in ax.texts] == ["2/5 | 2/5"] * 2


@pytest.fixture
def two_stage(tmp_path):
    """Gated DeltaNet's selection runs (seeds 0, 1) solve nothing on validation, its 5 confirmation runs at the
    picked rate solve all: the reported counts are the confirmation runs', as in the tables."""
    selection = {1e-3: 0.3, 1e-2: 0.6}
    entries = [run_entry("gated_deltanet", 16, lr, seed, finished(val, test_acc=0.05), stage="selection",
                         **{"data.seed": seed})
               for lr, val in selection.items() for seed in (0, 1)]
    entries += [run_entry("gated_deltanet", 16, 1e-2, seed, ran(0.995), stage="confirmation",
                          **{"data.seed": seed}) for seed in range(10, 15)]
    protocol = {"selection_seeds": [0, 1], "confirmation_seeds": list(range(10, 15))}
    return load_sweep(make_sweep(tmp_path, entries, protocol=protocol))


def test_the_learning_rate_plot_keeps_the_selection_runs_apart_from_the_reported_ones(two_stage):
    top, bottom = acc_vs_lr(two_stage).axes
    assert "selection" in top.get_ylabel() and "validation" in top.get_ylabel()
    assert "selection runs: validation accuracy" in top.get_title()
    assert sorted(y for _, y, _, _ in seeds(top)) == pytest.approx([30, 30, 60, 60])  # validation, never test
    (pick,) = [line for line in top.get_lines() if line.get_marker() == "v"]
    assert abs(np.log2(pick.get_xdata()[0] / 1e-2)) < 0.5
    assert "test" in bottom.get_ylabel() and "reported" in bottom.get_ylabel()
    reported = seeds(bottom)
    assert [y for _, y, _, _ in reported] == pytest.approx([99.5] * 5) and all(f for _, _, f, _ in reported)
    (cell,) = two_stage.cells().values()
    assert [text.get_text() for text in bottom.texts] == [format_rate(cell, 0.99).split()[0]] == ["5/5"]


def test_the_learning_rate_plot_draws_each_selection_seed_of_each_rate(sweep):
    top = acc_vs_lr(sweep).axes[0]
    assert len(seeds(top)) == len(BIMODAL["mamba2"]) + len(BIMODAL["log_linear_mamba2"])


@pytest.fixture
def uneven(tmp_path):
    """Two panels (d_model 16 and 32) holding different arms: Mamba-2 only in the first, Gated DeltaNet only in the
    second, attention in both, each run with a curve; only the Gated DeltaNet runs recorded their recall."""
    arms = {16: ("mamba2", "attention"), 32: ("attention", "gated_deltanet")}
    recall = {"by_level": {"2": [9, 10]}, "by_distance": {"2-3": [9, 10]}, "state_at_recall": {}}
    entries = [run_entry(mixer, d_model, 1e-3, seed,
                         ran(0.995, test={"test/acc/num_kv_pairs=4": 0.9},
                                  **({"recall": recall} if mixer == "gated_deltanet" else {})),
                         curve=[(50, 0.5), (100, 0.995)])
               for d_model, mixers in arms.items() for mixer in mixers for seed in range(2)]
    return load_sweep(make_sweep(tmp_path, entries))


def test_an_arm_keeps_its_colour_in_every_figure_of_the_folder(uneven):
    colours: dict[str, set[str]] = {}
    for plot in (acc_vs_d_model, acc_vs_lr, mqar_acc_vs_kv_pairs, recall_plot):
        for label, (colour, _) in legend_styles(plot(uneven)).items():
            colours.setdefault(label.split(",")[0], set()).add(colour)
    for ax in kaplan_meier_plot(uneven).axes:
        for line in ax.get_lines():
            if not line.get_label().startswith("_"):
                colours.setdefault(line.get_label().split(" (")[0], set()).add(to_hex(line.get_color()))
    assert set(colours) == {"Mamba-2", "Transformer", "Gated DeltaNet"}
    assert all(len(c) == 1 for c in colours.values()), colours  # recall_plot holds Gated DeltaNet alone
    assert len({next(iter(c)) for c in colours.values()}) == 3
    palette = Palette.of(uneven)
    assert {arm: next(iter(c)) for arm, c in colours.items()} == palette.colors


def test_the_legend_names_every_arm(uneven):
    (legend,) = acc_vs_lr(uneven).legends
    texts = [t.get_text() for t in legend.get_texts()]
    assert {"Gated DeltaNet", "Mamba-2", "Transformer"} <= set(texts)
    assert any("solved" in t for t in texts)


@pytest.fixture
def long_cells(tmp_path):
    """Three panels whose cells are told apart by four keys with long values, as an initialisation study's are."""
    inits = [("arange", 0.1, "fan_in_uniform", "zero"), ("arange", 0.02, "normal", "uniform"),
             ("uniform", 0.02, "normal", "uniform")]
    entries = [run_entry(mixer, 16, 1e-3, seed, ran(0.995), curve=[(50, 0.5), (100, 0.995)],
                         **{"model.A_init": a, "model.in_proj_std": std, "model.out_proj_init": out,
                            "model.conv_bias_init": bias})
               for a, std, out, bias in inits for mixer in ("mamba2", "log_linear_mamba2") for seed in range(2)]
    return load_sweep(make_sweep(tmp_path, entries))


@pytest.mark.parametrize("plot", [acc_vs_lr, kaplan_meier_plot])
def test_panel_titles_wrap_instead_of_running_into_each_other(long_cells, plot):
    fig = plot(long_cells)
    renderer = FigureCanvasAgg(fig).get_renderer()
    titled = [ax for ax in fig.axes if "d_model" in ax.get_title()]
    assert len(titled) == 3
    boxes = sorted((ax.title.get_window_extent(renderer) for ax in titled), key=lambda box: box.x0)
    for left, right in itertools.pairwise(boxes):
        assert left.x1 < right.x0
    assert all("conv_bias_init=" in ax.get_title() and "d_model 16" in ax.get_title() for ax in titled)


def test_rows_of_one_arm_share_its_colour_and_differ_by_marker(long_cells):
    palette = Palette.of(long_cells)
    styles = {row_label(long_cells.row_keys, r.row): (palette.style(r.row).color, palette.style(r.row).marker)
              for r in long_cells.records}
    for arm in ("Mamba-2 (", "Log-Linear Mamba-2 ("):
        mine = [style for label, style in styles.items() if label.startswith(arm)]
        assert len(mine) == 3 and len({colour for colour, _ in mine}) == 1 and len({m for _, m in mine}) == 3
    assert len({colour for colour, _ in styles.values()}) == 2


def test_the_selection_rates_of_arms_at_one_learning_rate_sit_side_by_side_at_ticks_naming_the_rates(sweep):
    fig = acc_vs_lr(sweep)
    tops = [ax for ax in fig.axes if "selection" in ax.get_ylabel()]
    assert len(tops) == 2  # d_model 16 and 32
    for top in tops:
        by_colour: dict[str, list[float]] = {}
        for x, _, _, colour in seeds(top):
            by_colour.setdefault(colour, []).append(x)
        assert len(by_colour) == len(BIMODAL)
        first, second = by_colour.values()
        assert max(first) < min(second) or max(second) < min(first)  # beside each other, never mixed
        assert all(abs(np.log2(x / 1e-3)) < 0.5 for x in first + second)
    for ax in fig.axes:
        assert [t.get_text() for t in ax.get_xticklabels()] == ["0.001"]
        assert not any(t.get_text() for t in ax.get_xticklabels(minor=True))


def test_coinciding_kaplan_meier_curves_stay_apart_with_their_counts(tmp_path):
    """Three arms whose runs all stay below the threshold: identical curves at 1, drawn a little apart."""
    entries = [run_entry(mixer, 16, 1e-3, seed, finished(0.3), curve=[(50, 0.25), (100, 0.3)])
               for mixer in ("mamba2", "log_linear_mamba2", "gated_deltanet") for seed in range(2)]
    entries.append(run_entry("attention", 16, 1e-3, 0, ran(0.995), curve=[(50, 0.3), (100, 0.995)]))
    (ax,) = kaplan_meier_plot(load_sweep(make_sweep(tmp_path, entries))).axes
    curves = {line.get_label(): line.get_ydata() for line in ax.get_lines() if not line.get_label().startswith("_")}
    assert sorted(curves) == ["Gated DeltaNet (0/2 reached)", "Log-Linear Mamba-2 (0/2 reached)",
                              "Mamba-2 (0/2 reached)", "Transformer (1/1 reached)"]
    levels = sorted(float(y[0]) for label, y in curves.items() if "0/2" in label)
    assert len(set(levels)) == 3 and levels[-1] - levels[0] <= KM_NUDGE + 1e-9
    assert all(abs(level - 1.0) <= KM_NUDGE / 2 + 1e-9 for level in levels)
    assert [t.get_text() for t in ax.get_legend().get_texts()] == list(curves)


def test_a_figure_that_would_say_nothing_is_not_drawn_and_an_earlier_copy_goes(tmp_path):
    """One model size: no accuracy against d_model; no run at the threshold: no survival curves (they would all
    stay at 1); a report removes the copies an earlier report drew, and says why in table.md."""
    entries = [run_entry(mixer, 16, 1e-3, seed, finished(0.3), curve=[(50, 0.25), (100, 0.3)])
               for mixer in ("mamba2", "log_linear_mamba2") for seed in range(2)]
    folder = make_sweep(tmp_path, entries)
    sweep = load_sweep(folder)
    assert acc_vs_d_model(sweep) == "one model size (d_model 16): nothing to draw against d_model"
    assert kaplan_meier_plot(sweep) == "no run reached 99% validation accuracy: every curve would stay at 1"
    for name in ("acc_vs_d_model.png", "kaplan_meier.png"):
        (folder / name).write_bytes(b"an earlier report's figure")
    report = write_report(folder)
    assert not (folder / "acc_vs_d_model.png").exists() and not (folder / "kaplan_meier.png").exists()
    assert report.skipped["kaplan_meier.png"].endswith("(the earlier report's copy removed)")
    assert ("No run reached 99% validation accuracy, so there is no kaplan_meier.png: every curve would stay at 1."
            in report.table)


def test_a_mad_battery_has_a_panel_per_task_with_every_seed(tmp_path):
    """Two arms on two tasks, 3 seeds each: one panel per task, each arm's seeds as points (filled when solved)."""
    entries = [run_entry(mixer, 32, 1e-3, seed, ran(acc), task=task, **{"data.task": task})
               for task, accs in (("in_context_recall", (0.995, 0.6, 0.7)), ("memorization", (0.995,) * 3))
               for mixer in ("mamba2", "gated_deltanet") for seed, acc in enumerate(accs)]
    sweep = load_sweep(make_sweep(tmp_path, entries, report={"mad_score": True}))
    fig = mad_tasks(sweep)
    titled = sorted((ax.get_title(), ax) for ax in fig.axes if ax.get_title())
    assert [t for t, _ in titled] == ["task=in_context_recall, d_model 32", "task=memorization, d_model 32"]
    for title, ax in titled:
        points = seeds(ax)
        assert len(points) == 6
        expected = (99.5, 99.5, 60.0, 60.0, 70.0, 70.0) if "recall" in title else (99.5,) * 6
        assert sorted(y for _, y, _, _ in points) == pytest.approx(sorted(expected))
        assert all(filled == (y > 99) for _, y, filled, _ in points)
    assert mad_tasks(load_sweep(make_sweep(tmp_path / "plain", entries))) == "not a MAD battery (report.mad_score)"


def test_no_two_arms_share_a_colour_up_to_twenty(tmp_path):
    """The λ study's 12 arms: two log-linear mixers with five λ each and their two base mixers."""
    lambdas = ("softplus", "bounded", "sigmoid", "softmax", "static")
    entries = [run_entry(mixer, 16, 1e-3, 0, finished(0.5), lambda_param=lam, **{"model.lambda_param": lam})
               for mixer in ("log_linear_mamba2", "log_linear_gated_deltanet") for lam in lambdas]
    entries += [run_entry(mixer, 16, 1e-3, 0, finished(0.5), **{"model.lambda_param": "softplus"})
                for mixer in ("mamba2", "gated_deltanet")]
    colours = Palette.of(load_sweep(make_sweep(tmp_path, entries))).colors
    assert len(colours) == 12 and len(set(colours.values())) == 12


def test_a_legend_names_only_the_keys_that_apply_to_its_arm(tmp_path):
    """An initialisation study's rows: attention and Gated DeltaNet read no Mamba-2 init option, so their legend
    entries and table rows carry none of the values the spec gave them."""
    init = {"model.A_init": "arange", "model.in_proj_std": 0.1}
    entries = [run_entry(mixer, d_model, 1e-3, seed, ran(0.995 if seed else 0.5), curve=[(50, 0.995 if seed else 0.5)],
                         **init)
               for d_model in (16, 32) for mixer in ("attention", "mamba2", "gated_deltanet") for seed in range(2)]
    loaded = load_sweep(make_sweep(tmp_path, entries))
    assert sorted(legend_styles(acc_vs_d_model(loaded))) == [
        "Gated DeltaNet", "Mamba-2 (A_init=arange, in_proj_std=0.1)", "Transformer"]
    assert sorted(record.row for record in loaded.records) == sorted(
        [("Transformer", "-", "-")] * 4 + [("Mamba-2", "arange", "0.1")] * 4 + [("Gated DeltaNet", "-", "-")] * 4)
    titles = sorted(ax.get_title() for ax in kaplan_meier_plot(loaded).axes if ax.get_visible())
    assert titles == ["A_init=arange, in_proj_std=0.1, d_model 16", "A_init=arange, in_proj_std=0.1, d_model 32",
                      "d_model 16", "d_model 32"]


def test_the_kaplan_meier_legend_sits_below_its_panel_where_it_hides_no_curve(tmp_path):
    entries = [run_entry(mixer, 16, 1e-3, seed, ran(acc), curve=[(50, acc)])
               for mixer, acc in (("mamba2", 0.995), ("gated_deltanet", 0.3)) for seed in range(2)]
    fig = kaplan_meier_plot(load_sweep(make_sweep(tmp_path, entries)))
    renderer = FigureCanvasAgg(fig).get_renderer()
    (ax,) = fig.axes
    assert ax.get_legend().get_window_extent(renderer).y1 < ax.get_window_extent(renderer).y0
