"""Paired comparisons: each log-linear mixer against its base mixer (and each λ parameterisation against
softplus), seed by seed, with a 95% t-interval on the mean difference of test accuracy.

Runs that differ only in the mixer share their seeds (`train.seed`, `data.seed`: the same
initialisation seed and data stream), so the difference of two runs of one seed removes what the seed
does to both. Per cell (every combination of the row keys other than the architecture and λ, at one
d_model), each side is taken at its own selected configuration (`results.selected_cells`: best mean
validation accuracy over lr, and λ for a log-linear mixer), and the pairs are its seeds with a test
accuracy on both sides; a seed on one side only is left out and counted.

The interval is Student's t over the n paired differences: mean ± t(0.975, n - 1) · sd / sqrt(n)
(no interval for n < 2). A difference is significant when its interval excludes 0.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from loglinear.reports.results import (
    DEFAULT_LAMBDA,
    HEADERS,
    Cell,
    Record,
    Sweep,
    base_mixer,
    display_name,
    is_log_linear,
    mean_std,
    mixer_rank,
    selected_cells,
)

COLUMNS = (
    "cell", "mixer", "baseline", "n_pairs", "mean_diff", "ci_low", "ci_high", "wins", "losses", "left_out",
    "significant",
)
LEVEL = 0.95
MINUS = "\u2212"


@dataclass
class Pairing:
    """One comparison in one cell: `mixer` − `baseline`, test accuracy in percentage points per shared seed.

    `diffs` {seed: difference}; `left_out` the seeds present (or expected) on one side only; `reason`
    why there is no pair at all (None when there is at least one)."""

    cell: str
    mixer: str
    baseline: str
    mixer_label: str
    baseline_label: str
    diffs: dict[tuple[Any, ...], float] = field(default_factory=dict)
    left_out: list[tuple[Any, ...]] = field(default_factory=list)
    reason: str | None = None

    @property
    def n_pairs(self) -> int:
        return len(self.diffs)

    @property
    def mean_diff(self) -> float | None:
        return mean_std(list(self.diffs.values()))[0] if self.diffs else None

    @property
    def interval(self) -> tuple[float, float] | None:
        """The 95% t-interval of the mean difference (None for fewer than 2 pairs)."""
        if self.n_pairs < 2:
            return None
        mean, std = mean_std(list(self.diffs.values()))
        half = t_quantile(0.5 + LEVEL / 2, self.n_pairs - 1) * std / math.sqrt(self.n_pairs)  # type: ignore[operator]
        return mean - half, mean + half

    @property
    def wins(self) -> int:
        return sum(d > 0 for d in self.diffs.values())

    @property
    def losses(self) -> int:
        return sum(d < 0 for d in self.diffs.values())

    @property
    def significant(self) -> bool:
        ci = self.interval
        return ci is not None and (ci[0] > 0 or ci[1] < 0)

    def row(self) -> dict[str, Any]:
        ci = self.interval
        return {
            "cell": self.cell, "mixer": self.mixer, "baseline": self.baseline, "n_pairs": self.n_pairs,
            "mean_diff": _round(self.mean_diff), "ci_low": _round(ci and ci[0]), "ci_high": _round(ci and ci[1]),
            "wins": self.wins, "losses": self.losses, "left_out": len(self.left_out), "significant": self.significant,
        }

    def sentence(self) -> str:
        """`Log-Linear Mamba-2 − Mamba-2: +4.1 points [−2.0, +10.3], 4 of 5 seeds (not significant)`."""
        head = f"{self.mixer_label} {MINUS} {self.baseline_label}"
        if self.reason is not None:
            return f"{head}: no pair ({self.reason})"
        ci = self.interval
        interval = f" [{signed(ci[0])}, {signed(ci[1])}]" if ci else ""
        verdict = "significant" if self.significant else ("one pair: no interval" if ci is None else "not significant")
        text = f"{head}: {signed(self.mean_diff)} points{interval}, {self.wins} of {self.n_pairs} seeds ({verdict})"  # type: ignore[arg-type]
        if self.left_out:
            seeds = ", ".join(map(_seed_text, self.left_out))
            text += f"; {len(self.left_out)} seed(s) left out, without a result on one side: {seeds}"
        return text


Score = Callable[[Record], "float | None"]
"""What a comparison compares, per run (a fraction; None when the run has no such result)."""


def test_score(record: Record) -> float | None:
    return record.test_score


def paired_comparisons(sweep: Sweep, score: Score = test_score) -> list[Pairing]:
    """Every log-linear mixer against its base, and every non-softplus λ against softplus, in every cell.

    `score` is what is compared seed by seed: the test accuracy by default, or for instance the accuracy
    at one test length (`state_tracking.accuracy_at`). Each side is its cell's selected configuration."""
    cells: dict[tuple[tuple[str, ...], int], list[Record]] = {}
    for record in sweep.records:
        cells.setdefault((sweep.table_row(record)[1:], record.d_model), []).append(record)
    pairings = []
    for (rest, d_model), records in cells.items():
        name = cell_name(sweep, rest, d_model)
        by_mixer: dict[str, list[Record]] = {}
        for record in records:
            by_mixer.setdefault(record.mixer, []).append(record)
        for mixer in sorted(by_mixer, key=mixer_rank):
            if not is_log_linear(mixer):
                continue
            base = base_mixer(mixer)
            if base in by_mixer:
                pairings.append(pair(name, mixer, base, _select(by_mixer[mixer]), _select(by_mixer[base]), score))
            lambdas = {r.lambda_param for r in by_mixer[mixer]}
            if DEFAULT_LAMBDA in lambdas:
                default = _select([r for r in by_mixer[mixer] if r.lambda_param == DEFAULT_LAMBDA])
                for lam in sorted(lambdas - {DEFAULT_LAMBDA}):  # type: ignore[type-var]
                    chosen = _select([r for r in by_mixer[mixer] if r.lambda_param == lam])
                    pairing = pair(name, f"{mixer}[{lam}]", f"{mixer}[{DEFAULT_LAMBDA}]", chosen, default, score)
                    pairings.append(pairing)
    return pairings


