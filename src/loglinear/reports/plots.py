"""The sweep's PNG plots (matplotlib's object API with the Agg canvas: no pyplot, no global state).

Each plot uses, per table cell, the runs at the cell's selected configuration (best mean validation
accuracy over lr and λ, see `results`); a plot whose data the sweep does not have is skipped, with the reason.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from loglinear.reports.results import THRESHOLD, Cell, Sweep, mean_std, slice_values
from loglinear.reports.state_tracking import SEQ_LEN_PREFIX, num_classes, scaled, training_lengths
from loglinear.runs.folder import FINISHED, write_atomic

Cells = dict[tuple[tuple[str, ...], int], Cell]
Drawing = Figure | str
"""A figure, or why there is none."""


def write_plots(sweep: Sweep, out: Path) -> tuple[list[Path], dict[str, str]]:
    """Write every plot the sweep has data for; returns the files written and {plot: reason} for the others."""
    cells: Cells = sweep.cells()  # type: ignore[assignment]
    written, skipped = [], {}
    for name, draw in PLOTS.items():
        drawing = draw(cells)
        if isinstance(drawing, str):
            skipped[name] = drawing
            continue
        written.append(save_figure(drawing, out / name, dpi=120))
    return written, skipped


def save_figure(fig: Figure, path: Path, dpi: int) -> Path:
    """Write `fig` as a PNG at `path` through a temporary file and a rename: an interrupted or failed write
    (Ctrl-C, a full disk) leaves the previous figure whole."""
    FigureCanvasAgg(fig)
    write_atomic(path, lambda f: fig.savefig(f, format="png", dpi=dpi, bbox_inches="tight"))
    return path


def acc_vs_d_model(cells: Cells) -> Drawing:
    series = _series(cells, lambda cell: cell.values)
    if not series:
        return "no run finished"
    fig, (ax,) = _panels(1)
    for label, points in series.items():
        _errorbar(ax, label, points)
    _log2_axis(ax, sorted({x for points in series.values() for x, _ in points}), "d_model")
    ax.set_ylabel("test accuracy (%)")
    ax.set_ylim(0, 101)
    ax.set_title("Accuracy vs model dimension (mean ± std over seeds, configuration selected on validation)")
    return _finish(fig, [ax])


def mqar_acc_vs_kv_pairs(cells: Cells) -> Drawing:
    return _slice_plot(cells, "test/acc/num_kv_pairs=", "number of key-value pairs",
                       missing="no MQAR test accuracy per number of key-value pairs (test/acc/num_kv_pairs=...)")


def acc_vs_seq_len(cells: Cells) -> Drawing:
    """State tracking: Grazzi et al.'s scaled accuracy (chance 0) by test length, the training range shaded."""
    panels: dict[tuple[str, int], dict[str, list[tuple[float, list[float]]]]] = {}
    trained: dict[tuple[str, int], tuple[int, int]] = {}
    for (row, d_model), cell in cells.items():
        runs = [r for r in cell.runs if r.status in FINISHED and r.task != "mqar"]
        values = slice_values(runs, SEQ_LEN_PREFIX)
        if not values:
            continue
        panel, classes = (runs[0].task, d_model), num_classes(runs[0])
        points = [(float(n), [scaled(a, classes) for a in v]) for n, v in values.items()]
        panels.setdefault(panel, {})[" / ".join(row)] = points
        lengths = training_lengths(runs[0])
        if lengths is not None:
            trained[panel] = lengths
    if not panels:
        return "no state-tracking test accuracy per sequence length (test/acc/seq_len=...)"
    fig, axes = _panels(len(panels))
    for ax, (panel, series) in zip(axes, sorted(panels.items()), strict=True):
        for label, points in series.items():
            _errorbar(ax, label, points)
        tested = sorted({x for points in series.values() for x, _ in points})
        _log2_axis(ax, tested, "test sequence length")
        if panel in trained:
            low, high = trained[panel]
            left, right = tested[0] / 2**0.25, tested[-1] * 2**0.25  # the tested lengths, a little margin each side
            ax.set_xlim(left, right)
            ax.axvspan(max(low, left), high, color="gray", alpha=0.15, label=f"training lengths {low}-{high}")
        ax.axhline(0.0, color="gray", linewidth=0.8)
        ax.set_title(f"{panel[0]}, d_model {panel[1]}")
        ax.set_ylabel("scaled accuracy (chance 0, perfect 1)")
        ax.set_ylim(-0.1, 1.05)
    return _finish(fig, axes)


