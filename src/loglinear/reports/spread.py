"""The spread a primary's design is judged at, read where the spec says it was measured (`effect.sd_source`): the
standard deviation of the same comparison's paired test-accuracy differences in a committed study, re-read from
its results.csv with its own spec (the sibling spec file of the study's name), so that no number is typed by hand.
A typed `effect.sd` must then agree with it; a source that is a file (a pilot's write-up) keeps the typed value."""

from __future__ import annotations

import dataclasses
import statistics
from pathlib import Path

from loglinear.protocol.power import RESULTS_CSV, DesignError, locate
from loglinear.reports.frontier import equal_state_comparisons
from loglinear.reports.paired import Pairing, paired_comparisons
from loglinear.reports.results_csv import load_sweep_from_csv
from loglinear.reports.state_tracking import accuracy_at
from loglinear.sweeps.spec import SweepSpec
from loglinear.sweeps.spec_keys import Primary

AGREEMENT = 5e-4
"""How far a typed `effect.sd` may lie from the one its committed study gives (an accuracy: 0.05 points)."""


def resolve_spread(spec: SweepSpec) -> SweepSpec:
    """`spec` with its primary's `effect.sd` read from the committed study `effect.sd_source` names (unchanged when
    the source is a pilot's file, or the spec states no source); a DesignError (one line) when the source is not
    found, holds no such comparison, or disagrees with a typed sd."""
    primary = spec.report.primary
    effect = None if primary is None else primary.effect
    if effect is None or effect.sd_source is None:
        return spec
    assert primary is not None
    where = f"{spec.path or spec.name}: report.primary.effect.sd_source {effect.sd_source!r}"
    found = locate(effect.sd_source, spec.path)
    if found is None:
        raise DesignError(f"{where} not found: name a committed study's folder (results/NAME) or the file that "
                          "documents the pilot")
    folder = found.parent if found.name == RESULTS_CSV else found
    if not (folder / RESULTS_CSV).is_file():
        if effect.sd is None:
            raise DesignError(f"{where} is a file, not a committed study: type the sd its pilot measured "
                              "(report.primary.effect.sd)")
        return spec
    if folder.name == spec.name:
        raise DesignError(f"{where} is this study's own folder: the spread must be known before its runs")
    sd = committed_sd(folder, primary, spec, where)
    if effect.sd is not None and abs(effect.sd - sd) > AGREEMENT:
        raise DesignError(f"{where} gives an sd of {sd:.4f} ({100 * sd:.2f} points), not the typed "
                          f"{effect.sd:g}: leave sd out (it is read from the study) or correct it")
    effect = dataclasses.replace(effect, sd=round(sd, 6))
    report = dataclasses.replace(spec.report, primary=dataclasses.replace(primary, effect=effect))
    return dataclasses.replace(spec, report=report)


def committed_sd(folder: Path, primary: Primary, spec: SweepSpec, where: str) -> float:
    """The standard deviation (an accuracy) of the paired test-accuracy differences of the primary's comparison
    (its arms, equal-state or not, at its test length) in the committed study `folder`, in `effect.sd_cell`, or
    in its only cell of that comparison."""
    source_spec = (spec.path.parent if spec.path is not None else Path(".")) / f"{folder.name}.yaml"
    if not source_spec.is_file():
        raise DesignError(f"{where}: the study's spec {source_spec} is not beside this one, so its results.csv "
                          "cannot be read")
    sweep = load_sweep_from_csv(folder / RESULTS_CSV, source_spec, folder)
    if primary.equal_state:
        candidates = equal_state_comparisons(sweep, sweep.cells())
    elif primary.length is not None:
        candidates = paired_comparisons(sweep, score=accuracy_at(primary.length), length=primary.length)
    else:
        candidates = paired_comparisons(sweep)
    arms = [p for p in candidates if (p.mixer, p.baseline) == (primary.mixer, primary.baseline)]
    cell = primary.effect.sd_cell  # type: ignore[union-attr]
    chosen = [p for p in arms if cell in (None, p.cell)]
    if len(chosen) != 1:
        cells = "; ".join(sorted(p.cell for p in arms)) or "none"
        why = (f"holds no comparison {primary.mixer} vs {primary.baseline}" if not chosen else
               f"compares {primary.mixer} vs {primary.baseline} in {len(chosen)} cells: name one with sd_cell")
        raise DesignError(f"{where} {why} (its cells: {cells})")
    return _spread(chosen[0], where)


def _spread(pairing: Pairing, where: str) -> float:
    if pairing.n_pairs < 2:
        raise DesignError(f"{where}: {pairing.name} has {pairing.n_pairs} pair(s), too few for a spread")
    return statistics.stdev(pairing.diffs) / 100
