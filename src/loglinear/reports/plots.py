"""The sweep's PNG plots (matplotlib's object API with the Agg canvas: no pyplot, no global state).

Each plot uses, per table cell, the runs the cell reports (at its learning rate selected on validation, see
`results`), except `acc_vs_lr.png`, which shows every learning rate of the selection; a plot whose data the
sweep does not have is skipped, with the reason. Outcomes are often bimodal (a run stays on a plateau or solves
the task), so every outcome plot draws each seed as a point, spread sideways so equal values stay visible, with
the median as a line: never a mean with an error bar, which draws a value no run had.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from matplotlib import colormaps, rcParams
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import to_hex
from matplotlib.figure import Figure
from matplotlib.ticker import NullFormatter

from loglinear.reports.frontier import frontier_series
from loglinear.reports.results import LAMBDA_KEY, MIXER_KEY, Cell, Record, Sweep, slice_values
from loglinear.reports.state_tracking import SEQ_LEN_PREFIX, num_classes, scaled, training_lengths
from loglinear.reports.statistics import kaplan_meier
from loglinear.runs.folder import FINISHED, write_atomic
from loglinear.sweeps.protocol import CONFIRMATION

Cells = dict[tuple[tuple[str, ...], int], Cell]
Drawing = Figure | str
"""A figure, or why there is none."""
SPREAD = 0.5
"""How far apart (in powers of 2 along a log x axis) the outermost seeds of all series at one x are drawn."""
SEEDS_NOTE = "points: seeds; line: median"
TITLE_WIDTH = 48
"""Characters per line of a panel's title: a 6-inch panel's title wraps before it runs into its neighbour's."""


def write_plots(sweep: Sweep, out: Path) -> tuple[list[Path], dict[str, str]]:
    """Write every plot the sweep has data for; returns the files written and {plot: reason} for the others."""
    written, skipped = [], {}
    for name, draw in PLOTS.items():
        drawing = draw(sweep)
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


def acc_vs_d_model(sweep: Sweep) -> Drawing:
    cells: Cells = sweep.cells()  # type: ignore[assignment]
    series = _series(cells, lambda cell: cell.values)
    if not series:
        return "no run finished"
    fig, (ax,) = _panels(1)
    seed_series(ax, series, arm_colors(series))
    _log2_axis(ax, sorted({x for points in series.values() for x, _ in points}), "d_model")
    ax.set_ylabel("test accuracy (%)")
    ax.set_ylim(-1, 101)
    ax.set_title(f"Accuracy vs model dimension ({SEEDS_NOTE}; configuration selected on validation)")
    return _finish(fig, [ax])


def mqar_acc_vs_kv_pairs(sweep: Sweep) -> Drawing:
    return _slice_plot(sweep.cells(), "test/acc/num_kv_pairs=", "number of key-value pairs",  # type: ignore[arg-type]
                       missing="no MQAR test accuracy per number of key-value pairs (test/acc/num_kv_pairs=...)")


def acc_vs_seq_len(sweep: Sweep) -> Drawing:
    """State tracking: Grazzi et al.'s scaled accuracy (chance 0) by test length, the training range shaded."""
    cells: Cells = sweep.cells()  # type: ignore[assignment]
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
    colors = _panel_colors(panels)
    for ax, (panel, series) in zip(axes, sorted(panels.items()), strict=True):
        seed_series(ax, series, colors)
        tested = sorted({x for points in series.values() for x, _ in points})
        _log2_axis(ax, tested, "test sequence length")
        if panel in trained:
            low, high = trained[panel]
            left, right = tested[0] / 2**0.25, tested[-1] * 2**0.25  # the tested lengths, a little margin each side
            ax.set_xlim(left, right)
            ax.axvspan(max(low, left), high, color="gray", alpha=0.15, label=f"training lengths {low}-{high}")
        ax.axhline(0.0, color="gray", linewidth=0.8)
        ax.set_title(f"{panel[0]}, d_model {panel[1]} ({SEEDS_NOTE})")
        ax.set_ylabel("scaled accuracy (chance 0, perfect 1)")
        ax.set_ylim(-0.1, 1.05)
    return _finish(fig, axes)


