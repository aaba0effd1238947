"""Which learning rates the grid extension adds (sweeps/extension.py): a cell whose pick on the selection seeds
sits at an edge of its rates gets the next rate beyond that edge (at its pick's other selected values, with
`report.select`), and so does every cell compared with it in the report, directly or through other comparisons
(log-linear mixer and base, equal-state base, λ parameterisation and default λ), so the two sides of every
comparison choose among the same candidates."""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable
from typing import Any

from loglinear.reports.frontier import equal_state_comparisons
from loglinear.reports.paired import paired_comparisons
from loglinear.reports.results import Candidate, Cell, Sweep, selection_cells
from loglinear.sweeps.extension import beyond
from loglinear.sweeps.protocol import CONFIRMATION, LR_KEY


def extension_targets(sweep: Sweep, step: float) -> list[dict[str, Any]]:
    """Each cell to extend, as one of its selection runs' varied values (seeds included) with the candidate to add
    in place of its own: for every pick at an edge, the pick with the next learning rate beyond it (`step` apart),
    for each cell of its comparison group that has not compared that candidate yet."""
    cells = selection_cells(sweep)
    groups = comparison_groups(sweep)
    wanted: dict[tuple[Hashable, Candidate], dict[str, Any]] = {}
    for key, cell in cells.items():
        if cell.edge is None:
            continue
        candidate = cell.with_lr(beyond(cell.lr, cell.edge, step))  # type: ignore[arg-type]
        for member in sorted(groups.get(key, {key}), key=str):
            runs = cells[member].runs
            if runs and candidate not in cells[member].options:
                point = runs[0].point
                values = {k: v for k, v in zip(cell.keys, candidate, strict=True) if k in point or k == LR_KEY}
                wanted.setdefault((member, candidate), {**point, **values})
    return list(wanted.values())


def comparison_groups(sweep: Sweep) -> dict[Hashable, set[Hashable]]:
    """{cell: the cells it is compared with, directly or through others, itself included}, from the comparisons
    the report makes of the selection runs; a cell in no comparison is absent."""
    selection = dataclasses.replace(sweep, records=[r for r in sweep.records if r.stage != CONFIRMATION],
                                    protocol=None)  # each cell then holds its selection runs at its pick
    cells: dict[Hashable, Cell] = selection.cells()  # type: ignore[assignment]
    groups: dict[Hashable, set[Hashable]] = {}
    for pairing in [*paired_comparisons(selection), *equal_state_comparisons(selection, cells)]:
        if pairing.keys is None:
            continue
        joined = set().union(*(groups.get(key, {key}) for key in pairing.keys))
        for key in joined:
            groups[key] = joined
    return groups