def unpairable_reason(sweep: Sweep) -> str:
    """Why a sweep has no comparison at all."""
    mixers = sorted({r.mixer for r in sweep.records}, key=mixer_rank)
    return (f"no cell holds a log-linear mixer with its base mixer, or a λ parameterisation with {DEFAULT_LAMBDA} "
            f"(mixers: {', '.join(mixers)})")


def cell_name(sweep: Sweep, rest: tuple[str, ...], d_model: int) -> str:
    """`d_model=16`, with the cell's other row keys first: `task=parity, eigenvalues=[-1, 1], d_model=64`."""
    keys = sweep.table_keys[1:]
    parts = [f"{HEADERS.get(k, k.rsplit('.', 1)[-1])}={v}" for k, v in zip(keys, rest, strict=True)]
    return ", ".join([*parts, f"d_model={d_model}"])


def summary_sentence(pairings: Iterable[Pairing]) -> str:
    """One plain sentence: which differences are significant (the interval excludes 0) and which are not."""
    pairings = list(pairings)
    significant = [p for p in pairings if p.significant]
    rest = [p for p in pairings if not p.significant]

    def name(p: Pairing, relation: str = "vs") -> str:
        return f"{p.mixer_label} {relation} {p.baseline_label} ({p.cell})"

    if not significant:
        return (f"No difference is significant: none of the {len(pairings)} comparisons has a 95% interval "
                f"that excludes 0, so these runs do not show that either side is more accurate.")
    found = "; ".join(name(p, "above" if p.mean_diff > 0 else "below") for p in significant)  # type: ignore[operator]
    if not rest:
        return f"Significant at 95% (interval excludes 0): {found}; no comparison is inconclusive."
    return (f"Significant at 95% (interval excludes 0): {found}; not significant (interval includes 0 or too few "
            f"seeds): {'; '.join(name(p) for p in rest)}.")


def t_quantile(p: float, df: int) -> float:
    """The p-quantile (p > 0.5) of Student's t with an integer number of degrees of freedom, by bisection
    on the closed-form two-sided probability P(|T| < t)."""
    target = 2 * p - 1
    low, high = 0.0, 1.0
    while _t_within(high, df) < target:
        high *= 2
    for _ in range(200):
        middle = (low + high) / 2
        low, high = (middle, high) if _t_within(middle, df) < target else (low, middle)
    return (low + high) / 2


def _t_within(t: float, df: int) -> float:
    """P(|T| < t) for Student's t with df degrees of freedom (the finite series for integer df)."""
    theta = math.atan(t / math.sqrt(df))
    c2 = math.cos(theta) ** 2
    if df % 2:  # odd: (2/pi) (theta + sin cos (1 + 2/3 c2 + 2*4/(3*5) c2^2 + ...)), df - 3 powers of cos
        term, total = 1.0, 1.0 if df > 1 else 0.0
        for k in range(1, (df - 1) // 2):
            term *= c2 * (2 * k) / (2 * k + 1)
            total += term
        return 2 / math.pi * (theta + math.sin(theta) * math.cos(theta) * total)
    term, total = 1.0, 1.0  # even: sin (1 + 1/2 c2 + 1*3/(2*4) c2^2 + ...), df - 2 powers of cos
    for k in range(1, df // 2):
        term *= c2 * (2 * k - 1) / (2 * k)
        total += term
    return math.sin(theta) * total


def _select(records: list[Record]) -> Cell:
    return selected_cells(records, lambda r: None)[None]


def pair(cell: str, mixer: str, baseline: str, chosen: Cell, base: Cell, score: Score) -> Pairing:
    pairing = Pairing(cell, mixer, baseline, _label(mixer, chosen), _label(baseline, base))
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
        sides.append({r.seed: score(r) for r in side.runs})
    ours, theirs = sides
    for seed in sorted(set(ours) | set(theirs), key=str):
        a, b = ours.get(seed), theirs.get(seed)
        if a is None or b is None:
            pairing.left_out.append(seed)
        else:
            pairing.diffs[seed] = 100 * (a - b)
    if not pairing.diffs:
        pairing.reason = (f"no seed has a test accuracy on both sides: {pairing.mixer_label} seeds "
                          f"{_seeds_text(ours)}, {pairing.baseline_label} seeds {_seeds_text(theirs)}")
    return pairing


def _label(mixer: str, cell: Cell) -> str:
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


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 6)
