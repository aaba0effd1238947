"""The primary comparison's own lines in a report: the comparison the spec declared before the runs, tested alone
at ALPHA (its test, statistic, p-value, alpha and verdict; Holm's correction covers the secondaries only), and its
design in the outcome's units (protocol/power.py) beside what the runs observed: the spread of the paired differences
and the differences the study rules out."""

from __future__ import annotations

import statistics

from scipy import stats

from loglinear.protocol.power import assess, reproduced_limitation
from loglinear.protocol.results import Sweep, lookup
from loglinear.reports.paired import Family, TestResult, p_text, signed
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
    verdict = "significant" if result.survives else "not significant"
    line = (f"{head}: {result.pairing.name}: {TEST_NAMES[result.test]}, {statistic_text(result)}, "
            f"p={p_text(result.p)}, alpha {ALPHA:g}: {verdict}.")
    if result.test == "accuracy_t" and result.pairing.bimodal:
        line += (" **Warning**: the paired differences look bimodal (two groups of seeds explain most of their "
                 "spread), so the paired t's normal model does not fit them: read the Wilcoxon test and the solve "
                 "rates beside it.")
    return line


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
        parts.append("**Exploratory primary**: the spec declares its primary comparison exploratory (its design is too "
                     "weak for the reference it names; \"Design\" under the paired comparisons), so a result of no "
                     "difference says little.")
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
    if result.test not in SHIFT_TESTS or pairing.n_pairs < 2:
        return None
    sd = statistics.stdev(pairing.diffs)
    declared = None if primary.effect is None else primary.effect.standardized
    at = ("" if declared is None else
          f", so the declared {declared:g} standard deviations are {declared * sd:.1f} points")
    ci = pairing.interval
    ruled = ("" if ci is None else f"; the paired t 95% interval [{signed(ci.low)}, {signed(ci.high)}] rules out "
             f"the differences beyond it, and none inside it")
    return f"Observed: the paired differences' standard deviation was {sd:.1f} points{at}{ruled}."
