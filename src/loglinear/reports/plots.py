"""The sweep's PNG plots, drawn with reports/figures.py (one colour per arm for the whole report folder, each
seed a point filled when its run is solved, a cell's counts above it, no median or mean line through a cell).

Each outcome plot uses, per table cell, the runs the cell reports (at its learning rate selected on validation,
see `results`); `acc_vs_lr.png` also shows the selection runs, on their validation accuracy, in a row of its own.
A plot whose data the sweep does not have is skipped, with the reason.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Callable
from pathlib import Path

from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import NullFormatter

from loglinear.protocol.results import LAMBDA_KEY, LR_KEY, MIXER_KEY, Cell, Record, Sweep
from loglinear.reports.figures import (
    COUNTS_PAD,
    Group,
    Palette,
    arm_label,
    counts_text,
    finish,
    key_name,
    panels,
    row_label,
    run_solved,
    save_figure,
    seed_points,
    slot_shift,
    solved_key,
    spread_for,
)
from loglinear.reports.frontier import frontier_series
from loglinear.reports.needles import niah_heatmap
from loglinear.reports.state_tracking import (
    SEQ_LEN_PREFIX,
    num_classes,
    scaled,
    tested_at_several_lengths,
    training_lengths,
)
from loglinear.reports.statistics import kaplan_meier
from loglinear.runs.folder import FINISHED
from loglinear.sweeps.spec_keys import CONFIRMATION, ReportConfig

Drawing = Figure | str


class SaysNothing(str):
    """Why a plot is not drawn when the sweep has its data but the figure would say nothing (one model size along a
    d_model axis, survival curves that never leave 1): an earlier report's copy of it is removed too."""
"""A figure, or why there is none."""
TITLE_WIDTH = 48
"""Characters per line of a panel's title: a 6-inch panel's title wraps before it runs into its neighbour's."""
KM_NUDGE = 0.04
"""How far apart (in survival fraction) the outermost of a panel's Kaplan-Meier curves are drawn, so that curves
that coincide (every run censored at the budget) stay visible side by side."""
FRONTIER_SLOT = 0.12
"""The frontier's dodge: each line's slot around its state size, in powers of 2, among the lines of its cluster
(`state_clusters`): a line alone at its state size is drawn there."""
CLUSTER_GAP = 1.0
"""State sizes less than this many powers of 2 apart are dodged together (their seeds would overlap otherwise)."""
STATE_MARK = "| on the x axis: a state size (the points around it are dodged sideways)"
LR_SLOT = 0.1
"""`acc_vs_lr`'s dodge per arm, in powers of 2, up to `LR_SPREAD`: a grid's rates are 1.7 octaves apart."""
LR_SPREAD = 1.4
DODGE_MARGIN = 0.15
"""Room (in powers of 2) between an axis' edge and the outermost dodged seed of its first or last group."""


def write_plots(sweep: Sweep, out: Path, palette: Palette | None = None) -> tuple[list[Path], dict[str, str]]:
    """Write every plot the sweep has data for, all in `palette`'s colours (default: the sweep's); returns the
    files written and {plot: reason} for the others."""
    palette = palette or Palette.of(sweep)
    written, skipped = [], {}
    for name, draw in PLOTS.items():
        drawing = draw(sweep, palette)
        if isinstance(drawing, SaysNothing) and (out / name).is_file():
            (out / name).unlink()
            drawing = SaysNothing(f"{drawing} (the earlier report's copy removed)")
        if isinstance(drawing, str):
            skipped[name] = drawing
            continue
        written.append(save_figure(drawing, out / name, dpi=120))
    return written, skipped


