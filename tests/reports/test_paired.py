"""Paired comparisons: paired.csv against a hand computation from results.csv, the equal candidates of both
sides, McNemar, log-rank and the t interval in one report with Holm's correction and the primary comparison,
λ pairs, unpairable sweeps, per-length comparisons. (The statistics themselves: test_statistics.py.)"""

from __future__ import annotations

import csv
import math
import re

import pytest
from scipy import stats

from loglinear.protocol.results import Event
from loglinear.reports.paired import COLUMNS, Pairing, holm_family
from loglinear.reports.primary import primary_line
from loglinear.reports.report import write_report
from loglinear.reports.statistics import holm, logrank, mcnemar_exact
from loglinear.runs.config import ConfigError
from loglinear.sweeps.spec_keys import Primary

from .report_helpers import finished, make_sweep, run_entry, section_rows, table_rows
from .report_helpers import row as row_of

T_975 = {1: 12.7062047, 2: 4.3026527, 3: 3.1824463, 4: 2.7764451}
"""Student's t 0.975 quantiles (standard tables)."""


def known_sweep(folder):
    """Mamba-2 and log-linear Mamba-2 at d_model 16 and 32, two learning rates, 5 seeds.

    d16: the selected lrs (1e-3 for Mamba-2, 1e-2 for log-linear) give differences +10, -5, +3, -2, +4
    points: mean +2, interval across 0. d32: differences +20, +22, +18, +21, with seed 4 of the
    log-linear side failed (left out, counted)."""
    base_d16 = [0.50, 0.60, 0.55, 0.70, 0.65]
    diffs_d16 = [0.10, -0.05, 0.03, -0.02, 0.04]
    base_d32 = [0.60, 0.62, 0.64, 0.66, 0.68]
    diffs_d32 = [0.20, 0.22, 0.18, 0.21, None]
    entries = []
    for d_model, base, diffs in ((16, base_d16, diffs_d16), (32, base_d32, diffs_d32)):
        for seed in range(5):
            # Mamba-2: 1e-3 validates best (0.8 > 0.3), so its test accuracies are the ones paired
            entries.append(run_entry("mamba2", d_model, 1e-3, seed, finished(0.8, test_acc=base[seed])))
            entries.append(run_entry("mamba2", d_model, 1e-2, seed, finished(0.3, test_acc=0.99)))
            # log-linear: 1e-2 validates best; 1e-3 tests better but must not be used
            ours = None if diffs[seed] is None else finished(0.9, test_acc=base[seed] + diffs[seed])
            if diffs[seed] is None:
                ours = {"status": "failed", "error": "RuntimeError: boom"}
            entries.append(run_entry("log_linear_mamba2", d_model, 1e-2, seed, ours))
            entries.append(run_entry("log_linear_mamba2", d_model, 1e-3, seed, finished(0.5, test_acc=1.0)))
    entries.append(run_entry("attention", 16, 1e-3, 0, finished(1.0)))  # no base: not paired
    return make_sweep(folder, entries)


