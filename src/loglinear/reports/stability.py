"""How stable each cell's learning-rate pick is on its selection runs: the margin of the chosen rate's mean
validation accuracy over the next best rate's, and whether the pick survives leaving out each selection seed in
turn (the same rule, `results.best_candidate`, on the other seeds' runs). On an outcome that either learns or does not,
a mean over two seeds is decided by which seeds learned, and a pick that one seed can flip says so here."""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

from loglinear.reports.paired import signed
from loglinear.reports.results import Candidate, Record, Sweep, best_candidate, candidate_text, mean_val_scores
from loglinear.sweeps.protocol import CONFIRMATION, LR_KEY


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


def format_stability(stability: Stability | None) -> str:
    """`0.003 by +0.9 over 0.01, kept 1/2`; `0.003 (the only rate scored)`; `-` without a pick (with several
    selected keys, each candidate as `candidate_text` writes it)."""
    if stability is None:
        return "-"
    pick = candidate_text(stability.keys, stability.pick)
    if stability.runner_up is None:
        return f"{pick} (the only rate scored)"
    runner_up = candidate_text(stability.keys, stability.runner_up)
    over = f"by {signed(100 * stability.margin)} over {runner_up}"  # type: ignore[operator]
    kept = "one seed" if stability.left_out == 0 else f"kept {stability.kept}/{stability.left_out}"
    return f"{pick} {over}, {kept}"


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
