"""What every figure of a report shares: one colour per arm and one marker per variant for the whole report folder
(`Palette`), every seed drawn as a point with whether its run is solved (`seed_points`), the panels, the legend
and the atomic PNG write. matplotlib's object API with the Agg canvas: no pyplot, no global state.

An arm is what the comparisons compare: the architecture with its λ parameterisation (`MIXER_KEY`, `LAMBDA_KEY`).
A variant is the rest of a table row (an initialisation, a key dimension): rows of one arm that differ there share
the arm's colour and are told apart by the marker. Outcomes are bimodal (a run stays on a plateau or solves the
task), so no figure draws a median or a mean through a cell: each seed is a point, filled when its run is solved
(`run_solved`, the tables' own count), hollow when not, with the cell's counts `k/n` written above it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from loglinear.protocol.results import HEADERS, LAMBDA_KEY, MIXER_KEY, Cell, Record, Sweep
from loglinear.runs.folder import write_atomic

ARM_KEYS = (MIXER_KEY, LAMBDA_KEY)
TAB10 = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
         "#17becf")
"""matplotlib's default cycle, for up to 10 arms."""
DISTINCT = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#000000", "#17becf", "#8c564b", "#e377c2",
            "#7f7f7f", "#bcbd22", "#000075", "#800000", "#808000", "#469990", "#f032e6", "#9a6324", "#3cb44b",
            "#4363d8", "#e6194b")
"""20 saturated colours, no two of one hue in light and dark (as tab20's pairs are), for 11 to 20 arms."""
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
SPREAD = 0.5
"""How far apart (in powers of 2 along a log x axis) the outermost seeds of all series at one x are drawn, at
least; `SLOT` per series when there are more, up to `MAX_SPREAD` (an octave apart, neighbours stay apart)."""
SLOT, MAX_SPREAD = 0.1, 0.9
COUNTS_PAD = 40
"""Points between a panel and its title, room for the counts written above the groups."""
COUNTS_CHAR = 3.6
"""Points one character of those counts takes, written upright in 6-point type."""
POINTS_NOTE = "points: seeds, filled when the run is solved, hollow when not"


def counts_pad(labels: list[str]) -> float:
    """Points between a panel and its title so that the longest of the counts above its groups stays below it."""
    return max([COUNTS_PAD] + [COUNTS_CHAR * len(label) + 8 for label in labels])


@dataclass(frozen=True)
class Style:
    color: str
    marker: str


@dataclass(frozen=True)
class Palette:
    """One colour per arm and one marker per variant, computed once from the sweep's rows (in table order), so an
    arm looks the same in every figure of its report folder, whichever rows or panels a figure shows."""

    row_keys: tuple[str, ...]
    colors: dict[str, str]
    markers: dict[tuple[str, ...], str]

    @classmethod
    def of(cls, sweep: Sweep) -> Palette:
        keys = tuple(sweep.row_keys)
        rows = list(dict.fromkeys(r.row for r in sweep.records))
        arms = list(dict.fromkeys(arm_label(keys, row) for row in rows))
        variants = list(dict.fromkeys(_variant(keys, row) for row in rows))
        cycle = TAB10 if len(arms) <= len(TAB10) else DISTINCT
        return cls(keys, {arm: cycle[i % len(cycle)] for i, arm in enumerate(arms)},
                   {variant: MARKERS[i % len(MARKERS)] for i, variant in enumerate(variants)})

    def style(self, row: tuple[str, ...]) -> Style:
        return Style(self.colors[arm_label(self.row_keys, row)], self.markers[_variant(self.row_keys, row)])

    def arm_style(self, arm: str) -> Style:
        """An arm's colour with the first marker: for figures whose panels already split the variants."""
        return Style(self.colors[arm], MARKERS[0])


def arm_label(row_keys: Iterable[str], row: tuple[str, ...]) -> str:
    """`Log-Linear Mamba-2 / softplus`: the row's architecture and λ (when the sweep varies it)."""
    return " / ".join(v for k, v in zip(row_keys, row, strict=True) if k in ARM_KEYS and v != "-")


def row_label(row_keys: Iterable[str], row: tuple[str, ...], skip: Iterable[str] = ()) -> str:
    """A legend's name of a table row: its arm, then its other keys by name, `Mamba-2 (state_dim=8)`, without the
    keys in `skip` and those that do not apply to the row's mixer (`-` in the table: attention has no eigenvalues
    and reads no Mamba-2 init option)."""
    skip = set(skip)
    rest = [f"{key_name(k)}={v}" for k, v in zip(row_keys, row, strict=True)
            if k not in ARM_KEYS and k not in skip and v != "-"]
    arm = arm_label(row_keys, row)
    return f"{arm} ({', '.join(rest)})" if rest else arm


def key_name(key: str) -> str:
    """A row key as tables and titles name it: `eigenvalues`, `state_dim`."""
    return HEADERS.get(key, key.rsplit(".", 1)[-1])


