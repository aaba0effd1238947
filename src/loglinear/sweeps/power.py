"""Whether a spec's declared primary comparison can reach significance at all with its seeds, and its power for
the effect the spec states, before anything runs (docs/sweeps.md, "Can the design conclude?").

The best case of each test on n paired seeds:
- solved, escaped (exact McNemar): every pair discordant one way, p = 2 * 0.5^n;
- steps (log-rank, n runs a side): every run of one side reaches the threshold before any of the other side,
  whose runs are all censored at the end (the smallest over the patterns of ties among the passing runs);
- accuracy (exact Wilcoxon signed-rank): every difference of one sign and no ties, p = 2 * 0.5^n;
- accuracy_t (paired t): unbounded from n = 2 on, so only the power for a stated effect says anything.
Power, for `report.primary.effect`: McNemar by exact enumeration of the pairs' outcomes (each side solving
independently at its stated rate); the paired t from the noncentral t distribution (normal differences); the
signed-rank test by a seeded simulation of normal differences against its exact rejection region.

A two-stage protocol needs MIN_SELECTION_SEEDS selection seeds unless it opts out (`allow_few_selection_seeds`).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

from loglinear.runs.config import ConfigError
from loglinear.sweeps.protocol import (
    ALPHA,
    MIN_SELECTION_SEEDS,
    RATE_TESTS,
    SEED_KEYS,
    TEST_NAMES,
    Effect,
    Primary,
)
from loglinear.sweeps.spec import SweepSpec, points

LOGRANK_TIES = 6
"""Up to this many seeds a side, `logrank_best_case` tries every pattern of ties (462 at 6)."""
MAX_SEEDS = 200
"""Where the search for the smallest number of seeds that could work gives up."""
SIMULATIONS, SIMULATION_SEED = 100_000, 0
"""The draws of `signed_rank_power` (its standard error is at most 0.0016) and their seed."""


class DesignError(ConfigError):
    """A spec whose primary comparison cannot reach ALPHA with its seeds; the message is one line."""


@dataclass(frozen=True)
class Design:
    """The primary comparison's test, its seeds, the best p-value they can give, and the power for the effect
    (`primary` None: a spec without one, whose protocol passed the check of its selection seeds)."""

    primary: Primary
    seeds: int
    best_p: float
    power: float | None

    def text(self) -> str:
        effect = self.primary.effect
        power = ("no effect stated (report.primary.effect)" if self.power is None
                 else f"power {self.power:.2f} for {effect_text(self.primary.test, effect)}")  # type: ignore[arg-type]
        best = "any p from 2 seeds on" if self.primary.test == "accuracy_t" else f"best-case p {self.best_p:.2g}"
        return (f"primary {self.primary.mixer} vs {self.primary.baseline}, {TEST_NAMES[self.primary.test]}, "
                f"{self.seeds} seeds: {best}, alpha {ALPHA}; {power}")


def confirmation_seeds(spec: SweepSpec) -> int:
    """The seeds the report pairs: the protocol's confirmation seeds, else the distinct `train.seed`s of the runs."""
    if spec.protocol is not None:
        return len(set(spec.protocol.confirmation_seeds))
    return len({p.get(SEED_KEYS[0], spec.base.get(SEED_KEYS[0])) for p in points(spec)})


def check_design(spec: SweepSpec) -> Design | None:
    """The spec's primary design (None without a primary); a DesignError when its best case is above ALPHA, or
    when its two-stage protocol has fewer than MIN_SELECTION_SEEDS selection seeds and does not opt out."""
    check_selection_seeds(spec)
    primary = spec.report.primary
    if primary is None:
        return None
    n = confirmation_seeds(spec)
    best = best_case_p(primary.test, n)
    if best > ALPHA:
        needed = next((m for m in range(n + 1, MAX_SEEDS + 1) if best_case_p(primary.test, m) <= ALPHA), None)
        enough = f"at least {needed}" if needed else f"more than {MAX_SEEDS}"
        raise DesignError(f"{spec.path or spec.name}: report.primary ({TEST_NAMES[primary.test]}) cannot reach alpha "
                          f"{ALPHA} with {n} seeds (best-case p {best:.3g}); it needs {enough} confirmation seeds")
    power = None if primary.effect is None else power_of(primary.test, primary.effect, n)
    return Design(primary, n, best, power)


def check_selection_seeds(spec: SweepSpec) -> None:
    """A DesignError for a two-stage protocol with fewer than MIN_SELECTION_SEEDS selection seeds, unless it opts
    out with `protocol.allow_few_selection_seeds`."""
    protocol = spec.protocol
    if protocol is None or protocol.allow_few_selection_seeds:
        return
    n = len(set(protocol.selection_seeds))
    if n < MIN_SELECTION_SEEDS:
        raise DesignError(f"{spec.path or spec.name}: protocol.selection_seeds has {n} seed(s); a learning rate "
                          f"picked on fewer than {MIN_SELECTION_SEEDS} can flip with one seed of a bimodal outcome: "
                          f"give at least {MIN_SELECTION_SEEDS}, or set protocol.allow_few_selection_seeds: true")