def read_csv(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def hand_pairs(results: list[dict], d_model: str) -> list[float]:
    """From results.csv: per mixer, the lr with the best mean val_score; then per shared seed, the test_score
    difference."""
    def selected(mixer):
        rows = [r for r in results if r["mixer"] == mixer and r["d_model"] == d_model]
        by_lr = {}
        for r in rows:
            if r["val_score"]:
                by_lr.setdefault(r["lr"], []).append(float(r["val_score"]))
        lr = max(by_lr, key=lambda lr: sum(by_lr[lr]) / len(by_lr[lr]))
        return {r["seed"]: float(r["test_score"]) for r in rows if r["lr"] == lr and r["test_score"]}

    ours, base = selected("log_linear_mamba2"), selected("mamba2")
    return [100 * (ours[s] - base[s]) for s in sorted(set(ours) & set(base))]


def test_paired_csv_matches_a_hand_computation_from_results_csv(tmp_path):
    report = write_report(known_sweep(tmp_path))
    results = read_csv(tmp_path / "results.csv")
    paired = read_csv(tmp_path / "paired.csv")
    assert list(paired[0]) == list(COLUMNS)
    assert [(p["cell"], p["mixer"], p["baseline"]) for p in paired] == [
        ("d_model=16", "log_linear_mamba2", "mamba2"), ("d_model=32", "log_linear_mamba2", "mamba2")]
    for row, d_model in zip(paired, ("16", "32"), strict=True):
        diffs = hand_pairs(results, d_model)
        n = len(diffs)
        mean = sum(diffs) / n
        sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (n - 1))
        half = T_975[n - 1] * sd / math.sqrt(n)
        assert int(row["n_pairs"]) == n
        assert float(row["mean_diff"]) == pytest.approx(mean, abs=1e-5)
        assert float(row["ci_low"]) == pytest.approx(mean - half, abs=1e-5)
        assert float(row["ci_high"]) == pytest.approx(mean + half, abs=1e-5)
        assert int(row["wins"]) == sum(d > 0 for d in diffs) and int(row["losses"]) == sum(d < 0 for d in diffs)
        assert (row["candidates_mixer"], row["candidates_baseline"]) == ("2", "2")
        assert (row["solved_mixer"], row["solved_baseline"], row["p_solved"]) == ("0", "0", "1.0")  # none above 99%
        assert float(row["p_accuracy"]) == pytest.approx(stats.wilcoxon(diffs).pvalue, abs=1e-6)
        assert float(row["p_accuracy_t"]) == pytest.approx(stats.ttest_1samp(diffs, 0.0).pvalue, abs=1e-6)
    d16, d32 = paired
    assert (d16["n_pairs"], d16["left_out"], d16["wins"], d16["losses"]) == ("5", "0", "3", "2")
    assert float(d16["ci_low"]) < 0 < float(d16["ci_high"])
    assert (d32["n_pairs"], d32["left_out"], d32["wins"]) == ("4", "1", "4")
    lines = report.table.split("## Paired comparisons")[1]
    assert "- d_model=16: Log-Linear Mamba-2 \u2212 Mamba-2 (learning rates 2 vs 2): solved 0/5 vs 0/5" in lines
    assert "accuracy +2.0 points [\u2212" in lines
    assert "(paired t interval), better on 3 of 5 seeds, Wilcoxon p=" in lines
    assert "+20.2 points [" in lines and "better on 4 of 4 seeds" in lines and "1 seed(s) left out" in lines


def outcome_sweep(folder, primary=None, plateau=None):
    """Log-linear Gated DeltaNet solves 5 of 5 seeds (passing 99% at step 200), Gated DeltaNet 0 of 5 (a plateau
    at 60%, censored at 500), Mamba-2 and log-linear Mamba-2 none (98% on seed 0, 30% on the others)."""
    entries = []
    for seed in range(5):
        entries.append(run_entry("log_linear_gated_deltanet", 16, 1e-3, seed,
                                 finished(0.995, "early_stopped", step=200, steps_to_threshold=200),
                                 curve=[(100, 0.5), (200, 0.995)]))
        entries.append(run_entry("gated_deltanet", 16, 1e-3, seed, finished(0.6, step=500),
                                 curve=[(s, 0.6) for s in range(100, 501, 100)]))
        for mixer in ("mamba2", "log_linear_mamba2"):
            entries.append(run_entry(mixer, 16, 1e-3, seed, finished(0.98 if seed == 0 else 0.3)))
    report = {"threshold": 0.99, "plateau": plateau, "primary": primary}
    return make_sweep(folder, entries, report=report)


