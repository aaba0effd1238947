"""The power of a margin primary (equivalence, non-inferiority) against independent simulations with statsmodels'
and scipy's own tests, and the design check's statement and refusal of it."""

from __future__ import annotations

import numpy as np
import pytest
import yaml
from scipy import stats
from statsmodels.stats.weightstats import ttost_paired

from loglinear.cli import main
from loglinear.protocol.power import equivalence_power, signed_rank_null, signed_rank_one_sided
from loglinear.runs.config import ConfigError
from loglinear.sweeps.spec import parse_spec

from .test_power import spec_file


def test_the_paired_t_equivalence_power_matches_statsmodels_on_independent_draws():
    """12 differences of mean 0.2 SD, margin 1 SD: the share of draws statsmodels' paired TOST calls equivalent."""
    rng = np.random.default_rng(11)
    draws = rng.normal(0.2, 1.0, size=(4_000, 12))
    zeros = np.zeros(12)
    simulated = np.mean([ttost_paired(d, zeros, -1.0, 1.0)[0] <= 0.05 for d in draws])
    assert equivalence_power("accuracy_t", 0.2, 1.0, 12) == pytest.approx(simulated, abs=0.02)


def test_the_signed_rank_equivalence_and_non_inferiority_powers_match_scipy_on_independent_draws():
    rng = np.random.default_rng(12)
    draws = rng.normal(0.0, 1.0, size=(3_000, 10))
    lower = stats.wilcoxon(draws + 0.8, axis=1, alternative="greater", method="exact").pvalue <= 0.05
    upper = stats.wilcoxon(draws - 0.8, axis=1, alternative="less", method="exact").pvalue <= 0.05
    assert equivalence_power("accuracy", 0.0, 0.8, 10) == pytest.approx(np.mean(lower & upper), abs=0.025)
    assert equivalence_power("accuracy", 0.0, 0.8, 10, "noninferiority") == pytest.approx(np.mean(lower), abs=0.025)


@pytest.mark.parametrize("n", [5, 6, 10, 30])
def test_the_one_sided_signed_rank_critical_value_is_the_smallest_w_at_alpha(n):
    upper = np.cumsum(signed_rank_null(n)[::-1])[::-1]
    w = signed_rank_one_sided(n)
    assert upper[w] <= 0.05 < upper[w - 1]
    assert stats.wilcoxon(np.arange(1.0, n + 1), alternative="greater", method="exact").pvalue <= 0.05
    assert signed_rank_one_sided(4) == 11  # 2^-4 = 0.0625: no W+ of 4 differences reaches 0.05


def test_the_power_grows_with_the_seeds_and_falls_with_a_true_difference():
    assert equivalence_power("accuracy", 0.0, 0.5, 40) < equivalence_power("accuracy", 0.0, 0.5, 80)
    assert equivalence_power("accuracy_t", 0.3, 0.5, 60) < equivalence_power("accuracy_t", 0.0, 0.5, 60)
    assert equivalence_power("accuracy_t", 0.0, 0.5, 1) == 0.0


def margin_spec(folder, seeds: int, **primary):
    (folder / "pilot.md").write_text("pilot: paired SD 15 points\n")
    raw = yaml.safe_load(spec_file(folder, "accuracy", seeds).read_text())
    raw["report"]["primary"].update({"margin": 0.054, "effect": {"sd": 0.15, "sd_source": str(folder / "pilot.md")},
                                     **primary})
    path = folder / "margin.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def test_a_margin_design_states_its_power_and_is_refused_below_the_rule(tmp_path, capsys):
    assert main(["sweep", "run", str(margin_spec(tmp_path, 80)), "--dry-run", "--out", str(tmp_path / "out")]) == 0
    err = capsys.readouterr().err
    power = equivalence_power("accuracy", 0.0, 0.054 / 0.15, 80)
    assert (f"two one-sided Wilcoxon signed-rank tests (equivalence within ±5.4 points), 80 seeds, alpha 0.05; power "
            f"{power:.2f} at a true difference of 0.0 points and the SD of 15.0 points from {tmp_path / 'pilot.md'}"
            ) in err
    assert main(["sweep", "run", str(margin_spec(tmp_path, 30)), "--dry-run"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not confirmatory: power" in err[0] and "at a true difference of 0.0 points" in err[0]
    assert "confirmation seeds reach it" in err[0]
    path = margin_spec(tmp_path, 30, margin_test="noninferiority", exploratory=True)
    assert main(["sweep", "run", str(path), "--dry-run", "--out", str(tmp_path / "out")]) == 0
    assert "one-sided Wilcoxon signed-rank test (non-inferiority: not worse by more than 5.4 points)" in \
        capsys.readouterr().err


def test_a_margin_belongs_to_an_accuracy_test(tmp_path):
    raw = yaml.safe_load(spec_file(tmp_path, "solved", 8).read_text())
    raw["report"]["primary"]["margin"] = 0.05
    with pytest.raises(ConfigError, match="margin is for the accuracy tests"):
        parse_spec(raw)
