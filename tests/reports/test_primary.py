"""The primary's lines in a report: its design in the outcome's units beside what the runs observed (the spread of
the paired differences and what the paired t interval rules out), and its standing at the top of the report
(declared exploratory, or a committed design rerun as committed)."""

from __future__ import annotations

import statistics

from loglinear.reports.report import write_report

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
    assert "a paired difference of 0.8 standard deviations (16.0 points at the SD of 20.0 points from the pilots)" \
        in design
    assert "power 0.8 from a difference of" in design and "for the reference, a paired difference of 5.0 points" \
        in design
    assert (f"Observed: the paired differences' standard deviation was {sd:.1f} points, so the declared 0.8 standard "
            f"deviations are {0.8 * sd:.1f} points; the paired t 95% interval [") in design
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
                  "0.0625, above alpha 0.05, so it can never be significant (at least 6 seeds could).")
    assert table.splitlines()[4] == limitation
