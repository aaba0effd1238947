"""Each statistic against textbook values computed by hand."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats

from loglinear.reports.statistics import (
    Event,
    bimodal_share,
    holm,
    is_bimodal,
    kaplan_meier,
    logrank,
    logrank_test,
    mcnemar_exact,
    signed_rank,
    t_interval,
    wilson,
)


def test_wilson_interval():
    three_of_three = wilson(3, 3)
    assert three_of_three.estimate == 1.0
    assert (round(three_of_three.low, 2), round(three_of_three.high, 2)) == (0.44, 1.00)
    # 0/5: centre and half-width z²/(2n) / (1 + z²/n) = 0.2172 each, so [0, 0.4345]
    none_of_five = wilson(0, 5)
    assert none_of_five.low == pytest.approx(0.0, abs=1e-12) and none_of_five.high == pytest.approx(0.4345, abs=1e-4)
    assert wilson(0, 0) is None


def test_exact_mcnemar_is_a_binomial_test_on_the_discordant_pairs():
    assert mcnemar_exact(0, 5) == pytest.approx(2 * 0.5**5)  # 0.0625
    assert mcnemar_exact(1, 4) == pytest.approx(2 * (1 + 5) / 32)  # P(X <= 1) twice: 0.375
    assert mcnemar_exact(3, 3) == pytest.approx(1.0)
    assert mcnemar_exact(0, 0) == 1.0


def test_t_interval_of_a_mean():
    ci = t_interval([1.0, 2.0, 3.0])  # mean 2, sd 1, t(0.975, 2) = 4.3027
    half = 4.302653 / math.sqrt(3)
    assert (ci.estimate, ci.low, ci.high) == pytest.approx((2.0, 2 - half, 2 + half), abs=1e-5)
    assert ci.p == pytest.approx(0.0742, abs=1e-4)  # t = 2 sqrt(3) on 2 degrees of freedom
    assert t_interval([0.0, 0.0]).p == 1.0 and t_interval([5.0, 5.0]).p == 0.0
    assert t_interval([1.0]) is None


def sign_flip_p(values):
    """Every sign pattern of the values' mean ranks, counted by hand: P(|W+ - mean| >= observed), two-sided."""
    ranks = stats.rankdata(np.abs(values))
    observed = ranks[np.asarray(values) > 0].sum()
    centre = ranks.sum() / 2
    sums = [sum(r for r, s in zip(ranks, signs, strict=True) if s)
            for signs in itertools.product([0, 1], repeat=len(values))]
    return np.mean([abs(w - centre) >= abs(observed - centre) - 1e-9 for w in sums])


