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
from loglinear.runs.config import CONFIGS_DIR, ConfigError
from loglinear.sweeps.power import best_case_p, check_design, mcnemar_power, paired_t_power
from loglinear.sweeps.spec import load_spec, parse_spec

from .sweep_helpers import TINY_BASE

PRIMARY = {"mixer": "log_linear_mamba2", "baseline": "mamba2"}


def spec_file(folder: Path, test: str, seeds: int, effect: dict | None = None, two_stage: bool = True) -> Path:
    """A tiny MQAR spec of Mamba-2 and its log-linear variant whose primary is `test` on `seeds` seeds."""
    primary = {**PRIMARY, "test": test, **({"effect": effect} if effect else {})}
    spec = {"name": "power", "base": {k: v for k, v in TINY_BASE.items() if k != "model.mixer"},
            "grid": {"model.mixer": ["mamba2", "log_linear_mamba2"]},
            "report": {"threshold": 0.99, "plateau": 0.5, "primary": primary}}
    if two_stage:
        spec["protocol"] = {"selection_seeds": [100], "confirmation_seeds": list(range(seeds))}
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
    assert best_case_p("accuracy", 1) == 1.0 and best_case_p("accuracy", 2) == 0.0


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
    code = main(["sweep", "run", str(spec_file(tmp_path, "solved", 6, effect)), "--dry-run",
                 "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 0
    assert (f"primary log_linear_mamba2 vs mamba2, exact McNemar on solved, 6 seeds: best-case p 0.031, alpha 0.05; "
            f"power {mcnemar_power(0.9, 0.2, 6):.2f} for solve rates 0.9 vs 0.2") in err


def test_the_accuracy_effect_is_standardized_and_its_power_printed(tmp_path, capsys):
    code = main(["sweep", "run", str(spec_file(tmp_path, "accuracy", 8, {"standardized": 1.0})), "--dry-run",
                 "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 0 and "8 seeds: any p from 2 seeds on, alpha 0.05; power 0.68 for a paired difference of 1 " \
                         "standard deviations" in err


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


def test_every_committed_spec_with_a_primary_can_reach_alpha():
    """The demo (3 seeds, log-rank best case 0.022) and the studies keep running."""
    for path in sorted((CONFIGS_DIR / "sweeps").glob("*.yaml")):
        spec = load_spec(path)
        design = check_design(spec)
        assert design is None or design.best_p <= 0.05, path.name