def acc_vs_lr(sweep: Sweep) -> Drawing:
    """Per cell (row keys but the architecture and λ, at one d_model), each arm's test accuracy (each seed, with
    the median, top) and solve rate (bottom) at every learning rate of the selection: a narrow window shows."""
    threshold = sweep.report.threshold
    panels: dict[str, dict[str, dict[float, list[float]]]] = {}
    for record in sweep.records:
        score = record.test_score
        if score is None or record.stage == CONFIRMATION:
            continue
        arm = panels.setdefault(_panel_name(sweep, record), {}).setdefault(_arm_name(sweep, record), {})
        arm.setdefault(record.lr, []).append(score)
    if not panels:
        return "no run finished"
    fig = Figure(figsize=(6 * len(panels), 7.5))
    axes = fig.subplots(2, len(panels), squeeze=False)
    colors = _panel_colors(panels)
    for column, (title, arms) in enumerate(sorted(panels.items())):
        accuracy, rate = axes[0][column], axes[1][column]
        seed_series(accuracy, {label: [(lr, [100 * v for v in values]) for lr, values in sorted(by_lr.items())]
                                 for label, by_lr in arms.items()}, colors)
        for index, (label, by_lr) in enumerate(arms.items()):  # beside each other as in the accuracy panel
            points = sorted(by_lr.items())
            rate.plot([lr * 2 ** _slot_shift(index, len(arms)) for lr, _ in points],
                      [sum(v > threshold for v in values) / len(values) for _, values in points], marker="o",
                      label=label, color=colors[label])
        accuracy.set_title(f"{title}\n({SEEDS_NOTE})")
        accuracy.set_ylabel("test accuracy (%)")
        accuracy.set_ylim(-1, 101)
        rate.set_ylabel(f"solve rate (test accuracy > {100 * threshold:g}%)")
        rate.set_ylim(-0.05, 1.05)
        rates = sorted({lr for by_lr in arms.values() for lr in by_lr})
        for ax in (accuracy, rate):
            ax.set_xscale("log")
            ax.set_xticks(rates, [f"{lr:.2g}" for lr in rates])
            ax.xaxis.set_minor_formatter(NullFormatter())
            ax.set_xlabel("learning rate")
    return _finish(fig, [ax for line in axes for ax in line])


def kaplan_meier_plot(sweep: Sweep) -> Drawing:
    """Per cell, each arm's Kaplan-Meier curve: the fraction of runs whose validation accuracy has not yet passed
    the threshold, against training steps (censored runs marked), with its 95% interval shaded."""
    threshold = sweep.report.threshold
    panels: dict[str, dict[str, Cell]] = {}
    for cell in sweep.cells().values():
        if cell.passages(threshold):
            panels.setdefault(_panel_name(sweep, cell.runs[0]), {})[_arm_name(sweep, cell.runs[0])] = cell
    if not panels:
        return "no finished run has a metrics.csv"
    fig, axes = _panels(len(panels))
    colors = _panel_colors(panels)
    for ax, (title, arms) in zip(axes, sorted(panels.items()), strict=True):
        for label, cell in arms.items():
            events = cell.passages(threshold)
            curve = kaplan_meier(events)
            steps = [0.0, *curve.steps]  # type: ignore[union-attr]
            line, = ax.step(steps, [1.0, *curve.fraction], where="post", label=label,  # type: ignore[union-attr]
                            color=colors[label])
            ax.fill_between(steps, [1.0, *curve.low], [1.0, *curve.high], step="post",  # type: ignore[union-attr]
                            color=line.get_color(), alpha=0.15)
            censored = [e.steps for e in events if not e.reached]
            ax.plot(censored, [_at(curve, s) for s in censored], "|", color=line.get_color(), markersize=10)
        ax.set_title(title)
        ax.set_xlabel("training steps")
        ax.set_ylabel(f"fraction not yet above {100 * threshold:g}% (validation)")
        ax.set_ylim(-0.05, 1.05)
    return _finish(fig, axes)


def _at(curve, steps: float) -> float:
    """The curve's value at `steps` (a right-continuous step function)."""
    return next((f for s, f in zip(reversed(curve.steps), reversed(curve.fraction), strict=True) if s <= steps), 1.0)


def _panel_name(sweep: Sweep, record: Record) -> str:
    keys = [(k, v) for k, v in zip(sweep.row_keys, record.row, strict=True) if k not in (MIXER_KEY, LAMBDA_KEY)]
    lines: list[str] = []
    for part in [*(f"{k.rsplit('.', 1)[-1]}={v}" for k, v in keys), f"d_model {record.d_model}"]:
        if lines and len(lines[-1]) + 2 + len(part) <= TITLE_WIDTH:
            lines[-1] += f", {part}"
        else:
            lines.append(part)
    return ",\n".join(lines)


def _arm_name(sweep: Sweep, record: Record) -> str:
    keys = [v for k, v in zip(sweep.row_keys, record.row, strict=True) if k in (MIXER_KEY, LAMBDA_KEY) and v != "-"]
    return " / ".join(keys)


