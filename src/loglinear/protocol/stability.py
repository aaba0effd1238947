"""How stable each cell's learning-rate pick is on its selection runs: the margin of the chosen rate's mean
validation accuracy over the next best rate's, and whether the pick survives leaving out each selection seed in
turn (the same rule, `results.best_candidate`, on the other seeds' runs). On an outcome that either learns or does not,
a mean over two seeds is decided by which seeds learned, and a pick that one seed can flip says so here."""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

from loglinear.protocol.results import Candidate, Record, Sweep, best_candidate, mean_val_scores
from loglinear.sweeps.spec_keys import CONFIRMATION, LR_KEY


@dataclass(frozen=True)
class Stability:
    """One cell's pick: the candidate `pick` (the values of the selected `keys`: the learning rate alone by default)
    and its mean validation score, the `runner_up` candidate and its score (None with one candidate scored), and
    `kept` of the `left_out` leave-one-seed-out picks that chose `pick` (`left_out` 0: one seed)."""

    pick: Candidate
    score: float
    runner_up: Candidate | None
    runner_up_score: float | None
    kept: int
    left_out: int
    keys: tuple[str, ...] = (LR_KEY,)

    @property
    def margin(self) -> float | None:
        """The chosen candidate's mean validation score minus the runner-up's (a fraction)."""
        return None if self.runner_up_score is None else self.score - self.runner_up_score

    @property
    def agrees(self) -> bool:
        return self.kept == self.left_out


def selection_stability(sweep: Sweep) -> dict[Hashable, Stability]:
    """{(row, d_model): Stability} of every table cell whose selection runs scored at least one candidate, from its
    selection runs (every run under the single-stage protocol)."""
    keys = sweep.selected_keys
    groups: dict[Hashable, dict[Candidate, list[Record]]] = {}
    for record in sweep.records:
        if record.stage != CONFIRMATION:
            groups.setdefault((record.row, record.d_model), {}).setdefault(record.candidate(keys), []).append(record)
    found = {}
    for key, by_candidate in groups.items():
        stability = cell_stability(by_candidate, keys)
        if stability is not None:
            found[key] = stability
    return found


def cell_stability(by_candidate: dict[Candidate, list[Record]], keys: tuple[str, ...] = (LR_KEY,)) -> Stability | None:
    scored = mean_val_scores(by_candidate)
    if not scored:
        return None
    pick = best_candidate(scored)
    others = {candidate: score for candidate, score in scored.items() if candidate != pick}
    runner_up = best_candidate(others) if others else None
    seeds: list[Any] = sorted({r.seed for runs in by_candidate.values() for r in runs if r.val_score is not None},
                              key=str)
    picks = []
    if len(seeds) > 1:
        for seed in seeds:
            rest = mean_val_scores({c: [r for r in runs if r.seed != seed] for c, runs in by_candidate.items()})
            picks.append(best_candidate(rest) if rest else None)
    return Stability(pick, scored[pick], runner_up, None if runner_up is None else scored[runner_up],
                     sum(p == pick for p in picks), len(picks), keys)
