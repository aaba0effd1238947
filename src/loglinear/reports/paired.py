"""Paired comparisons: each log-linear mixer (at the default λ) against its base mixer, and each other λ
parameterisation against the default, seed by seed, and the tests of a report with Holm's correction.

Runs that differ only in the mixer share their seeds (`train.seed`, `data.seed`), so two runs of one seed
form a pair. Per cell (every combination of the row keys other than the architecture and λ, at one
d_model), each side is one arm at its own selected learning rate (`results.selected_cells`: both sides
choose among their learning rates, and say how many); under the two-stage protocol the pairs are the
confirmation seeds' runs. A seed on one side only is left out and counted.

Each comparison has up to four tests, five with a paired-t primary (`sweeps.spec_keys.TESTS`, statistics in
`statistics`):
- solved: exact McNemar on the paired outcomes "solved" (`results.Record.solved`: the run met the threshold on
  validation under the stopping rule);
- escaped: the same for "escaped the plateau" (`results.Record.escaped`), when the spec sets a plateau threshold;
- steps: log-rank on the steps until solved (every run of each side, censored at its end);
- accuracy: the Wilcoxon signed-rank test of the paired differences of test accuracy (exact where it can be),
  which needs no normality: runs that either solve or stay on a plateau do not break it.
Those three run-level events are the same at every test length, so a comparison at one test length (state
tracking) has none of them: it tests `above` instead, exact McNemar on "test accuracy at that length above the
threshold", and its accuracy there (`sweeps.spec_keys.LENGTH_TESTS`).
Every comparison also shows Student's t interval of the mean paired difference, the effect size, and whether the
differences look bimodal (`statistics.is_bimodal`: the interval then summarises two groups of seeds). The paired
t is a test only as a declared primary (`accuracy_t`, for an outcome the spec declares continuous).
`holm_family` marks the primary comparison the spec declares, tested alone at ALPHA, and adjusts every other
p-value of a report (the secondaries) together with Holm's method. A primary with a margin (`Primary.margin`) is
its margin test (equivalence or non-inferiority, `statistics.margin_test`), and every test of difference of that
comparison is then a secondary.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from loglinear.protocol.compared import paired_arms
from loglinear.protocol.results import (
    DEFAULT_LAMBDA,
    Cell,
    Event,
    Record,
    Sweep,
    display_name,
    mixer_rank,
)
from loglinear.reports.chance import left_chance
from loglinear.reports.statistics import (
    ALPHA,
    Interval,
    MarginTest,
    SignedRank,
    holm,
    is_bimodal,
    logrank,
    margin_test,
    mcnemar_exact,
    signed_rank,
    t_interval,
)
from loglinear.runs.config import ConfigError
from loglinear.sweeps.spec_keys import Primary

COLUMNS = (
    "cell", "mixer", "baseline", "equal_state", "candidates_mixer", "candidates_baseline", "n_pairs",
    "solved_mixer", "solved_baseline", "only_mixer_solved", "only_baseline_solved", "p_solved",
    "escaped_mixer", "escaped_baseline", "p_escaped", "p_steps",
    "above_mixer", "above_baseline", "only_mixer_above", "only_baseline_above", "p_above",
    "mean_diff", "ci_low", "ci_high", "p_accuracy", "wins", "losses", "left_out",
    "holm_solved", "holm_escaped", "holm_steps", "holm_above", "holm_accuracy", "primary", "p_accuracy_t", "bimodal",
    "p_margin", "margin_low", "margin_high",
)
MINUS = "\u2212"
EVENTS = ("solved", "escaped", "left_chance")
"""The paired binary outcomes of a run, in the order of `Pairing.flags`."""
ABOVE = "above"
"""The paired binary outcome of a comparison at one test length: test accuracy there above the threshold."""


@dataclass
class Pairing:
    """One comparison in one cell (at one test length for state tracking): `mixer` against `baseline`.

    `pairs` {seed: (mixer score, baseline score)} over the shared seeds, `flags` each side's (solved, escaped, left
    chance) there; `passages` each side's times to the threshold (all its runs), `endings` how each side's runs ended
    (runs/stopping.py); `left_out` the seeds present (or expected) on one side only; `reason` why there
    is no pair at all (None when there is at least one)."""

    cell: str
    mixer: str
    baseline: str
    mixer_label: str
    baseline_label: str
    threshold: float
    plateau: float | None = None
    length: int | None = None
    candidates: tuple[int, int] = (0, 0)
    pairs: dict[tuple[Any, ...], tuple[float, float]] = field(default_factory=dict)
    flags: dict[tuple[Any, ...], tuple[tuple[bool, bool], tuple[bool, bool]]] = field(default_factory=dict)
    passages: tuple[list[Event], list[Event]] = ([], [])
    endings: tuple[list[str], list[str]] = ([], [])
    left_out: list[tuple[Any, ...]] = field(default_factory=list)
    reason: str | None = None
    equal_state: bool = False
    """A comparison with the base model whose state is at least as large (frontier.py), not the same-size one."""
    left_chance: float | None = None
    """`report.left_chance`: the multiple of chance a run's best validation accuracy must pass (reports/chance.py)."""

    @property
    def n_pairs(self) -> int:
        return len(self.pairs)

    @property
    def diffs(self) -> list[float]:
        """Mixer − baseline in percentage points, per shared seed."""
        return [100 * (a - b) for a, b in self.pairs.values()]

    @property
    def interval(self) -> Interval | None:
        """The paired t interval of the mean difference (None for fewer than 2 pairs), cut at -100 and +100 points,
        the bounds of a difference of two accuracies (few seeds far apart can reach past them)."""
        return t_interval(self.diffs, within=(-100.0, 100.0))

    @property
    def rank_test(self) -> SignedRank | None:
        """The Wilcoxon signed-rank test of the differences (None for fewer than 2 pairs)."""
        return signed_rank(self.diffs)

    @property
    def bimodal(self) -> bool:
        """Whether the differences split into two groups that explain most of their spread (4 pairs or more)."""
        return is_bimodal(self.diffs)

    @property
    def wins(self) -> int:
        return sum(d > 0 for d in self.diffs)

    @property
    def losses(self) -> int:
        return sum(d < 0 for d in self.diffs)

    def outcomes(self, event: str) -> tuple[int, int, int, int]:
        """Over the shared seeds, for `event` (solved, escaped, or above: the compared score above the threshold):
        the runs with it on each side, then the discordant pairs (only the mixer's run, only the baseline's)."""
        if event == ABOVE:
            had = [(a > self.threshold, b > self.threshold) for a, b in self.pairs.values()]
        else:
            index = EVENTS.index(event)
            had = [(a[index], b[index]) for a, b in self.flags.values()]
        return (sum(a for a, _ in had), sum(b for _, b in had),
                sum(a and not b for a, b in had), sum(b and not a for a, b in had))

    def tests(self, paired_t: bool = False) -> dict[str, float]:
        """{test: p-value} of the tests this comparison has (none without a pair); `paired_t`: with the paired t
        (`accuracy_t`), which is tested only as the declared primary."""
        if self.reason is not None:
            return {}
        found = {}
        if self.length is not None:
            found[ABOVE] = mcnemar_exact(*self.outcomes(ABOVE)[2:])
        else:
            found["solved"] = mcnemar_exact(*self.outcomes("solved")[2:])
            if self.plateau is not None:
                found["escaped"] = mcnemar_exact(*self.outcomes("escaped")[2:])
            steps = logrank(*self.passages)
            if steps is not None:
                found["steps"] = steps
        ranks = self.rank_test
        if ranks is not None:
            found["accuracy"] = ranks.p
        interval = self.interval
        if paired_t and interval is not None and interval.p is not None:
            found["accuracy_t"] = interval.p
        return found

    def matches(self, primary: Primary) -> bool:
        return (primary.mixer, primary.baseline) == (self.mixer, self.baseline) and primary.length == self.length \
            and primary.cell in (None, self.cell) and primary.equal_state == self.equal_state

    def row(self, family: list[TestResult]) -> dict[str, Any]:
        """The `COLUMNS` of paired.csv (None where a test does not apply), with this comparison's Holm results."""
        mine = {r.test: r for r in family if r.pairing is self}
        tests = self.tests()
        ci = self.interval
        solved = self.outcomes("solved")
        escaped = self.outcomes("escaped") if self.plateau is not None else (None, None)
        above = self.outcomes(ABOVE) if self.length is not None else (None,) * 4
        row = {
            "cell": self.cell, "mixer": self.mixer, "baseline": self.baseline, "equal_state": self.equal_state,
            "candidates_mixer": self.candidates[0],
            "candidates_baseline": self.candidates[1], "n_pairs": self.n_pairs,
            "solved_mixer": solved[0], "solved_baseline": solved[1], "only_mixer_solved": solved[2],
            "only_baseline_solved": solved[3], "escaped_mixer": escaped[0], "escaped_baseline": escaped[1],
            "above_mixer": above[0], "above_baseline": above[1], "only_mixer_above": above[2],
            "only_baseline_above": above[3],
            "mean_diff": _round(ci.estimate if ci else (self.diffs[0] if self.diffs else None)),
            "ci_low": _round(ci and ci.low), "ci_high": _round(ci and ci.high),
            "wins": self.wins, "losses": self.losses, "left_out": len(self.left_out),
            "primary": next((r.test for r in mine.values() if r.primary), None),
            "p_accuracy_t": _round(ci and ci.p), "bimodal": self.bimodal,
        }
        margin = next((r.margin for r in mine.values() if r.margin is not None), None)
        row.update(p_margin=_round(margin and margin.p), margin_low=_round(margin and margin.interval.low),
                   margin_high=_round(margin and margin.interval.high))
        for test in ("solved", "escaped", "steps", ABOVE, "accuracy"):
            row[f"p_{test}"] = _round(tests.get(test))
            row[f"holm_{test}"] = _round(mine[test].adjusted) if test in mine else None  # the primary: none
        return row

    @property
    def name(self) -> str:
        at = "" if self.length is None else f", length {self.length}"
        return f"{self.mixer_label} {MINUS} {self.baseline_label} ({self.cell}{at})"


