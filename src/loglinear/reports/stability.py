"""How stable each cell's learning-rate pick is on its selection runs: the margin of the chosen rate's mean
validation accuracy over the next best rate's, and whether the pick survives leaving out each selection seed in
turn (the same rule, `results.best_rate`, on the other seeds' runs). On an outcome that either learns or does not,
a mean over two seeds is decided by which seeds learned, and a pick that one seed can flip says so here."""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

from loglinear.reports.paired import signed
from loglinear.reports.results import Record, Sweep, best_rate, mean_val_scores
from loglinear.sweeps.protocol import CONFIRMATION


@dataclass(frozen=True)
class Stability:
    """One cell's pick: `lr` and its mean validation score, the `runner_up` rate and its score (None with one rate
    scored), and `kept` of the `left_out` leave-one-seed-out picks that chose `lr` (`left_out` 0: one seed)."""

    lr: float
    score: float
    runner_up: float | None
    runner_up_score: float | None
    kept: int
    left_out: int

    @property
    def margin(self) -> float | None:
        """The chosen rate's mean validation score minus the runner-up's (a fraction)."""
        return None if self.runner_up_score is None else self.score - self.runner_up_score

    @property
    def agrees(self) -> bool:
        return self.kept == self.left_out


def selection_stability(sweep: Sweep) -> dict[Hashable, Stability]:
    """{(row, d_model): Stability} of every table cell whose selection runs scored at least one rate, from its
    selection runs (every run under the single-stage protocol)."""
    groups: dict[Hashable, dict[float, list[Record]]] = {}
    for record in sweep.records:
        if record.stage != CONFIRMATION:
            groups.setdefault((record.row, record.d_model), {}).setdefault(record.lr, []).append(record)
    found = {}
    for key, by_lr in groups.items():
        stability = cell_stability(by_lr)
        if stability is not None:
            found[key] = stability
    return found


def cell_stability(by_lr: dict[float, list[Record]]) -> Stability | None:
    scored = mean_val_scores(by_lr)
    if not scored:
        return None
    lr = best_rate(scored)
    others = {rate: score for rate, score in scored.items() if rate != lr}
    runner_up = best_rate(others) if others else None
    seeds: list[Any] = sorted({r.seed for runs in by_lr.values() for r in runs if r.val_score is not None}, key=str)
    picks = []
    if len(seeds) > 1:
        for seed in seeds:
            rest = mean_val_scores({rate: [r for r in runs if r.seed != seed] for rate, runs in by_lr.items()})
            picks.append(best_rate(rest) if rest else None)
    return Stability(lr, scored[lr], runner_up, None if runner_up is None else scored[runner_up],
                     sum(p == lr for p in picks), len(picks))


def format_stability(stability: Stability | None) -> str:
    """`0.003 by +0.9 over 0.01, kept 1/2`; `0.003 (the only rate scored)`; `-` without a pick."""
    if stability is None:
        return "-"
    if stability.runner_up is None:
        return f"{stability.lr:.3g} (the only rate scored)"
    over = f"by {signed(100 * stability.margin)} over {stability.runner_up:.3g}"  # type: ignore[operator]
    kept = "one seed" if stability.left_out == 0 else f"kept {stability.kept}/{stability.left_out}"
    return f"{stability.lr:.3g} {over}, {kept}"


def stability_summary(found: dict[Hashable, Stability]) -> str:
    """One sentence: how many cells keep their pick with any one selection seed left out, and how many by a margin
    under one point."""
    chosen = [s for s in found.values() if s.runner_up is not None]
    tested = [s for s in chosen if s.left_out]
    if not tested:
        return "No cell chose among several learning rates on two selection seeds or more, so no pick can be checked."
    close = sum(abs(s.margin) < 0.01 for s in chosen)  # type: ignore[arg-type]
    return (f"{sum(s.agrees for s in tested)} of {len(tested)} cells that chose among several rates on several seeds "
            f"keep their pick with any one selection seed left out; {close} of {len(chosen)} picks lead the next rate "
            f"by less than 1 point of validation accuracy.")
