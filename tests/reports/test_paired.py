"""Paired differences: paired.csv against a hand computation from results.csv, an interval spanning 0,
a seed missing on one side, λ pairs, unpairable sweeps, and the t quantile."""

from __future__ import annotations

import csv
import math

import pytest

from loglinear.reports.paired import COLUMNS, t_quantile
from loglinear.reports.report import write_report

from .report_helpers import finished, make_sweep, run_entry, table_rows
from .report_helpers import row as row_of

T_975 = {1: 12.7062047, 2: 4.3026527, 3: 3.1824463, 4: 2.7764451, 9: 2.2621572, 30: 2.0422725}
"""Student's t 0.975 quantiles (standard tables)."""


@pytest.mark.parametrize("df", sorted(T_975))
def test_t_quantile_matches_the_tables(df):
    assert t_quantile(0.975, df) == pytest.approx(T_975[df], abs=1e-6)


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
        ("d_model=16", "log_linear_mamba2", "mamba2"), ("d_model=32", "log_linear_mamba2", "mamba2"),
    ]
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
    d16, d32 = paired
    assert (d16["n_pairs"], d16["left_out"], d16["wins"], d16["losses"]) == ("5", "0", "3", "2")
    assert float(d16["mean_diff"]) == pytest.approx(2.0)
    assert float(d16["ci_low"]) < 0 < float(d16["ci_high"]) and d16["significant"] == "False"
    assert (d32["n_pairs"], d32["left_out"], d32["wins"]) == ("4", "1", "4")
    assert float(d32["mean_diff"]) == pytest.approx(20.25) and d32["significant"] == "True"
    lines = report.table.split("## Paired differences")[1]
    assert "- d_model=16: Log-Linear Mamba-2 \u2212 Mamba-2: +2.0 points [\u2212" in lines
    assert "3 of 5 seeds (not significant)" in lines
    assert "+20.2 points [" in lines and "4 of 4 seeds (significant); 1 seed(s) left out" in lines
    assert report.table.rstrip().splitlines()[-1] == (
        "Significant at 95% (interval excludes 0): Log-Linear Mamba-2 above Mamba-2 (d_model=32); not significant "
        "(interval includes 0 or too few seeds): Log-Linear Mamba-2 vs Mamba-2 (d_model=16)."
    )


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
    assert constant["significant"] == "False"


def test_cells_without_shared_seeds_report_why(tmp_path):
    entries = [run_entry("gated_deltanet", 16, 1e-3, s, finished(0.5)) for s in (0, 1, 2)]
    entries += [run_entry("log_linear_gated_deltanet", 16, 1e-3, s, finished(0.6)) for s in (3, 4, 5)]
    report = write_report(make_sweep(tmp_path, entries))
    lines = report.table.split("## Paired differences")[1]
    assert ("Log-Linear Gated DeltaNet \u2212 Gated DeltaNet: no pair (no seed has a test accuracy on both sides: "
            "Log-Linear Gated DeltaNet seeds {3, 4, 5}, Gated DeltaNet seeds {0, 1, 2})") in lines
    assert report.table.rstrip().endswith("so nothing here is significant.")
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
    assert "+20.0 points, 1 of 1 seeds (one pair: no interval)" in report.table
    assert report.table.rstrip().splitlines()[-1].startswith("No difference is significant")


def test_state_tracking_pairs_each_test_length_and_attention_has_no_eigenvalues(tmp_path):
    # seed by seed, log-linear minus base at length 128: -2, -3, -4 points (significant); at 64: 0 (no interval width)
    base_128, log_linear_128 = [0.99, 0.98, 0.97], [0.97, 0.95, 0.93]
    entries = []
    for seed in range(3):
        for mixer, at_128 in (("gated_deltanet", base_128[seed]), ("log_linear_gated_deltanet", log_linear_128[seed])):
            test = {"test/acc/seq_len=64": 1.0, "test/acc/seq_len=128": at_128}
            entries.append(run_entry(mixer, 32, 1e-3, seed, finished(1.0, test=test), task="parity",
                                     **{"model.negative_eigenvalues": True}))
        entries.append(run_entry("attention", 32, 1e-3, seed, finished(0.5, test={"test/acc/seq_len=64": 0.5,
                                                                                  "test/acc/seq_len=128": 0.5}),
                                 task="parity", **{"model.negative_eigenvalues": False}))
    report = write_report(make_sweep(tmp_path, entries))
    assert row_of(table_rows(report.table, 0), "Transformer") == ["-", "50.0 (0.0)"]
    section = report.table.split("## Paired differences by test length")[1]
    rows = table_rows(section, 0)
    assert rows[0] == ["comparison", "cell", "64 (train)", "128"]
    assert row_of(rows, "Log-Linear Gated DeltaNet \u2212 Gated DeltaNet", "eigenvalues=[-1, 1], d_model=32") == [
        "+0.0 [+0.0, +0.0] 0/3", "\u22123.0 [\u22125.5, \u22120.5] 0/3 *"]
    by_length = read_csv(tmp_path / "paired_by_length.csv")
    assert [(r["test_length"], r["mean_diff"], r["significant"]) for r in by_length] == [
        ("64", "0.0", "False"), ("128", "-3.0", "True")]
    assert float(by_length[1]["ci_low"]) == pytest.approx(-3.0 - t_quantile(0.975, 2) * 1.0 / 3 ** 0.5)
