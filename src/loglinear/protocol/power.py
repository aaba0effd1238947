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
With a margin (`report.primary.margin`): the two one-sided tests of equivalence (or the one-sided test of
non-inferiority) by the declared test, by a seeded simulation of normal differences at the true difference the
effect states (default 0).
In the outcome's units: an accuracy effect in points over the standard deviation of the paired differences
(`effect.sd`, read from the committed study `effect.sd_source` names: reports/spread.py), a rate test's in the rates
themselves; beside it the smallest difference detected with power TARGET_POWER, and the power for the spec's
reference effect (`report.primary.reference`, the paper's gap).
The power rule: a confirmatory primary needs power MIN_POWER for its effect and for its reference (so an effect, in
points with its spread); below it, or with a test that has no power computation (the log-rank), only a primary
declared `exploratory` passes. A committed study whose design cannot reach ALPHA or falls short of the rule reruns as
committed when its spec declares `report.reproduces: results/NAME`, the folder of that study: the limitation is then
stated (`Design.limitation`) on its every report.

A two-stage protocol needs MIN_SELECTION_SEEDS selection seeds unless it opts out (`allow_few_selection_seeds`).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy import stats

from loglinear.runs.config import ConfigError
from loglinear.sweeps.spec import SweepSpec, points
from loglinear.sweeps.spec_keys import (
    ALPHA,
    MARGIN_TESTS,
    MIN_POWER,
    MIN_SELECTION_SEEDS,
    RATE_TESTS,
    SEED_KEYS,
    SHIFT_TESTS,
    TEST_NAMES,
    Effect,
    Primary,
    Reference,
)

LOGRANK_TIES = 6
"""Up to this many seeds a side, `logrank_best_case` tries every pattern of ties (462 at 6)."""
MAX_SEEDS = 200
"""Where the search for the smallest number of seeds that could work gives up."""
SIMULATIONS, SIMULATION_SEED = 100_000, 0
"""The draws of `signed_rank_power` (its standard error is at most 0.0016) and their seed."""
RESULTS_CSV = "results.csv"
"""The file every committed study's report holds (reports/files.py writes it): what `report.reproduces` must name."""
TARGET_POWER = MIN_POWER
"""The power at which the design check states the smallest difference a design detects."""
SEARCH_SIMULATIONS = 20_000
"""The draws of each power in the search for the seeds a design needs (only the refusal's message uses it)."""
LARGEST_SHIFT = 10.0
"""Where the search for the smallest detectable standardized difference gives up (far beyond any design here)."""
SHIFT_STEP, RATE_STEP = 0.01, 0.01
"""The resolution of the smallest detectable difference: in standard deviations, and in rate."""


class DesignError(ConfigError):
    """A spec whose primary comparison cannot reach ALPHA with its seeds; the message is one line."""


@dataclass(frozen=True)
class Design:
    """The primary comparison's test, its seeds, the best p-value they can give, the power for the effect (for the
    margin, under a margin), the smallest difference detected with TARGET_POWER (standard deviations for an
    accuracy test; the mixer's rate for a rate test, the baseline's as stated), the power for the reference, why it
    falls short of the power rule (`shortfall`, None when it meets it), and the limitation of a committed design
    rerun as committed (`report.reproduces`)."""

    primary: Primary
    seeds: int
    best_p: float
    power: float | None
    detectable: float | None = None
    reference_power: float | None = None
    limitation: str | None = None
    shortfall: str | None = None

    def text(self) -> str:
        primary = self.primary
        if primary.margin is not None:
            head = f"{margin_test_text(primary)}, {self.seeds} seeds, alpha {ALPHA}"
            power = ("no spread stated (report.primary.effect.sd_source), so no power" if self.power is None else
                     f"power {self.power:.2f} {margin_power_text(primary)}")
            parts = [f"primary {primary.mixer} vs {primary.baseline}, {head}; {power}"]
        else:
            best = "any p from 2 seeds on" if primary.test == "accuracy_t" else f"best-case p {self.best_p:.2g}"
            power = ("no effect stated (report.primary.effect)" if primary.effect is None else
                     f"no spread stated for {effect_text(primary.test, primary.effect)}" if self.power is None else
                     f"power {self.power:.2f} for {effect_text(primary.test, primary.effect)}")
            parts = [f"primary {primary.mixer} vs {primary.baseline}, {TEST_NAMES[primary.test]}, {self.seeds} seeds: "
                     f"{best}, alpha {ALPHA}; {power}"]
            detectable = self.detectable_text()
            if detectable:
                parts.append(detectable)
        if self.reference_power is not None:
            parts.append(f"power {self.reference_power:.2f} for the reference, "
                         f"{reference_text(primary.test, primary.reference)}")  # type: ignore[arg-type]
        if primary.exploratory:
            parts.append("declared exploratory (report.primary.exploratory): a verdict of no difference says little")
        if self.limitation:
            parts.append(self.limitation)
        return "; ".join(parts)

    def detectable_text(self) -> str | None:
        """`power 0.8 from a difference of 0.8 standard deviations (20.3 points)`, or why there is none."""
        primary, effect = self.primary, self.primary.effect
        if primary.test in SHIFT_TESTS:
            if self.detectable is None:
                return f"no difference reaches power {TARGET_POWER:g} with {self.seeds} seeds"
            points = "" if effect is None or effect.sd is None else f" ({points_text(self.detectable * effect.sd)})"
            return f"power {TARGET_POWER:g} from a difference of {self.detectable:.2f} standard deviations{points}"
        if primary.test in RATE_TESTS and effect is not None:
            if self.detectable is None:
                return f"no rate reaches power {TARGET_POWER:g} against the baseline's {effect.baseline:g}"
            return (f"power {TARGET_POWER:g} from a rate of {self.detectable:.2f} against the baseline's "
                    f"{effect.baseline:g} ({points_text(self.detectable - effect.baseline)})")  # type: ignore[operator]
        return None


def points_text(difference: float) -> str:
    """An accuracy or rate difference in percentage points: `5.4 points`."""
    return f"{100 * difference:.1f} points"


def confirmation_seeds(spec: SweepSpec) -> int:
    """The seeds the report pairs: the protocol's confirmation seeds, else the distinct `train.seed`s of the runs."""
    if spec.protocol is not None:
        return len(set(spec.protocol.confirmation_seeds))
    return len({p.get(SEED_KEYS[0], spec.base.get(SEED_KEYS[0])) for p in points(spec)})


def check_design(spec: SweepSpec) -> Design | None:
    """The spec's primary design (None without a primary), its spread already read from its source
    (reports/spread.py); a DesignError when its best case is above ALPHA, or when it falls short of the power rule
    (`shortfall`) and is not declared exploratory, unless the spec reproduces a committed study
    (`report.reproduces`: the limitation is then stated); or when its two-stage protocol has fewer than
    MIN_SELECTION_SEEDS selection seeds and does not opt out."""
    check_selection_seeds(spec)
    primary = spec.report.primary
    where = spec.path or spec.name
    if primary is None:
        return None
    n = confirmation_seeds(spec)
    design = assess(primary, n)
    reproduces = spec.report.reproduces
    if reproduces is not None:
        check_reproduces(spec)
        return reproduced_limitation(design, reproduces)
    if design.best_p > ALPHA and primary.margin is None:
        needed = next((m for m in range(n + 1, MAX_SEEDS + 1) if best_case_p(primary.test, m) <= ALPHA), None)
        enough = f"at least {needed}" if needed else f"more than {MAX_SEEDS}"
        raise DesignError(f"{where}: report.primary ({TEST_NAMES[primary.test]}) cannot reach alpha {ALPHA} with "
                          f"{n} seeds (best-case p {design.best_p:.3g}); it needs {enough} confirmation seeds")
    if design.shortfall is not None and not primary.exploratory:
        raise DesignError(f"{where}: report.primary is not confirmatory: {design.shortfall}; or declare it "
                          f"report.primary.exploratory: true")
    return design


def reproduced_limitation(design: Design, reproduces: str) -> Design:
    """`design` with the limitation of a committed design rerun as committed: a best case above ALPHA, or a design
    that falls short of the power rule (declared before it) and not declared exploratory."""
    parts = []
    if design.best_p > ALPHA and design.primary.margin is None:
        needed = next((m for m in range(design.seeds + 1, MAX_SEEDS + 1)
                       if best_case_p(design.primary.test, m) <= ALPHA), None)
        enough = f"at least {needed}" if needed else f"more than {MAX_SEEDS}"
        parts.append(f"with {design.seeds} seeds its best case is p {design.best_p:.3g}, above alpha {ALPHA}, so it "
                     f"can never be significant ({enough} seeds could)")
    if design.shortfall is not None and not design.primary.exploratory:
        parts.append(f"it was declared before the power rule and is not confirmatory under it: {design.shortfall}")
    if not parts:
        return design
    return dataclasses.replace(design, limitation=f"reproduces {reproduces} as committed: {'; '.join(parts)}")


def assess(primary: Primary, n: int) -> Design:
    """The design of `primary` on n seeds, refusing nothing (a report states it whatever it is)."""
    effect = primary.effect
    if primary.margin is not None:
        power = margin_power(primary, n)
    else:
        power = None if effect is None else effect_power(primary.test, effect, n)
    reference = primary.reference
    reference_power = None
    if reference is not None:
        if primary.test in RATE_TESTS:
            reference_power = power_of(primary.test, Effect(mixer=reference.mixer, baseline=reference.baseline), n)
        elif effect is not None and effect.sd is not None:
            reference_power = power_of(primary.test, Effect(standardized=reference.difference / effect.sd), n)  # type: ignore[operator]
    design = Design(primary, n, best_case_p(primary.test, n), power,
                    None if primary.margin is not None else detectable_of(primary, n), reference_power)
    return dataclasses.replace(design, shortfall=shortfall_of(design))


def effect_power(test: str, effect: Effect, n: int) -> float | None:
    """The power for `effect` (None for an accuracy effect with no spread to put it in standard deviations)."""
    if test in SHIFT_TESTS:
        shift = effect.shift()
        return None if shift is None else power_of(test, Effect(standardized=shift), n)
    return power_of(test, effect, n)


def shortfall_of(design: Design) -> str | None:
    """Why `design` is not confirmatory under the power rule (power MIN_POWER for its effect and its reference, an
    accuracy effect in points with its spread), None when it is."""
    primary, effect = design.primary, design.primary.effect
    if primary.test == "steps":
        return "the log-rank test of steps has no power computation here, so its power cannot be shown"
    if primary.margin is None and effect is None:
        return "it states no effect to detect (report.primary.effect)"
    if primary.test in SHIFT_TESTS and (effect is None or effect.sd is None):
        return ("its effect has no spread in points (report.primary.effect.sd_source: a committed study or a "
                "pilot's write-up)")
    if design.power is not None and design.power < MIN_POWER:
        needed = seeds_for(primary, design.seeds)
        more = f"{needed} confirmation seeds reach it" if needed else f"no design of up to {MAX_SEEDS} seeds does"
        what = (margin_power_text(primary) if primary.margin is not None else
                f"for {effect_text(primary.test, effect)}")  # type: ignore[arg-type]
        return f"power {design.power:.2f} {what}, below {MIN_POWER} ({more})"
    if design.reference_power is not None and design.reference_power < MIN_POWER:
        return (f"power {design.reference_power:.2f} for its reference "
                f"({reference_text(primary.test, primary.reference)}), below {MIN_POWER}")  # type: ignore[arg-type]
    return None


def seeds_for(primary: Primary, n: int) -> int | None:
    """The fewest confirmation seeds above n whose power for the primary's effect reaches MIN_POWER (power grows
    with the seeds: a bisection, simulated powers on SEARCH_SIMULATIONS draws), None beyond MAX_SEEDS."""
    def power(m: int) -> float:
        if primary.margin is not None:
            return margin_power(primary, m, SEARCH_SIMULATIONS) or 0.0
        return effect_power(primary.test, primary.effect, m) or 0.0  # type: ignore[arg-type]

    if power(MAX_SEEDS) < MIN_POWER:
        return None
    low, high = n, MAX_SEEDS  # power(low) < MIN_POWER <= power(high)
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if power(middle) >= MIN_POWER else (middle, high)
    return high


def locate(path: str, spec_path: Path | None) -> Path | None:
    """The file or folder `path` names: as given when absolute, else relative to the working directory or to a
    folder above the spec (None when none exists)."""
    named = Path(path)
    candidates = [named] if named.is_absolute() else [named, *([] if spec_path is None else
                                                              [p / named for p in spec_path.resolve().parents])]
    return next((c for c in candidates if c.exists()), None)


def check_reproduces(spec: SweepSpec) -> None:
    """A DesignError unless `report.reproduces` names a committed study of this spec: a folder whose results.csv
    holds runs of a sweep of the spec's name (its run ids, `NAME/...`)."""
    where = spec.path or spec.name
    found = locate(spec.report.reproduces, spec.path)  # type: ignore[arg-type]
    if found is None or not (found / RESULTS_CSV).is_file():
        raise DesignError(f"{where}: report.reproduces {spec.report.reproduces!r} is not a committed study's folder "
                          f"(no {RESULTS_CSV} there): only a committed design reruns below the rule's reach")
    if found.name != spec.name:
        raise DesignError(f"{where}: report.reproduces {spec.report.reproduces!r} is another study's folder; a spec "
                          f"reproduces only its own committed study (results/{spec.name})")


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


def detectable_of(primary: Primary, n: int) -> float | None:
    """The smallest difference detected with TARGET_POWER on n seeds: in standard deviations for an accuracy test,
    as the mixer's rate above the stated baseline rate for a rate test (None where none reaches it, or a rate test
    without a stated baseline)."""
    if primary.test in SHIFT_TESTS:
        return smallest_shift(primary.test, n)
    if primary.test in RATE_TESTS and primary.effect is not None:
        return smallest_rate(primary.effect.baseline, n)  # type: ignore[arg-type]
    return None


@functools.lru_cache(maxsize=64)
def smallest_shift(test: str, n: int) -> float | None:
    """The smallest standardized difference, to SHIFT_STEP, whose power on n seeds is at least TARGET_POWER
    (bisection: the power grows with the difference); None when even LARGEST_SHIFT does not reach it."""
    def power(d: float) -> float:
        return power_of(test, Effect(standardized=d), n)

    if best_case_p(test, n) > ALPHA or power(LARGEST_SHIFT) < TARGET_POWER:
        return None
    low, high = 0, round(LARGEST_SHIFT / SHIFT_STEP)  # in steps: power(low) < target <= power(high)
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if power(middle * SHIFT_STEP) >= TARGET_POWER else (middle, high)
    return high * SHIFT_STEP


def smallest_rate(baseline: float, n: int) -> float | None:
    """The smallest mixer rate above `baseline`, to RATE_STEP, whose McNemar power on n seeds is at least
    TARGET_POWER; None when no rate up to 1 reaches it."""
    for step in range(1, round(1 / RATE_STEP) + 1):
        rate = round(baseline + step * RATE_STEP, 10)
        if rate > 1:
            return None
        if mcnemar_power(rate, baseline, n) >= TARGET_POWER:
            return rate
    return None


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
    return float(sum(stats.multinomial.pmf([a, b, n - a - b], n, outcomes) for a, b in mcnemar_rejects(n)))


@functools.lru_cache(maxsize=64)
def mcnemar_rejects(n: int) -> tuple[tuple[int, int], ...]:
    """The counts (only the mixer, only the baseline) of n pairs whose exact McNemar p-value is at most ALPHA."""
    return tuple((a, b) for a in range(n + 1) for b in range(n + 1 - a)
                 if a + b and stats.binomtest(a, a + b, 0.5).pvalue <= ALPHA)


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
    return float(signed_rank_rejects(n)[positive_rank_sum(draws)].mean())


def effect_text(test: str, effect: Effect) -> str:
    """The effect in the test's units: rates, or a paired difference in points with the spread it is judged at."""
    if test in RATE_TESTS:
        rates = "rates above the threshold" if test == "above" else "solve rates"
        return (f"{rates} {effect.mixer:g} vs {effect.baseline:g} "
                f"({points_text(effect.mixer - effect.baseline)})")  # type: ignore[operator]
    points = effect.points()
    shift = effect.shift()
    if points is None:
        return f"a paired difference of {effect.standardized:g} standard deviations (no spread, so not in points)"
    text = f"a paired difference of {points_text(points)}"
    if shift is not None:
        text += f" ({shift:.2f} standard deviations at the SD of {points_text(effect.sd)} from {effect.sd_source})"  # type: ignore[arg-type]
    return text


def margin_test_text(primary: Primary) -> str:
    """`two one-sided Wilcoxon signed-rank tests (equivalence within ±5.4 points)`."""
    test = "Wilcoxon signed-rank" if primary.test == "accuracy" else "paired t"
    margin = points_text(primary.margin)  # type: ignore[arg-type]
    if primary.margin_test == "noninferiority":
        return f"one-sided {test} test (non-inferiority: not worse by more than {margin})"
    return f"two one-sided {test} tests (equivalence within ±{margin})"


def margin_power_text(primary: Primary) -> str:
    """`at a true difference of 0.0 points and the SD of 15.3 points from results/x`."""
    effect = primary.effect
    true = 0.0 if effect is None or effect.difference is None else effect.difference
    spread = ("" if effect is None or effect.sd is None else
              f" and the SD of {points_text(effect.sd)} from {effect.sd_source}")
    return f"at a true difference of {points_text(true)}{spread}"


def margin_power(primary: Primary, n: int, simulations: int = SIMULATIONS) -> float | None:
    """The power of the primary's margin test on n seeds at its effect's true difference (default 0), in standard
    deviations of its spread (None without a spread)."""
    effect = primary.effect
    if effect is None or effect.sd is None:
        return None
    true = 0.0 if effect.difference is None else effect.difference
    return equivalence_power(primary.test, true / effect.sd, primary.margin / effect.sd, n,  # type: ignore[operator]
                             primary.margin_test, simulations)


def equivalence_power(test: str, shift: float, margin: float, n: int, kind: str = MARGIN_TESTS[0],
                      simulations: int = SIMULATIONS) -> float:
    """The probability that the margin test (`kind`: both one-sided tests of equivalence, or the lower one of
    non-inferiority) rejects at ALPHA on n normal differences of mean `shift` and margin `margin` (both in standard
    deviations), by `simulations` draws seeded with SIMULATION_SEED: the paired t for accuracy_t, the exact
    signed-rank test for accuracy."""
    if n < 2:
        return 0.0
    draws = np.random.default_rng(SIMULATION_SEED).normal(shift, 1.0, size=(simulations, n))
    if test == "accuracy_t":
        error = draws.std(axis=1, ddof=1) / math.sqrt(n)
        critical = stats.t.ppf(1 - ALPHA, n - 1)
        mean = draws.mean(axis=1)
        lower, upper = (mean + margin) / error > critical, (mean - margin) / error < -critical
    else:
        critical = signed_rank_one_sided(n)
        total = n * (n + 1) // 2
        lower = positive_rank_sum(draws + margin) >= critical
        upper = positive_rank_sum(draws - margin) <= total - critical
    rejected = lower if kind == "noninferiority" else lower & upper
    return float(rejected.mean())


def positive_rank_sum(draws: np.ndarray) -> np.ndarray:
    """W+ of each row: the sum of the ranks of |x| over the positive values (no ties among normal draws), read in
    the order of |x| (rank r at the r-th place), which takes one sort where the ranks themselves take two."""
    order = np.abs(draws).argsort(axis=1)
    positive = np.take_along_axis(draws > 0, order, axis=1)
    return positive @ np.arange(1, draws.shape[1] + 1)


@functools.lru_cache(maxsize=64)
def signed_rank_one_sided(n: int) -> int:
    """The smallest W+ whose exact one-sided p-value P(W+ >= w) under the null of n differences without ties is at
    most ALPHA; n(n+1)/2 + 1 (never reached) when even the largest is not."""
    upper = np.cumsum(signed_rank_null(n)[::-1])[::-1] <= ALPHA + 1e-12
    return int(np.argmax(upper)) if upper[-1] else n * (n + 1) // 2 + 1


def reference_text(test: str, reference: Reference) -> str:
    """`a paired difference of 5.4 points (the paper's ...)` or `rates 0.9 vs 0.3 (...)`."""
    if test in RATE_TESTS:
        return f"rates {reference.mixer:g} vs {reference.baseline:g} ({reference.source})"
    return f"a paired difference of {points_text(reference.difference)} ({reference.source})"  # type: ignore[arg-type]
