"""The primary comparison's own line in a report: the comparison the spec declared before the runs, tested alone
at ALPHA (its test, statistic, p-value, alpha and verdict); Holm's correction covers the secondaries only."""

from __future__ import annotations

from scipy import stats

from loglinear.reports.paired import Family, TestResult, p_text, signed
from loglinear.reports.statistics import ALPHA, logrank_test
from loglinear.sweeps.protocol import RATE_TESTS, TEST_NAMES


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