def test_the_primary_alone_at_alpha_and_holm_over_the_secondaries(tmp_path):
    primary = {"mixer": "log_linear_gated_deltanet", "baseline": "gated_deltanet", "test": "solved",
               "cell": "d_model=16"}
    report = write_report(outcome_sweep(tmp_path, primary=primary, plateau=0.5))
    paired = {p["mixer"]: p for p in read_csv(tmp_path / "paired.csv")}
    gdn, mamba = paired["log_linear_gated_deltanet"], paired["log_linear_mamba2"]
    assert (gdn["solved_mixer"], gdn["solved_baseline"], gdn["only_mixer_solved"]) == ("5", "0", "5")
    assert float(gdn["p_solved"]) == pytest.approx(mcnemar_exact(5, 0)) == pytest.approx(0.0625)
    assert (gdn["escaped_mixer"], gdn["escaped_baseline"]) == ("5", "5")  # 60% is above the 50% plateau
    assert float(gdn["p_escaped"]) == 1.0
    gdn_times = [Event(200, True)] * 5
    gdn_base_times = [Event(500, False)] * 5
    assert float(gdn["p_steps"]) == pytest.approx(logrank(gdn_times, gdn_base_times), abs=1e-6)
    assert mamba["p_steps"] == ""  # no metrics.csv: no time to the threshold
    assert (mamba["only_mixer_solved"], mamba["only_baseline_solved"], mamba["p_solved"]) == ("0", "0", "1.0")
    # the primary (GDN solved) is tested alone: no Holm value; the 6 secondaries form the Holm family: escaped,
    # steps, accuracy of GDN; solved, escaped, accuracy of Mamba-2 (identical outcomes: differences all 0, p = 1)
    assert gdn["holm_solved"] == ""
    family = [float(gdn[f"p_{t}"]) for t in ("escaped", "steps", "accuracy")]
    family += [float(mamba[f"p_{t}"]) for t in ("solved", "escaped", "accuracy")]
    adjusted = holm(family)
    assert float(gdn["holm_steps"]) == pytest.approx(adjusted[1], abs=1e-5)  # from rounded p-values
    assert float(mamba["holm_solved"]) == pytest.approx(adjusted[3], abs=1e-6)
    assert (gdn["primary"], mamba["primary"]) == ("solved", "")
    lines = report.table.split("## Paired comparisons")[1]
    assert "- **Primary** d_model=16: Log-Linear Gated DeltaNet \u2212 Gated DeltaNet (learning rates 1 vs 1)" in lines
    assert "solved 5/5 vs 0/5 (discordant 5 vs 0), McNemar p=0.062 (primary, alone at alpha 0.05: not significant)" \
        in lines
    assert ("**Primary comparison** (declared before the runs, tested alone at alpha 0.05): Log-Linear Gated DeltaNet "
            "\u2212 Gated DeltaNet (d_model=16): exact McNemar on solved, discordant pairs 5 vs 0 of 5, p=0.062, alpha "
            "0.05: not significant.") in lines
    survivors = [p for p, a in zip(family, adjusted, strict=True) if a <= 0.05]
    summary = report.table.rstrip().splitlines()[-1]
    assert summary.startswith(f"Of the 6 secondary tests of this report, {len(survivors)} survive Holm at 0.05")


def test_a_primary_below_alpha_alone_is_significant_where_holm_over_everything_would_not_be():
    """8 seeds, the mixer solves every one and the baseline none: McNemar p = 2 * 0.5^8 = 0.0078, significant on
    its own, though Holm over every test of the report (its own accuracy test, Wilcoxon p = 0.0078 too, then 14 tests
    of 7 comparisons without a difference) would multiply it by 15, above 0.05."""
    primary = pairing("d_model=16", {s: (1.0, 0.0) for s in range(8)})
    others = [pairing(f"d_model={d}", {s: (0.5, 0.5) for s in range(8)}) for d in range(7)]
    family = holm_family([primary, *others], Primary("log_linear_mamba2", "mamba2", "solved", cell="d_model=16"))
    chosen = family.primary
    assert chosen is not None and chosen.pairing is primary and chosen.test == "solved"
    assert chosen.p == pytest.approx(2 * 0.5**8) and chosen.adjusted is None and chosen.survives
    assert holm([r.p for r in family])[family.index(chosen)] > 0.05
    assert len(family.secondaries) == len(family) - 1 == 15
    assert all(r.adjusted is not None and not r.survives for r in family.secondaries)
    assert primary_line(family, declared=True).endswith(
        "exact McNemar on solved, discordant pairs 8 vs 0 of 8, p=0.008, alpha 0.05: significant.")


