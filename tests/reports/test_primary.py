"""The primary's lines in a report: its design in the outcome's units beside what the runs observed (the spread of
the paired differences and what the paired t interval rules out), and its standing at the top of the report
(declared exploratory, or a committed design rerun as committed)."""

from __future__ import annotations

import statistics

import numpy as np
from statsmodels.stats.weightstats import ttost_paired

from loglinear.protocol.power import equivalence_power, signed_rank_power
from loglinear.reports.report import write_report
from loglinear.reports.statistics import hodges_lehmann

from .report_helpers import finished, make_sweep, run_entry

GAINS = [0.30, -0.05, 0.12, 0.02, 0.25, -0.10, 0.08, 0.15]
"""Log-linear minus base test accuracy on each of 8 shared seeds."""


def accuracy_study(folder, **primary):
    entries = []
    for seed, gain in enumerate(GAINS):
        entries.append(run_entry("mamba2", 16, 1e-2, seed, finished(0.40)))
        entries.append(run_entry("log_linear_mamba2", 16, 1e-2, seed, finished(0.40 + gain)))
    report = {"primary": {"mixer": "log_linear_mamba2", "baseline": "mamba2", "test": "accuracy", **primary}}
    return make_sweep(folder, entries, report=report)


def test_the_report_states_the_design_in_points_and_what_the_interval_rules_out(tmp_path):
    effect = {"standardized": 0.8, "sd": 0.2, "sd_source": "the pilots"}
    reference = {"difference": 0.05, "source": "the paper"}
    table = write_report(accuracy_study(tmp_path, effect=effect, reference=reference, exploratory=True)).table
    sd = statistics.stdev(100 * g for g in GAINS)
    design = next(line for line in table.splitlines() if line.startswith("**Design**"))
    assert design.startswith("**Design** (as declared, on the 8 pairs compared): primary log_linear_mamba2 vs mamba2, "
                             "Wilcoxon signed-rank on test accuracy, 8 seeds: best-case p 0.0078")
    assert "a paired difference of 16.0 points (0.80 standard deviations at the SD of 20.0 points from the pilots)" \
        in design
    assert "power 0.8 from a difference of" in design and "for the reference, a paired difference of 5.0 points" \
        in design
    at_observed = signed_rank_power(0.16 / (sd / 100), 8)
    reference_observed = signed_rank_power(0.05 / (sd / 100), 8)
    assert (f"Observed: the paired differences' standard deviation was {sd:.1f} points, at which the design had power "
            f"{at_observed:.2f} for the effect of 16.0 points and {reference_observed:.2f} for the reference "
            "(5.0 points); the paired t 95% interval [") in design
    assert "rules out the differences beyond it, and none inside it." in design
    assert table.splitlines()[4].startswith("**Exploratory primary**: the spec declares its primary comparison "
                                            "exploratory")


def test_a_report_without_exploratory_or_reproduces_has_no_standing_line(tmp_path):
    table = write_report(accuracy_study(tmp_path)).table
    assert "**Exploratory primary**" not in table and "**Limitation**" not in table
    assert "no effect stated (report.primary.effect)" in table


def test_a_committed_design_rerun_as_committed_states_its_limitation_at_the_top(tmp_path):
    entries = []
    for seed in range(5):
        entries.append(run_entry("mamba2", 16, 1e-2, seed, finished(0.4)))
        entries.append(run_entry("log_linear_mamba2", 16, 1e-2, seed, finished(0.5)))
    report = {"reproduces": "results/hand",
              "primary": {"mixer": "log_linear_mamba2", "baseline": "mamba2", "test": "accuracy"}}
    table = write_report(make_sweep(tmp_path, entries, report=report)).table
    limitation = ("**Limitation**: this design reproduces results/hand as committed: with 5 seeds its best case is p "
                  "0.0625, above alpha 0.05, so it can never be significant (at least 6 seeds could); it was declared "
                  "before the power rule and is not confirmatory under it: it states no effect to detect "
                  "(report.primary.effect).")
    assert table.splitlines()[4] == limitation


def test_a_margin_primary_reads_equivalent_or_not_shown_with_its_interval_against_the_margin(tmp_path):
    """GAINS: mean +9.6 points; within ±30 points the paired TOST shows equivalence (statsmodels' p), within ±5 it
    does not; the Wilcoxon version states the Hodges-Lehmann interval; the difference test is then a secondary."""
    diffs = np.array([100 * g for g in GAINS])
    effect = {"sd": 0.15, "sd_source": "the pilots"}
    table = write_report(accuracy_study(tmp_path / "t", test="accuracy_t", outcome="continuous", margin=0.30,
                                        effect=effect)).table
    primary = next(line for line in table.splitlines() if line.startswith("**Primary comparison**"))
    p = ttost_paired(diffs, np.zeros(len(diffs)), -30.0, 30.0)[0]
    assert f"two one-sided paired t tests of equivalence (paired t), p={p:.3f}" in primary
    assert primary.endswith(": equivalent within ±30.0 points.") and "90% interval [" in primary
    design = next(line for line in table.splitlines() if line.startswith("**Design**"))
    assert "two one-sided paired t tests (equivalence within ±30.0 points), 8 seeds" in design
    sd = statistics.stdev(diffs)
    assert f"at which the margin test had power {equivalence_power('accuracy_t', 0.0, 30 / sd, 8):.2f}" in design
    table = write_report(accuracy_study(tmp_path / "w", margin=0.05, effect=effect)).table
    primary = next(line for line in table.splitlines() if line.startswith("**Primary comparison**"))
    hl = hodges_lehmann(diffs)
    assert "two one-sided Wilcoxon signed-rank tests of equivalence (Wilcoxon, exact)" in primary
    assert f"90% interval [{hl.low:+.1f}, {hl.high:+.1f}]".replace("-", "−") in primary
    assert primary.endswith("(Hodges-Lehmann): not shown (the interval is not inside ±5.0 points).")
    assert "Wilcoxon p=" in table.split("**Design**")[1]  # the difference test, a secondary under Holm
    table = write_report(accuracy_study(tmp_path / "n", margin=0.05, margin_test="noninferiority",
                                        effect=effect)).table
    assert "one-sided Wilcoxon signed-rank test of non-inferiority" in table
    assert ": not worse by more than 5.0 points." in table
