"""The statistics of a report, with `scipy.stats` wherever it has them (docs/reports.md says how each is read).

- `wilson`: the Wilson score interval of a proportion k/n (solve rates);
- `mcnemar_exact`: the exact McNemar test of paired binary outcomes, a two-sided binomial test on the
  discordant pairs (mixer solved and baseline not, against the reverse);
- `t_interval`: Student's t interval of a mean and the p-value of mean = 0 (paired differences of continuous
  accuracy, and accuracy given solved), which assumes roughly normal values;
- `signed_rank`: the Wilcoxon signed-rank test of paired differences (the accuracy test), which assumes only that
  they are symmetric about their median under the null: exact where it can be;
- `margin_test`: equivalence within a margin (the two one-sided tests, TOST) or non-inferiority (the lower one) of
  paired differences, by the paired t or the Wilcoxon signed-rank test, with the matching 90% interval (Student's t;
  Hodges-Lehmann's from the Walsh averages for the signed-rank test);
- `bimodal_share`: how much of the paired differences' spread two separated groups explain (the report's warning
  that a t interval, or a mean, summarises runs that either learned or did not);
- `kaplan_meier`, `logrank` and `logrank_test`: time to an event (steps until validation accuracy first passes a
  threshold), right-censored at the step where a run ended without passing it;
- `holm`: Holm-Bonferroni adjusted p-values over a family of tests (scipy has no Holm).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
from scipy import stats

from loglinear.protocol.power import signed_rank_one_sided
from loglinear.protocol.results import Event
from loglinear.sweeps.spec_keys import ALPHA

LEVEL = 1 - ALPHA


@dataclass(frozen=True)
class Interval:
    """An estimate with its interval at LEVEL, and the p-value of the estimate being 0 (None when not tested)."""

    estimate: float
    low: float
    high: float
    p: float | None = None

    def within(self, low: float, high: float) -> Interval:
        """The interval cut at `low` and `high`, the bounds of what it estimates (a t interval over few values far
        apart can reach past them)."""
        return replace(self, low=max(self.low, low), high=min(self.high, high))


@dataclass(frozen=True)
class SurvivalCurve:
    """Kaplan-Meier estimate of P(not yet passed the threshold after `steps`), with its pointwise interval."""

    steps: list[float]
    fraction: list[float]
    low: list[float]
    high: list[float]

    @property
    def median(self) -> float:
        """The first step where at most half the runs have not passed (inf when more than half never did)."""
        return next((s for s, f in zip(self.steps, self.fraction, strict=True) if f <= 0.5), math.inf)


def wilson(k: int, n: int) -> Interval | None:
    """k/n with its Wilson score interval (None for n = 0)."""
    if n == 0:
        return None
    ci = stats.binomtest(k, n).proportion_ci(LEVEL, method="wilson")
    return Interval(k / n, float(ci.low), float(ci.high))


def mcnemar_exact(only_first: int, only_second: int) -> float:
    """Two-sided exact McNemar p-value from the discordant pairs: first succeeded and second failed
    (`only_first`), and the reverse (1 without discordant pairs)."""
    discordant = only_first + only_second
    return 1.0 if discordant == 0 else float(stats.binomtest(only_first, discordant, 0.5).pvalue)


def t_interval(values: Sequence[float], within: tuple[float, float] | None = None) -> Interval | None:
    """The mean of `values` with Student's t interval and the p-value of mean = 0 (None for fewer than 2 values;
    values all 0 have p = 1, values all equal to another number p = 0 and a zero-width interval); the interval cut
    at `within`'s (low, high), the bounds of what the values estimate, when given (`Interval.within`)."""
    interval = _t_interval(values)
    return interval if interval is None or within is None else interval.within(*within)


def _t_interval(values: Sequence[float]) -> Interval | None:
    if len(values) < 2:
        return None
    array = np.asarray(values, dtype=float)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # zero variance: scipy's inf / nan, handled below
        result = stats.ttest_1samp(array, 0.0)
        ci = result.confidence_interval(LEVEL)
    mean = float(array.mean())
    if np.all(array == array[0]):
        return Interval(mean, mean, mean, 1.0 if mean == 0 else 0.0)
    return Interval(mean, float(ci.low), float(ci.high), float(result.pvalue))