def pairing(cell, pairs):
    """A comparison of `pairs` {seed: (mixer, baseline) test accuracy}, a run solved where it is 1."""
    flags = {seed: ((a == 1.0, a == 1.0), (b == 1.0, b == 1.0)) for seed, (a, b) in pairs.items()}
    return Pairing(cell, "log_linear_mamba2", "mamba2", "Log-Linear Mamba-2", "Mamba-2", 0.99, pairs=pairs,
                   flags=flags)


def test_the_steps_primary_line_names_the_log_rank_statistic(tmp_path):
    primary = {"mixer": "log_linear_gated_deltanet", "baseline": "gated_deltanet", "test": "steps",
               "cell": "d_model=16"}
    report = write_report(outcome_sweep(tmp_path, primary=primary, plateau=0.5))
    gdn = {p["mixer"]: p for p in read_csv(tmp_path / "paired.csv")}["log_linear_gated_deltanet"]
    assert gdn["holm_steps"] == "" and gdn["primary"] == "steps"
    line = next(x for x in report.table.splitlines() if x.startswith("**Primary comparison**"))
    assert "log-rank on the steps to the threshold, log-rank z=" in line and "(5 vs 5 runs)" in line
    assert line.endswith(f"p={float(gdn['p_steps']):.3f}, alpha 0.05: significant.")


def test_a_primary_comparison_that_is_not_in_the_report_is_an_error(tmp_path):
    """One readable line naming the comparison as the spec declares it, never the Python form of its record."""
    primary = {"mixer": "log_linear_mamba2", "baseline": "attention", "test": "solved", "cell": "d_model=16",
               "effect": {"mixer": 0.9, "baseline": 0.3}}
    with pytest.raises(ValueError, match="report.primary") as error:
        write_report(outcome_sweep(tmp_path, primary=primary))
    message = str(error.value)
    assert message.startswith("report.primary log_linear_mamba2 vs attention (test solved, cell d_model=16) matches "
                              "0 comparisons (there are: ")
    assert "Primary(" not in message and "Effect(" not in message and "\n" not in message


def test_an_escaped_primary_without_a_plateau_says_so(tmp_path):
    primary = {"mixer": "log_linear_mamba2", "baseline": "mamba2", "test": "escaped", "cell": "d_model=16"}
    with pytest.raises(ValueError, match="the escaped test needs report.plateau") as error:
        write_report(outcome_sweep(tmp_path, primary=primary))
    assert "matches" not in str(error.value)


@pytest.mark.parametrize("test", ["accuracy", "accuracy_t"])
def test_an_accuracy_primary_whose_differences_have_no_spread_says_so_without_nan(tmp_path, test):
    primary = {"mixer": "log_linear_mamba2", "baseline": "mamba2", "test": test, "cell": "d_model=16",
               "outcome": "continuous"}
    report = write_report(outcome_sweep(tmp_path, primary=primary))  # the two Mamba-2s score alike on every seed
    line = next(x for x in report.table.splitlines() if x.startswith("**Primary comparison**"))
    if test == "accuracy_t":
        assert "no spread: the difference is +0.0 points on every one of the 5 pairs (t undefined" in line
    assert "nan" not in line


