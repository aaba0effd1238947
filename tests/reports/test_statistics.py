"""Each statistic against textbook values computed by hand."""

from __future__ import annotations

import math

import pytest

from loglinear.reports.statistics import Event, holm, kaplan_meier, logrank, mcnemar_exact, t_interval, wilson


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


def test_holm_orders_the_p_values_and_keeps_the_adjustment_monotone():
    # sorted: 0.005 x4 = 0.02, 0.01 x3 = 0.03, 0.03 x2 = 0.06, 0.04 x1 = 0.04 -> raised to 0.06
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])
    assert holm([]) == []
