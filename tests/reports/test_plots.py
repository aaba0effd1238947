"""Outcome plots draw every seed: each run's value as a point (none hidden behind another), the median as a line."""

from __future__ import annotations

import itertools
import statistics

import numpy as np
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import to_hex

from loglinear.reports.plots import acc_vs_d_model, acc_vs_lr, arm_colors, kaplan_meier_plot
from loglinear.reports.results import load_sweep

from .report_helpers import finished, make_sweep, run_entry

BIMODAL = {"mamba2": [0.25, 0.25, 0.995, 0.25, 0.995], "log_linear_mamba2": [0.995, 0.995, 0.995, 0.25, 0.6]}
"""Plateau or solved: a mean of Mamba-2's would draw 54%, a value no run had; its median is a run's 25%."""


@pytest.fixture
def sweep(tmp_path):
    entries = [run_entry(mixer, d_model, 1e-3, seed, finished(acc))
               for d_model in (16, 32) for mixer, values in BIMODAL.items() for seed, acc in enumerate(values)]
    return load_sweep(make_sweep(tmp_path, entries))


def drawn(ax):
    """{series label: (the points' (x, y), the line's (x, y))} of an axis."""
    lines = {line.get_label(): np.column_stack(line.get_data()) for line in ax.get_lines()}
    points = [c.get_offsets() for c in ax.collections]
    return lines, points


def test_each_seed_is_a_point_and_the_line_is_the_median(sweep):
    (ax,) = acc_vs_d_model(sweep).axes
    lines, points = drawn(ax)
    assert sorted(lines) == ["Log-Linear Mamba-2", "Mamba-2"]
    for (label, line), offsets in zip(lines.items(), points, strict=True):
        values = BIMODAL["mamba2" if label == "Mamba-2" else "log_linear_mamba2"]
        assert line[:, 1].tolist() == pytest.approx([100 * statistics.median(values)] * 2)
        assert sorted(offsets[:, 1].tolist()) == pytest.approx(sorted(100 * v for v in values * 2))
        for d_model in (16, 32):  # every seed near its d_model, within the spread, never on top of another
            near = offsets[np.abs(np.log2(offsets[:, 0] / d_model)) < 0.5]
            assert len(near) == len(values)
            assert len({tuple(p) for p in near.tolist()}) == len(values)
    every = np.concatenate(points)
    assert len({tuple(p) for p in every.tolist()}) == len(every)  # no seed of one arm hides one of the other


def test_the_learning_rate_plot_draws_each_seed_of_each_rate(sweep):
    accuracy = acc_vs_lr(sweep).axes[0]
    _, points = drawn(accuracy)
    assert sum(len(p) for p in points) == len(BIMODAL["mamba2"]) + len(BIMODAL["log_linear_mamba2"])


@pytest.fixture
def uneven(tmp_path):
    """Two panels (d_model 16 and 32) holding different arms: Mamba-2 only in the first, Gated DeltaNet only in the
    second, attention in both, each run with a curve for the Kaplan-Meier plot."""
    arms = {16: ("mamba2", "attention"), 32: ("attention", "gated_deltanet")}
    entries = [run_entry(mixer, d_model, 1e-3, seed, finished(0.995), curve=[(50, 0.5), (100, 0.995)])
               for d_model, mixers in arms.items() for mixer in mixers for seed in range(2)]
    return load_sweep(make_sweep(tmp_path, entries))


@pytest.mark.parametrize("plot", [acc_vs_lr, kaplan_meier_plot])
def test_an_arm_keeps_its_colour_in_every_panel_and_the_legend_names_every_arm(uneven, plot):
    fig = plot(uneven)
    colours: dict[str, set] = {}
    for ax in fig.axes:
        for line in ax.get_lines():
            if not line.get_label().startswith("_"):
                colours.setdefault(line.get_label(), set()).add(to_hex(line.get_color()))
    assert set(colours) == {"Mamba-2", "Transformer", "Gated DeltaNet"}
    assert all(len(c) == 1 for c in colours.values())
    assert len({next(iter(c)) for c in colours.values()}) == 3
    (legend,) = fig.legends
    assert sorted(t.get_text() for t in legend.get_texts()) == ["Gated DeltaNet", "Mamba-2", "Transformer"]


@pytest.fixture
def long_cells(tmp_path):
    """Three panels whose cells are told apart by four keys with long values, as an initialisation study's are."""
    inits = [("arange", 0.1, "fan_in_uniform", "zero"), ("arange", 0.02, "normal", "uniform"),
             ("uniform", 0.02, "normal", "uniform")]
    entries = [run_entry(mixer, 16, 1e-3, seed, finished(0.995), curve=[(50, 0.5), (100, 0.995)],
                         **{"model.A_init": a, "model.in_proj_std": std, "model.out_proj_init": out,
                            "model.conv_bias_init": bias})
               for a, std, out, bias in inits for mixer in ("mamba2", "log_linear_mamba2") for seed in range(2)]
    return load_sweep(make_sweep(tmp_path, entries))


@pytest.mark.parametrize("plot", [acc_vs_lr, kaplan_meier_plot])
def test_panel_titles_wrap_instead_of_running_into_each_other(long_cells, plot):
    fig = plot(long_cells)
    renderer = FigureCanvasAgg(fig).get_renderer()
    titled = [ax for ax in fig.axes if ax.get_title()]
    assert len(titled) == 3
    boxes = sorted((ax.title.get_window_extent(renderer) for ax in titled), key=lambda box: box.x0)
    for left, right in itertools.pairwise(boxes):
        assert left.x1 < right.x0
    assert all("conv_bias_init=" in ax.get_title() and "d_model 16" in ax.get_title() for ax in titled)


def test_the_solve_rates_of_arms_at_one_learning_rate_sit_side_by_side_at_ticks_naming_the_rates(sweep):
    fig = acc_vs_lr(sweep)
    rates = [ax for ax in fig.axes if ax.get_ylabel().startswith("solve rate")]
    assert len(rates) == 2  # d_model 16 and 32
    for rate in rates:
        xs = [x for line in rate.get_lines() for x in line.get_xdata()]
        assert len(xs) == len(set(xs)) == len(BIMODAL)  # one rate per arm, neither on top of the other
        assert all(abs(np.log2(x / 1e-3)) < 0.5 for x in xs)
    for ax in fig.axes:
        assert [t.get_text() for t in ax.get_xticklabels()] == ["0.001"]
        assert not any(t.get_text() for t in ax.get_xticklabels(minor=True))


@pytest.mark.parametrize("arms", [3, 10, 12, 20])
def test_no_two_arms_share_a_colour_up_to_twenty(arms):
    colours = arm_colors(f"arm {i}" for i in [*range(arms), 0])
    assert len(colours) == arms and len(set(colours.values())) == arms