def test_equal_candidates_with_lambda_tuned(tmp_path):
    """Log-linear softplus and bounded, each over the base's 3 learning rates: the log-linear side of the main
    comparison is softplus alone (3 candidates, not 6), and bounded is compared with softplus."""
    entries = []
    for lr in (1e-4, 1e-3, 1e-2):
        for seed in range(2):
            entries.append(run_entry("mamba2", 16, lr, seed, finished(0.5)))
            for lam, acc in (("softplus", 0.6), ("bounded", 0.9 if lr == 1e-2 else 0.1)):
                entries.append(run_entry("log_linear_mamba2", 16, lr, seed, finished(acc), lambda_param=lam,
                                         **{"model.lambda_param": lam}))
    report = write_report(make_sweep(tmp_path, entries))
    paired = read_csv(tmp_path / "paired.csv")
    assert [(p["mixer"], p["baseline"], p["candidates_mixer"], p["candidates_baseline"]) for p in paired] == [
        ("log_linear_mamba2", "mamba2", "3", "3"),
        ("log_linear_mamba2[bounded]", "log_linear_mamba2[softplus]", "3", "3")]
    assert float(paired[0]["mean_diff"]) == pytest.approx(10.0)  # softplus 60 vs 50, not bounded's 90
    assert "Log-Linear Mamba-2 \u2212 Mamba-2 (learning rates 3 vs 3)" in report.table


def test_lambda_parameterisations_pair_against_softplus(tmp_path):
    entries = [
        run_entry("log_linear_gated_deltanet", 16, 1e-3, seed, finished(0.5, test_acc=acc), lambda_param=lam,
                  **{"model.lambda_param": lam})
        for lam, accs in (("softplus", [0.5, 0.6, 0.7]), ("sigmoid", [0.6, 0.6, 0.9]), ("constant", [0.5, 0.6, 0.7]))
        for seed, acc in enumerate(accs)
    ]
    write_report(make_sweep(tmp_path, entries))
    paired = {p["mixer"]: p for p in read_csv(tmp_path / "paired.csv")}
    assert set(paired) == {"log_linear_gated_deltanet[sigmoid]", "log_linear_gated_deltanet[constant]"}
    assert {p["baseline"] for p in paired.values()} == {"log_linear_gated_deltanet[softplus]"}
    sigmoid, constant = paired["log_linear_gated_deltanet[sigmoid]"], paired["log_linear_gated_deltanet[constant]"]
    assert float(sigmoid["mean_diff"]) == pytest.approx(10.0) and (sigmoid["wins"], sigmoid["losses"]) == ("2", "0")
    assert float(constant["mean_diff"]) == 0.0 and float(constant["ci_low"]) == float(constant["ci_high"]) == 0.0
    assert float(constant["p_accuracy"]) == 1.0


def test_cells_without_shared_seeds_report_why(tmp_path):
    entries = [run_entry("gated_deltanet", 16, 1e-3, s, finished(0.5)) for s in (0, 1, 2)]
    entries += [run_entry("log_linear_gated_deltanet", 16, 1e-3, s, finished(0.6)) for s in (3, 4, 5)]
    report = write_report(make_sweep(tmp_path, entries))
    lines = report.table.split("## Paired comparisons")[1]
    assert ("Log-Linear Gated DeltaNet \u2212 Gated DeltaNet: no pair (no seed has a result on both sides: "
            "Log-Linear Gated DeltaNet seeds {3, 4, 5}, Gated DeltaNet seeds {0, 1, 2})") in lines
    assert report.table.rstrip().endswith("so there is nothing to test.")
    (row,) = read_csv(tmp_path / "paired.csv")
    assert (row["n_pairs"], row["mean_diff"], row["ci_low"], row["left_out"]) == ("0", "", "", "6")


def test_sweep_without_pairs_says_so(tmp_path):
    entries = [run_entry(m, 16, 1e-3, 0, finished(0.5)) for m in ("attention", "mamba2")]
    report = write_report(make_sweep(tmp_path, entries))
    assert report.table.rstrip().endswith(
        "No paired comparison: no cell holds a log-linear mixer with its base mixer, or a λ parameterisation "
        "with softplus (mixers: attention, mamba2).")
    assert read_csv(tmp_path / "paired.csv") == []