def acc_vs_d_model(sweep: Sweep, palette: Palette | None = None) -> Drawing:
    palette = palette or Palette.of(sweep)
    report = sweep.report
    series: dict[str, list[Group]] = {}
    styles = {}
    for (row, d_model), cell in sorted(sweep.cells().items(), key=lambda item: item[0][1]):  # type: ignore[index]
        if cell.values:
            label = row_label(sweep.row_keys, row)
            styles[label] = palette.style(row)
            series.setdefault(label, []).append(_cell_group(cell, float(d_model), report))
    if not series:
        return "no run finished"
    sizes = {g.x for groups in series.values() for g in groups}
    if len(sizes) == 1:
        return SaysNothing(f"one model size (d_model {int(sizes.pop())}): nothing to draw against d_model")
    fig, (ax,) = panels(1)
    seed_points(ax, series, styles)
    _log2_axis(ax, sorted({g.x for groups in series.values() for g in groups}), "d_model")
    ax.set_ylabel("test accuracy (%)")
    ax.set_ylim(-1, 101)
    ax.set_title("Accuracy vs model dimension (each seed; configuration selected on validation)", pad=COUNTS_PAD)
    return finish(fig, [ax], solved_key(report.plateau))


def mqar_acc_vs_kv_pairs(sweep: Sweep, palette: Palette | None = None) -> Drawing:
    return _slice_plot(sweep, palette or Palette.of(sweep), "test/acc/num_kv_pairs=", "number of key-value pairs",
                       missing="no MQAR test accuracy per number of key-value pairs (test/acc/num_kv_pairs=...)")


def acc_vs_seq_len(sweep: Sweep, palette: Palette | None = None) -> Drawing:
    """State tracking: Grazzi et al.'s scaled accuracy (chance 0) by test length, the training range shaded."""
    palette = palette or Palette.of(sweep)
    panel_series: dict[tuple[str, int], dict[str, list[Group]]] = {}
    styles = {}
    trained: dict[tuple[str, int], tuple[int, int]] = {}
    for (row, d_model), cell in sweep.cells().items():  # type: ignore[misc]
        runs = [r for r in cell.runs if r.status in FINISHED and tested_at_several_lengths(r)]
        groups = _slice_groups(runs, SEQ_LEN_PREFIX, sweep.report.threshold,
                               lambda a, r: scaled(a, num_classes(r)))
        if not groups:
            continue
        panel = (runs[0].task, d_model)
        label = row_label(sweep.row_keys, row)
        styles[label] = palette.style(row)
        panel_series.setdefault(panel, {})[label] = groups
        lengths = training_lengths(runs[0])
        if lengths is not None:
            trained[panel] = lengths
    if not panel_series:
        return "no run tested at several sequence lengths (test/acc/seq_len=...)"
    fig, axes = panels(len(panel_series))
    for ax, (panel, series) in zip(axes, sorted(panel_series.items()), strict=True):
        seed_points(ax, series, styles)
        tested = sorted({g.x for groups in series.values() for g in groups})
        _log2_axis(ax, tested, "test sequence length")
        reach = spread_for(len(series)) / 2 + DODGE_MARGIN  # every dodged seed inside, with a margin
        left, right = tested[0] / 2**reach, tested[-1] * 2**reach
        ax.set_xlim(left, right)
        if panel in trained:
            low, high = trained[panel]
            ax.axvspan(max(low, left), _shade_end(tested, high), color="gray", alpha=0.15,
                       label=f"training lengths {low}-{high}")
        ax.axhline(0.0, color="gray", linewidth=0.8)
        ax.set_title(f"{panel[0]}, d_model {panel[1]} (each seed)")
        ax.set_ylabel("scaled accuracy (chance 0, perfect 1)")
        lowest = min(v for groups in series.values() for g in groups for v in g.values)
        ax.set_ylim(min(-0.1, lowest - 0.05), 1.05)
    return finish(fig, axes, solved_key(None)[:1])


def _shade_end(tested: list[float], high: float) -> float:
    """Where the training range's shading ends: past the dodged seeds of the longest tested length inside it (halfway
    to the next tested length, in octaves), so a group is shaded whole or not at all; `high` itself otherwise."""
    inside = [n for n in tested if n <= high]
    beyond = [n for n in tested if n > high]
    if not inside or inside[-1] != high or not beyond:
        return high
    return math.sqrt(high * beyond[0])


