"""Figures of lambda per Fenwick level: one run's (`loglinear inspect`) and, per sweep cell, the lambda
parameterisations side by side with their accuracy, each seed drawn, and for MQAR the effective weight per level at
the recall positions (reports/lambda_recall.py) (`loglinear sweep report OUT --lambda`).

Each cell's figure carries the λ = 1 control the study's conclusions rest on: λ = 1 on every level is exactly the
base mixer (the `constant` parameterisation), so the λ row has a reference line at 1, the title the base mixer's
accuracy (the same other row keys and d_model, at its own selected learning rate), and for MQAR a row compares
the share of the output the key's level carries with the same share at λ = 1 (the readout norms alone).

matplotlib's object API with the Agg canvas (no pyplot, no global state), as reports/figures.py.
"""

from __future__ import annotations

import math
import re
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import numpy as np
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from loglinear.models.lambda_levels import LevelRow
from loglinear.protocol.results import (
    LAMBDA_KEY,
    MIXER_KEY,
    Record,
    Sweep,
    base_mixer,
    display_name,
    is_log_linear,
    load_sweep,
)
from loglinear.reports import lambda_recall
from loglinear.reports.figures import save_figure
from loglinear.reports.lambda_inspect import (
    CHECKPOINT,
    LEVELS_CSV,
    LEVELS_PNG,
    PROBE_SEQUENCES,
    InspectError,
    Inspection,
    inspect_run,
    read_csv,
)
from loglinear.reports.lambda_recall import RECALL_CSV, RecallRow, recall_section
from loglinear.reports.recall_levels import accuracy_by
from loglinear.reports.tables import mean_std_text
from loglinear.runs.folder import FINISHED, write_text_atomic
from loglinear.sweeps.manifest import run_dir

REPORT = "lambda_levels.md"
T = TypeVar("T")
DPI = 100


def run_figure(rows: list[LevelRow], title: str) -> Figure:
    """Per layer (columns): mean lambda by level, one line per head with q25-q75 shaded; below, the mean
    effective weight by level (when measured)."""
    layers = sorted({r.layer for r in rows})
    with_effective = any(not math.isnan(r.effective_mean) for r in rows)
    n_rows = 2 if with_effective else 1
    fig = Figure(figsize=(3.4 * len(layers), 2.7 * n_rows + 0.4))
    axes = fig.subplots(n_rows, len(layers), squeeze=False)
    for col, layer in enumerate(layers):
        mine = [r for r in rows if r.layer == layer]
        for head in sorted({r.head for r in mine}):
            line = sorted((r for r in mine if r.head == head), key=lambda r: r.level)
            levels = [r.level for r in line]
            drawn = axes[0, col].plot(levels, [r.mean for r in line], marker="o", markersize=3, label=f"head {head}")
            axes[0, col].fill_between(levels, [r.quantiles[0.25] for r in line], [r.quantiles[0.75] for r in line],
                                      color=drawn[0].get_color(), alpha=0.2, linewidth=0)
            if with_effective:
                axes[1, col].plot(levels, [r.effective_mean for r in line], marker="o", markersize=3,
                                  color=drawn[0].get_color())
        axes[0, col].set_title(f"layer {layer}", fontsize="medium")
        axes[0, col].set_ylabel("lambda (mean, q25-q75)" if col == 0 else "")
        if with_effective:
            axes[1, col].set_ylabel("effective weight" if col == 0 else "")
            axes[1, col].set_ylim(bottom=0)
        axes[-1, col].set_xlabel("level (0 = the token itself)")
    for ax in axes.ravel():
        ax.grid(True, alpha=0.3)
        ax.xaxis.get_major_locator().set_params(integer=True)
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(8, len(labels)), fontsize="small",
               bbox_to_anchor=(0.5, -0.02))
    fig.suptitle(title, fontsize="medium")
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    return fig


@dataclass
class Profile:
    """One run's level profile: mean over layers and heads of each level's mean lambda and effective weight; for
    MQAR, per key level, the share the key's level carries at the recall positions and the same share at λ = 1
    (mean over layers and heads; empty without a recall table)."""

    levels: list[int]
    lam: list[float]
    effective: list[float]
    key_levels: list[int] = field(default_factory=list)
    key_share: list[float] = field(default_factory=list)
    key_share_at_one: list[float] = field(default_factory=list)