def test_one_shared_seed_has_no_interval(tmp_path):
    entries = [run_entry("mamba2", 16, 1e-3, 0, finished(0.5)),
               run_entry("log_linear_mamba2", 16, 1e-3, 0, finished(0.7))]
    report = write_report(make_sweep(tmp_path, entries))
    assert "accuracy +20.0 points, one pair (no interval)" in report.table
    assert report.table.rstrip().splitlines()[-1].startswith("Of the 1 secondary tests of this report, 0 survive Holm")


def test_the_interval_of_a_difference_of_accuracies_is_cut_at_100_points(tmp_path):
    # differences +99, -99, +1 points: mean +0.3, t(0.975, 2) = 4.303 times 99.0 / sqrt(3) reaches about 246 points
    accuracies = ((0.995, 0.005), (0.005, 0.995), (0.5, 0.49))
    entries = [run_entry(mixer, 16, 1e-3, seed, finished(acc))
               for seed, pair in enumerate(accuracies)
               for mixer, acc in zip(("log_linear_mamba2", "mamba2"), pair, strict=True)]
    report = write_report(make_sweep(tmp_path, entries))
    assert "accuracy +0.3 points [−100.0, +100.0] (paired t interval)" in report.table
    row = read_csv(tmp_path / "paired.csv")[0]
    assert (float(row["ci_low"]), float(row["ci_high"])) == (-100.0, 100.0)


def test_state_tracking_pairs_each_test_length_and_attention_has_no_eigenvalues(tmp_path):
    # seed by seed, log-linear minus base at length 128: -2, -3, -4 points (significant); at 64: 0 (no interval width)
    base_128, log_linear_128 = [0.99, 0.98, 0.97], [0.97, 0.95, 0.93]
    entries = []
    for seed in range(3):
        for mixer, at_128 in (("gated_deltanet", base_128[seed]), ("log_linear_gated_deltanet", log_linear_128[seed])):
            test = {"test/acc/seq_len=64": 1.0, "test/acc/seq_len=128": at_128}
            entries.append(run_entry(mixer, 32, 1e-3, seed, finished(1.0, test=test, steps_to_threshold=100),
                                     task="parity", **{"model.negative_eigenvalues": True}))
        entries.append(run_entry("attention", 32, 1e-3, seed, finished(0.5, test={"test/acc/seq_len=64": 0.5,
                                                                                  "test/acc/seq_len=128": 0.5}),
                                 task="parity", **{"model.negative_eigenvalues": False}))
    report = write_report(make_sweep(tmp_path, entries))
    assert row_of(table_rows(report.table, 0), "Transformer") == ["-", "50.0 (0.0)"]
    rows = section_rows(report.table, "Paired differences by test length")
    assert rows[0] == ["comparison", "cell", "64 (train)", "128"]
    # at 64 every run is above 99% on test, at 128 none (0.99 is not above it)
    assert row_of(rows, "Log-Linear Gated DeltaNet \u2212 Gated DeltaNet", "eigenvalues=[-1, 1], d_model=32") == [
        "+0.0 [+0.0, +0.0] 0/3, above 3 vs 3", "\u22123.0 [\u22125.5, \u22120.5] 0/3, above 0 vs 0"]
    by_length = read_csv(tmp_path / "paired_by_length.csv")
    assert [(r["test_length"], r["mean_diff"]) for r in by_length] == [("64", "0.0"), ("128", "-3.0")]
    assert float(by_length[1]["ci_low"]) == pytest.approx(-3.0 - T_975[2] * 1.0 / 3 ** 0.5)
    assert float(by_length[1]["p_accuracy_t"]) < 0.05 < float(by_length[1]["p_accuracy"]) == 0.25
    assert float(by_length[1]["holm_accuracy"]) >= 0.25