def acc_vs_lr(sweep: Sweep, palette: Palette | None = None) -> Drawing:
    """Per cell (row keys but the architecture and λ, at one d_model), two rows kept apart. Top: every selection
    run's validation accuracy at every learning rate (what chose the rate; a narrow window shows), each arm's pick
    marked. Bottom: the runs the table reports, at the picked rate, by test accuracy, with the table's counts.
    With several selected keys (`report.select`), a cell has a panel per value of the others (weight decay 0.1),
    and an arm's pick and its reported runs are in the panel of the values it picked."""
    palette = palette or Palette.of(sweep)
    report = sweep.report
    selection: dict[str, dict[str, dict[float, list[float]]]] = {}
    for record in sweep.records:
        score = record.val_score
        if score is None or record.stage == CONFIRMATION:
            continue
        arm = selection.setdefault(_selection_panel(sweep, record), {}).setdefault(_arm_name(sweep, record), {})
        arm.setdefault(record.lr, []).append(100 * score)
    if not selection:
        return "no run finished"
    picked: dict[str, dict[str, Cell]] = {}
    for cell in sweep.cells().values():
        if cell.lr is not None and cell.runs:
            picked.setdefault(_selection_panel(sweep, cell.runs[0]), {})[_arm_name(sweep, cell.runs[0])] = cell
    fig = Figure(figsize=(6 * len(selection), 8))
    axes = fig.subplots(2, len(selection), squeeze=False)
    for column, (title, arms) in enumerate(sorted(selection.items())):
        top, bottom = axes[0][column], axes[1][column]
        styles = {arm: palette.arm_style(arm) for arm in arms}
        spread = spread_for(len(arms), LR_SLOT, LR_SPREAD)
        seed_points(top, {arm: [Group(lr, values) for lr, values in sorted(by_lr.items())]
                          for arm, by_lr in arms.items()}, styles, spread)
        cells = picked.get(title, {})
        reported = {arm: [_cell_group(cells[arm], cells[arm].lr, report)]  # type: ignore[arg-type]
                    for arm in arms if arm in cells and cells[arm].values}
        seed_points(bottom, reported, styles, spread, slots=list(arms))  # each arm in its slot of the top row
        for index, arm in enumerate(arms):
            if arm in cells:
                top.plot(cells[arm].lr * 2 ** slot_shift(index, len(arms), spread), 105, marker="v",
                         color=styles[arm].color, linestyle="none")
        top.set_title(f"{title}\nselection runs: validation accuracy (▼ the rate picked)")
        top.set_ylabel("validation accuracy (%), selection runs")
        top.set_ylim(-1, 108)
        bottom.set_title("runs the tables report, at the picked rate: test accuracy", pad=COUNTS_PAD)
        bottom.set_ylabel("test accuracy (%), reported runs")
        bottom.set_ylim(-1, 101)
        rates = sorted({lr for by_lr in arms.values() for lr in by_lr})
        for ax in (top, bottom):
            ax.set_xscale("log")
            ax.set_xticks(rates, [f"{lr:.2g}" for lr in rates])
            ax.xaxis.set_minor_formatter(NullFormatter())
            ax.set_xlabel("learning rate")
            ax.set_yticks(range(0, 101, 20))
        bottom.set_xlim(top.get_xlim())
    picked_key = ("▼ the learning rate picked on the selection runs",
                  Line2D([], [], linestyle="none", marker="v", color="gray"))
    return finish(fig, [ax for line in axes for ax in line], [picked_key, *solved_key(report.plateau)])


def _cell_group(cell: Cell, x: float, report: ReportConfig) -> Group:
    """A cell's runs with a test accuracy at `x`: each in %, whether it is solved, the cell's counts above."""
    runs = [r for r in cell.runs if r.test_score is not None]
    return Group(x, [100 * r.test_score for r in runs], _solved(runs, report.threshold),  # type: ignore[operator]
                 counts_text(cell, report.threshold, report.plateau))


