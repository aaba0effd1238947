"""The report on hand-made sweep folders: means and stds over seeds, selection on validation and report
on test, `>=99`, runs above 99% and steps to 99%, missing and failed runs, the λ table, test-length
table, results.csv and plots. (Paired differences: test_paired.py.)"""

from __future__ import annotations

import csv
from pathlib import Path

from loglinear.cli import sweep_main
from loglinear.reports.report import verdict_text, write_report

from .report_helpers import finished, make_sweep, row, run_entry, table_rows


def paper_sweep(folder: Path) -> Path:
    entries = []
    # Transformer d16: every seed above 99% at lr 1e-3 (-> >=99), worse at 1e-2
    entries += [run_entry("attention", 16, 1e-3, s, finished(a, "early_stopped", steps_to_threshold=50 + 10 * s))
                for s, a in enumerate([0.995, 0.999, 1.0])]
    entries += [run_entry("attention", 16, 1e-2, s, finished(0.5)) for s in range(3)]
    # Transformer d32: lr 1e-3 has a run diverged before validating (counts as 0); lr 1e-2 wins
    entries += [run_entry("attention", 32, 1e-3, 0, finished(None, "diverged"))]
    entries += [run_entry("attention", 32, 1e-3, s, finished(0.9)) for s in (1, 2)]
    entries += [run_entry("attention", 32, 1e-2, s, finished(a, "early_stopped", steps_to_threshold=80))
                for s, a in enumerate([0.995, 0.996, 0.997])]
    # Mamba-2 d16: mean 60 (std 10) at 1e-3 beats mean 45 at 1e-2
    entries += [run_entry("mamba2", 16, 1e-3, s, finished(a)) for s, a in enumerate([0.5, 0.6, 0.7])]
    entries += [run_entry("mamba2", 16, 1e-2, s, finished(a)) for s, a in enumerate([0.4, 0.45, 0.5])]
    # Mamba-2 d32: at 1e-3 one seed finished (0.8), one failed, one has no result; 1e-2 averages 0.72
    entries += [run_entry("mamba2", 32, 1e-3, 0, finished(0.8)),
                run_entry("mamba2", 32, 1e-3, 1, {"status": "failed", "error": "RuntimeError: boom"}),
                run_entry("mamba2", 32, 1e-3, 2, None)]
    entries += [run_entry("mamba2", 32, 1e-2, s, finished(a)) for s, a in enumerate([0.7, 0.72, 0.74])]
    return make_sweep(folder, entries)


def test_paper_table_means_stds_best_lr_and_solved_cells(tmp_path):
    report = write_report(paper_sweep(tmp_path))
    accuracy = table_rows(report.table, 0)
    assert accuracy[0] == ["Architecture", "d_model 16", "d_model 32"]
    assert [r[0] for r in accuracy[1:]] == ["Transformer", "Mamba-2"]
    assert row(accuracy, "Transformer") == [">=99", ">=99"]
    assert row(accuracy, "Mamba-2") == ["60.0 (10.0)", "80.0 [1/3]"]
    above = table_rows(report.table, 1)
    assert row(above, "Transformer") == ["3/3, 60", "3/3, 80"]  # steps 50, 60, 70 -> median 60
    assert row(above, "Mamba-2") == ["0/3, never", "0/3, never"]
    configs = table_rows(report.table, 2)
    assert row(configs, "Transformer") == ["0.001 (of 2)", "0.01 (of 2)"]
    assert row(configs, "Mamba-2") == ["0.001 (of 2)", "0.001 (of 2)"]


