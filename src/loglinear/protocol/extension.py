"""The two-stage protocol's grid extension: a cell whose learning rate, picked on the selection seeds, sits at an
edge of the rates it compared did not have its optimum inside the grid, so it gets one more rate beyond that edge
on the selection seeds (at its pick's other selected values, with `report.select`), before any confirmation run,
until its pick is interior or it has had `protocol.extensions` of them (docs/reports.md, "Learning rates at the
edge of the grid"); so does every cell compared with it in the report, directly or through other comparisons
(log-linear mixer and base, equal-state base, λ parameterisation and default λ: protocol/compared.py), so the two
sides of every comparison choose among the same candidates.

The step is the spec's own grid ratio when its learning rates are evenly spaced on a log scale (within
RATIO_TOLERANCE), else half a decade; the new rate is rounded to 3 significant digits.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Hashable, Mapping
from typing import Any

from loglinear.protocol.compared import equal_state_arms, paired_arms
from loglinear.protocol.results import Candidate, Cell, Sweep, selection_cells
from loglinear.sweeps.spec import SweepSpec, points
from loglinear.sweeps.spec_keys import CONFIRMATION, LR_KEY, SEED_KEYS, SELECTION, seed_point

HALF_DECADE = math.sqrt(10.0)
RATIO_TOLERANCE = 0.01
EDGES = ("lowest", "highest")


def grid_step(spec: SweepSpec) -> float:
    """The factor between neighbouring learning rates of the spec when they are evenly spaced on a log scale,
    else half a decade (also for a spec with one learning rate)."""
    rates = sorted({p[LR_KEY] for p in points(spec) if LR_KEY in p})
    ratios = [b / a for a, b in zip(rates, rates[1:], strict=False)]
    if ratios and max(ratios) / min(ratios) <= 1 + RATIO_TOLERANCE:
        return ratios[0]
    return HALF_DECADE


def extendable(spec: SweepSpec) -> bool:
    """Whether some configuration of the spec compares several learning rates: with one rate a cell's pick is at no
    edge (the report marks none), so a spec without such a configuration never extends its grid."""
    rates: dict[str, set[float]] = {}
    for point in points(spec):
        configuration = json.dumps({k: v for k, v in point.items() if k != LR_KEY}, sort_keys=True, default=str)
        rates.setdefault(configuration, set()).add(point.get(LR_KEY))
    return any(len(found) > 1 for found in rates.values())


def beyond(lr: float, edge: str, step: float) -> float:
    """The next learning rate past `edge` (`lowest` or `highest`) of a grid whose pick is `lr`."""
    if edge not in EDGES:
        raise ValueError(f"edge must be one of {', '.join(EDGES)}, got {edge!r}")
    return float(f"{(lr / step if edge == 'lowest' else lr * step):.3g}")


def extension_points(spec: SweepSpec, targets: list[Mapping[str, Any]]) -> list[tuple[dict[str, Any], str]]:
    """For each target (a selection run's varied values with a learning rate beyond its cell's grid), its
    configuration on every selection seed, as stage-1 points."""
    assert spec.protocol is not None
    staged = []
    for target in targets:
        configuration = {k: v for k, v in target.items() if k not in SEED_KEYS}
        staged += [({**configuration, **seed_point(seed)}, SELECTION) for seed in spec.protocol.selection_seeds]
    return staged


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
    for arms in [*paired_arms(selection), *equal_state_arms(selection, cells)]:
        if arms.keys is None:
            continue
        joined = set().union(*(groups.get(key, {key}) for key in arms.keys))
        for key in joined:
            groups[key] = joined
    return groups