def kaplan_meier_plot(sweep: Sweep, palette: Palette | None = None) -> Drawing:
    """Per cell, each arm's Kaplan-Meier curve: the fraction of runs whose validation accuracy has not yet passed
    the threshold, against training steps (censored runs marked), with its 95% interval shaded. The curves of a
    panel are nudged apart vertically (at most `KM_NUDGE` between the outermost), each legend entry has its
    counts, runs that reached the threshold / runs (as in the steps table)."""
    palette = palette or Palette.of(sweep)
    threshold = sweep.report.threshold
    arms_by_panel: dict[str, dict[str, Cell]] = {}
    for cell in sweep.cells().values():
        if cell.passages(threshold):
            arms_by_panel.setdefault(_panel_name(sweep, cell.runs[0]), {})[_arm_name(sweep, cell.runs[0])] = cell
    if not arms_by_panel:
        return "no finished run has a metrics.csv"
    if not any(e.reached for arms in arms_by_panel.values() for c in arms.values() for e in c.passages(threshold)):
        return SaysNothing(f"no run reached {100 * threshold:g}% validation accuracy: every curve would stay at 1")
    fig, axes = panels(len(arms_by_panel))
    for ax, (title, arms) in zip(axes, sorted(arms_by_panel.items()), strict=True):
        step = KM_NUDGE / max(len(arms) - 1, 1)
        for index, (arm, cell) in enumerate(arms.items()):
            nudge = (index - (len(arms) - 1) / 2) * step
            events = cell.passages(threshold)
            curve = kaplan_meier(events)
            color = palette.arm_style(arm).color
            steps = [0.0, *curve.steps]  # type: ignore[union-attr]
            reached = sum(e.reached for e in events)
            ax.step(steps, [1.0 + nudge, *(f + nudge for f in curve.fraction)], where="post",  # type: ignore[union-attr]
                    label=f"{arm} ({reached}/{len(events)} reached)", color=color)
            ax.fill_between(steps, [1.0, *curve.low], [1.0, *curve.high], step="post",  # type: ignore[union-attr]
                            color=color, alpha=0.1)
            censored = [e.steps for e in events if not e.reached]
            ax.plot(censored, [_at(curve, s) + nudge for s in censored], "|", color=color, markersize=10)
        ax.set_title(title)
        ax.set_xlabel("training steps")
        ax.set_ylabel(f"fraction not yet above {100 * threshold:g}% (validation)")
        ax.set_ylim(-0.08, 1.08)
        # below the panel: inside it, the legend would hide the curves that fall to 0
        ax.legend(fontsize="small", loc="upper center", bbox_to_anchor=(0.5, -0.22), title="arm (reached/runs)",
                  title_fontsize="small")
    fig.text(0.5, 0.0, f"curves nudged apart vertically, at most {KM_NUDGE:g} between the outermost of a panel, "
             "so coinciding curves stay visible; |: censored run; shaded: 95% interval", ha="center", va="top",
             fontsize="small")
    return finish(fig, axes, legend=False)


def _at(curve, steps: float) -> float:
    """The curve's value at `steps` (a right-continuous step function)."""
    return next((f for s, f in zip(reversed(curve.steps), reversed(curve.fraction), strict=True) if s <= steps), 1.0)


def _panel_name(sweep: Sweep, record: Record) -> str:
    keys = [(k, v) for k, v in zip(sweep.row_keys, record.row, strict=True)
            if k not in (MIXER_KEY, LAMBDA_KEY) and v != "-"]  # a key the panel's mixers do not read: not named
    lines: list[str] = []
    for part in [*(f"{key_name(k)}={v}" for k, v in keys), f"d_model {record.d_model}"]:
        if lines and len(lines[-1]) + 2 + len(part) <= TITLE_WIDTH:
            lines[-1] += f", {part}"
        else:
            lines.append("\n".join(textwrap.wrap(part, TITLE_WIDTH)))  # a part too long for a line (task_args) wraps
    return ",\n".join(lines)