def profile_of(rows: list[LevelRow], recall: list[RecallRow] = ()) -> Profile:
    levels = sorted({r.level for r in rows})
    lam = [float(np.mean([r.mean for r in rows if r.level == lv])) for lv in levels]
    effective = [_nanmean([r.effective_mean for r in rows if r.level == lv]) for lv in levels]
    own = [r for r in recall if r.level == r.key_level]
    key_levels = sorted({r.key_level for r in own})
    return Profile(levels, lam, effective, key_levels,
                   [_nanmean([r.effective_mean for r in own if r.key_level == k]) for k in key_levels],
                   [_nanmean([r.uniform_mean for r in own if r.key_level == k]) for k in key_levels])


CONTROL_LABEL = "λ = 1 on every level (the base mixer)"
CONTROL_KEY = f"dashed: the control, {CONTROL_LABEL}; bottom row: the key level's share at λ = 1"
CONTROL_STYLE = {"color": "gray", "linestyle": "--"}


def cell_figure(title: str, profiles: dict[str, list[Profile]], accuracy: dict[str, str],
                control: str | None = None) -> Figure:
    """One cell: a column per lambda parameterisation (its accuracy in the title), lambda above (the λ = 1 control
    dashed) and the effective weight below, and for MQAR runs a third row: the share of the output carried by the
    key's level at the recall positions, by key level, beside the same share at λ = 1 (dashed); each run (seed)
    its own thin line, the median over them bold, so no seed is hidden. `control`: the base mixer's accuracy."""
    with_recall = any(p.key_levels for runs in profiles.values() for p in runs)
    rows = 3 if with_recall else 2
    fig = Figure(figsize=(2.8 * len(profiles) + 0.6, 2.7 * rows + 0.6))
    axes = fig.subplots(rows, len(profiles), squeeze=False, sharey="row")
    for col, (name, runs) in enumerate(profiles.items()):
        _seed_lines(axes[0, col], runs, lambda p: p.levels, lambda p: p.lam)
        axes[0, col].axhline(1.0, linewidth=1.2, **CONTROL_STYLE)
        _seed_lines(axes[1, col], runs, lambda p: p.levels, lambda p: p.effective)
        axes[0, col].set_title(f"{name}: {accuracy[name]}", fontsize="small")
        axes[1, col].set_xlabel("level (0 = the token itself)")
        if with_recall:
            _seed_lines(axes[2, col], runs, lambda p: p.key_levels, lambda p: p.key_share_at_one, **CONTROL_STYLE)
            _seed_lines(axes[2, col], runs, lambda p: p.key_levels, lambda p: p.key_share)
            axes[2, col].set_xlabel("level holding the recalled key")
    axes[0, 0].set_ylabel("lambda (mean over layers, heads)")
    axes[1, 0].set_ylabel("effective weight (mean)")
    axes[1, 0].set_ylim(bottom=0)
    if with_recall:
        axes[2, 0].set_ylabel("key level's share at recall")
        axes[2, 0].set_ylim(bottom=0)
    for ax in axes.ravel():
        ax.grid(True, alpha=0.3)
        ax.xaxis.get_major_locator().set_params(integer=True)
    key = CONTROL_KEY if with_recall else f"dashed: {CONTROL_LABEL}"
    fig.legend([Line2D([], [], linewidth=1.2, **CONTROL_STYLE)], [key], loc="upper center", bbox_to_anchor=(0.5, 0.0),
               fontsize="small")
    base = "" if control is None else f"\ncontrol, {CONTROL_LABEL}: {control}"
    fig.suptitle(f"{title} (thin: one seed each; bold: median; λ: test accuracy % (std)){base}", fontsize="medium")
    fig.tight_layout()
    return fig


def _seed_lines(ax, runs: list[Profile], levels_of: Callable[[Profile], list[int]],
                values_of: Callable[[Profile], list[float]], **style) -> None:
    """Each run's values by level as a thin line (the cycle's colours, or `style`), their median bold (black, or
    `style`'s colour)."""
    levels = sorted({lv for p in runs for lv in levels_of(p)})
    table = np.full((len(runs), len(levels)), np.nan)
    for i, p in enumerate(runs):
        for lv, v in zip(levels_of(p), values_of(p), strict=True):
            table[i, levels.index(lv)] = v
        ax.plot(levels, table[i], marker="o", markersize=2, linewidth=0.8, alpha=0.6, **style)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a level no run measured: its median is NaN, not drawn
        ax.plot(levels, np.nanmedian(table, axis=0), linewidth=2, **{"color": "black", **style})