@dataclass
class TestResult:
    """One test of one comparison. The primary one is tested alone at ALPHA (`adjusted` None); every other one,
    a secondary, has its Holm-adjusted p-value over the report's secondaries. A primary with a margin is the
    margin test (`margin`; `test` its kind, equivalence or noninferiority)."""

    pairing: Pairing
    test: str
    p: float
    adjusted: float | None = 1.0
    primary: bool = False
    margin: MarginTest | None = None

    @property
    def survives(self) -> bool:
        """The primary: p <= ALPHA on its own; a secondary: Holm-adjusted p <= ALPHA."""
        return (self.p if self.adjusted is None else self.adjusted) <= ALPHA


class Family(list):
    """The `TestResult`s of one report, and `untested_primary`: why the declared primary comparison has no test
    (its runs gave the test nothing to work on), None when it has one or none is declared."""

    untested_primary: str | None = None

    @property
    def secondaries(self) -> list[TestResult]:
        return [r for r in self if not r.primary]

    @property
    def primary(self) -> TestResult | None:
        return next((r for r in self if r.primary), None)


def holm_family(pairings: Iterable[Pairing], primary: Primary | None) -> Family:
    """Every test of every comparison: the primary one (declared in advance) tested alone at ALPHA, the others
    Holm-adjusted together. A declared primary that matches no comparison, or several, or asks for the plateau
    test without a plateau threshold, is a ConfigError naming the comparisons there are; one whose test the runs
    cannot give (no run reached the threshold, fewer than two pairs) is reported as untested, never dropped."""
    pairings = list(pairings)
    paired_t = primary is not None and primary.test == "accuracy_t"
    results = Family(TestResult(p, test, value) for p in pairings
                     for test, value in p.tests(paired_t and p.matches(primary)).items())  # type: ignore[arg-type]
    if primary is not None:
        matching = [p for p in pairings if p.matches(primary)]
        if len(matching) == 1 and primary.test == "escaped" and matching[0].plateau is None:
            raise ConfigError(f"report.primary {primary}: the escaped test needs report.plateau")
        if len(matching) != 1:
            there = "; ".join(sorted({f"{p.mixer} vs {p.baseline} at cell {p.cell!r}" for p in pairings}))
            raise ConfigError(f"report.primary {primary} matches {len(matching)} comparisons (there are: "
                              f"{there or 'none'})")
        if primary.margin is not None:
            tested = margin_test(matching[0].diffs, 100 * primary.margin, primary.margin_test,
                                 rank=primary.test == "accuracy")
            if tested is None:
                results.untested_primary = f"{matching[0].name}: {primary.margin_test}: {_untested(matching[0], '')}"
            else:
                results.append(TestResult(matching[0], primary.margin_test, tested.p, None, True, tested))
        else:
            chosen = [r for r in results if r.pairing is matching[0] and r.test == primary.test]
            if chosen:
                chosen[0].primary, chosen[0].adjusted = True, None
            else:
                results.untested_primary = (f"{matching[0].name}: {primary.test}: "
                                            f"{_untested(matching[0], primary.test)}")
    secondaries = results.secondaries
    for result, adjusted in zip(secondaries, holm([r.p for r in secondaries]), strict=True):
        result.adjusted = adjusted
    return results


