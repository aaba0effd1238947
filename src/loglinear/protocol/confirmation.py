"""The second stage of a two-stage sweep: each cell's configuration at the candidate its selection runs pick
(protocol/results.py, `selection_cells`), on every confirmation seed."""

from __future__ import annotations

from typing import Any

from loglinear.protocol.results import Sweep, selection_cells
from loglinear.sweeps.spec import Run, SweepSpec, confirmation_points, expand


def selected_points(sweep: Sweep) -> list[dict[str, Any]]:
    """What a two-stage sweep confirms: the varied values of each cell's runs at the learning rate chosen on the
    selection runs alone (confirmation runs, whatever their results, take no part), seeds included."""
    return [cell.runs[0].point for cell in selection_cells(sweep).values() if cell.lr is not None and cell.runs]


def confirmation_runs(spec: SweepSpec, sweep: Sweep) -> list[Run]:
    """The second stage of a two-stage sweep: each cell's configuration at the rate its selection runs in `sweep`
    pick (`selected_points`), on every confirmation seed."""
    return expand(spec, confirmation_points(spec, selected_points(sweep)))
