"""The margin tests of paired differences (reports/statistics.py): the paired t's against statsmodels' TOST, the
Wilcoxon version's one-sided p-values against scipy and its Hodges-Lehmann interval against the tests it inverts."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy import stats
from statsmodels.stats.weightstats import ttost_paired

from loglinear.reports.statistics import hodges_lehmann, margin_test


@pytest.mark.parametrize(("shift", "margin"), [(0.0, 4.0), (1.0, 2.0), (-3.0, 5.0), (0.5, 0.5)])
def test_the_paired_t_tost_is_statsmodels(shift, margin):
    diffs = np.random.default_rng(5).normal(shift, 3.0, 20)
    tested = margin_test(diffs, margin, "equivalence", rank=False)
    p, lower, upper = ttost_paired(diffs, np.zeros(20), -margin, margin)
    assert tested.p == pytest.approx(p) and tested.p_lower == pytest.approx(lower[1])
    assert tested.p_upper == pytest.approx(upper[1])
    ci = stats.ttest_1samp(diffs, 0.0).confidence_interval(0.90)
    assert (tested.interval.low, tested.interval.high) == pytest.approx((ci.low, ci.high))
    assert tested.shown == (-margin < ci.low and ci.high < margin)


def test_non_inferiority_is_the_lower_test_alone():
    diffs = np.random.default_rng(6).normal(-1.0, 2.0, 15)
    tested = margin_test(diffs, 3.0, "noninferiority", rank=True)
    assert tested.p_upper is None
    assert tested.p == pytest.approx(stats.wilcoxon(diffs + 3.0, alternative="greater", method="exact").pvalue)


@given(st.lists(st.floats(-50, 50, allow_nan=False).map(lambda x: round(x, 3)), min_size=6, max_size=25,
                unique=True))
def test_the_hodges_lehmann_interval_inverts_the_one_sided_signed_rank_tests(values):
    """Just inside the interval neither one-sided test rejects at 0.05; just outside one does (the interval is the
    set of shifts the tests keep), where the values have no tied Walsh averages at its ends."""
    diffs = np.asarray(values)
    interval = hodges_lehmann(diffs)
    i, j = np.triu_indices(len(diffs))
    walsh = np.sort((diffs[i] + diffs[j]) / 2)
    gaps = np.diff(walsh)
    eps = 1e-7 if len(gaps) == 0 else max(1e-9, min(1e-6, gaps[gaps > 0].min() / 4))

    def p(theta: float, alternative: str) -> float:
        return stats.wilcoxon(diffs - theta, alternative=alternative, method="exact").pvalue

    if np.isclose(walsh, interval.low).sum() == 1:
        assert p(interval.low - eps, "greater") <= 0.05 < p(interval.low + eps, "greater")
    if np.isclose(walsh, interval.high).sum() == 1:
        assert p(interval.high + eps, "less") <= 0.05 < p(interval.high - eps, "less")
    assert interval.low <= interval.estimate <= interval.high


def test_too_few_values_have_no_margin_test():
    assert margin_test([1.0], 2.0, "equivalence", rank=True) is None
