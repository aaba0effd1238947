"""MQAR at the moment of recall, per table cell (the runs it reports, at its selected learning rate): test
accuracy by the Fenwick level that held the recalled key and by the key-to-query distance, and the state the
decoder held at the query positions, from each run's result.json `recall` (runs/recall_levels.py).

`recall.md` holds the tables, `mqar_recall.png` the plot (distance for every arm, level for the log-linear
ones: a base mixer has one state, so its "level" is only where the key stood; under each point, the number of
queries it rests on); results.csv gets the state columns `RECALL_COLUMNS`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from loglinear.protocol.results import Record, Sweep, is_log_linear
from loglinear.reports.figures import (
    Group,
    Palette,
    counts_pad,
    finish,
    panels,
    run_solved,
    save_figure,
    seed_points,
    solved_key,
)
from loglinear.reports.tables import markdown_table, mean_std_text
from loglinear.runs.folder import FINISHED, write_text_atomic

TABLE = "recall.md"
PLOT = "mqar_recall.png"
RECALL_COLUMNS = ("state_at_recall_per_layer", "state_at_recall_total")
KINDS = ("by_level", "by_distance")
"""results.csv: the numbers a run's decoder holds at its test queries, averaged over them (one layer, all)."""


def recall_state(record: Record) -> dict[str, float | None]:
    """The RECALL_COLUMNS of one run (None without a `recall` in its result.json)."""
    state = (record.result.get("recall") or {}).get("state_at_recall") or {}
    return {f"state_at_recall_{kind}": state.get(kind) for kind in ("per_layer", "total")}


def recall_groups(record: Record) -> dict[str, Any] | None:
    """The run's recalled keys counted by level and by distance (`by_level`, `by_distance`: {label: [right,
    scored]}), None without a `recall` in its result.json."""
    recall = record.result.get("recall") or {}
    groups = {kind: recall[kind] for kind in KINDS if recall.get(kind)}
    return groups or None


def accuracy_by(record: Record, kind: str) -> dict[str, float]:
    """{label: test accuracy} over the run's recalled keys grouped by `kind` (`by_level` or `by_distance`)."""
    groups = (record.result.get("recall") or {}).get(kind) or {}
    return {label: right / scored for label, (right, scored) in groups.items() if scored}


def recall_cells(sweep: Sweep) -> dict[str, list[Record]]:
    """{row label: the finished runs with a `recall` record} for each cell of the main table, in its order."""
    return {label: runs for label, (_, runs) in _recall_rows(sweep).items()}


def _recall_rows(sweep: Sweep) -> dict[str, tuple[tuple[str, ...], list[Record]]]:
    """`recall_cells` with each cell's table row."""
    table = sweep.cells()
    several_widths = len({d_model for _, d_model in table}) > 1  # type: ignore[misc]
    cells = {}
    for (row, d_model), cell in table.items():  # type: ignore[misc]
        runs = [r for r in cell.runs if r.status in FINISHED and recall_groups(r)]
        if runs:
            cells[" / ".join(row) + (f", d_model {d_model}" if several_widths else "")] = (row, runs)
    return cells


def recall_tables(sweep: Sweep) -> str | None:
    """The two tables of recall.md (None without recall records): mean (std) over seeds, in %."""
    cells = recall_cells(sweep)
    if not cells:
        return None
    parts = [f"# {sweep.name}: accuracy at the moment of recall\n",
             "Test accuracy (%) over the recalled keys grouped by where each stood at its query, mean (std) over "
             "the seeds a cell reports; state at recall: numbers one layer's decoder holds at the query positions "
             "(log-linear: the Fenwick levels occupied there), averaged over the queries.\n"]
    for kind, title in (("by_distance", "key-to-query distance"), ("by_level", "Fenwick level of the key")):
        labels = sorted({lab for runs in cells.values() for r in runs for lab in accuracy_by(r, kind)},
                        key=lambda lab: int(lab.split("-")[0]))
        header = ["arm", "state at recall / layer", *labels]
        rows = []
        for name, runs in cells.items():
            states = [s for s in (recall_state(r)["state_at_recall_per_layer"] for r in runs) if s is not None]
            values = [accuracy_by(r, kind) for r in runs]
            rows.append([name, mean_std_text(states, scale=1.0, digits=0)]
                        + [mean_std_text([v[lab] for v in values if lab in v]) for lab in labels])
        parts += [f"## By {title}\n", markdown_table(header, rows)]
    return "\n".join(p.rstrip("\n") + "\n" for p in parts)


