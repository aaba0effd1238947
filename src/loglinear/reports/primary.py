"""The primary comparison's own lines in a report: the comparison the spec declared before the runs, tested alone
at ALPHA (its test, statistic, p-value, alpha and verdict; Holm's correction covers the secondaries only), and its
design in the outcome's units (protocol/power.py) beside what the runs observed: the spread of the paired differences,
the power the design had at that spread, and the differences the study rules out. A primary with a margin reads
"equivalent within ±m points", "not worse by more than m points" or "not shown"."""

from __future__ import annotations

import dataclasses
import statistics

from scipy import stats

from loglinear.protocol.power import assess, effect_power, margin_power, points_text, reproduced_limitation
from loglinear.protocol.results import Sweep, lookup
from loglinear.reports.paired import MINUS, Family, TestResult, p_text, signed
from loglinear.reports.statistics import ALPHA, logrank_test
from loglinear.sweeps.spec_keys import RATE_TESTS, SHIFT_TESTS, TEST_NAMES, Primary


def primary_line(family: Family, declared: bool) -> str:
    """`Primary comparison (declared before the runs, tested alone at alpha 0.05): NAME: TEST, STATISTIC, p=P,
    alpha 0.05: significant.`; or why it has no test, or that the spec declares none."""
    head = f"**Primary comparison** (declared before the runs, tested alone at alpha {ALPHA:g})"
    if family.untested_primary is not None:
        return f"{head}: {family.untested_primary}: not tested."
    result = family.primary
    if result is None:
        return ("No primary comparison: the spec declares none, so every test below is secondary."
                if not declared else f"{head}: not tested.")
    if result.margin is not None:
        return f"{head}: {result.pairing.name}: {margin_text(result)}"
    verdict = "significant" if result.survives else "not significant"
    line = (f"{head}: {result.pairing.name}: {TEST_NAMES[result.test]}, {statistic_text(result)}, "
            f"p={p_text(result.p)}, alpha {ALPHA:g}: {verdict}.")
    if result.test == "accuracy_t" and result.pairing.bimodal:
        line += (" **Warning**: the paired differences look bimodal (two groups of seeds explain most of their "
                 "spread), so the paired t's normal model does not fit them: read the Wilcoxon test and the solve "
                 "rates beside it.")
    return line


def margin_text(result: TestResult) -> str:
    """`two one-sided Wilcoxon signed-rank tests against ±5.4 points: p=0.012 (lower 0.001, upper 0.012), 90%
    interval [−2.1, +3.0] (Hodges-Lehmann): equivalent within ±5.4 points.`"""
    tested = result.margin
    assert tested is not None
    margin = f"{tested.margin:.1f} points"
    ci = tested.interval
    estimator = "Hodges-Lehmann" if tested.method.startswith("Wilcoxon") else "paired t"
    interval = f"90% interval [{signed(ci.low)}, {signed(ci.high)}] around {signed(ci.estimate)} ({estimator})"
    if tested.kind == "noninferiority":
        test = "one-sided Wilcoxon signed-rank test" if estimator == "Hodges-Lehmann" else "one-sided paired t test"
        verdict = (f"not worse by more than {margin}" if tested.shown else
                   f"not shown (the interval's lower end is not above {MINUS}{margin})")
        return (f"{test} of non-inferiority ({tested.method}), p={p_text(tested.p)}, alpha {ALPHA:g}; {interval}: "
                f"{verdict}.")
    test = ("two one-sided Wilcoxon signed-rank tests" if estimator == "Hodges-Lehmann" else
            "two one-sided paired t tests")
    verdict = (f"equivalent within ±{margin}" if tested.shown else
               f"not shown (the interval is not inside ±{margin})")
    return (f"{test} of equivalence ({tested.method}), p={p_text(tested.p)} (lower {p_text(tested.p_lower)}, upper "
            f"{p_text(tested.p_upper)}), alpha {ALPHA:g}; {interval}: {verdict}.")  # type: ignore[arg-type]


def statistic_text(result: TestResult) -> str:
    """What the test computed from the runs: the discordant pairs, the log-rank z, the signed ranks or Student's t."""
    pairing = result.pairing
    if result.test in RATE_TESTS:
        _, _, only_mixer, only_baseline = pairing.outcomes(result.test)
        return f"discordant pairs {only_mixer} vs {only_baseline} of {pairing.n_pairs}"
    if result.test == "steps":
        z, _ = logrank_test(*pairing.passages)  # type: ignore[misc]
        return f"log-rank z={z:.2f} ({len(pairing.passages[0])} vs {len(pairing.passages[1])} runs)"
    if result.test == "accuracy":
        ranks = pairing.rank_test
        return f"W+={ranks.statistic:g} over {ranks.n} nonzero differences of {pairing.n_pairs} ({ranks.method})"  # type: ignore[union-attr]
    if len(set(pairing.diffs)) == 1:  # Student's t is 0/0 or x/0 here: say what the runs gave instead
        return (f"no spread: the difference is {signed(pairing.diffs[0])} points on every one of the "
                f"{pairing.n_pairs} pairs (t undefined; statistics.t_interval's p)")
    t = stats.ttest_1samp(pairing.diffs, 0.0).statistic
    return f"t={t:.2f} ({pairing.n_pairs - 1} df)"