def test_selection_uses_validation_and_reports_test(tmp_path):
    """A planted configuration with the best validation but a worse test is chosen, and its test is reported."""
    entries = [run_entry("mamba2", 16, 1e-3, s, finished(0.9, test_acc=t)) for s, t in enumerate([0.50, 0.52])]
    entries += [run_entry("mamba2", 16, 1e-2, s, finished(0.8, test_acc=t)) for s, t in enumerate([0.85, 0.87])]
    # log-linear: (lr, λ) selected jointly; sigmoid at 1e-2 validates best, tests worst
    entries += [run_entry("log_linear_mamba2", 16, lr, s, finished(val, test_acc=t), lambda_param=lam,
                          **{"model.lambda_param": lam})
                for lr, lam, val, t in ((1e-3, "softplus", 0.7, 0.9), (1e-2, "softplus", 0.6, 0.95),
                                        (1e-3, "sigmoid", 0.75, 0.6), (1e-2, "sigmoid", 0.95, 0.3))
                for s in range(2)]
    report = write_report(make_sweep(tmp_path, entries))
    accuracy = table_rows(report.table, 0)
    assert accuracy[0] == ["Architecture", "d_model 16"]  # λ is selected, not a row of the main table
    assert row(accuracy, "Mamba-2") == ["51.0 (1.4)"]
    assert row(accuracy, "Log-Linear Mamba-2") == ["30.0 (0.0)"]
    configs = table_rows(report.table, 2)
    assert row(configs, "Mamba-2") == ["0.001 (of 2)"]
    assert row(configs, "Log-Linear Mamba-2") == ["0.01, sigmoid (of 4)"]
    lambdas = table_rows(report.table, 3)  # per λ, the lr is selected on validation too
    assert row(lambdas, "softplus") == ["90.0 (0.0)"] and row(lambdas, "sigmoid") == ["30.0 (0.0)"]


def test_median_steps_count_runs_that_never_reached_the_threshold(tmp_path):
    steps = [100, 300, None, None]
    entries = [run_entry("mamba2", 16, 1e-3, s, finished(0.995 if n else 0.5, steps_to_threshold=n))
               for s, n in enumerate(steps)]
    entries += [run_entry("gated_deltanet", 16, 1e-3, s, finished(0.995 if n else 0.5, steps_to_threshold=n))
                for s, n in enumerate([100, 300, 200, None])]
    above = table_rows(write_report(make_sweep(tmp_path, entries)).table, 1)
    assert row(above, "Mamba-2") == ["2/4, never"]  # median of 100, 300, inf, inf
    assert row(above, "Gated DeltaNet") == ["3/4, 250"]  # median of 100, 200, 300, inf


def test_missing_and_failed_runs_are_listed(tmp_path):
    report = write_report(paper_sweep(tmp_path))
    missing = report.table.split("## Missing or failed runs")[1]
    assert "2 of 24 runs" in missing
    assert "failed: RuntimeError: boom" in missing and "train.seed=1" in missing
    assert "no result yet" in missing and "train.seed=2" in missing
    assert "Diverged runs count as 0" in report.table