def mqar_frontier(sweep: Sweep) -> Drawing:
    """MQAR: test accuracy against state size on a log axis, one line per architecture (frontier.py): all test
    sets at the state of the longest, then one panel per number of key-value pairs at the state of its length."""
    series = frontier_series(sweep, sweep.cells())  # type: ignore[arg-type]
    if not series:
        return "no finished MQAR run with a state size in its result.json"
    fig, axes = _panels(len(series))
    colors = arm_colors(label for lines in series.values() for label in lines)
    for ax, (panel, lines) in zip(axes, series.items(), strict=True):
        seed_series(ax, lines, colors)
        ax.set_xscale("log")
        ax.set_xlabel("state size (numbers per sequence, all layers)")
        ax.set_ylabel("test accuracy (%)")
        ax.set_ylim(-1, 101)
        where = "all test sets (state at the longest)" if panel == "all" else f"{panel} (state at its length)"
        ax.set_title(f"{where}; {SEEDS_NOTE}")
    return _finish(fig, axes)


def _slice_plot(cells: Cells, prefix: str, xlabel: str, missing: str) -> Drawing:
    """MQAR: one panel per d_model, one line per table row: each seed's test slice metric, with the median."""
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
    colors = _panel_colors(panels)
    for ax, (panel, series) in zip(axes, sorted(panels.items()), strict=True):
        seed_series(ax, series, colors)
        _log2_axis(ax, sorted({x for points in series.values() for x, _ in points}), xlabel)
        ax.set_title(f"{panel[0]}, d_model {panel[1]} ({SEEDS_NOTE})")
        ax.set_ylabel("test accuracy (%)")
        ax.set_ylim(-1, 101)
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


def seed_series(ax, series: dict[str, list[tuple[float, list[float]]]], colors: dict[str, str] | None = None) -> None:
    """Each series' seeds as points and their median as a line, on a log x axis. The series at one x sit side by
    side, and the seeds of one series spread within its slot (in the order of their values), so no seed hides
    another: the spread is a factor of at most 2**SPREAD along x, the values are never moved. `colors`: a colour
    per label (else the axes' cycle)."""
    slot = SPREAD / max(len(series), 1)
    for index, (label, points) in enumerate(series.items()):
        shift = _slot_shift(index, len(series))
        line, = ax.plot([x * 2**shift for x, _ in points], [statistics.median(v) for _, v in points], marker="_",
                        markersize=12, label=label, **({} if colors is None else {"color": colors[label]}))
        xs, ys = [], []
        for x, values in points:
            for rank, value in enumerate(sorted(values)):
                offset = 0.0 if len(values) == 1 else (rank / (len(values) - 1) - 0.5) * 0.8 * slot
                xs.append(x * 2 ** (shift + offset))
                ys.append(value)
        ax.scatter(xs, ys, s=12, color=line.get_color(), alpha=0.75, linewidths=0, zorder=3)


def _slot_shift(index: int, count: int) -> float:
    """Where the `index`-th of `count` series sits around a shared x, in powers of 2 (see `seed_series`)."""
    return (index - (count - 1) / 2) * SPREAD / max(count, 1)


def arm_colors(labels: Iterable[str]) -> dict[str, str]:
    """A colour per label from matplotlib's default cycle, in order of first appearance: an arm keeps its colour in
    every panel of a figure, also where the panels hold different arms. With more arms than the cycle has colours
    (10), tab20's 20, so that no two arms share one up to 20 arms."""
    arms = list(dict.fromkeys(labels))
    cycle = rcParams["axes.prop_cycle"].by_key()["color"]
    if len(arms) > len(cycle):
        cycle = [to_hex(c) for c in colormaps["tab20"].colors]
    return {label: cycle[i % len(cycle)] for i, label in enumerate(arms)}


def _panel_colors(panels: Mapping[Any, Iterable[str]]) -> dict[str, str]:
    """`arm_colors` over the arms of every panel, the panels in the sorted order they are drawn in."""
    return arm_colors(label for _, labels in sorted(panels.items()) for label in labels)


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
    entries: dict[str, object] = {}  # every panel's entries, each label once
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            entries.setdefault(label, handle)
    handles, labels = list(entries.values()), list(entries)
    fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=min(3, max(1, len(labels))),
               fontsize="small")
    fig.tight_layout()
    return fig


PLOTS: dict[str, Callable[[Sweep], Drawing]] = {
    "acc_vs_d_model.png": acc_vs_d_model,
    "acc_vs_lr.png": acc_vs_lr,
    "mqar_acc_vs_kv_pairs.png": mqar_acc_vs_kv_pairs,
    "acc_vs_seq_len.png": acc_vs_seq_len,
    "kaplan_meier.png": kaplan_meier_plot,
    "mqar_frontier.png": mqar_frontier,
}