SIGN_FLIPS = 16
"""Up to this many nonzero differences with ties, `signed_rank` enumerates every sign pattern (2^16 = 65,536)."""
EXACT_RANKS = 50
"""Up to this many nonzero differences without ties, `signed_rank` uses the exact null distribution (scipy's)."""
BIMODAL_SHARE = 0.9
"""Paired differences are flagged bimodal when a split into two groups explains at least this share of their
spread (`bimodal_share`); docs/reports.md has its false-alarm rate on normal differences."""


@dataclass(frozen=True)
class SignedRank:
    """A Wilcoxon signed-rank test: `statistic` the sum of the ranks of the positive differences (W+) over the
    `n` nonzero ones, its two-sided `p`, and `method`: exact, exact over sign flips (ties), or normal."""

    statistic: float
    n: int
    p: float
    method: str


def signed_rank(values: Sequence[float]) -> SignedRank | None:
    """The two-sided Wilcoxon signed-rank test of median 0 (None for fewer than 2 values). Zero differences are
    dropped (Wilcoxon's rule: they carry no sign), tied absolute values share their mean rank. Without ties: the
    exact null distribution up to EXACT_RANKS differences; with ties: the exact distribution over every sign
    pattern of the observed ranks up to SIGN_FLIPS; beyond: the normal approximation (tie-corrected). No nonzero
    difference: p = 1."""
    if len(values) < 2:
        return None
    return _wilcoxon(values, "two-sided")


def _wilcoxon(values: Sequence[float], alternative: str) -> SignedRank:
    """`signed_rank`'s test with its `alternative` (two-sided, greater: median above 0, less)."""
    nonzero = np.asarray([v for v in values if v != 0], dtype=float)
    n = len(nonzero)
    if n == 0:
        return SignedRank(0.0, 0, 1.0, "no nonzero difference")
    tied = len(np.unique(np.abs(nonzero))) < n
    if not tied and n <= EXACT_RANKS:
        method, how = "exact", "exact"
    elif tied and n <= SIGN_FLIPS:
        method, how = stats.PermutationMethod(n_resamples=2**n), "exact over sign flips (ties)"
    else:
        method, how = "approx", "normal approximation"
    result = stats.wilcoxon(nonzero, method=method, alternative=alternative)
    ranks = stats.rankdata(np.abs(nonzero))
    return SignedRank(float(ranks[nonzero > 0].sum()), n, min(1.0, float(result.pvalue)), how)


EQUIVALENCE, NONINFERIORITY = "equivalence", "noninferiority"


@dataclass(frozen=True)
class MarginTest:
    """A test of paired differences against a margin (all in the differences' units): equivalence, both one-sided
    tests of H0 difference <= -margin (`p_lower`) and H0 difference >= margin (`p_upper`), each at ALPHA; or
    non-inferiority, the first alone (`p_upper` None). `interval` is the estimate with its 1 - 2 ALPHA (90%)
    interval, the one the tests invert: the margin test rejects when it lies inside (-margin, margin), or above
    -margin for non-inferiority."""

    kind: str
    margin: float
    interval: Interval
    p_lower: float
    p_upper: float | None
    method: str

    @property
    def p(self) -> float:
        """The test's p-value: the larger of the two one-sided ones (the lower one alone for non-inferiority)."""
        return self.p_lower if self.p_upper is None else max(self.p_lower, self.p_upper)

    @property
    def shown(self) -> bool:
        return self.p <= ALPHA


def margin_test(values: Sequence[float], margin: float, kind: str, rank: bool) -> MarginTest | None:
    """The margin test of `values` (None for fewer than 2): by the Wilcoxon signed-rank test (`rank`; each
    one-sided test on the differences shifted by the margin, zeros dropped as in `signed_rank`) with the
    Hodges-Lehmann estimate and its interval, or by the paired t with Student's interval."""
    if len(values) < 2:
        return None
    array = np.asarray(values, dtype=float)
    if rank:
        lower, upper = _wilcoxon(array + margin, "greater"), _wilcoxon(array - margin, "less")
        interval, p_lower, p_upper, method = hodges_lehmann(array), lower.p, upper.p, f"Wilcoxon, {lower.method}"
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # zero variance: scipy's nan, read as p = 1 or 0 below
            p_lower = float(stats.ttest_1samp(array, -margin, alternative="greater").pvalue)
            p_upper = float(stats.ttest_1samp(array, margin, alternative="less").pvalue)
            ci = stats.ttest_1samp(array, 0.0).confidence_interval(1 - 2 * ALPHA)
        mean = float(array.mean())
        if np.all(array == array[0]):
            p_lower, p_upper = float(mean <= -margin), float(mean >= margin)
            interval = Interval(mean, mean, mean)
        else:
            interval = Interval(mean, float(ci.low), float(ci.high))
        method = "paired t"
    return MarginTest(kind, margin, interval, p_lower, None if kind == NONINFERIORITY else p_upper, method)