def standing_line(sweep: Sweep) -> str | None:
    """The primary's standing, stated under the protocol at the top of every report: declared exploratory, or a
    committed design rerun as committed whose primary can never be significant (None when neither)."""
    primary = sweep.report.primary
    if primary is None:
        return None
    parts = []
    if primary.exploratory:
        parts.append("**Exploratory primary**: the spec declares its primary comparison exploratory (its design is "
                     "below the power a confirmatory primary needs; \"Design\" under the paired comparisons), so a "
                     "result of no difference says little.")
    if sweep.report.reproduces is not None:
        n = (len(set(sweep.protocol.confirmation_seeds)) if sweep.protocol is not None else
             len({lookup(r.config, "train.seed") for r in sweep.records}))
        limitation = reproduced_limitation(assess(primary, n), sweep.report.reproduces).limitation
        if limitation is not None:
            parts.append(f"**Limitation**: this design {limitation}.")
    return " ".join(parts) or None


def design_line(sweep: Sweep, family: Family) -> str | None:
    """`**Design**: ...` the declared primary's design on the pairs the report compared (or the confirmation seeds
    when it has no test), in the outcome's units, then what the runs observed; None without a primary."""
    primary = sweep.report.primary
    result = family.primary
    if primary is None:
        return None
    if result is not None:
        n = result.pairing.n_pairs
    elif sweep.protocol is not None:
        n = len(set(sweep.protocol.confirmation_seeds))
    else:
        return None
    design = assess(primary, n)
    if sweep.report.reproduces is not None:
        design = reproduced_limitation(design, sweep.report.reproduces)
    line = f"**Design** (as declared, on the {n} pairs compared): {design.text()}."
    observed = observed_text(result, primary)
    return line if observed is None else f"{line} {observed}"


def observed_text(result: TestResult | None, primary: Primary) -> str | None:
    """What the runs showed beside the design: the paired differences' standard deviation (what the declared effect
    is in points at that spread) and the differences the paired t interval rules out; the observed counts for a rate
    test."""
    if result is None:
        return None
    pairing = result.pairing
    if result.test in RATE_TESTS:
        a, b, _, _ = pairing.outcomes(result.test)
        return f"Observed: {a}/{pairing.n_pairs} vs {b}/{pairing.n_pairs}."
    if primary.test not in SHIFT_TESTS or pairing.n_pairs < 2:
        return None
    sd = statistics.stdev(pairing.diffs)
    ci = pairing.interval
    ruled = ("" if ci is None else f"; the paired t 95% interval [{signed(ci.low)}, {signed(ci.high)}] rules out "
             f"the differences beyond it, and none inside it")
    return (f"Observed: the paired differences' standard deviation was {sd:.1f} points"
            f"{at_observed(primary, sd / 100, pairing.n_pairs)}{ruled}.")


def at_observed(primary: Primary, sd: float, n: int) -> str:
    """The declared design's power at the spread the study observed (`sd`, an accuracy) on its n pairs: for its
    effect (the margin test's, or the effect in points) and for its reference; "" where the effect has no points."""
    effect = primary.effect
    if effect is None or sd <= 0:
        return ""
    observed = dataclasses.replace(effect, sd=min(1.0, sd), standardized=None,
                                   difference=effect.points() if primary.margin is None else effect.difference)
    if primary.margin is not None:
        power = margin_power(dataclasses.replace(primary, effect=observed), n)
        return f", at which the margin test had power {power:.2f}"
    if observed.difference is None:
        declared = effect.standardized
        return f", so the declared {declared:g} standard deviations are {declared * sd * 100:.1f} points"  # type: ignore[operator]
    parts = [f"power {effect_power(primary.test, observed, n):.2f} for the effect of "  # type: ignore[str-format]
             f"{points_text(observed.difference)}"]
    if primary.reference is not None and primary.reference.difference is not None:
        reference = dataclasses.replace(observed, difference=primary.reference.difference)
        parts.append(f"{effect_power(primary.test, reference, n):.2f} for the reference "
                     f"({points_text(primary.reference.difference)})")
    return f", at which the design had {' and '.join(parts)}"
