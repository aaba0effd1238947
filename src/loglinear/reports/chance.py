"""Left chance: a run whose best validation accuracy rose above `report.left_chance` times chance, the accuracy of a
uniform guess among its task's classes (1 / num_classes). A binary event declared by rule, beside `escaped` (solved
or final validation accuracy above `report.plateau`): the two can count the arms in opposite directions (one arm's
runs leave chance more often, the other's climb further), and the report says so where they do. Described, never
tested: it adds no test to the Holm family.

Under two stages the report also compares how often the selection runs left chance at each cell's picked learning
rate with how often its confirmation runs did: four selection seeds that all left chance at the pick say little
about how often the confirmation seeds will."""

from __future__ import annotations

from collections.abc import Hashable

from scipy import stats

from loglinear.protocol.results import Cell, Record, Sweep, candidate_text
from loglinear.reports.state_tracking import num_classes
from loglinear.reports.statistics import wilson
from loglinear.runs.folder import FINISHED
from loglinear.sweeps.spec_keys import CONFIRMATION

NOTE = ("`k/n [low, high]`: k of the cell's n runs left chance: their best validation accuracy rose above {multiple:g} "
        "times chance, the accuracy of a uniform guess among the task's classes ({levels}); with the Wilson 95% "
        "interval of the rate in percent. Described, not tested.")
SELECTION_NOTE = ("At each cell's selected learning rate, the runs that left chance: the selection runs (which chose "
                  "the rate) against the confirmation runs (which the tables report). Described, not tested per cell.")


def chance_level(record: Record, multiple: float) -> float:
    """The accuracy a run must pass to leave chance: `multiple` over its task's number of classes."""
    return multiple / num_classes(record)


def left_chance(record: Record, multiple: float) -> bool | None:
    """Whether the run's best validation accuracy rose above `chance_level`; None for a run without a result or its
    best validation accuracy (a diverged run did not leave chance)."""
    if record.status not in FINISHED:
        return None
    if record.status == "diverged":
        return False
    best = record.result.get("val_accuracy")
    return None if best is None else best > chance_level(record, multiple)


def cell_left(cell: Cell, multiple: float) -> list[bool]:
    return [left for left in (left_chance(r, multiple) for r in cell.runs) if left is not None]


def format_left_chance(cell: Cell, multiple: float) -> str:
    """`3/16 [7, 43]` (Wilson 95% interval in percent) or `-`."""
    outcomes = cell_left(cell, multiple)
    rate = wilson(sum(outcomes), len(outcomes))
    return "-" if rate is None else f"{sum(outcomes)}/{len(outcomes)} [{100 * rate.low:.0f}, {100 * rate.high:.0f}]"


def levels_text(sweep: Sweep, multiple: float) -> str:
    """The chance levels of the sweep's tasks: `above 5% for mqar (1/4096)`."""
    seen: dict[str, int] = {}
    for record in sweep.records:
        seen.setdefault(record.task, num_classes(record))
    return ", ".join(f"above {100 * multiple / classes:.3g}% for {task} (1/{classes})"
                     for task, classes in seen.items())


def selection_against_confirmation(sweep: Sweep, cells: dict[Hashable, Cell], multiple: float) -> dict[Hashable, str]:
    """{cell key: `lr 0.01: selection 4/4 vs confirmation 5/16`}: at each cell's selected candidate, the selection
    runs that left chance beside the confirmation runs that did."""
    keys = sweep.selected_keys
    found = {}
    for key, cell in cells.items():
        if cell.runs and cell.pick is not None:
            selection = [r for r in sweep.records if r.stage != CONFIRMATION and (r.row, r.d_model) == key
                         and r.candidate(keys) == cell.pick]
            chosen = [x for x in (left_chance(r, multiple) for r in selection) if x is not None]
            confirmed = cell_left(cell, multiple)
            found[key] = (f"{candidate_text(keys, cell.pick)}: selection {sum(chosen)}/{len(chosen)} vs "
                          f"confirmation {sum(confirmed)}/{len(confirmed)}")
    return found


def pooled_summary(sweep: Sweep, cells: dict[Hashable, Cell], multiple: float) -> str:
    """One sentence: over every cell, the selection runs at the picked rates against the confirmation runs, with
    Fisher's exact test of the two rates (described: no part of the Holm family)."""
    keys = sweep.selected_keys
    chosen, confirmed = [], []
    for key, cell in cells.items():
        if cell.runs and cell.pick is not None:
            chosen += [x for x in (left_chance(r, multiple) for r in sweep.records if r.stage != CONFIRMATION
                                   and (r.row, r.d_model) == key and r.candidate(keys) == cell.pick)
                       if x is not None]
            confirmed += cell_left(cell, multiple)
    if not chosen or not confirmed:
        return "No cell has both selection and confirmation runs at its pick."
    p = stats.fisher_exact([[sum(chosen), len(chosen) - sum(chosen)],
                            [sum(confirmed), len(confirmed) - sum(confirmed)]]).pvalue
    return (f"Over every cell: selection runs {sum(chosen)}/{len(chosen)} left chance at the picked rates, "
            f"confirmation runs {sum(confirmed)}/{len(confirmed)} (Fisher's exact test p={p:.2g}, described: no part "
            f"of the Holm family).")