def test_results_csv_has_one_row_per_expected_run(tmp_path):
    write_report(paper_sweep(tmp_path))
    with open(tmp_path / "results.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 24
    assert {r["status"] for r in rows} == {"early_stopped", "max_steps", "diverged", "failed", "missing"}
    assert {"run_id", "mixer", "d_model", "lr", "seed", "val_accuracy", "val_score", "test_score", "test/acc",
            "model.mixer", "train.seed"} <= set(rows[0])
    diverged = next(r for r in rows if r["status"] == "diverged")
    assert diverged["val_accuracy"] == "" and diverged["mixer"] == "attention"
    assert diverged["val_score"] == diverged["test_score"] == "0.0"


def test_plots_are_written_when_their_data_exists(tmp_path):
    report = write_report(paper_sweep(tmp_path))
    names = {p.name for p in report.written}
    assert {"acc_vs_d_model.png", "steps_to_threshold.png", "table.md", "results.csv"} <= names
    assert set(report.skipped) == {"mqar_acc_vs_kv_pairs.png", "acc_vs_seq_len.png"}
    for name in ("acc_vs_d_model.png", "steps_to_threshold.png"):
        assert (tmp_path / name).read_bytes()[:4] == b"\x89PNG"


def test_lambda_table_when_the_parameterisation_varies(tmp_path):
    entries = [
        run_entry(mixer, 16, 1e-3, seed, finished(acc), lambda_param=lam, **{"model.lambda_param": lam})
        for mixer, base in (("log_linear_mamba2", 0.5), ("log_linear_gated_deltanet", 0.3))
        for lam, bonus in (("softplus", 0.0), ("constant", 0.1))
        for seed, acc in enumerate([base + bonus, base + bonus])
    ]
    report = write_report(make_sweep(tmp_path, entries))
    assert table_rows(report.table, 0)[0] == ["Architecture", "d_model 16"]
    assert row(table_rows(report.table, 2), "Log-Linear Mamba-2") == ["0.001, constant (of 2)"]
    lambdas = table_rows(report.table, 3)
    assert lambdas[0] == ["λ", "Log-Linear Mamba-2 16", "Log-Linear Gated DeltaNet 16"]
    assert row(lambdas, "softplus") == ["50.0 (0.0)", "30.0 (0.0)"]
    assert row(lambdas, "constant") == ["60.0 (0.0)", "40.0 (0.0)"]


def test_state_tracking_and_mqar_slices(tmp_path):
    lengths = {f"test/acc/seq_len={n}": acc for n, acc in ((64, 1.0), (128, 0.8), (512, 0.5))}
    lengths |= {f"test/acc_seq/seq_len={n}": acc for n, acc in ((64, 0.9), (128, 0.25), (512, 0.0))}
    pairs = {"test/acc/num_kv_pairs=4": 0.9, "test/acc/num_kv_pairs=64": 0.3}
    entries = [run_entry(m, 64, 1e-3, s, finished(0.995, test=lengths), task="parity", data="data/parity.yaml")
               for m in ("mamba2", "gated_deltanet") for s in range(2)]
    entries += [run_entry("mamba2", 64, 1e-3, s, finished(0.5, test=pairs), data="data/mqar_paper.yaml")
                for s in range(2)]
    report = write_report(make_sweep(tmp_path, entries))
    main = table_rows(report.table, 0)
    assert main[0] == ["Architecture", "task", "d_model 64"]
    assert row(main, "Mamba-2", "parity") == [">=99"]
    assert row(main, "Mamba-2", "mqar_paper") == ["50.0 (0.0)"]
    by_length = table_rows(report.table, 3)
    assert by_length[0] == ["Architecture", "task", "d_model", "64 (train) scaled", "64 seq %",
                            "128 scaled", "128 seq %", "512 scaled", "512 seq %"]
    # parity has 2 classes: scaled accuracy 2 acc - 1 (chance 0), beside full-sequence accuracy in %
    assert row(by_length, "Gated DeltaNet", "parity", "64") == [
        "1.00 (0.00)", "90.0 (0.0)", "0.60 (0.00)", "25.0 (0.0)", "0.00 (0.00)", "0.0 (0.0)"]
    assert {"acc_vs_seq_len.png", "mqar_acc_vs_kv_pairs.png"} <= {p.name for p in report.written}
    assert "the test accuracy above is the mean over the examples of every test set, so over the lengths 64, 128, " \
           "512" in report.table


def test_a_sweep_with_one_test_set_has_no_length_note(tmp_path):
    assert "test length" not in write_report(paper_sweep(tmp_path)).table


def test_report_command_prints_the_table_and_rejects_other_folders(tmp_path, capsys):
    folder = tmp_path / "sweep"
    folder.mkdir()
    assert sweep_main(["report", str(paper_sweep(folder))]) == 0
    assert "| Transformer | >=99 | >=99 |" in capsys.readouterr().out
    assert sweep_main(["report", str(tmp_path / "nothing")]) == 2
    assert "manifest.json" in capsys.readouterr().err


def test_state_tracking_training_range_comes_from_the_mixture(tmp_path):
    lengths = {f"test/acc/seq_len={n}": 1.0 for n in (20, 40, 80)}
    entries = []
    for seed in range(2):
        entry = run_entry("mamba2", 32, 1e-3, seed, finished(1.0, test=lengths), task="parity", data="data/parity.yaml")
        entry["config"]["data"]["mixture"] = [{"seq_len": 10}, {"seq_len": 40}]
        entries.append(entry)
    header = table_rows(write_report(make_sweep(tmp_path, entries)).table, 3)[0]
    assert header[3:] == ["20 (train) scaled", "20 seq %", "40 (train) scaled", "40 seq %", "80 scaled", "80 seq %"]


def used(impl: str, status: str | None = None, failure: str | None = None) -> dict:
    """result.json `implementations` of a one-layer run that ran `impl` (with a self-check verdict of `status`)."""
    verdict = None if status is None else {
        "status": status, "device": "NVIDIA H100 80GB HBM3", "dtype": "bfloat16", "failure": failure,
        "source": "run", "checked_at": "2026-01-01T00:00:00+0000", "path": "/cache/loglinear/selfcheck-ab.json"}
    return {"blocks.0.mixer": [{"impl": impl, "selfcheck": verdict}]}


def test_the_report_lists_implementations_and_says_when_its_tables_mix_them(tmp_path):
    failure = "mamba2 B2 T21 (bfloat16): o relative error 1.0e-03, tolerance 5.0e-02"
    entries = [run_entry("mamba2", 16, 1e-3, s, finished(0.5, implementations=used("triton", "passed")))
               for s in range(2)]
    entries += [run_entry("mamba2", 16, 1e-3, 2, finished(0.6, implementations=used("chunk", "failed", failure)))]
    entries += [run_entry("attention", 16, 1e-3, s, finished(0.9, implementations={})) for s in range(3)]
    entries += [run_entry("attention", 16, 1e-3, 3, {"status": "failed", "error": "RuntimeError: boom"})]
    report = write_report(make_sweep(tmp_path, entries))
    assert ("These tables are built from runs that ran different implementations of the log-linear operator: "
            "`chunk` (1 run), `triton` (2 runs)") in report.table
    section = report.table.split("## Operator implementations")[1].split("## Missing or failed runs")[0]
    header, *rows = table_rows(section)
    assert header == ["implementations", "runs", "self-check"]
    assert sorted(rows) == sorted([
        ["none (no mixer runs the operator)", "3", "-"],
        ["`triton`", "2", "passed on NVIDIA H100 80GB HBM3 (bfloat16)"],
        ["`chunk`", "1", f"failed on NVIDIA H100 80GB HBM3 (bfloat16): {failure} "
                         "(stored in /cache/loglinear/selfcheck-ab.json)"],
    ])
    verdict = used("chunk", "failed", "the fused kernels raised CompilationError: a | b")["blocks.0.mixer"][0]
    assert "a \\| b" in verdict_text(verdict["selfcheck"])  # a pipe in an error does not split the table cell
    with open(tmp_path / "results.csv") as f:
        assert [r["implementations"] for r in csv.DictReader(f)] == ["", "", "", "", "triton", "triton", "chunk"]


def test_no_mixing_note_for_one_implementation_and_old_results_are_not_recorded(tmp_path):
    entries = [run_entry("mamba2", 16, 1e-3, s, finished(0.5, implementations=used("triton", "passed")))
               for s in range(2)]
    entries += [run_entry("attention", 16, 1e-3, 0, finished(0.9, implementations={}))]
    entries += [run_entry("attention", 16, 1e-3, 1, finished(0.9))]  # a result from before the record existed
    table = write_report(make_sweep(tmp_path / "one", entries)).table
    assert "different implementations" not in table
    section = table.split("## Operator implementations")[1].split("## Missing or failed runs")[0]
    assert ["not recorded", "1", "-"] in table_rows(section)
    old = write_report(make_sweep(tmp_path / "old", [run_entry("mamba2", 16, 1e-3, 0, finished(0.5))])).table
    assert "Not recorded in the finished runs' results." in old