def _selection_panel(sweep: Sweep, record: Record) -> str:
    """`_panel_name`, and the record's values of the selected keys other than the learning rate."""
    others = [f"{key_name(k)}={v}" for k, v in zip(sweep.selected_keys, record.candidate(sweep.selected_keys),
                                                     strict=True) if k != LR_KEY]
    return "\n".join([_panel_name(sweep, record), *others])


def _arm_name(sweep: Sweep, record: Record) -> str:
    return arm_label(sweep.row_keys, record.row)


def mqar_frontier(sweep: Sweep, palette: Palette | None = None) -> Drawing:
    """MQAR: test accuracy against state size on a log axis, one series per architecture (frontier.py): all test
    sets at the state of the longest (with each cell's counts), then one panel per number of key-value pairs at
    the state of its length. The series at one state size are dodged sideways, `FRONTIER_SLOT` apart."""
    palette = palette or Palette.of(sweep)
    report = sweep.report
    series = frontier_series(sweep, sweep.cells())  # type: ignore[arg-type]
    if not series:
        return "no finished MQAR run with a state size in its result.json"
    fig, axes = panels(len(series))
    styles = {label: palette.style(row) for lines in series.values() for label, (row, _) in lines.items()}
    for ax, (panel, lines) in zip(axes, series.items(), strict=True):
        groups = {label: [Group(state, accuracies, _solved(runs, report.threshold),
                                counts_text(cell, report.threshold, report.plateau) if panel == "all" else None)
                          for state, accuracies, runs, cell in points]
                  for label, (_, points) in lines.items()}
        states = sorted({g.x for series_groups in groups.values() for g in series_groups})
        for cluster in state_clusters(states):
            near = {label: [g for g in line if g.x in cluster] for label, line in groups.items()}
            near = {label: line for label, line in near.items() if line}
            seed_points(ax, near, styles, spread_for(len(near), FRONTIER_SLOT, CLUSTER_GAP))
        ax.plot(states, [0] * len(states), linestyle="none", marker="|", markersize=12, color="gray", label=STATE_MARK)
        ax.set_xscale("log")
        ax.set_xlabel("state size (numbers per sequence, all layers)")
        ax.set_ylabel("test accuracy (%)")
        ax.set_ylim(-1, 101)
        where = "all test sets (state at the longest)" if panel == "all" else f"{panel} (state at its length)"
        ax.set_title(f"{where}; each seed, dodged", pad=COUNTS_PAD if panel == "all" else 6)
    return finish(fig, axes, solved_key(report.plateau))


def state_clusters(states: list[float]) -> list[set[float]]:
    """The sorted state sizes in runs whose neighbours are less than `CLUSTER_GAP` powers of 2 apart."""
    clusters: list[set[float]] = []
    for state in states:
        if clusters and math.log2(state / max(clusters[-1])) < CLUSTER_GAP:
            clusters[-1].add(state)
        else:
            clusters.append({state})
    return clusters


def _slice_plot(sweep: Sweep, palette: Palette, prefix: str, xlabel: str, missing: str) -> Drawing:
    """MQAR: one panel per d_model, one series per table row: each seed's test slice metric."""
    panel_series: dict[tuple[str, int], dict[str, list[Group]]] = {}
    styles = {}
    for (row, d_model), cell in sweep.cells().items():  # type: ignore[misc]
        runs = [r for r in cell.runs if r.status in FINISHED and r.task == "mqar"]
        groups = _slice_groups(runs, prefix, sweep.report.threshold, lambda a, _: 100 * a)
        if not groups:
            continue
        label = row_label(sweep.row_keys, row)
        styles[label] = palette.style(row)
        panel_series.setdefault((runs[0].task, d_model), {})[label] = groups
    if not panel_series:
        return missing
    fig, axes = panels(len(panel_series))
    for ax, (panel, series) in zip(axes, sorted(panel_series.items()), strict=True):
        seed_points(ax, series, styles)
        _log2_axis(ax, sorted({g.x for groups in series.values() for g in groups}), xlabel)
        ax.set_title(f"{panel[0]}, d_model {panel[1]} (each seed)")
        ax.set_ylabel("test accuracy (%)")
        ax.set_ylim(-1, 101)
    return finish(fig, axes, solved_key(None)[:1])


