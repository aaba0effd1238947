"""Can a spec's primary comparison conclude? The best case of each test on n seeds, the power for a stated effect
(against a seed-by-seed enumeration and a simulation), and `loglinear sweep run` refusing a design that cannot
reach alpha before anything runs or is written, `--dry-run` included."""

from __future__ import annotations

import itertools
import warnings
from pathlib import Path

import numpy as np
import pytest
import yaml
from scipy import stats

from loglinear.cli import main
from loglinear.protocol.power import (
    DesignError,
    assess,
    best_case_p,
    check_design,
    mcnemar_power,
    paired_t_power,
    positive_rank_sum,
    signed_rank_null,
    signed_rank_power,
    smallest_shift,
)
from loglinear.reports.spread import resolve_spread
from loglinear.runs.config import CONFIGS_DIR, ConfigError
from loglinear.sweeps.spec import load_spec, parse_spec
from loglinear.sweeps.spec_keys import Effect, Primary

from ..sweeps.sweep_helpers import TINY_BASE

PRIMARY = {"mixer": "log_linear_mamba2", "baseline": "mamba2"}


def spec_file(folder: Path, test: str, seeds: int, effect: dict | None = None, two_stage: bool = True,
              selection: int = 4, exploratory: bool = False, **protocol) -> Path:
    """A tiny MQAR spec of Mamba-2 and its log-linear variant whose primary is `test` on `seeds` seeds (`selection`
    selection seeds under the two-stage protocol), declared `exploratory` or not."""
    primary = {**PRIMARY, "test": test, **({"effect": effect} if effect else {}),
               **({"exploratory": True} if exploratory else {})}
    if test == "accuracy_t":
        primary["outcome"] = "continuous"
    spec = {"name": "power", "base": {k: v for k, v in TINY_BASE.items() if k != "model.mixer"},
            "grid": {"model.mixer": ["mamba2", "log_linear_mamba2"]},
            "report": {"threshold": 0.99, "plateau": 0.5, "primary": primary}}
    if two_stage:
        spec["protocol"] = {"selection_seeds": list(range(100, 100 + selection)),
                            "confirmation_seeds": list(range(seeds)), **protocol}
    else:
        spec["zip"] = [{"train.seed": list(range(seeds)), "data.seed": list(range(seeds))}]
    path = folder / "power.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


@pytest.mark.parametrize("n", [1, 3, 5, 6, 8])
def test_mcnemar_best_case_is_every_pair_discordant_one_way(n):
    assert best_case_p("solved", n) == pytest.approx(stats.binomtest(n, n, 0.5).pvalue)
    assert best_case_p("escaped", n) == pytest.approx(2 * 0.5**n)


def test_the_log_rank_best_case_is_one_side_passing_before_the_other_is_censored():
    """No arrangement of 3 runs a side gives a smaller log-rank p than the best case (an arrangement whose every
    event comes after the last run at risk on one side has no variance: scipy's nan, no test)."""
    best = best_case_p("steps", 3)
    times = range(1, 7)
    for mine in itertools.combinations(times, 3):
        theirs = [t for t in times if t not in mine]
        for reached in itertools.product([True, False], repeat=6):
            groups = [stats.CensoredData(uncensored=[t for t, r in zip(side, done, strict=True) if r],
                                         right=[t for t, r in zip(side, done, strict=True) if not r])
                      for side, done in ((mine, reached[:3]), (theirs, reached[3:]))]
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                p = stats.logrank(*groups).pvalue
            assert np.isnan(p) or p >= best - 1e-12
    assert best_case_p("steps", 2) > 0.05 >= best


@pytest.mark.parametrize("n", [2, 3, 4])
def test_the_log_rank_best_case_tries_every_pattern_of_ties(n):
    """Reference: every way the passing side's n runs can fall on n steps (with ties), the other side censored."""
    second = stats.CensoredData(right=[10] * n)
    found = [stats.logrank(stats.CensoredData(uncensored=list(times)), second).pvalue
             for times in itertools.product(range(1, n + 1), repeat=n)]
    assert best_case_p("steps", n) == pytest.approx(min(found))
    distinct = stats.logrank(stats.CensoredData(uncensored=list(range(1, n + 1))), second).pvalue
    assert best_case_p("steps", n) <= distinct