def _untested(pairing: Pairing, test: str) -> str:
    if pairing.reason is not None:
        return f"no pair of runs ({pairing.reason})"
    if test == "steps":
        return "no run of either side reached the threshold on validation, so there is no event to compare"
    return "fewer than two pairs, or differences without spread"


Score = Callable[[Record], "float | None"]
"""What a comparison compares, per run (a fraction; None when the run has no such result)."""


def test_score(record: Record) -> float | None:
    return record.test_score


def paired_comparisons(sweep: Sweep, score: Score = test_score, length: int | None = None) -> list[Pairing]:
    """Every log-linear mixer at the default λ against its base, and every other λ against the default, in every
    cell (`compared.paired_arms`). `score` is what is compared seed by seed: the test accuracy by default, or for
    instance the accuracy at one test length (`state_tracking.accuracy_at`, with `length`)."""
    return [pair(sweep, arms.cell, arms.mixer, arms.baseline, *arms.sides, score, length)
            for arms in paired_arms(sweep)]


def unpairable_reason(sweep: Sweep) -> str:
    """Why a sweep has no comparison at all."""
    mixers = sorted({r.mixer for r in sweep.records}, key=mixer_rank)
    return (f"no cell holds a log-linear mixer with its base mixer, or a λ parameterisation with {DEFAULT_LAMBDA} "
            f"(mixers: {', '.join(mixers)})")