def recall_plot(sweep: Sweep, palette: Palette | None = None) -> Any:
    """Accuracy against distance (every arm) and against level (log-linear arms), each arm in its report colour in
    both panels, each seed a point (filled when its run is solved) with the number of queries it rests on below
    it; a reason string without data. Level l is drawn at distance 2^(l-1), the nearest its keys can be, so both
    panels share the distance axis."""
    cells = _recall_rows(sweep)
    if not cells:
        return "no finished MQAR run with a recall record in its result.json"
    palette = palette or Palette.of(sweep)
    styles = {name: palette.style(row) for name, (row, _) in cells.items()}
    fig, axes = panels(2)
    for ax, kind, xlabel in ((axes[0], "by_distance", "key-to-query distance"),
                             (axes[1], "by_level", "Fenwick level of the key at the query")):
        series = {name: _seed_groups(runs, kind, sweep.report.threshold) for name, (_, runs) in cells.items()
                  if kind == "by_distance" or is_log_linear(runs[0].mixer)}
        seed_points(ax, series, styles)
        above = [group.above for groups in series.values() for group in groups if group.above]
        labels = sorted({lab for _, runs in cells.values() for r in runs for lab in accuracy_by(r, kind)},
                        key=_low_end)
        ax.set_xscale("log", base=2)
        ax.set_xticks([_position(lab, kind) for lab in labels], labels)
        ax.minorticks_off()
        ax.set_xlabel(xlabel)
        ax.set_ylabel("test accuracy (%)")
        ax.set_ylim(0, 101)
        ax.set_title("each seed; above it: queries per seed (n, or its range over the seeds)", pad=counts_pad(above))
    return finish(fig, axes, solved_key(None)[:1])


def _low_end(label: str) -> int:
    return int(label.split("-")[0])


def _position(label: str, kind: str) -> float:
    """Where a bucket sits on the distance axis: a distance bucket at its low end, level l at 2^(l-1)."""
    return float(_low_end(label)) if kind == "by_distance" else 2.0 ** (_low_end(label) - 1)


def _seed_groups(runs: list[Record], kind: str, threshold: float) -> list[Group]:
    """A group per bucket of `kind`: every seed's accuracy in %, whether its run is solved, and above it how many
    queries each seed scored there (`n=40`, or `n=31-45` when the seeds differ)."""
    groups = [(r, (r.result.get("recall") or {}).get(kind) or {}) for r in runs]
    labels = sorted({lab for _, by in groups for lab, (_, scored) in by.items() if scored}, key=_low_end)
    made = []
    for lab in labels:
        scored = [(r, by[lab]) for r, by in groups if lab in by and by[lab][1]]
        counts = sorted(n for _, (_, n) in scored)
        above = f"n={counts[0]}" if counts[0] == counts[-1] else f"n={counts[0]}-{counts[-1]}"
        made.append(Group(_position(lab, kind), [100 * right / n for _, (right, n) in scored],
                          [run_solved(r, threshold) for r, _ in scored], above))
    return made


def write_recall_report(sweep: Sweep, out: Path, palette: Palette | None = None) -> list[Path]:
    """Write recall.md and mqar_recall.png when the sweep's runs recorded their recall; the files written."""
    tables = recall_tables(sweep)
    if tables is None:
        return []
    write_text_atomic(out / TABLE, tables)
    return [out / TABLE, save_figure(recall_plot(sweep, palette), out / PLOT, dpi=120)]