def test_the_paired_t_can_reach_any_p_from_two_seeds():
    assert best_case_p("accuracy_t", 1) == 1.0 and best_case_p("accuracy_t", 2) == 0.0


@pytest.mark.parametrize("n", [1, 5, 6, 8])
def test_the_signed_rank_best_case_is_every_difference_of_one_sign(n):
    assert best_case_p("accuracy", n) == pytest.approx(stats.wilcoxon(np.arange(1.0, n + 1), method="exact").pvalue)
    assert best_case_p("accuracy", 5) > 0.05 > best_case_p("accuracy", 6) == 2 / 64


@pytest.mark.parametrize("n", [1, 4, 7])
def test_the_signed_rank_null_counts_the_subsets_of_ranks(n):
    sums = [sum(c) for k in range(n + 1) for c in itertools.combinations(range(1, n + 1), k)]
    assert signed_rank_null(n).tolist() == pytest.approx([sums.count(w) / 2**n for w in range(n * (n + 1) // 2 + 1)])


@pytest.mark.parametrize("n", [1, 2, 7, 44])
def test_the_positive_rank_sum_is_scipy_s_signed_rank_statistic(n):
    """W+ of each row of normal draws (no ties, no zeros), against scipy's two-sided statistic min(W+, W-) and the
    total n(n+1)/2."""
    draws = np.random.default_rng(n).normal(0.2, 1.0, size=(200, n))
    w_plus = positive_rank_sum(draws)
    assert w_plus.dtype.kind == "i"
    total = n * (n + 1) // 2
    scipy_statistic = stats.wilcoxon(draws, axis=1, method="exact").statistic
    assert np.array_equal(np.minimum(w_plus, total - w_plus), scipy_statistic)


def test_signed_rank_power_matches_scipy_on_independent_draws():
    """Power of the exact test on 8 normal differences shifted by 1 sd, against scipy's own test on other draws;
    with no shift it is the test's exact size, 10/256 (W+ <= 3 or >= 33)."""
    draws = np.random.default_rng(1).normal(1.0, 1.0, size=(20_000, 8))
    simulated = np.mean(stats.wilcoxon(draws, axis=1, method="exact").pvalue <= 0.05)
    assert signed_rank_power(1.0, 8) == pytest.approx(simulated, abs=0.012)
    assert signed_rank_power(0.0, 8) == pytest.approx(10 / 256, abs=0.002)
    assert signed_rank_power(-1.0, 8) == pytest.approx(signed_rank_power(1.0, 8), abs=0.006)
    assert signed_rank_power(1.0, 5) == 0.0 and signed_rank_power(2.0, 60) == pytest.approx(1.0)
    # about 3/pi as efficient as the t on normal differences: a little below it, never above by more than noise
    assert paired_t_power(1.0, 8) - 0.1 < signed_rank_power(1.0, 8) < paired_t_power(1.0, 8)


def reference_mcnemar_power(mixer: float, baseline: float, n: int) -> float:
    """Every seed's outcome (mixer solved?, baseline solved?) enumerated: 4^n arrangements."""
    total = 0.0
    for outcome in itertools.product([(1, 1), (1, 0), (0, 1), (0, 0)], repeat=n):
        probability = np.prod([(mixer if a else 1 - mixer) * (baseline if b else 1 - baseline) for a, b in outcome])
        only_mixer = sum(a and not b for a, b in outcome)
        only_baseline = sum(b and not a for a, b in outcome)
        discordant = only_mixer + only_baseline
        if discordant and stats.binomtest(only_mixer, discordant, 0.5).pvalue <= 0.05:
            total += probability
    return total


@pytest.mark.parametrize(("mixer", "baseline", "n"), [(0.9, 0.2, 6), (0.5, 0.5, 5), (1.0, 0.0, 5), (0.7, 0.1, 4)])
def test_mcnemar_power_matches_the_seed_by_seed_enumeration(mixer, baseline, n):
    assert mcnemar_power(mixer, baseline, n) == pytest.approx(reference_mcnemar_power(mixer, baseline, n), abs=1e-12)


def test_paired_t_power_matches_a_simulation():
    rng = np.random.default_rng(0)
    samples = rng.normal(1.0, 1.0, size=(40_000, 8))
    simulated = np.mean(stats.ttest_1samp(samples, 0.0, axis=1).pvalue <= 0.05)
    assert paired_t_power(1.0, 8) == pytest.approx(simulated, abs=0.01)
    assert paired_t_power(-1.0, 8) == pytest.approx(paired_t_power(1.0, 8))
    assert paired_t_power(1.0, 200) == pytest.approx(1.0)


@pytest.mark.parametrize("dry_run", [True, False])
def test_a_design_that_cannot_reach_alpha_is_refused_before_anything(tmp_path, capsys, dry_run):
    out = tmp_path / "out"
    code = main(["sweep", "run", str(spec_file(tmp_path, "solved", 5)), "--out", str(out), "--quiet",
                 *(["--dry-run"] if dry_run else [])])
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and captured.out == ""
    assert "exact McNemar on solved" in lines[0] and "with 5 seeds (best-case p 0.0625)" in lines[0]
    assert lines[0].endswith("it needs at least 6 confirmation seeds")
    assert not out.exists()


def test_single_stage_seeds_count_and_the_log_rank_needs_three(tmp_path, capsys):
    code = main(["sweep", "run", str(spec_file(tmp_path, "steps", 2, two_stage=False)), "--dry-run"])
    err = capsys.readouterr().err
    assert code == 2 and "log-rank on the steps to the threshold) cannot reach alpha 0.05 with 2 seeds" in err
    assert "at least 3 confirmation seeds" in err


def test_a_wandb_sweep_file_is_refused_for_a_design_that_cannot_reach_alpha(tmp_path, capsys):
    out = tmp_path / "out"
    code = main(["sweep", "wandb", str(spec_file(tmp_path, "solved", 3, two_stage=False)), "--out", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "exact McNemar on solved" in err[0] and "with 3 seeds" in err[0]
    assert not out.exists()


def test_a_design_that_can_reach_alpha_prints_its_power(tmp_path, capsys):
    effect = {"mixer": 0.9, "baseline": 0.2}
    code = main(["sweep", "run", str(spec_file(tmp_path, "solved", 6, effect, exploratory=True)), "--dry-run",
                 "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 0
    assert (f"primary log_linear_mamba2 vs mamba2, exact McNemar on solved, 6 seeds: best-case p 0.031, alpha 0.05; "
            f"power {mcnemar_power(0.9, 0.2, 6):.2f} for solve rates 0.9 vs 0.2") in err


def test_a_confirmatory_design_below_the_power_rule_is_refused_with_the_seeds_it_needs(tmp_path, capsys):
    """Power 0.47 for solve rates 0.9 vs 0.2 on 6 seeds: refused (one line, nothing written) naming the fewest
    seeds that reach 0.8; with those seeds it passes; declared exploratory it passes as it is."""
    effect = {"mixer": 0.9, "baseline": 0.2}
    out = tmp_path / "out"
    assert main(["sweep", "run", str(spec_file(tmp_path, "solved", 6, effect)), "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    needed = next(n for n in range(7, 60) if mcnemar_power(0.9, 0.2, n) >= 0.8)
    assert len(err) == 1 and not out.exists()
    assert (f"report.primary is not confirmatory: power {mcnemar_power(0.9, 0.2, 6):.2f} for solve rates 0.9 vs 0.2 "
            f"(70.0 points), below 0.8 ({needed} confirmation seeds reach it); or declare it "
            "report.primary.exploratory: true") in err[0]
    assert main(["sweep", "run", str(spec_file(tmp_path, "solved", needed, effect)), "--dry-run", "--out",
                 str(out)]) == 0


@pytest.mark.parametrize(("test", "effect", "why"), [
    ("solved", None, "it states no effect to detect"),
    ("steps", None, "the log-rank test of steps has no power computation here"),
    ("accuracy", {"standardized": 1.0}, "its effect has no spread in points"),
])
def test_a_primary_without_a_power_in_points_is_confirmatory_only_when_declared_exploratory(tmp_path, capsys, test,
                                                                                          effect, why):
    assert main(["sweep", "run", str(spec_file(tmp_path, test, 12, effect)), "--dry-run"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"report.primary is not confirmatory: {why}" in err[0]
    assert main(["sweep", "run", str(spec_file(tmp_path, test, 12, effect, exploratory=True)), "--dry-run",
                 "--out", str(tmp_path / "out")]) == 0


def test_an_exploratory_accuracy_effect_in_standard_deviations_prints_its_power(tmp_path, capsys):
    code = main(["sweep", "run", str(spec_file(tmp_path, "accuracy_t", 8, {"standardized": 1.0}, exploratory=True)),
                 "--dry-run", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 0 and "paired t on test accuracy, 8 seeds: any p from 2 seeds on, alpha 0.05; power 0.68 for a " \
                         "paired difference of 1 standard deviations (no spread, so not in points)" in err
    code = main(["sweep", "run", str(spec_file(tmp_path, "accuracy", 8, {"standardized": 1.0}, exploratory=True)),
                 "--dry-run", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 0 and (f"Wilcoxon signed-rank on test accuracy, 8 seeds: best-case p 0.0078, alpha 0.05; power "
                          f"{signed_rank_power(1.0, 8):.2f} for a paired difference of 1 standard deviations") in err


def test_the_rank_test_on_five_seeds_is_refused(tmp_path, capsys):
    code = main(["sweep", "run", str(spec_file(tmp_path, "accuracy", 5)), "--dry-run"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert "(Wilcoxon signed-rank on test accuracy) cannot reach alpha 0.05 with 5 seeds (best-case p 0.0625); it " \
           "needs at least 6 confirmation seeds" in err[0]


def test_the_paired_t_without_a_continuous_outcome_is_refused_in_one_line(tmp_path, capsys):
    raw = yaml.safe_load(spec_file(tmp_path, "accuracy_t", 8).read_text())
    del raw["report"]["primary"]["outcome"]
    path = tmp_path / "no_outcome.yaml"
    path.write_text(yaml.safe_dump(raw))
    code = main(["sweep", "run", str(path), "--dry-run"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "accuracy_t (paired t) needs primary.outcome: continuous" in err[0]


@pytest.mark.parametrize("dry_run", [True, False])
def test_fewer_than_four_selection_seeds_are_refused_before_anything(tmp_path, capsys, dry_run):
    out = tmp_path / "out"
    code = main(["sweep", "run", str(spec_file(tmp_path, "solved", 8, selection=2)), "--out", str(out), "--quiet",
                 *(["--dry-run"] if dry_run else [])])
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and captured.out == "" and not out.exists()
    assert "protocol.selection_seeds has 2 seed(s)" in lines[0]
    assert lines[0].endswith("give at least 4, or set protocol.allow_few_selection_seeds: true")


def test_a_protocol_may_opt_out_of_the_selection_seeds_minimum(tmp_path, capsys):
    path = spec_file(tmp_path, "solved", 8, selection=2, allow_few_selection_seeds=True, exploratory=True)
    assert main(["sweep", "run", str(path), "--dry-run", "--out", str(tmp_path / "out")]) == 0
    assert main(["sweep", "run", str(spec_file(tmp_path, "solved", 8, selection=4, exploratory=True)), "--dry-run",
                 "--out", str(tmp_path / "out")]) == 0
    raw = yaml.safe_load(spec_file(tmp_path, "solved", 8, selection=1).read_text())
    del raw["report"]["primary"]  # the minimum holds without a primary too
    path.write_text(yaml.safe_dump(raw))
    assert main(["sweep", "run", str(path), "--dry-run"]) == 2
    assert "protocol.selection_seeds has 1 seed(s)" in capsys.readouterr().err


@pytest.mark.parametrize(("test", "effect", "match"), [
    ("solved", {"standardized": 1.0}, "mixer and baseline, solve rates"),
    ("solved", {"mixer": 1.2, "baseline": 0.1}, "solve rates in \\[0, 1\\]"),
    ("accuracy", {"mixer": 0.9, "baseline": 0.1}, "standardized"),
    ("steps", {"standardized": 1.0}, "no exact power"),
])
def test_an_effect_that_does_not_fit_its_test_is_a_config_error(tmp_path, test, effect, match):
    raw = yaml.safe_load(spec_file(tmp_path, test, 8, effect).read_text())
    with pytest.raises(ConfigError, match=match):
        parse_spec(raw)


FIVE_SEED_RANK_PRIMARIES = {"parity_gdn_confirm_cpu", "state_tracking_cpu", "state_tracking_s3_cpu"}
"""Committed specs whose primary, declared as the paired t, is now the signed-rank test, which 5 seeds cannot take
below 0.0625: they rerun as committed (`report.reproduces`), the limitation stated."""
CONFIRMATORY = {"mqar_state_gdn_cpu", "mqar_levels_mamba2_cpu", "state_tracking_s3_gdn_cpu", "mqar_levels_gdn_cpu",
                "mqar_paper_gpu"}
"""The specs declared under the power rule: power 0.8 for their effect in points, the spread read from a committed
study."""


def test_every_committed_spec_with_a_primary_is_confirmatory_exploratory_or_reproduces_its_committed_study():
    """The studies declared under the power rule meet it; the others are declared exploratory or rerun their
    committed study as committed, the limitation stated; without `reproduces` those are refused as a new design."""
    for path in sorted((CONFIGS_DIR / "sweeps").glob("*.yaml")):
        spec = resolve_spread(load_spec(path))
        design = check_design(spec)
        if design is None:
            continue
        if path.stem in CONFIRMATORY:
            assert design.shortfall is None and design.power >= 0.8 and not spec.report.primary.exploratory, path.name
            assert spec.report.reproduces is None and spec.report.primary.effect.sd_source.startswith("results/")
            continue
        if spec.report.primary.exploratory:
            assert spec.report.reproduces is None or design.best_p > 0.05, path.name
            continue
        assert spec.report.reproduces == f"results/{path.stem}", path.name
        assert f"reproduces results/{path.stem} as committed" in design.limitation
        if path.stem in FIVE_SEED_RANK_PRIMARIES:
            assert design.best_p > 0.05 and "can never be significant (at least 6 seeds could)" in design.text()
        spec.report.reproduces = None
        with pytest.raises(DesignError, match="with 5 seeds .* at least 6 confirmation seeds|not confirmatory"):
            check_design(spec)


def reproducing_spec(folder: Path, reproduces: str) -> Path:
    raw = yaml.safe_load(spec_file(folder, "accuracy", 5, two_stage=False).read_text())
    raw["report"]["reproduces"] = reproduces
    path = folder / "power.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def test_only_a_committed_study_of_the_spec_may_be_reproduced(tmp_path, capsys):
    """`reproduces` lifts the refusal only for a folder of the spec's own name holding a results.csv."""
    for folder, match in (("results/power", "is not a committed study's folder"),
                          ("results/other", "is another study's folder")):
        (tmp_path / folder).mkdir(parents=True, exist_ok=True)
        (tmp_path / folder / ".keep").write_text("")
        path = reproducing_spec(tmp_path, folder)
        if folder == "results/other":
            (tmp_path / folder / "results.csv").write_text("run_id\n")
        assert main(["sweep", "run", str(path), "--dry-run"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and match in err[0]
    (tmp_path / "results" / "power" / "results.csv").write_text("run_id\n")
    assert main(["sweep", "run", str(reproducing_spec(tmp_path, "results/power")), "--dry-run",
                 "--out", str(tmp_path / "out")]) == 0
    assert "reproduces results/power as committed: with 5 seeds its best case is p 0.0625" in capsys.readouterr().err


def paper_like(folder: Path, **primary) -> Path:
    """An accuracy primary on 16 seeds with the spread a pilot's write-up (pilots.md) states and a reference."""
    (folder / "pilots.md").write_text("The pilots' paired differences: standard deviation 25 points.\n")
    raw = yaml.safe_load(spec_file(folder, "accuracy", 16, {"standardized": 0.8, "sd": 0.25,
                                                             "sd_source": str(folder / "pilots.md")}).read_text())
    raw["report"]["primary"].update(primary)
    path = folder / "paper.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def test_the_design_is_stated_in_points_with_the_smallest_difference_and_the_power_for_the_reference(tmp_path,
                                                                                                      capsys):
    """0.8 SD at the pilots' 25 points is 20 points; the smallest difference with power 0.8 is the first
    standardized step whose simulated power reaches it; the reference's power is the power at its points over the
    pilots' SD, and below 0.8 the primary is refused unless declared exploratory."""
    reference = {"difference": 0.054, "source": "the paper at d_model 32"}
    assert main(["sweep", "run", str(paper_like(tmp_path, reference=reference)), "--dry-run"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    low = signed_rank_power(0.054 / 0.25, 16)
    assert len(err) == 1 and f"not confirmatory: power {low:.2f} for its reference (a paired difference of 5.4 " \
        "points (the paper at d_model 32)), below 0.8" in err[0] and "report.primary.exploratory: true" in err[0]
    path = paper_like(tmp_path, reference=reference, exploratory=True)
    assert main(["sweep", "run", str(path), "--dry-run", "--out", str(tmp_path / "out")]) == 0
    err = capsys.readouterr().err
    smallest = smallest_shift("accuracy", 16)
    assert signed_rank_power(smallest, 16) >= 0.8 > signed_rank_power(round(smallest - 0.01, 2), 16)
    assert (f"power {signed_rank_power(0.8, 16):.2f} for a paired difference of 20.0 points (0.80 standard deviations "
            f"at the SD of 25.0 points from {tmp_path / 'pilots.md'}); power 0.8 from a difference of {smallest:.2f} "
            "standard deviations "
            f"({100 * smallest * 0.25:.1f} points); power {low:.2f} for the reference, a paired difference of 5.4 "
            f"points (the paper at d_model 32); declared exploratory") in err
    strong = {"difference": 0.25, "source": "a large gap"}
    assert main(["sweep", "run", str(paper_like(tmp_path, reference=strong)), "--dry-run",
                 "--out", str(tmp_path / "out")]) == 0


def test_a_rate_design_states_the_smallest_rate_it_detects():
    primary = Primary(mixer="a", baseline="b", test="solved", effect=Effect(mixer=0.9, baseline=0.3))
    design = assess(primary, 16)
    rate = design.detectable
    assert mcnemar_power(rate, 0.3, 16) >= 0.8 > mcnemar_power(round(rate - 0.01, 2), 0.3, 16)
    assert f"power 0.8 from a rate of {rate:.2f} against the baseline's 0.3 ({100 * (rate - 0.3):.1f} points)" \
        in design.text()


@pytest.mark.parametrize(("primary", "match"), [
    ({"effect": {"standardized": 0.8, "sd": 0.25}}, "sd needs primary.effect.sd_source"),
    ({"effect": {"standardized": 0.8, "sd": 1.5, "sd_source": "x"}}, "an accuracy in \\(0, 1\\]"),
    ({"effect": {"difference": 0.1, "standardized": 0.8}}, "one of them"),
    ({"effect": {"difference": 0.0, "sd_source": "x"}}, "must not be 0"),
    ({"effect": {"difference": 1.5, "sd_source": "x"}}, "at most 1 in size"),
    ({"effect": {"difference": 0.1, "sd_cell": "d_model=16"}}, "sd_cell needs"),
    ({"effect": {"standardized": 0.8}, "reference": {"difference": 0.05, "source": "paper"}},
     "needs primary.effect's sd_source"),
    ({"margin": 0.05, "reference": {"difference": 0.05, "source": "paper"}, "effect": {"sd_source": "x"}},
     "leave reference out"),
    ({"margin": 1.5}, "margin is an accuracy difference in \\(0, 1\\]"),
    ({"margin_test": "noninferiority"}, "margin_test needs primary.margin"),
    ({"margin": 0.05, "margin_test": "superiority"}, "margin_test must be one of equivalence, noninferiority"),
    ({"effect": {"standardized": 0.8, "sd": 0.2, "sd_source": "x"}, "reference": {"difference": 0.05}},
     "reference.source"),
    ({"reference": {"mixer": 0.5, "baseline": 0.2, "source": "x"}}, "reference of the accuracy test: difference"),
    ({"effect": {"standardized": 0.8}, "exploratroy": True}, "exploratroy"),
])
def test_a_reference_or_spread_that_does_not_fit_is_a_config_error(tmp_path, primary, match):
    raw = yaml.safe_load(spec_file(tmp_path, "accuracy", 8).read_text())
    raw["report"]["primary"].update(primary)
    with pytest.raises(ConfigError, match=match):
        parse_spec(raw)