def test_a_primary_test_the_runs_cannot_give_is_reported_untested_not_an_error(tmp_path):
    """No Mamba-2 run was solved (none reached 99% on validation): the declared log-rank test has no event, so
    the report says the primary was not tested, and why."""
    primary = {"mixer": "log_linear_mamba2", "baseline": "mamba2", "test": "steps"}
    report = write_report(outcome_sweep(tmp_path, primary=primary))
    line = next(x for x in report.table.splitlines() if x.startswith("**Primary comparison**"))
    assert "tested alone at alpha 0.05): Log-Linear Mamba-2 \u2212 Mamba-2 (d_model=16): steps: no run of either " \
           "side reached" in line
    assert line.endswith("not tested.")
    assert all(p["primary"] == "" for p in read_csv(tmp_path / "paired.csv"))


def test_a_plateau_primary_without_a_plateau_threshold_is_an_error(tmp_path):
    primary = {"mixer": "log_linear_gated_deltanet", "baseline": "gated_deltanet", "test": "escaped"}
    with pytest.raises(ValueError, match="report.plateau"):
        write_report(outcome_sweep(tmp_path, primary=primary))


def test_a_report_whose_only_test_is_the_primary_says_there_is_no_secondary(tmp_path):
    # one pair, neither run solved: no steps event to compare, no interval of one difference; McNemar only
    entries = [run_entry("mamba2", 16, 1e-3, 0, finished(0.5)), run_entry("log_linear_mamba2", 16, 1e-3, 0,
                                                                           finished(0.9))]
    primary = {"mixer": "log_linear_mamba2", "baseline": "mamba2", "test": "solved"}
    report = write_report(make_sweep(tmp_path, entries, report={"threshold": 0.99, "primary": primary}))
    assert "discordant pairs 0 vs 0 of 1, p=1.000, alpha 0.05: not significant." in report.table
    assert report.table.rstrip().endswith("The primary test is the report's only test: there is no secondary one.")


ISSUE_DIFFS = [-86, -86, -85, -85, -84, -20, -1, 25]
"""Per-seed differences (points) of a committed MQAR primary: most seeds lose ~85 points, three do not."""


def example_pairing():
    return pairing("d_model=16", {s: (0.9 + d / 100, 0.9) for s, d in enumerate(ISSUE_DIFFS)})


def test_the_accuracy_primary_is_the_exact_wilcoxon_test_with_ties():
    """Ties (−86 twice, −85 twice) share their mean rank; W+ = 3 (the rank of +25) and the exact two-sided p over
    every sign pattern is 10/256 = 0.039, where the paired t gives 0.015."""
    example = example_pairing()
    family = holm_family([example], Primary("log_linear_mamba2", "mamba2", "accuracy"))
    assert family.primary.p == pytest.approx(10 / 256) and "accuracy_t" not in {r.test for r in family}
    assert primary_line(family, declared=True).endswith(
        "Wilcoxon signed-rank on test accuracy, W+=3 over 8 nonzero differences of 8 (exact over sign flips "
        "(ties)), p=0.039, alpha 0.05: significant.")
    assert example.bimodal and example.interval.p == pytest.approx(0.0148, abs=1e-4)


def test_the_paired_t_primary_needs_a_continuous_outcome_and_warns_on_bimodal_differences():
    with pytest.raises(ConfigError, match="accuracy_t .* needs primary.outcome: continuous"):
        Primary("log_linear_mamba2", "mamba2", "accuracy_t")
    primary = Primary("log_linear_mamba2", "mamba2", "accuracy_t", outcome="continuous")
    family = holm_family([example_pairing()], primary)
    assert family.primary.test == "accuracy_t" and family.primary.p == pytest.approx(0.0148, abs=1e-4)
    assert [r.test for r in family.secondaries] == ["solved", "accuracy"]  # the paired t is a primary only
    line = primary_line(family, declared=True)
    assert "paired t on test accuracy, t=" in line and "**Warning**: the paired differences look bimodal" in line
    steady = pairing("d_model=16", {s: (0.9 + d / 100, 0.9) for s, d in enumerate([3, 4, 5, 5, 6, 7, 2, 4])})
    assert "Warning" not in primary_line(holm_family([steady], primary), declared=True)