def _slice_groups(runs: list[Record], prefix: str, threshold: float,
                  value: Callable[[float, Record], float]) -> list[Group]:
    """One group per slice value (`prefix` + N in the runs' test metrics): each run's `value` there, whether the
    run is solved (over the whole test set: the one meaning of solved)."""
    by_slice: dict[int, list[tuple[float, bool]]] = {}
    for record in runs:
        for metric, accuracy in record.test.items():
            if metric.startswith(prefix) and metric[len(prefix):].lstrip("-").isdigit():
                by_slice.setdefault(int(metric[len(prefix):]), []).append(
                    (value(float(accuracy), record), run_solved(record, threshold)))
    return [Group(float(n), [v for v, _ in points], [s for _, s in points]) for n, points in sorted(by_slice.items())]


def _solved(runs: list[Record], threshold: float) -> list[bool]:
    return [run_solved(r, threshold) for r in runs]


def _log2_axis(ax, ticks: list[float], label: str) -> None:
    ax.set_xscale("log", base=2)
    ax.set_xticks(ticks)
    ax.set_xticklabels([f"{t:g}" for t in ticks])
    ax.set_xlabel(label)


def mad_tasks(sweep: Sweep, palette: Palette | None = None) -> Drawing:
    """A MAD battery (`report.mad_score`): one panel per setting (task and its arguments, at one d_model), each arm's
    reported runs as points by test accuracy, filled when solved, with the cell's counts above."""
    if not sweep.report.mad_score:
        return "not a MAD battery (report.mad_score)"
    palette = palette or Palette.of(sweep)
    report = sweep.report
    by_panel: dict[str, dict[str, list[Group]]] = {}
    styles = {}
    for cell in sweep.cells().values():
        if cell.values:
            arm = _arm_name(sweep, cell.runs[0])
            styles[arm] = palette.arm_style(arm)
            by_panel.setdefault(_panel_name(sweep, cell.runs[0]), {})[arm] = [_cell_group(cell, 1.0, report)]
    if not by_panel:
        return "no run finished"
    arms = list(dict.fromkeys(a for series in by_panel.values() for a in series))
    fig, axes = panels(len(by_panel))
    for ax, (title, series) in zip(axes, sorted(by_panel.items()), strict=True):
        seed_points(ax, series, styles, slots=arms)
        ax.set_xscale("log", base=2)
        spread = spread_for(len(arms))
        ax.set_xlim(2 ** (-spread / 2 - DODGE_MARGIN), 2 ** (spread / 2 + DODGE_MARGIN))
        ax.set_xticks([])
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_ylabel("test accuracy (%)")
        ax.set_ylim(-1, 101)
        ax.set_title(title, pad=COUNTS_PAD)
    fig.suptitle("MAD's tasks: each seed of each arm (configuration selected on validation)")
    return finish(fig, axes, solved_key(report.plateau))


PLOTS: dict[str, Callable[[Sweep, Palette], Drawing]] = {
    "acc_vs_d_model.png": acc_vs_d_model,
    "acc_vs_lr.png": acc_vs_lr,
    "mqar_acc_vs_kv_pairs.png": mqar_acc_vs_kv_pairs,
    "acc_vs_seq_len.png": acc_vs_seq_len,
    "kaplan_meier.png": kaplan_meier_plot,
    "mqar_frontier.png": mqar_frontier,
    "mad_tasks.png": mad_tasks,
    "niah_heatmap.png": niah_heatmap,
}
