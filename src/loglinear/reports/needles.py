"""Needle in a haystack by context length and needle depth: the test sets of a `niah` run that fix the needle's depth
(one per length and depth, docs/tasks.md), read as a grid, and the heatmap of each arm's mean accuracy over it."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from loglinear.protocol.results import Record, Sweep, lookup
from loglinear.reports.figures import Palette, row_label
from loglinear.runs.folder import FINISHED
from loglinear.synthetics.config import eval_set_name
from loglinear.synthetics.registry import get_task

SET_PREFIX = "test/acc/set="


def depth_grid(record: Record) -> dict[tuple[int, float], float]:
    """{(length, depth): test accuracy} over the run's test sets that fix the needle's depth; empty for a run of
    another task, one without such sets or one without a test (a single test set logs no per-set metric)."""
    if record.task != "niah" or record.status not in FINISHED or record.status == "diverged":
        return {}
    task_args: dict[str, Any] = lookup(record.config, "data.task_args") or {}
    grid = {}
    for overrides in lookup(record.config, "data.eval_sets") or []:
        overrides = dict(overrides)
        name = str(overrides.pop("name", None) or eval_set_name(overrides))
        task = get_task("niah", **{**task_args, **overrides})
        value = record.test.get(f"{SET_PREFIX}{name}")
        if task.depth is not None and value is not None:
            grid[task.seq_len, task.depth] = float(value)
    return grid


def mean_grids(sweep: Sweep) -> dict[Hashable, tuple[dict[tuple[int, float], float], int]]:
    """Per reported cell with a depth grid: the mean over its runs of each (length, depth) accuracy, and how many
    runs it averages."""
    grids = {}
    for key, cell in sweep.cells().items():
        runs = [g for g in (depth_grid(r) for r in cell.runs) if g]
        if runs:
            points = sorted(set().union(*runs))
            grids[key] = ({p: float(np.mean([g[p] for g in runs if p in g])) for p in points}, len(runs))
    return grids


def niah_heatmap(sweep: Sweep, palette: Palette | None = None) -> Figure | str:
    """One panel per arm (and d_model): its runs' mean test accuracy at each context length (columns) and needle
    depth (rows), each cell's value written in it."""
    grids = mean_grids(sweep)
    if not grids:
        return "no finished niah run tested at fixed needle depths (test sets with a depth)"
    cols = min(len(grids), 3)
    rows = -(-len(grids) // cols)
    fig = Figure(figsize=(4.6 * cols, 3.8 * rows), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False).ravel().tolist()
    for ax in axes[len(grids):]:
        ax.set_visible(False)
    image = None
    for ax, (key, (grid, runs)) in zip(axes, grids.items(), strict=False):  # the table's order of the rows
        lengths, depths = sorted({p[0] for p in grid}), sorted({p[1] for p in grid})
        values = np.full((len(depths), len(lengths)), np.nan)
        for (length, depth), accuracy in grid.items():
            values[depths.index(depth), lengths.index(length)] = 100 * accuracy
        image = ax.imshow(values, vmin=0, vmax=100, cmap="viridis", aspect="auto", origin="upper")
        for (i, j), value in np.ndenumerate(values):
            if not np.isnan(value):
                ax.text(j, i, f"{value:.0f}", ha="center", va="center", fontsize="small",
                        color="black" if value > 60 else "white")
        ax.set_xticks(range(len(lengths)), [str(n) for n in lengths])
        ax.set_yticks(range(len(depths)), [f"{100 * d:g}%" for d in depths])
        ax.set_xlabel("context length (tokens)")
        ax.set_ylabel("needle depth")
        ax.set_title(f"{_cell_label(sweep, key)}\nmean of {runs} run{'s' * (runs != 1)}", fontsize="medium")
    fig.colorbar(image, ax=axes[: len(grids)], label="test accuracy (%)", shrink=0.8)
    fig.suptitle("Needle in a haystack: accuracy by context length and needle depth (mean over seeds)")
    return fig


def _cell_label(sweep: Sweep, key: Hashable) -> str:
    row, d_model = key  # type: ignore[misc]
    return f"{row_label(sweep.row_keys, row)}, d_model {d_model}"