def hodges_lehmann(values: Sequence[float]) -> Interval:
    """The Hodges-Lehmann estimate (the median of the Walsh averages (x_i + x_j) / 2, i <= j) with the 1 - 2 ALPHA
    interval that inverts the one-sided exact signed-rank tests: from the c-th smallest to the c-th largest Walsh
    average, c = M + 1 - w, where M = n(n+1)/2 and w is the smallest W+ with P(W+ >= w) <= ALPHA (exact without
    ties; with ties the same order statistics, approximately)."""
    array = np.asarray(values, dtype=float)
    i, j = np.triu_indices(len(array))
    walsh = np.sort((array[i] + array[j]) / 2)
    total = len(walsh)
    c = total + 1 - signed_rank_one_sided(len(array))
    if c < 1:  # too few values for any interval at this level: the whole range
        return Interval(float(np.median(walsh)), float(walsh[0]), float(walsh[-1]))
    return Interval(float(np.median(walsh)), float(walsh[c - 1]), float(walsh[total - c]))


def bimodal_share(values: Sequence[float]) -> float | None:
    """The largest share of the values' sum of squares that lies between two groups, over the splits of the sorted
    values into two groups of at least 2 (None for fewer than 4 values; 0 when they are all equal)."""
    array = np.sort(np.asarray(values, dtype=float))
    if len(array) < 4:
        return None
    total = float(((array - array.mean()) ** 2).sum())
    if total == 0:
        return 0.0
    within = min(float(((a - a.mean()) ** 2).sum() + ((b - b.mean()) ** 2).sum())
                 for a, b in (np.split(array, [k]) for k in range(2, len(array) - 1)))
    return 1 - within / total


def is_bimodal(values: Sequence[float]) -> bool:
    share = bimodal_share(values)
    return share is not None and share >= BIMODAL_SHARE


def _censored(events: Sequence[Event]) -> stats.CensoredData:
    return stats.CensoredData(uncensored=[e.steps for e in events if e.reached],
                              right=[e.steps for e in events if not e.reached])


def kaplan_meier(events: Sequence[Event]) -> SurvivalCurve | None:
    """The Kaplan-Meier curve of `events` (None without runs; flat at 1 when no run passed the threshold)."""
    if not events:
        return None
    if not any(e.reached for e in events):
        last = max(e.steps for e in events)
        return SurvivalCurve([last], [1.0], [1.0], [1.0])
    result = stats.ecdf(_censored(events)).sf
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the interval is undefined once the curve reaches 0
        ci = result.confidence_interval(LEVEL)
    fraction = result.probabilities.tolist()
    low = np.nan_to_num(ci.low.probabilities, nan=0.0).tolist()
    high = np.nan_to_num(ci.high.probabilities, nan=0.0).tolist()
    return SurvivalCurve(result.quantiles.tolist(), fraction, low, high)


def logrank(first: Sequence[Event], second: Sequence[Event]) -> float | None:
    """Two-sided log-rank p-value of two groups' times to the threshold (None when a group is empty or no
    run of either group passed it: the curves are then both flat)."""
    result = logrank_test(first, second)
    return None if result is None else result[1]


def logrank_test(first: Sequence[Event], second: Sequence[Event]) -> tuple[float, float] | None:
    """The log-rank statistic (scipy's z: positive when the first group passes later) and its two-sided p-value;
    None as for `logrank`. z = 0 and p = 1 when no passage can tell the groups apart (every run still at risk
    passes at the same step, or one group has none left at risk): observed equals expected at every passage, and
    scipy's 0/0 would give nan."""
    if not first or not second or not any(e.reached for e in [*first, *second]):
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        result = stats.logrank(_censored(first), _censored(second))
    if not np.isfinite(result.statistic):
        return 0.0, 1.0
    return float(result.statistic), float(result.pvalue)


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm-Bonferroni adjusted p-values, in the order given: the i-th smallest of m p-values is multiplied
    by m - i + 1 (i from 1), and an adjusted value is never below the one of a smaller p-value."""
    m = len(pvalues)
    adjusted = [0.0] * m
    running = 0.0
    for rank, index in enumerate(sorted(range(m), key=lambda i: pvalues[i])):
        running = max(running, min(1.0, (m - rank) * pvalues[index]))
        adjusted[index] = running
    return adjusted