def pair(sweep: Sweep, cell: str, mixer: str, baseline: str, chosen: Cell, base: Cell, score: Score,
          length: int | None) -> Pairing:
    report = sweep.report
    pairing = Pairing(cell, mixer, baseline, _label(mixer), _label(baseline), report.threshold, report.plateau,
                      length, (chosen.candidates, base.candidates), left_chance=report.left_chance)
    sides = []
    for label, side in ((pairing.mixer_label, chosen), (pairing.baseline_label, base)):
        if side.lr is None:
            pairing.reason = f"no run of {label} finished"
            return pairing
        seeds = [r.seed for r in side.runs]
        repeated = sorted({s for s in seeds if seeds.count(s) > 1}, key=str)
        if repeated:
            pairing.reason = (f"{label} has several runs with seed {_seed_text(repeated[0])}: "
                              "the cell's runs differ in a key that is not a row key")
            return pairing
        sides.append({r.seed: r for r in side.runs})
    pairing.passages = (chosen.passages(report.threshold), base.passages(report.threshold))
    pairing.endings = (chosen.endings(report.threshold), base.endings(report.threshold))
    runs = [{seed: (record, score(record)) for seed, record in side.items()} for side in sides]
    ours, theirs = ({seed: value for seed, (_, value) in side.items()} for side in runs)
    for seed in sorted(set(ours) | set(theirs), key=str):
        a, b = ours.get(seed), theirs.get(seed)
        if a is None or b is None:
            pairing.left_out.append(seed)
        else:
            pairing.pairs[seed] = (a, b)
            pairing.flags[seed] = (_flags(runs[0][seed][0], report), _flags(runs[1][seed][0], report))
    if not pairing.pairs:
        pairing.reason = (f"no seed has a result on both sides: {pairing.mixer_label} seeds "
                          f"{_seeds_text(ours)}, {pairing.baseline_label} seeds {_seeds_text(theirs)}")
    return pairing


def _flags(record: Record, report: Any) -> tuple[bool, bool, bool]:
    """(solved, escaped, left chance) of a run (escaped False without a plateau threshold, left chance without
    `report.left_chance`; not known counts as not)."""
    escaped = report.plateau is not None and record.escaped(report.plateau, report.threshold)
    left = report.left_chance is not None and left_chance(record, report.left_chance)
    return bool(record.solved(report.threshold)), bool(escaped), bool(left)


def _label(mixer: str) -> str:
    """Display name: `Log-Linear Mamba-2`, or `Log-Linear Mamba-2 (λ sigmoid)` for a λ comparison."""
    name, _, lam = mixer.partition("[")
    label = display_name(name)
    return f"{label} (λ {lam.rstrip(']')})" if lam else label


def _seeds_text(side: dict[tuple[Any, ...], float | None]) -> str:
    finished = [_seed_text(s) for s, v in side.items() if v is not None]
    return "{" + ", ".join(finished) + "}"


def _seed_text(seed: tuple[Any, ...]) -> str:
    values = [v for v in seed if v is not None]
    return "/".join(str(v) for v in dict.fromkeys(values)) if values else "default"


def signed(value: float) -> str:
    """`+4.1`, `−2.0` (a true minus sign)."""
    return f"{value:+.1f}".replace("-", MINUS)


def p_text(p: float) -> str:
    """`0.031`, `<0.001`."""
    return "<0.001" if p < 0.001 else f"{p:.3f}"


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 6)
