"""The `report` and `protocol` keys of a sweep spec (docs/reports.md has the protocol and the statistics).

    report:                          # optional; every key optional
      threshold: 0.99                # solved: validation accuracy above it under the stopping rule (default SOLVED)
      plateau: 0.5                   # escaped: solved, or final validation accuracy above it (default: not reported)
      plateau_gap: [0.014, 0.174]    # optional: the empty gap of the pilots' final validation accuracies; plateau
                                     # then defaults to its middle and must lie inside it
      left_chance: 5                 # optional: left chance: best validation accuracy above this many times chance
                                     # (1 / the task's classes); described beside escaped, never tested
      mad_score: false               # true: MAD's per-task accuracy, solve rate and score (reports/mad_score.py)
      select: [train.lr]             # the training keys each cell selects over on validation: every combination
                                     # of their values (MAD: [train.lr, train.weight_decay]); train.lr among them
      reproduces: results/NAME       # optional: this spec's committed study, rerun as committed even where its
                                     # primary cannot reach alpha (the limitation stated on every report)
      primary:                       # the one comparison declared in advance (the others are secondary)
        mixer: log_linear_gated_deltanet    # or log_linear_mamba2[bounded] for a λ parameterisation
        baseline: gated_deltanet            # or log_linear_mamba2[softplus]
        test: solved                 # solved, escaped (McNemar), steps (log-rank), accuracy (Wilcoxon
                                     # signed-rank), accuracy_t (paired t: only with outcome: continuous) or
                                     # above (McNemar on test accuracy above the threshold at `length`)
        outcome: continuous          # optional: declares test accuracy a continuous outcome (accuracy_t needs it)
        cell: d_model=16             # the report's cell name, needed when the sweep has several cells
        length: 160                  # state tracking: the comparison at one test length (accuracy,
                                     # accuracy_t and above; solved, escaped and steps are the run's)
        effect: {mixer: 0.9, baseline: 0.3}   # what the design must detect, in the outcome's units: rates of
                                              # the event for solved, escaped and above; for accuracy and
                                              # accuracy_t {difference: 0.1} (10 points of mean paired difference)
                                              # with sd_source: a committed study (results/NAME: the SD of the
                                              # same comparison's paired differences is read from its
                                              # results.csv; sd_cell names its cell when it has several) or a
                                              # file documenting the pilot that measured `sd` (then typed)
        reference: {difference: 0.054, source: "..."}   # optional: an effect found elsewhere (the paper's gap) and
                                              # where it comes from: a mean paired accuracy difference (accuracy,
                                              # accuracy_t; needs effect's sd) or mixer and baseline rates
        margin: 0.054                # optional (accuracy, accuracy_t): an equivalence margin in accuracy; the
                                     # primary is then the two one-sided tests (TOST) of |difference| < margin,
                                     # or with margin_test: noninferiority the one-sided test of difference > -margin;
                                     # effect.difference is then the true difference assumed (default 0)
        exploratory: false           # true: the design is declared below the power a confirmatory primary needs
                                     # (MIN_POWER for its effect and its reference); refused otherwise
    protocol:                        # optional: two stages (default: one stage on the spec's own seeds)
      selection_seeds: [0, 1, 2, 3]  # stage 1: every configuration; each arm's lr chosen on validation
      confirmation_seeds: [4, 5, 6]  # stage 2: the chosen configurations only; the report's test accuracy
      extensions: 2                  # edge picks: at most this many extra learning rates beyond the grid's edge
                                     # (0 to MAX_EXTENSIONS)
      allow_few_selection_seeds: false   # true: accept fewer than MIN_SELECTION_SEEDS selection seeds

A seed of the protocol sets both `train.seed` and `data.seed`, so the spec itself must not set them.
Both mappings are typed: an unknown key or a value of the wrong kind is a ConfigError naming it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from loglinear.runs.config import SOLVED, ConfigError

TESTS = ("solved", "escaped", "steps", "accuracy", "accuracy_t", "above")
"""What a comparison tests: solved and escaped (exact McNemar on paired outcomes), steps (log-rank on the steps
to the threshold), accuracy (Wilcoxon signed-rank on the paired test accuracies), accuracy_t (paired t on them: a
primary only, for an outcome the spec declares continuous), above (exact McNemar on "test accuracy above the
threshold at one test length")."""
TEST_NAMES = {"solved": "exact McNemar on solved", "escaped": "exact McNemar on escaped",
              "steps": "log-rank on the steps to the threshold", "accuracy": "Wilcoxon signed-rank on test accuracy",
              "accuracy_t": "paired t on test accuracy",
              "above": "exact McNemar on above (test accuracy above the threshold at the length)"}
RUN_TESTS = ("solved", "escaped", "steps")
"""The tests of a run's own events (on validation): the same at every test length, so never tested at one."""
LENGTH_TESTS = ("above", "accuracy", "accuracy_t")
"""The tests a comparison at one test length has (above only there: it needs a length)."""
SHIFT_TESTS = ("accuracy", "accuracy_t")
"""The tests of paired accuracy differences, whose effect is a standardized shift."""
OUTCOMES = ("continuous",)
"""What `primary.outcome` may declare: continuous, the one outcome the paired t may test."""
MIN_SELECTION_SEEDS = 4
"""Fewer selection seeds are refused unless the protocol opts out: a mean of two runs of a bimodal outcome picks
a learning rate by which seeds happened to learn (docs/reports.md, "Selection stability")."""
RATE_TESTS = ("solved", "escaped", "above")
"""The tests of paired binary outcomes (exact McNemar), whose effect is a pair of solve rates."""
ALPHA = 0.05
"""The level at which the primary comparison is tested alone, and the family-wise error of Holm's correction."""
MIN_POWER = 0.8
"""A confirmatory primary needs at least this power for its declared effect and for its reference; below it only a
primary declared `exploratory` (or a committed study rerun as committed, `reproduces`) passes."""
MARGIN_TESTS = ("equivalence", "noninferiority")
"""What a primary with a margin tests: |difference| < margin (two one-sided tests), or difference > -margin."""
SELECTION, CONFIRMATION = "selection", "confirmation"
SEED_KEYS = ("train.seed", "data.seed")
LR_KEY = "train.lr"
MAX_EXTENSIONS = 10
"""The most `protocol.extensions` a spec may ask for: ten rates beyond an edge already span five decades at the
default step (half a decade)."""


@dataclass
class Effect:
    """The effect the primary comparison must detect, in the outcome's units: each side's rate of the event (solved,
    escaped, above), or the mean paired accuracy difference (accuracy, accuracy_t: `difference`, or in standard
    deviations of normal differences, `standardized`), with the spread of those differences (`sd`) and where it
    comes from (`sd_source`). Under a margin (`Primary.margin`) `difference` is the true difference assumed."""

    mixer: float | None = None
    baseline: float | None = None
    difference: float | None = None
    """The mean paired accuracy difference to detect (an accuracy: 0.1 is 10 points)."""
    standardized: float | None = None
    sd: float | None = None
    """The standard deviation of the paired accuracy differences (an accuracy, 0.254 for 25.4 points), named by
    `sd_source`: read from a committed study's results.csv where it names one (a typed value must then agree)."""
    sd_source: str | None = None
    """A committed study's folder (results/NAME, holding its results.csv), or a file documenting the pilot that
    measured `sd`."""
    sd_cell: str | None = None
    """The cell of `sd_source`'s comparison, when that study compares the primary's arms in several cells."""

    def __str__(self) -> str:
        return ", ".join(f"{f}: {getattr(self, f)}" for f in ("mixer", "baseline", "difference", "standardized", "sd")
                         if getattr(self, f) is not None) or "nothing"

    def shift(self) -> float | None:
        """The effect in standard deviations of the paired differences (None when neither it nor its spread is
        known)."""
        if self.standardized is not None:
            return self.standardized
        if self.difference is None or self.sd is None:
            return None
        return self.difference / self.sd

    def points(self) -> float | None:
        """The effect as an accuracy difference (None when it is stated in standard deviations without a spread)."""
        if self.difference is not None:
            return self.difference
        return None if self.standardized is None or self.sd is None else self.standardized * self.sd


@dataclass
class Reference:
    """An effect found elsewhere that the design is judged against (the paper's gap): a mean paired accuracy
    difference (`difference`, an accuracy) for the accuracy tests, or each side's rate of the event for the rate
    tests; `source` says where it comes from."""

    source: str = ""
    difference: float | None = None
    mixer: float | None = None
    baseline: float | None = None


@dataclass
class Primary:
    mixer: str
    baseline: str
    test: str = "solved"
    cell: str | None = None
    length: int | None = None
    equal_state: bool = False
    effect: Effect | None = None
    outcome: str | None = None
    reference: Reference | None = None
    margin: float | None = None
    """An equivalence or non-inferiority margin (an accuracy: 0.054 is 5.4 points), for the accuracy tests."""
    margin_test: str = MARGIN_TESTS[0]
    exploratory: bool = False

    def __post_init__(self) -> None:
        if self.test not in TESTS:
            raise ConfigError(f"primary.test must be one of {', '.join(TESTS)}, got {self.test!r}")
        if self.outcome is not None and self.outcome not in OUTCOMES:
            raise ConfigError(f"primary.outcome must be one of {', '.join(OUTCOMES)}, got {self.outcome!r}")
        if self.length is not None and self.test in RUN_TESTS:
            raise ConfigError(f"primary.test {self.test} is the run's (on validation), the same at every test length: "
                              f"at length {self.length} test one of {', '.join(LENGTH_TESTS)} (above: test accuracy "
                              "above the threshold there), or leave length out")
        if self.length is None and self.test == "above":
            raise ConfigError("primary.test above (test accuracy above the threshold at one test length) needs "
                              "primary.length")
        if self.test == "accuracy_t" and self.outcome != "continuous":
            raise ConfigError("primary.test accuracy_t (paired t) needs primary.outcome: continuous, declared before "
                              "the runs; for accuracy that runs either reach or not, use test: accuracy (Wilcoxon)")
        _check_margin(self)
        if self.effect is not None:
            _check_effect(self.test, self.effect, self.margin is not None)
        if self.reference is not None:
            _check_reference(self.test, self.reference, self.effect)

    def __str__(self) -> str:
        """The comparison as a spec declares it: `mixer vs baseline (test accuracy, cell d_model=16)`."""
        where = [f"cell {self.cell}"] * (self.cell is not None) + [f"length {self.length}"] * (self.length is not None)
        return f"{self.mixer} vs {self.baseline} ({', '.join([f'test {self.test}', *where])})"


def _check_margin(primary: Primary) -> None:
    if primary.margin_test not in MARGIN_TESTS:
        raise ConfigError(f"primary.margin_test must be one of {', '.join(MARGIN_TESTS)}, got {primary.margin_test!r}")
    if primary.margin is None:
        if primary.margin_test != MARGIN_TESTS[0]:
            raise ConfigError("primary.margin_test needs primary.margin (the accuracy difference the test is about)")
        return
    if primary.test not in SHIFT_TESTS:
        raise ConfigError(f"primary.margin is for the accuracy tests ({', '.join(SHIFT_TESTS)}), not {primary.test}")
    if not 0.0 < primary.margin <= 1.0:
        raise ConfigError(f"primary.margin is an accuracy difference in (0, 1] (0.054 is 5.4 points), got "
                          f"{primary.margin!r}")
    if primary.reference is not None:
        raise ConfigError("primary.margin: the margin is the effect that matters; leave reference out")


def _check_effect(test: str, effect: Effect, margin: bool) -> None:
    rates = (effect.mixer, effect.baseline)
    shifts = (effect.difference, effect.standardized)
    if test in RATE_TESTS:
        if None in rates or shifts != (None, None) or not all(0.0 <= r <= 1.0 for r in rates):
            raise ConfigError(f"primary.effect of the {test} test: mixer and baseline, solve rates in [0, 1], "
                              f"got {effect}")
        if (effect.sd, effect.sd_source, effect.sd_cell) != (None, None, None):
            raise ConfigError(f"primary.effect of the {test} test is in rates already: leave sd, sd_source and "
                              "sd_cell out")
        return
    if test not in SHIFT_TESTS:
        raise ConfigError("primary.effect: the log-rank test of steps has no exact power here; leave effect out")
    if rates != (None, None) or None not in shifts or (not margin and shifts == (None, None)):
        raise ConfigError(f"primary.effect of the {test} test: difference (the mean paired accuracy difference, 0.1 "
                          f"for 10 points) or standardized (the same in standard deviations), one of them, got "
                          f"{effect}")
    if not margin and 0 in shifts:
        raise ConfigError(f"primary.effect of the {test} test must not be 0 (only a margin's true difference may be)")
    if effect.difference is not None and not abs(effect.difference) <= 1.0:
        raise ConfigError(f"primary.effect.difference is an accuracy difference, at most 1 in size, got "
                          f"{effect.difference!r}")
    if effect.sd is not None and not 0.0 < effect.sd <= 1.0:
        raise ConfigError(f"primary.effect.sd (the standard deviation of the paired accuracy differences) is an "
                          f"accuracy in (0, 1], got {effect.sd!r}")
    if effect.sd is not None and effect.sd_source is None:
        raise ConfigError("primary.effect.sd needs primary.effect.sd_source (the committed study, results/NAME, or "
                          "the file documenting the pilot that measured it)")
    if effect.sd_cell is not None and effect.sd_source is None:
        raise ConfigError("primary.effect.sd_cell needs primary.effect.sd_source (the study whose cell it names)")


def _check_reference(test: str, reference: Reference, effect: Effect | None) -> None:
    if not reference.source.strip():
        raise ConfigError("primary.reference.source must say where the reference effect comes from")
    rates = (reference.mixer, reference.baseline)
    if test in RATE_TESTS:
        if None in rates or reference.difference is not None or not all(0.0 <= r <= 1.0 for r in rates):
            raise ConfigError(f"primary.reference of the {test} test: mixer and baseline, rates in [0, 1], got "
                              f"mixer {reference.mixer!r}, baseline {reference.baseline!r}, difference "
                              f"{reference.difference!r}")
    elif test in SHIFT_TESTS:
        if rates != (None, None) or reference.difference is None or not 0.0 < abs(reference.difference) <= 1.0:
            raise ConfigError(f"primary.reference of the {test} test: difference, a mean paired accuracy difference "
                              f"(not 0, at most 1 in size), got {reference.difference!r}")
        if effect is None or effect.sd_source is None:
            raise ConfigError("primary.reference of an accuracy test needs primary.effect's sd_source (the spread of "
                              "the paired differences) to give its power")
    else:
        raise ConfigError("primary.reference: the log-rank test of steps has no exact power here; leave it out")


@dataclass
class ReportConfig:
    threshold: float = SOLVED
    plateau: float | None = None
    primary: Primary | None = None
    mad_score: bool = False
    select: list[str] = field(default_factory=lambda: [LR_KEY])
    reproduces: str | None = None
    """The folder of the committed study this spec reran (results/NAME): its design may then stay below what a new
    design needs (protocol/power.py), with the limitation stated on every report."""
    plateau_gap: list[float] | None = None
    """The empty gap (low, high) of the pilots' final validation accuracies: the escaped threshold lies in it."""
    left_chance: float | None = None
    """A run left chance when its best validation accuracy rose above this many times chance (reports/chance.py)."""

    def __post_init__(self) -> None:
        if self.plateau_gap is not None:
            gap = self.plateau_gap
            if len(gap) != 2 or not 0.0 <= gap[0] < gap[1] < 1.0:
                raise ConfigError(f"plateau_gap must be [low, high], accuracies with 0 <= low < high < 1, got {gap}")
            if self.plateau is None:
                self.plateau = round((gap[0] + gap[1]) / 2, 6)
            elif not gap[0] < self.plateau < gap[1]:
                raise ConfigError(f"plateau {self.plateau} is outside plateau_gap {gap}: the escaped threshold lies "
                                  f"in the pilots' empty gap")
        if self.left_chance is not None and not self.left_chance > 1.0:
            raise ConfigError(f"left_chance is a multiple of chance above 1, got {self.left_chance!r}")
        for name in ("threshold", "plateau"):
            value = getattr(self, name)
            if value is not None and not 0.0 <= value < 1.0:
                raise ConfigError(f"{name} must be an accuracy in [0, 1), got {value!r}")
        if self.plateau is not None and self.plateau > self.threshold:
            raise ConfigError(f"plateau {self.plateau} is above threshold {self.threshold}: a run escapes the plateau "
                              f"when solved or its final validation accuracy is above it, so it must be at most the "
                              f"threshold")
        _check_select(self.select)


def _check_select(keys: list[str]) -> None:
    """The selected keys: training keys other than the seeds, each once, the learning rate among them (the grid
    extension and the plots by learning rate need it)."""
    if LR_KEY not in keys:
        raise ConfigError(f"select must list {LR_KEY} (with the other training keys to select over), got {keys}")
    for i, key in enumerate(keys):
        if not key.startswith("train.") or key in SEED_KEYS:
            raise ConfigError(f"select: {key!r} is not a training key to select over (train.*, not a seed); a model "
                              "or data key makes rows of its own")
        if key in keys[:i]:
            raise ConfigError(f"select lists {key} more than once, got {keys}")


@dataclass
class TwoStage:
    selection_seeds: list[int]
    confirmation_seeds: list[int]
    extensions: int = 2
    """How many learning rates beyond its grid's edge a cell whose pick sits at that edge may add (0: none)."""
    allow_few_selection_seeds: bool = False
    """Accept fewer than MIN_SELECTION_SEEDS selection seeds (the design check refuses them otherwise)."""

    def __post_init__(self) -> None:
        if not 0 <= self.extensions <= MAX_EXTENSIONS:
            raise ConfigError(f"extensions must be from 0 to {MAX_EXTENSIONS}, got {self.extensions}")
        for name in ("selection_seeds", "confirmation_seeds"):
            seeds = getattr(self, name)
            if not seeds:
                raise ConfigError(f"{name} must be a non-empty list of seeds")
            repeated = next((s for i, s in enumerate(seeds) if s in seeds[:i]), None)
            if repeated is not None:
                raise ConfigError(f"{name} lists seed {repeated} more than once; list each seed once "
                                  f"(got {seeds})")
        shared = set(self.selection_seeds) & set(self.confirmation_seeds)
        if shared:
            raise ConfigError(f"seed(s) {sorted(shared)} are both selection and confirmation seeds")

    def stage_of(self, seed: Any) -> str | None:
        return SELECTION if seed in self.selection_seeds else CONFIRMATION if seed in self.confirmation_seeds else None


def report_config(raw: Any) -> ReportConfig:
    """The `report` mapping of a spec (or of a manifest) as a ReportConfig; None or {} gives the defaults."""
    return _typed("report", raw or {}, ReportConfig)  # type: ignore[return-value]


def two_stage(raw: Any) -> TwoStage | None:
    """The `protocol` mapping of a spec (or of a manifest); None for the single-stage protocol."""
    return None if raw is None else _typed("protocol", raw, TwoStage)  # type: ignore[return-value]


def as_mapping(config: ReportConfig | TwoStage | None) -> dict[str, Any] | None:
    """What the manifest records (read back by `report_config` and `two_stage`)."""
    return None if config is None else asdict(config)


def seed_point(seed: int) -> dict[str, int]:
    """The varied values a protocol seed gives a run: `train.seed` and `data.seed`."""
    return dict.fromkeys(SEED_KEYS, seed)


def _typed(where: str, raw: Any, kind: type) -> object:
    """`raw` checked against the dataclass `kind` (unknown keys, wrong kinds and missing keys are ConfigErrors)."""
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where} must be a mapping, got {raw!r}")
    try:
        return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(kind), raw))
    except ConfigError as e:
        raise ConfigError(f"{where}: {e}") from None
    except (OmegaConfBaseException, ValueError) as e:
        key = getattr(e, "full_key", None)
        message = str(e).splitlines()[0]
        if key and "is not a ListConfig" in message:
            message = f"must be a list, got {OmegaConf.select(OmegaConf.create(dict(raw)), key)!r}"
        raise ConfigError(f"{where}.{key}: {message}" if key else f"{where}: {message}") from None