def inspect_and_plot(run_dir: str | Path, device: str = "auto", max_batches: int | None = None,
                     probe_sequences: int = PROBE_SEQUENCES) -> Inspection:
    """`inspect_run`, then the run's figure beside its table: what `loglinear inspect RUN_DIR` writes."""
    inspection = inspect_run(run_dir, device, max_batches, probe_sequences)
    figure = run_figure(inspection.rows, inspection.title)
    inspection.written.append(save_figure(figure, Path(run_dir) / LEVELS_PNG, DPI))
    return inspection


def write_lambda_report(out: str | Path, device: str = "auto") -> tuple[list[Path], dict[str, str]]:
    """Inspect every finished log-linear run the cells report (each λ at its selected learning rate; reusing the
    tables newer than the run's checkpoint) and write one figure per cell and `lambda_levels.md`; returns
    (written, {what: why skipped})."""
    out = Path(out)
    sweep = load_sweep(out)
    records = [r for r in sweep.records if is_log_linear(r.mixer)]
    if not records:
        return [], {"lambda figures": "the sweep has no log-linear run"}
    cells = {key: sweep.select(cell_records, lambda r: str(r.get(LAMBDA_KEY)))
             for key, cell_records in _cells(sweep, records).items()}
    profiles: dict[str, Profile] = {}
    recalls: dict[str, list[RecallRow]] = {}
    skipped: dict[str, str] = {}
    for record in (r for by_lambda in cells.values() for cell in by_lambda.values() for r in cell.runs):
        folder = run_dir(out, record.run_id)
        if record.status not in FINISHED:
            skipped[f"runs/{record.run_id}"] = f"not finished ({record.status})"
            continue
        try:
            rows = _saved_rows(folder, LEVELS_CSV, read_csv)
            recall = _saved_rows(folder, RECALL_CSV, lambda_recall.read_csv) if record.task == "mqar" else []
            if rows is None or recall is None:
                inspection = inspect_and_plot(folder, device)
                rows, recall = inspection.rows, inspection.recall_rows
        except InspectError as e:
            skipped[f"runs/{record.run_id}"] = str(e)
            continue
        profiles[record.run_id] = profile_of(rows, recall)
        recalls[record.run_id] = recall
    written, sections = [], [f"# {sweep.name}: lambda by Fenwick level\n", NOTE]
    for (title, slug), by_lambda in cells.items():
        shown = {name: [profiles[r.run_id] for r in cell.runs if r.run_id in profiles]
                 for name, cell in by_lambda.items()}
        shown = {name: runs for name, runs in shown.items() if runs}
        if not shown:
            skipped[title] = "no run of the cell could be inspected"
            continue
        accuracy = {name: mean_std_text(by_lambda[name].values) for name in shown}
        control = control_accuracy(sweep, next(r for cell in by_lambda.values() for r in cell.runs))
        path = save_figure(cell_figure(title, shown, accuracy, control), out / f"lambda_{slug}.png", DPI)
        written.append(path)
        sections.append(_section(title, path.name, by_lambda, shown, accuracy))
        sections += [_recall_part(name, cell.runs, recalls) for name, cell in by_lambda.items()
                     if any(recalls.get(r.run_id) for r in cell.runs)]
    report = out / REPORT
    write_text_atomic(report, "\n".join(sections))
    return [report, *written], skipped


def _saved_rows(folder: Path, name: str, reader: Callable[[Path], list[T]]) -> list[T] | None:
    """The rows of the run's table `name` when it is newer than its checkpoint and whole; None (inspect again)
    when it is older, missing, empty or unreadable."""
    csv_path, checkpoint = folder / name, folder / CHECKPOINT
    try:
        if csv_path.stat().st_mtime < checkpoint.stat().st_mtime:
            return None
        return reader(csv_path) or None
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _recall_part(name: str, runs: list[Record], recalls: dict[str, list[RecallRow]]) -> str:
    """One λ parameterisation's table of effective weights at the recall positions (reports/lambda_recall.py)."""
    measured = [r for r in runs if recalls.get(r.run_id)]
    accuracy: dict[str, list[float]] = {}
    for record in measured:
        for label, value in accuracy_by(record, "by_level").items():
            accuracy.setdefault(label, []).append(value)
    return (f"### λ {name}: effective weight per level at the recall positions ({len(measured)} runs)\n\n"
            + recall_section([recalls[r.run_id] for r in measured], accuracy))