def steps_to_threshold(cells: Cells) -> Drawing:
    def steps(cell: Cell) -> list[float]:
        reached = (r.result.get("steps_to_threshold") for r in cell.runs)
        return [float(s) for s in reached if s is not None]

    series = _series(cells, steps, scale=1.0)
    if not series:
        return f"no run reached {100 * THRESHOLD:.0f}% validation accuracy"
    fig, (ax,) = _panels(1)
    for label, points in series.items():
        _errorbar(ax, label, points)
    _log2_axis(ax, sorted({x for points in series.values() for x, _ in points}), "d_model")
    ax.set_ylabel(f"steps to {100 * THRESHOLD:.0f}% validation accuracy")
    ax.set_title("Training steps to the threshold (runs that reached it, selected configuration)")
    return _finish(fig, [ax])


def _slice_plot(cells: Cells, prefix: str, xlabel: str, missing: str) -> Drawing:
    """MQAR: one panel per d_model, one line per table row: mean ± std over seeds of a test slice metric."""
    panels: dict[tuple[str, int], dict[str, list[tuple[float, list[float]]]]] = {}
    for (row, d_model), cell in cells.items():
        runs = [r for r in cell.runs if r.status in FINISHED and r.task == "mqar"]
        values = slice_values(runs, prefix)
        if not values:
            continue
        panel = (runs[0].task, d_model)
        panels.setdefault(panel, {})[" / ".join(row)] = [(float(x), [100 * a for a in v]) for x, v in values.items()]
    if not panels:
        return missing
    fig, axes = _panels(len(panels))
    for ax, (panel, series) in zip(axes, sorted(panels.items()), strict=True):
        for label, points in series.items():
            _errorbar(ax, label, points)
        _log2_axis(ax, sorted({x for points in series.values() for x, _ in points}), xlabel)
        ax.set_title(f"{panel[0]}, d_model {panel[1]}")
        ax.set_ylabel("test accuracy (%)")
        ax.set_ylim(0, 101)
    return _finish(fig, axes)


def _series(cells: Cells, values_of: Callable[[Cell], list[float]],
            scale: float = 100.0) -> dict[str, list[tuple[float, list[float]]]]:
    """{row label: [(d_model, values)]} over the cells that have values."""
    series: dict[str, list[tuple[float, list[float]]]] = {}
    for (row, d_model), cell in sorted(cells.items(), key=lambda item: item[0][1]):
        values = values_of(cell)
        if values:
            series.setdefault(" / ".join(row), []).append((float(d_model), [scale * v for v in values]))
    return series


def _errorbar(ax, label: str, points: list[tuple[float, list[float]]]) -> None:
    stats = [mean_std(values) for _, values in points]
    ax.errorbar([x for x, _ in points], [m for m, _ in stats], yerr=[s or 0.0 for _, s in stats],
                marker="o", capsize=3, label=label)


def _log2_axis(ax, ticks: list[float], label: str) -> None:
    ax.set_xscale("log", base=2)
    ax.set_xticks(ticks)
    ax.set_xticklabels([f"{t:g}" for t in ticks])
    ax.set_xlabel(label)


def _panels(n: int) -> tuple[Figure, list]:
    cols = min(n, 3)
    rows = math.ceil(n / cols)
    fig = Figure(figsize=(6 * cols, 4.2 * rows))
    axes = fig.subplots(rows, cols, squeeze=False).ravel().tolist()
    for ax in axes[n:]:
        ax.set_visible(False)
    return fig, axes[:n]


def _finish(fig: Figure, axes: list) -> Figure:
    for ax in axes:
        ax.grid(True, alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=min(3, max(1, len(labels))),
               fontsize="small")
    fig.tight_layout()
    return fig


PLOTS: dict[str, Callable[[Cells], Drawing]] = {
    "acc_vs_d_model.png": acc_vs_d_model,
    "mqar_acc_vs_kv_pairs.png": mqar_acc_vs_kv_pairs,
    "acc_vs_seq_len.png": acc_vs_seq_len,
    "steps_to_threshold.png": steps_to_threshold,
}