def best_case_p(test: str, n: int) -> float:
    """The smallest p-value `test` can give on n seeds (n runs a side for the log-rank)."""
    if test in (*RATE_TESTS, "accuracy"):
        return 2 * 0.5**n if n > 0 else 1.0
    if test == "steps":
        return logrank_best_case(n)
    return 0.0 if n >= 2 else 1.0


def logrank_best_case(n: int) -> float:
    """The log-rank p-value when every run of one side passes the threshold before any run of the other, whose
    runs are all censored at the end: the smallest over every pattern of ties among the passing runs (ties can
    lower it) up to LOGRANK_TIES seeds; beyond, the runs passing one at a time, already far below ALPHA."""
    if n < 1:
        return 1.0
    second = stats.CensoredData(right=[n + 1] * n)
    patterns = itertools.combinations_with_replacement(range(1, n + 1), n) if n <= LOGRANK_TIES else [range(1, n + 1)]
    return min(float(stats.logrank(stats.CensoredData(uncensored=list(times)), second).pvalue) for times in patterns)


def power_of(test: str, effect: Effect, n: int) -> float:
    """The probability that the primary test gives p <= ALPHA on n seeds under `effect`."""
    if test in RATE_TESTS:
        return mcnemar_power(effect.mixer, effect.baseline, n)  # type: ignore[arg-type]
    if test == "accuracy":
        return signed_rank_power(effect.standardized, n)  # type: ignore[arg-type]
    return paired_t_power(effect.standardized, n)  # type: ignore[arg-type]


def mcnemar_power(mixer: float, baseline: float, n: int) -> float:
    """Exact: the sum over every count of discordant pairs (only the mixer solved, only the baseline solved,
    concordant) of its multinomial probability, where the exact McNemar p-value is at most ALPHA."""
    only_mixer, only_baseline = mixer * (1 - baseline), baseline * (1 - mixer)
    outcomes = [only_mixer, only_baseline, 1 - only_mixer - only_baseline]
    total = 0.0
    for a in range(n + 1):
        for b in range(n + 1 - a):
            if a + b and stats.binomtest(a, a + b, 0.5).pvalue <= ALPHA:
                total += float(stats.multinomial.pmf([a, b, n - a - b], n, outcomes))
    return total


def paired_t_power(standardized: float, n: int) -> float:
    """Two-sided paired t at ALPHA on n normal differences whose mean is `standardized` standard deviations."""
    if n < 2:
        return 0.0
    df, shift = n - 1, standardized * math.sqrt(n)
    critical = stats.t.ppf(1 - ALPHA / 2, df)
    upper, lower = stats.nct.sf(critical, df, shift), stats.nct.cdf(-critical, df, shift)
    # scipy gives nan for a tail too far out to matter (a probability below 1e-15)
    return float(sum(0.0 if math.isnan(tail) else tail for tail in (upper, lower)))


def signed_rank_null(n: int) -> np.ndarray:
    """P(W+ = w) for w = 0 .. n(n+1)/2 under the null (n nonzero differences without ties, each sign 1/2): the
    count of subsets of the ranks 1..n summing to w, over 2^n."""
    counts = np.zeros(n * (n + 1) // 2 + 1)
    counts[0] = 1.0
    for rank in range(1, n + 1):
        counts[rank:] = counts[rank:] + counts[:-rank].copy()
    return counts / 2.0**n


def signed_rank_rejects(n: int) -> np.ndarray:
    """For each W+ of n differences without ties, whether the exact two-sided signed-rank p is at most ALPHA."""
    null = signed_rank_null(n)
    below, above = np.cumsum(null), np.cumsum(null[::-1])[::-1]
    return np.minimum(1.0, 2 * np.minimum(below, above)) <= ALPHA + 1e-12


def signed_rank_power(standardized: float, n: int) -> float:
    """Two-sided exact signed-rank test at ALPHA on n normal differences whose mean is `standardized` standard
    deviations, by SIMULATIONS draws seeded with SIMULATION_SEED (the same number for the same design)."""
    if n < 1:
        return 0.0
    draws = np.random.default_rng(SIMULATION_SEED).normal(standardized, 1.0, size=(SIMULATIONS, n))
    ranks = np.abs(draws).argsort(axis=1).argsort(axis=1) + 1
    positive = np.where(draws > 0, ranks, 0).sum(axis=1)
    return float(signed_rank_rejects(n)[positive].mean())


def effect_text(test: str, effect: Effect) -> str:
    if test in RATE_TESTS:
        rates = "rates above the threshold" if test == "above" else "solve rates"
        return f"{rates} {effect.mixer:g} vs {effect.baseline:g}"
    return f"a paired difference of {effect.standardized:g} standard deviations"