NOTE = (
    "Per cell (every varied key but λ, the learning rate and the seed), each λ parameterisation at its best "
    "learning rate (selected on validation): the mean over its seeds of each run's level profile "
    "(lambda averaged over layers, heads and the validation tokens where the level is occupied; "
    "each seed its own line in the figure, the median bold), and the effective weight (lambda times the level's "
    "readout norm, as a share of the output). Accuracy: test accuracy at that learning rate, mean (std) over "
    "seeds. MQAR: then, per λ, the effective weight of each level at the query positions, grouped by the level "
    "that held the recalled key (mean (std) over seeds of each run's mean over heads and queries; the key's own "
    "level in bold), beside the test accuracy of the queries whose key sat in that level. "
    "The figures carry the λ = 1 control, which is exactly the base mixer: a dashed line at λ = 1, the base "
    "mixer's test accuracy in the title and, for MQAR, the key level's share at λ = 1 (dashed) beside its share "
    "as trained. Per-run tables: runs/<id>/lambda_levels.csv, runs/<id>/lambda_recall.csv.\n"
)


def control_accuracy(sweep: Sweep, record: Record) -> str | None:
    """The test accuracy, mean (std), of the λ = 1 control of `record`'s cell: the base mixer's runs with the same
    other row keys and d_model, at their own selected learning rate (None when the sweep has none)."""
    keys = [i for i, k in enumerate(sweep.row_keys) if k not in (MIXER_KEY, LAMBDA_KEY)]
    base = [r for r in sweep.records if r.mixer == base_mixer(record.mixer) and r.d_model == record.d_model
            and all(r.row[i] == record.row[i] for i in keys)]
    cells = sweep.select(base, lambda r: r.row)
    values = [v for cell in cells.values() for v in cell.values]
    return f"{display_name(base[0].mixer)} {mean_std_text(values)}" if values and len(cells) == 1 else None


def _cells(sweep: Sweep, records: list[Record]) -> dict[tuple[str, str], list[Record]]:
    """Records grouped by every row key but λ, and d_model: {(title, file slug): records}."""
    keys = [k for k in sweep.row_keys if k != LAMBDA_KEY]
    cells: dict[tuple[str, str], list[Record]] = {}
    for r in records:
        values = [r.row[sweep.row_keys.index(k)] for k in keys]
        title = ", ".join([*values, f"d_model {r.d_model}"])
        slug_parts = [str(r.get(MIXER_KEY)), *values[1:], f"d{r.d_model}"]
        slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", "_".join(slug_parts)).strip("_")
        cells.setdefault((title, slug), []).append(r)
    return cells


def _section(title: str, image: str, by_lambda, shown: dict[str, list[Profile]], accuracy: dict[str, str]) -> str:
    levels = sorted({lv for runs in shown.values() for p in runs for lv in p.levels})
    lines = [f"## {title}\n", f"![lambda by level]({image})\n",
             "| λ | lr | accuracy (%) | runs | " + " | ".join(f"level {lv}" for lv in levels) + " |",
             "|" + "---|" * (4 + len(levels))]
    for name, runs in shown.items():
        mean_by_level = []
        for lv in levels:
            values = [v for p in runs for l2, v in zip(p.levels, p.lam, strict=True) if l2 == lv]
            mean_by_level.append(f"{np.mean(values):.3g}" if values else "")
        lines.append(f"| {name} | {by_lambda[name].pick_text} | {accuracy[name]} | {len(runs)} | "
                     + " | ".join(mean_by_level) + " |")
    return "\n".join(lines) + "\n"


def _nanmean(values: list[float]) -> float:
    finite = [v for v in values if not math.isnan(v)]
    return float(np.mean(finite)) if finite else float("nan")