RUN_LEVEL = {"solved", "escaped", "steps"}
"""The tests of a run's own events, written out here so that the check below does not trust the code it checks."""


def length_sweep(folder, primary=None):
    """Gated DeltaNet and its log-linear form on 4 seeds, tested at 40, 80 and 160: every run solved on validation
    (the run's event), while test accuracy above 99% differs by length: at 40 all, at 80 the log-linear side's seeds 0
    and 1 only, at 160 none."""
    entries = []
    for seed in range(4):
        for mixer, at_80 in (("gated_deltanet", 0.95), ("log_linear_gated_deltanet", 0.995 if seed < 2 else 0.9)):
            test = {"test/acc/seq_len=40": 1.0, "test/acc/seq_len=80": at_80, "test/acc/seq_len=160": 0.6 + seed / 100}
            entries.append(run_entry(mixer, 32, 1e-3, seed, finished(1.0, "early_stopped", test=test,
                                                                     steps_to_threshold=100 + seed),
                                     task="parity", curve=[(100 + seed, 1.0)]))
    report = {"threshold": 0.99, "plateau": 0.6, **({"primary": primary} if primary else {})}
    return make_sweep(folder, entries, report=report)


def test_no_test_is_repeated_inside_one_holm_family(tmp_path):
    """A run's own events (solved, escaped, steps) are the same at every test length: tested once, overall; each
    length has its own event (above) and its accuracy."""
    write_report(length_sweep(tmp_path))
    by_length = read_csv(tmp_path / "paired_by_length.csv")
    overall = read_csv(tmp_path / "paired.csv")
    tested = []
    for row in [*overall, *by_length]:
        length = row.get("test_length")
        for column in (c for c in COLUMNS if c.startswith("p_") and c != "p_accuracy_t"):
            if row[column] != "":
                test = column.removeprefix("p_")
                tested.append((row["mixer"], row["baseline"], row["cell"], test,
                               None if test in RUN_LEVEL else length))
    assert len(tested) == len(set(tested)), f"repeated in one family: {[t for t in tested if tested.count(t) > 1]}"
    assert {r["test_length"]: (r["above_mixer"], r["above_baseline"], r["only_mixer_above"]) for r in by_length} == {
        "40": ("4", "4", "0"), "80": ("2", "0", "2"), "160": ("0", "0", "0")}
    assert all(r["p_solved"] == r["p_escaped"] == r["p_steps"] == "" for r in by_length)


def test_a_primary_at_a_length_tests_the_event_above_there(tmp_path):
    primary = {"mixer": "log_linear_gated_deltanet", "baseline": "gated_deltanet", "test": "above", "length": 80}
    report = write_report(length_sweep(tmp_path, primary))
    line = next(x for x in report.table.splitlines() if x.startswith("**Primary comparison**"))
    assert ("d_model=32, length 80): exact McNemar on above (test accuracy above the threshold at the length), "
            "discordant pairs 2 vs 0 of 4, p=0.500") in line  # the run-level solved event is 4 vs 4: no discordance
    assert [r["primary"] for r in read_csv(tmp_path / "paired_by_length.csv")] == ["", "above", ""]


@pytest.mark.parametrize(("test", "length", "words"), [
    ("solved", 40, "primary.test solved is the run's (on validation), the same at every test length"),
    ("steps", 40, "primary.test steps is the run's"),
    ("above", None, "primary.test above (test accuracy above the threshold at one test length) needs primary.length"),
])
def test_a_run_event_at_a_length_or_above_without_one_is_refused(test, length, words):
    with pytest.raises(ConfigError, match=re.escape(words)):
        Primary("log_linear_gated_deltanet", "gated_deltanet", test, length=length)
