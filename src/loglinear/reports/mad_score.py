"""The MAD score (Poli et al. 2024) and MAD's per-task summary, for a sweep over task settings whose spec asks for
them (`report.mad_score: true`).

An arm is the model: the labels of the `model` keys in a table row (architecture, λ, model options) and the column
(d_model). A setting is the rest of the row: the data (task, its arguments, training-set size) and any training key
that varies with it (MAD's step budget follows its training-set size). Each (arm, setting) is a table cell, its runs
at the learning rate the sweep's protocol selected for it (the confirmation runs under two stages).

- Per task and arm: the accuracy, the mean over the task's settings and seeds of the cells' test accuracy, with a
  t interval over seeds of each seed's mean over those settings; the solve rate, runs solved over runs, with a
  Wilson interval (the runs of several settings pooled as if independent).
- The MAD score of an arm: per seed, the mean over every setting of that seed's test accuracy; their mean with a
  t interval over seeds. MAD itself reports the mean over settings of the best of six optimiser settings on one
  seed, picked on test accuracy; here the pick is on validation and the seeds give the interval.

A seed counts only where every cell it is averaged over has its test accuracy, so each per-seed mean covers the
same settings; the tables say how many seeds that leaves.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

from loglinear.protocol.results import COLUMN_KEY, Cell, Sweep
from loglinear.reports.statistics import t_interval, wilson
from loglinear.reports.tables import column_header, markdown_table

NOTE = ("Per task: the accuracy is the mean test accuracy over the task's settings and seeds [95% t interval over "
        "seeds of each seed's mean over the settings]; the solve rate pools the runs of the task's settings "
        "[95% Wilson interval]. The MAD score is the mean over every setting of the selected configuration's test "
        "accuracy (Poli et al. 2024), per seed, then over seeds [95% t interval]. A t interval is cut at 0 and "
        "100%, the bounds of an accuracy. MAD picks the best of six "
        "optimiser settings on one seed by test accuracy; here each cell's learning rate is picked on validation "
        "as the protocol above says. A seed counts only where every setting averaged has its test accuracy.")


MAD_TASKS = ("in_context_recall", "fuzzy_in_context_recall", "noisy_in_context_recall", "selective_copying",
             "compression", "memorization")
"""MAD's six tasks (synthetics/): the score averages a model's accuracy over their settings."""


def is_arm_key(key: str) -> bool:
    """Whether a row key belongs to the model (the arm); the other row keys make the setting."""
    return key == "model" or key.startswith("model.")


def mad_sections(sweep: Sweep, cells: dict[Hashable, Cell]) -> list[str]:
    """The report's parts: the per-task table, the MAD score table and their note; a line saying why there is no
    score when some run trains on a task that is not MAD's."""
    others = sorted({r.task for r in sweep.records} - set(MAD_TASKS))
    if others:
        return ["## MAD score\n", f"Not computed (`report.mad_score`): the score averages MAD's tasks "
                                  f"({', '.join(MAD_TASKS)}), and runs of this sweep train on {', '.join(others)}."]
    threshold = sweep.report.threshold
    setting_at = [i for i, key in enumerate(sweep.row_keys) if not is_arm_key(key)]
    arms: dict[tuple[str, ...], list[Cell]] = {}
    for (row, d_model), cell in cells.items():
        if cell.runs:
            arm = tuple(label for i, label in enumerate(row) if i not in setting_at) + (str(d_model),)
            arms.setdefault(arm, []).append(cell)
    tasks = list(dict.fromkeys(cell.runs[0].task for arm_cells in arms.values() for cell in arm_cells))
    arm_header = [column_header(k) for i, k in enumerate(sweep.row_keys) if i not in setting_at]
    arm_header.append(column_header(COLUMN_KEY))
    task_rows, score_rows = [], []
    for arm, arm_cells in arms.items():
        for task in tasks:
            of_task = [c for c in arm_cells if c.runs[0].task == task]
            if of_task:
                task_rows.append([*arm, f"`{task}`", str(len(of_task)), accuracy_text(of_task),
                                  solve_rate_text(of_task, threshold)])
        score_rows.append([*arm, str(len(arm_cells)), accuracy_text(arm_cells)])
    return ["## MAD's tasks: accuracy and solve rate per task\n",
            markdown_table([*arm_header, "task", "settings", "test accuracy", "solved"], task_rows),
            "## MAD score\n", markdown_table([*arm_header, "settings", "MAD score"], score_rows), NOTE]


def per_seed_means(cells: Sequence[Cell]) -> list[float]:
    """For each seed with a test accuracy in every cell, the mean over the cells of that seed's test accuracy."""
    by_cell = [{run.seed: run.test_score for run in cell.runs if run.test_score is not None} for cell in cells]
    shared = set.intersection(*(set(scores) for scores in by_cell))
    return [sum(scores[seed] for scores in by_cell) / len(by_cell) for seed in sorted(shared, key=str)]


def accuracy_text(cells: Sequence[Cell]) -> str:
    """`mean [low, high] (n seeds)` in percent over the per-seed means, `-` without a seed."""
    means = per_seed_means(cells)
    if not means:
        return "-"
    interval = t_interval(means, within=(0.0, 1.0))  # an accuracy's bounds
    mean = sum(means) / len(means)
    bounds = "" if interval is None else f" [{100 * interval.low:.1f}, {100 * interval.high:.1f}]"
    return f"{100 * mean:.1f}{bounds} ({len(means)} seed{'s' if len(means) != 1 else ''})"


def solve_rate_text(cells: Sequence[Cell], threshold: float) -> str:
    """`k/n [low, high]` (Wilson, percent) over the cells' runs whose solving is known, `-` for none."""
    outcomes = [solved for cell in cells for solved in cell.solved(threshold)]
    rate = wilson(sum(outcomes), len(outcomes))
    if rate is None:
        return "-"
    return f"{sum(outcomes)}/{len(outcomes)} [{100 * rate.low:.0f}, {100 * rate.high:.0f}]"