def _variant(row_keys: Iterable[str], row: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(v for k, v in zip(row_keys, row, strict=True) if k not in ARM_KEYS)


def run_solved(record: Record, threshold: float) -> bool:
    """Whether the run is solved at the report's `threshold` (`Record.solved`, the tables' own count), so a point
    is filled exactly when the table counts its run."""
    return record.solved(threshold) is True


def counts_text(cell: Cell, threshold: float, plateau: float | None) -> str:
    """`k/n` runs solved, the tables' count (`Cell.solved`); `k/n | e/n` with the escaped ones (`Cell.escaped`)
    when the report has a plateau threshold."""
    solved = cell.solved(threshold)
    text = f"{sum(solved)}/{len(solved)}"
    if plateau is None:
        return text
    escaped = cell.escaped(plateau, threshold)
    return f"{text} | {sum(escaped)}/{len(escaped)}"


def counts_note(plateau: float | None) -> str:
    return "k/n above a group: runs solved" + ("" if plateau is None else " | runs escaped the plateau")


@dataclass
class Group:
    """One cell's seeds at one x: their values, whether each run is solved (None: not marked, drawn small and light,
    as the selection runs are), and a text written above the panel at the group's place (its counts, or what its
    points rest on)."""

    x: float
    values: list[float]
    solved: list[bool] | None = None
    above: str | None = None


def spread_for(count: int, slot: float = SLOT, most: float = MAX_SPREAD) -> float:
    """The width (powers of 2) over which `count` series at one x are dodged: see `SPREAD`."""
    return min(max(SPREAD, slot * count), most)


def seed_points(ax, series: dict[str, list[Group]], styles: dict[str, Style], spread: float | None = None,
                slots: list[str] | None = None) -> None:
    """Each series' seeds as points on a log x axis, no line through them. The series at one x sit side by side
    (series i of n at a factor 2**slot_shift(i, n, spread)), and the seeds of one group spread within its slot in
    the order of their values, so no seed hides another; the values are never moved. Each series gets a legend
    entry (an empty line with its colour and marker). `spread`: default `spread_for` the number of slots; `slots`:
    the labels whose slots to lay out (default: the series'), so a series keeps its place beside another panel's."""
    slots = list(series) if slots is None else slots
    spread = spread_for(len(slots)) if spread is None else spread
    slot = spread / max(len(slots), 1)
    for label, groups in series.items():
        style, shift = styles[label], slot_shift(slots.index(label), len(slots), spread)
        ax.plot([], [], linestyle="none", marker=style.marker, color=style.color, label=label)
        filled, hollow, plain = ([], []), ([], []), ([], [])
        for group in groups:
            x = group.x * 2**shift
            order = sorted(range(len(group.values)), key=lambda i: group.values[i])
            for rank, i in enumerate(order):
                offset = 0.0 if len(order) == 1 else (rank / (len(order) - 1) - 0.5) * 0.8 * slot
                target = plain if group.solved is None else filled if group.solved[i] else hollow
                target[0].append(group.x * 2 ** (shift + offset))
                target[1].append(group.values[i])
            if group.above:
                ax.annotate(group.above, (x, 1.0), xycoords=("data", "axes fraction"), textcoords="offset points",
                            xytext=(0, 2), rotation=90, ha="center", va="bottom", fontsize=6, color=style.color)
        ax.scatter(*filled, s=14, marker=style.marker, color=style.color, alpha=0.8, linewidths=0, zorder=3)
        ax.scatter(*plain, s=10, marker=style.marker, color=style.color, alpha=0.45, linewidths=0, zorder=3)
        ax.scatter(*hollow, s=14, marker=style.marker, facecolors="none", edgecolors=style.color, alpha=0.9,
                   linewidths=0.9, zorder=3)


def slot_shift(index: int, count: int, spread: float) -> float:
    """Where the `index`-th of `count` series sits around a shared x, in powers of 2 (see `seed_points`)."""
    return (index - (count - 1) / 2) * spread / max(count, 1)


def solved_key(plateau: float | None) -> list[tuple[str, Line2D]]:
    """Legend entries saying what a filled and a hollow point and the counts mean."""
    return [(POINTS_NOTE, Line2D([], [], linestyle="none")), (counts_note(plateau), Line2D([], [], linestyle="none"))]


def panels(n: int) -> tuple[Figure, list]:
    cols = min(n, 3)
    rows = math.ceil(n / cols)
    fig = Figure(figsize=(6 * cols, 4.2 * rows))
    axes = fig.subplots(rows, cols, squeeze=False).ravel().tolist()
    for ax in axes[n:]:
        ax.set_visible(False)
    return fig, axes[:n]


def finish(fig: Figure, axes: list, extra: list[tuple[str, object]] = (), legend: bool = True) -> Figure:
    """Grids, one figure legend below the panels (every panel's entries, each label once, then `extra`), a tight
    layout; `legend=False` for figures whose panels carry their own."""
    for ax in axes:
        ax.grid(True, alpha=0.3)
    if legend:
        entries: dict[str, object] = {}
        for ax in axes:
            for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
                entries.setdefault(label, handle)
        for label, handle in extra:
            entries.setdefault(label, handle)
        fig.legend(list(entries.values()), list(entries), loc="upper center", bbox_to_anchor=(0.5, 0.0),
                   ncol=min(3, max(1, len(entries))), fontsize="small")
    fig.tight_layout()
    return fig


def save_figure(fig: Figure, path: Path, dpi: int) -> Path:
    """Write `fig` as a PNG at `path` through a temporary file and a rename: an interrupted or failed write
    (Ctrl-C, a full disk) leaves the previous figure whole."""
    FigureCanvasAgg(fig)
    write_atomic(path, lambda f: fig.savefig(f, format="png", dpi=dpi, bbox_inches="tight"))
    return path