def test_signed_rank_is_exact_without_ties():
    """Six differences of one sign: W+ = 21, the one pattern of 64 at each extreme, p = 2/64."""
    result = signed_rank([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    assert (result.statistic, result.n, result.p, result.method) == (21.0, 6, pytest.approx(2 / 64), "exact")
    assert signed_rank([-3.0, 1.0, 2.0, 4.0, 5.0]).p == pytest.approx(sign_flip_p([-3.0, 1.0, 2.0, 4.0, 5.0]))


def test_signed_rank_with_ties_enumerates_every_sign_pattern():
    """The committed MQAR primary's differences: ties share their mean rank; W+ = 3, p = 10/256 (paired t: 0.015)."""
    diffs = [-86, -86, -85, -85, -84, -20, -1, 25]
    result = signed_rank(diffs)
    assert (result.statistic, result.method) == (3.0, "exact over sign flips (ties)")
    assert result.p == pytest.approx(10 / 256) == pytest.approx(sign_flip_p(diffs))
    tied = [1.0, 1.0, 2.0, 2.0, -3.0, 4.0, 5.0, 6.0]
    assert signed_rank(tied).p == pytest.approx(sign_flip_p(tied))


def test_signed_rank_drops_zero_differences():
    assert signed_rank([0.0, 0.0, 1.0, 2.0, 3.0]).p == pytest.approx(signed_rank([1.0, 2.0, 3.0]).p) == 0.25
    assert signed_rank([0.0, 0.0, 1.0, 2.0, 3.0]).n == 3
    assert signed_rank([0.0, 0.0]).p == 1.0 and signed_rank([1.0]) is None


def test_signed_rank_uses_the_normal_approximation_for_many_tied_differences():
    diffs = [float(v) for v in range(1, 20)] + [1.0]
    result = signed_rank(diffs)
    assert result.method == "normal approximation"
    assert result.p == pytest.approx(stats.wilcoxon(diffs, method="approx").pvalue)


def test_bimodal_share_of_the_best_split():
    """The MQAR example splits into −86..−84 and −20, −1, +25: the split holds 93% of the sum of squares."""
    diffs = [-86, -86, -85, -85, -84, -20, -1, 25]
    assert bimodal_share(diffs) == pytest.approx(0.932, abs=1e-3) and is_bimodal(diffs)
    assert bimodal_share([0.0, 0.0, 10.0, 10.0]) == 1.0 and is_bimodal([0.0, 0.0, 10.0, 10.0])
    assert not is_bimodal([3, 4, 5, 5, 6, 7, 2, 4])
    assert bimodal_share([1.0, 2.0, 3.0]) is None and bimodal_share([2.0] * 5) == 0.0
    # one outlier is not a second mode: groups need 2 values each
    assert not is_bimodal([0.0, 0.1, 0.2, 0.1, 0.0, 0.2, 50.0])


def test_kaplan_meier_with_censored_runs():
    events = [Event(100, True), Event(300, True), Event(500, False), Event(500, False)]
    curve = kaplan_meier(events)
    assert curve.steps == [100, 300, 500]
    assert curve.fraction == pytest.approx([3 / 4, 3 / 4 * 2 / 3, 0.5])  # 4 at risk, then 3; censored runs stay
    assert curve.median == 300
    assert all(lo <= f <= hi for lo, f, hi in zip(curve.low, curve.fraction, curve.high, strict=True))
    assert kaplan_meier([Event(500, False)] * 3).median == math.inf


def test_logrank_against_a_hand_computation():
    # A: events at 1 and 3, censored at 5; B: event at 2, censored at 4 and 6. At each event time,
    # observed and expected events of A and the hypergeometric variance:
    #   t=1: 3 of 6 at risk in A, 1 event (A): E 3/6, V 1 (3/6)(3/6)(5/5) = 0.25
    #   t=2: 2 of 5 in A, 1 event (B):        E 2/5, V (2/5)(3/5) = 0.24
    #   t=3: 2 of 4 in A, 1 event (A):        E 2/4, V 0.25
    # O - E = 2 - 1.4 = 0.6, V = 0.74, z = 0.6 / sqrt(0.74), p = erfc(|z| / sqrt 2)
    a = [Event(1, True), Event(3, True), Event(5, False)]
    b = [Event(2, True), Event(4, False), Event(6, False)]
    z = 0.6 / math.sqrt(0.74)
    assert logrank(a, b) == pytest.approx(math.erfc(z / math.sqrt(2)), rel=1e-9)
    assert logrank([Event(5, False)], [Event(5, False)]) is None
    assert logrank(a, []) is None


def test_logrank_of_groups_no_passage_tells_apart_is_one_not_nan():
    # every run passes at the first validation: at that step all are at risk and all pass, so the hypergeometric
    # variance is 0 and so is observed - expected (scipy gives 0/0)
    everyone_at_100 = [Event(100, True)] * 3
    assert logrank_test(everyone_at_100, everyone_at_100) == (0.0, 1.0)
    # one group gone (censored) before the other's first passage: nothing to compare at any passage
    assert logrank_test([Event(50, False)] * 3, [Event(100, True)] * 3) == (0.0, 1.0)
    assert logrank([Event(100, True)] * 3, [Event(100, True), Event(100, True), Event(200, True)]) < 1.0


def test_holm_orders_the_p_values_and_keeps_the_adjustment_monotone():
    # sorted: 0.005 x4 = 0.02, 0.01 x3 = 0.03, 0.03 x2 = 0.06, 0.04 x1 = 0.04 -> raised to 0.06
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])
    assert holm([]) == []
