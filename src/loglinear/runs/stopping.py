"""When a run counts as solved, and how it ended: one definition for the training loop and for the reports.

A run is *solved* when its validation accuracy was strictly above the threshold on `evals` consecutive
evaluations (`train.threshold_evals`, default 1: the first evaluation above it); the step of the last of them is
its `steps_to_threshold`, and with early stopping on, the step it stops at. A run's *convergence* says how it
ended: `threshold` (solved), `plateau` (ended by its budget, its best validation accuracy improved by less than
`min_delta` over its last `window` evaluations), `improving` (ended by its budget while still improving by at
least that much), `too short` (ended by its budget with fewer evaluations than `window`: neither can be told),
`diverged`, `failed`; `unknown` where its validation history is not available.
"""

from __future__ import annotations

from collections.abc import Sequence

TOO_SHORT = "too short"
BUDGET_ENDS = ("plateau", "improving", TOO_SHORT)
"""How a run that neither reached the threshold nor diverged or failed ended."""
CONVERGENCE = ("threshold", *BUDGET_ENDS, "diverged", "failed", "unknown")

History = Sequence[tuple[int, float]]
"""A run's validations in order: (steps trained, validation accuracy)."""


def crossing_step(history: History, threshold: float, evals: int = 1) -> int | None:
    """The steps trained at the evaluation that ends the first run of `evals` consecutive evaluations strictly above
    `threshold`; None when there is none."""
    held = 0
    for steps, accuracy in history:
        held = held + 1 if accuracy > threshold else 0
        if held == evals:
            return steps
    return None


def budget_validations(max_steps: int, val_every: int) -> int:
    """The validations of a run that trains its whole budget: every `val_every` steps, and once at the end off that
    grid."""
    return -(-max_steps // val_every)


def budget_end(history: History, window: int, min_delta: float) -> str:
    """`too short` when `history` has fewer than `window` evaluations; else `plateau` when its best validation
    accuracy rose by less than `min_delta` over its last `window` evaluations (over all of them after the first when
    it has exactly `window`), else `improving`."""
    if len(history) < window:
        return TOO_SHORT
    accuracies = [accuracy for _, accuracy in history]
    before = accuracies[:-window] or accuracies[:1]
    return "plateau" if max(accuracies) - max(before) < min_delta else "improving"


def convergence(status: str, solved: bool, history: History | None, window: int, min_delta: float) -> str:
    """How a run with result status `status` ended (`CONVERGENCE`); `history` None when it is not available."""
    if solved:
        return "threshold"
    if status in ("diverged", "failed"):
        return status
    if history is None:
        return "unknown"
    return budget_end(history, window, min_delta)


def budget_label(label: str, validations: int, window: int) -> str:
    """A recorded `plateau` or `improving` read again under the rule above: `too short` when the run's budget had
    fewer than `window` validations (a run labelled before the rule); any other label as it is."""
    return TOO_SHORT if label in BUDGET_ENDS and validations < window else label
