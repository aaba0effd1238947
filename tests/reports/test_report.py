"""The report on hand-made sweep folders: means and stds over seeds, selection on validation and report
on test, `all solved`, solve rates, steps to 99%, accuracy given solved, missing and failed runs, λ rows,
test-length table, results.csv and plots. (Paired comparisons and the two-stage protocol: test_paired.py,
test_two_stage.py.)"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest

from loglinear.cli import sweep_main
from loglinear.reports.report import write_report
from loglinear.reports.tables import verdict_text

from .report_helpers import finished, make_sweep, row, run_entry, section_rows, table_rows


def paper_sweep(folder: Path) -> Path:
    entries = []
    # Transformer d16: every seed solved at lr 1e-3 (-> all solved), worse at 1e-2
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
    assert row(accuracy, "Transformer") == ["99.8 (0.3), all solved", "99.6 (0.1), all solved"]
    assert row(accuracy, "Mamba-2") == ["60.0 (10.0)", "80.0 [1/3]"]
    rates = section_rows(report.table, "Solve rate")
    assert row(rates, "Transformer") == ["3/3 [44, 100]", "3/3 [44, 100]"]  # Wilson 95% interval of 3/3
    assert row(rates, "Mamba-2") == ["0/3 [0, 56]", "0/1 [0, 79]"]
    given = section_rows(report.table, "Test accuracy of the solved runs")
    assert row(given, "Mamba-2") == ["-", "-"]
    # 99.5, 99.6, 99.7: half-width t(0.975, 2) 0.1 / sqrt 3 = 0.25
    assert row(given, "Transformer")[1] == "99.6 [99.4, 99.8] (n=3)"
    configs = section_rows(report.table, "Selected learning rate")
    assert row(configs, "Transformer") == ["0.001 (of 2, at the lowest edge)", "0.01 (of 2, at the highest edge)"]
    assert row(configs, "Mamba-2") == ["0.001 (of 2, at the lowest edge)", "0.001 (of 2, at the lowest edge)"]
    assert report.table.splitlines()[2].startswith("Single-stage protocol")


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
    # λ is a row: each arm chooses among the same 2 learning rates, never among (lr, λ) pairs
    assert accuracy[0] == ["Architecture", "λ", "d_model 16"]
    assert row(accuracy, "Mamba-2", "-") == ["51.0 (1.4)"]
    assert row(accuracy, "Log-Linear Mamba-2", "softplus") == ["90.0 (0.0)"]
    assert row(accuracy, "Log-Linear Mamba-2", "sigmoid") == ["30.0 (0.0)"]
    configs = section_rows(report.table, "Selected learning rate")
    assert row(configs, "Mamba-2", "-") == ["0.001 (of 2, at the lowest edge)"]
    assert row(configs, "Log-Linear Mamba-2", "softplus") == ["0.001 (of 2, at the lowest edge)"]
    assert row(configs, "Log-Linear Mamba-2", "sigmoid") == ["0.01 (of 2, at the highest edge)"]


def curve_to(steps: int | None, budget: int = 500) -> list[tuple[int, float]]:
    """A validation curve every 100 steps that first passes 99% at `steps` (None: never, up to the budget)."""
    end = budget if steps is None else steps
    return [(s, 0.995 if s == steps else 0.3) for s in range(100, end + 1, 100)]


def test_steps_to_the_threshold_are_a_kaplan_meier_median_of_censored_runs(tmp_path):
    entries = [run_entry("mamba2", 16, 1e-3, s, finished(0.995 if n else 0.5, step=n or 500, steps_to_threshold=n),
                         curve=curve_to(n)) for s, n in enumerate([100, 300, None, None])]
    entries += [run_entry("gated_deltanet", 16, 1e-3, s, finished(0.995 if n else 0.5, step=n or 500,
                                                                  steps_to_threshold=n),
                          curve=curve_to(n)) for s, n in enumerate([100, 300, 200, None])]
    steps = section_rows(write_report(make_sweep(tmp_path, entries)).table, "Steps to 99%")
    # Mamba-2: 1 - 1/4 at 100, then 3/4 (1 - 1/3) = 1/2 at 300: half never passed, the median is 300
    assert row(steps, "Mamba-2") == ["300 (2/4 reached)"]
    assert row(steps, "Gated DeltaNet") == ["200 (3/4 reached)"]  # 3/4 at 100, 1/2 at 200
    assert (tmp_path / "kaplan_meier.png").read_bytes()[:4] == b"\x89PNG"
    never = [run_entry("mamba2", 16, 1e-3, s, finished(0.5, step=500), curve=curve_to(None)) for s in range(2)]
    assert row(section_rows(write_report(make_sweep(tmp_path / "never", never)).table, "Steps to 99%"),
               "Mamba-2") == ["never (0/2 reached)"]


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
    assert (diverged["solved"], diverged["escaped"], diverged["convergence"]) == ("False", "", "diverged")
    failed = next(r for r in rows if r["status"] == "failed")
    missing = next(r for r in rows if r["status"] == "missing")
    assert (failed["solved"], failed["convergence"]) == ("", "failed")
    assert (missing["solved"], missing["convergence"]) == ("", "")
    assert {r["convergence"] for r in rows if r["solved"] == "True"} == {"threshold"}
    # a run ended by its budget whose history is not there (no metrics.csv, not recorded in result.json)
    assert {r["convergence"] for r in rows if r["status"] == "max_steps"} == {"unknown"}


def test_plots_are_written_when_their_data_exists(tmp_path):
    report = write_report(paper_sweep(tmp_path))
    names = {p.name for p in report.written}
    assert {"acc_vs_d_model.png", "acc_vs_lr.png", "table.md", "results.csv"} <= names
    # the solved runs' steps come from their result.json: the Kaplan-Meier curves need no metrics.csv
    assert set(report.skipped) == {"mqar_acc_vs_kv_pairs.png", "acc_vs_seq_len.png", "mqar_frontier.png",
                                   "mad_tasks.png", "niah_heatmap.png"}
    for name in ("acc_vs_d_model.png", "acc_vs_lr.png"):
        assert (tmp_path / name).read_bytes()[:4] == b"\x89PNG"


def test_selection_accuracy_against_the_learning_rate_and_the_reported_runs_at_the_pick(tmp_path):
    entries = [run_entry("mamba2", 16, lr, s, finished(acc, steps_to_threshold=50 if acc > 0.99 else None))
               for lr, acc in ((1e-3, 0.3), (1e-2, 0.995)) for s in range(2)]
    entries += [run_entry("gated_deltanet", 16, lr, s, finished(acc)) for lr, acc in ((1e-3, 0.6), (1e-2, 0.2))
                for s in range(2)]
    from loglinear.protocol.results import load_sweep
    from loglinear.reports.plots import acc_vs_lr

    selection, reported = acc_vs_lr(load_sweep(make_sweep(tmp_path, entries))).axes
    assert sorted(round(y) for y in np.concatenate([c.get_offsets()[:, 1] for c in selection.collections])) == [
        20, 20, 30, 30, 60, 60, 100, 100]
    picks = sorted(line.get_xdata()[0] for line in selection.get_lines() if line.get_marker() == "v")
    assert picks == pytest.approx([1e-3, 1e-2], rel=0.5)  # Gated DeltaNet picked 1e-3, Mamba-2 1e-2
    assert sorted(t.get_text() for t in reported.texts) == ["0/2", "2/2"]  # the tables' solve counts
    assert selection.get_xscale() == "log"


def test_lambda_rows_when_the_parameterisation_varies(tmp_path):
    entries = [
        run_entry(mixer, 16, 1e-3, seed, finished(acc), lambda_param=lam, **{"model.lambda_param": lam})
        for mixer, base in (("log_linear_mamba2", 0.5), ("log_linear_gated_deltanet", 0.3))
        for lam, bonus in (("softplus", 0.0), ("constant", 0.1))
        for seed, acc in enumerate([base + bonus, base + bonus])
    ]
    report = write_report(make_sweep(tmp_path, entries))
    accuracy = table_rows(report.table, 0)
    assert accuracy[0] == ["Architecture", "λ", "d_model 16"]
    assert row(accuracy, "Log-Linear Mamba-2", "softplus") == ["50.0 (0.0)"]
    assert row(accuracy, "Log-Linear Mamba-2", "constant") == ["60.0 (0.0)"]
    assert row(accuracy, "Log-Linear Gated DeltaNet", "constant") == ["40.0 (0.0)"]
    assert row(section_rows(report.table, "Selected learning rate"), "Log-Linear Mamba-2", "constant") == [
        "0.001 (of 1)"]


def test_the_lambda_ranking_orders_by_solve_rate_then_accuracy_with_the_base_and_shares_ties(tmp_path):
    """softplus solves 1 of 2 (mean 74.5%), bounded 0 of 2 at a higher mean (80%), sigmoid and static equal."""
    tests = {"softplus": (0.995, 0.495), "bounded": (0.8, 0.8), "sigmoid": (0.3, 0.3), "static": (0.3, 0.3)}
    entries = [run_entry("log_linear_mamba2", 16, 1e-3, seed,
                         finished(acc, steps_to_threshold=100 if acc > 0.99 else None), lambda_param=lam,
                         **{"model.lambda_param": lam})
               for lam, accs in tests.items() for seed, acc in enumerate(accs)]
    entries += [run_entry("mamba2", 16, 1e-3, seed, finished(0.5)) for seed in (0, 1)]
    entries += [run_entry("attention", 16, 1e-3, seed, finished(1.0)) for seed in (0, 1)]  # no λ: not ranked
    report = write_report(make_sweep(tmp_path, entries))
    header, *body = section_rows(report.table, "Ranking of the λ parameterisations")
    assert header == ["Architecture", "d_model", "rank", "λ", "learning rate", "solve rate [95%]", "test accuracy %",
                      "steps to 99%"]
    assert [r[2:4] for r in body] == [["1", "softplus"], ["2", "bounded"], ["3", "Mamba-2 (base)"], ["4", "sigmoid"],
                                      ["4", "static"]]
    assert body[0][5:7] == ["1/2 [9, 91]", "74.5 (35.4)"] and {r[0] for r in body} == {"Log-Linear Mamba-2"}
    assert "Ranking" not in write_report(make_sweep(tmp_path / "no_lambda", entries[-4:])).table


def test_a_model_key_zipped_with_the_learning_rate_makes_rows_of_its_own(tmp_path):
    """zip (model.state_dim, train.lr, train.warmup_steps): two models, each at its own rate, never one cell
    averaging both; the training key zipped with the rate follows it."""
    entries = [
        run_entry("mamba2", 16, lr, seed, finished(acc),
                  **{"model.state_dim": state_dim, "train.warmup_steps": 10, "data.seed": seed})
        for state_dim, lr, acc in ((8, 1e-2, 0.1), (49, 3e-2, 0.9))
        for seed in (0, 1)
    ]
    zipped = [["model.state_dim", "train.lr", "train.warmup_steps"], ["train.seed", "data.seed"]]
    report = write_report(make_sweep(tmp_path, entries, zip=zipped))
    accuracy = table_rows(report.table, 0)
    assert accuracy[0] == ["Architecture", "state_dim", "d_model 16"]
    assert row(accuracy, "Mamba-2", "8") == ["10.0 (0.0)"] and row(accuracy, "Mamba-2", "49") == ["90.0 (0.0)"]


def test_a_size_key_shows_a_dash_in_the_rows_of_mixers_that_do_not_read_it(tmp_path):
    """... and `default` where the mixer reads it and it was left to the mixer's own rule (None)."""
    entries = [run_entry(mixer, 16, 1e-3, seed, finished(0.5), **{"model.state_dim": 8, "model.deltanet_key_dim": None})
               for mixer in ("attention", "mamba2", "gated_deltanet") for seed in (0, 1)]
    accuracy = table_rows(write_report(make_sweep(tmp_path, entries)).table, 0)
    assert accuracy[0] == ["Architecture", "state_dim", "deltanet_key_dim", "d_model 16"]
    assert [r[:3] for r in accuracy[1:]] == [["Transformer", "-", "-"], ["Mamba-2", "8", "-"],
                                             ["Gated DeltaNet", "-", "default"]]


def test_state_tracking_and_mqar_slices(tmp_path):
    lengths = {f"test/acc/seq_len={n}": acc for n, acc in ((64, 1.0), (128, 0.8), (512, 0.5))}
    lengths |= {f"test/acc_seq/seq_len={n}": acc for n, acc in ((64, 0.9), (128, 0.25), (512, 0.0))}
    pairs = {"test/acc/num_kv_pairs=4": 0.9, "test/acc/num_kv_pairs=64": 0.3}
    entries = [run_entry(m, 64, 1e-3, s, finished(0.995, test=lengths, steps_to_threshold=100), task="parity",
                         data="data/parity.yaml")
               for m in ("mamba2", "gated_deltanet") for s in range(2)]
    entries += [run_entry("mamba2", 64, 1e-3, s, finished(0.5, test=pairs), data="data/mqar_paper.yaml")
                for s in range(2)]
    report = write_report(make_sweep(tmp_path, entries))
    main = table_rows(report.table, 0)
    assert main[0] == ["Architecture", "task", "d_model 64"]
    assert row(main, "Mamba-2", "parity") == ["99.5 (0.0), all solved"]
    assert row(main, "Mamba-2", "mqar_paper") == ["50.0 (0.0)"]
    by_length = section_rows(report.table, "State tracking by test length")
    assert by_length[0] == ["Architecture", "task", "d_model", "64 (train) scaled", "64 seq %", "64 above 99%",
                            "128 scaled", "128 seq %", "128 above 99%", "512 scaled", "512 seq %", "512 above 99%"]
    # parity has 2 classes: scaled accuracy 2 acc - 1 (chance 0), beside full-sequence accuracy in % and k/n runs whose
    # test accuracy at that length is above 99% (what a length shows; solved is the run's, on validation)
    assert row(by_length, "Gated DeltaNet", "parity", "64") == [
        "1.00 (0.00)", "90.0 (0.0)", "2/2", "0.60 (0.00)", "25.0 (0.0)", "0/2", "0.00 (0.00)", "0.0 (0.0)", "0/2"]
    assert {"acc_vs_seq_len.png", "mqar_acc_vs_kv_pairs.png"} <= {p.name for p in report.written}
    by_pairs = section_rows(report.table, "MQAR by number of key-value pairs")
    assert by_pairs[0] == ["Architecture", "task", "d_model", "4 pairs %", "4 above 99%", "64 pairs %",
                           "64 above 99%"]
    assert by_pairs[1:] == [["Mamba-2", "mqar_paper", "64", "90.0 (0.0)", "0/2", "30.0 (0.0)", "0/2"]]
    assert "the test accuracy above is the mean over the examples of every test set, so over the lengths 64, 128, " \
           "512" in report.table


def test_a_sweep_with_one_test_set_has_no_length_note(tmp_path):
    assert "test length" not in write_report(paper_sweep(tmp_path)).table


def test_report_command_prints_the_table_and_rejects_other_folders(tmp_path, capsys):
    folder = tmp_path / "sweep"
    folder.mkdir()
    assert sweep_main(["report", str(paper_sweep(folder))]) == 0
    assert "| Transformer | 99.8 (0.3), all solved | 99.6 (0.1), all solved |" in capsys.readouterr().out
    assert sweep_main(["report", str(tmp_path / "nothing")]) == 2
    assert "manifest.json" in capsys.readouterr().err


def test_state_tracking_training_range_comes_from_the_mixture(tmp_path):
    lengths = {f"test/acc/seq_len={n}": 1.0 for n in (20, 40, 80)}
    entries = []
    for seed in range(2):
        entry = run_entry("mamba2", 32, 1e-3, seed, finished(1.0, test=lengths), task="parity", data="data/parity.yaml")
        entry["config"]["data"]["mixture"] = [{"seq_len": 10}, {"seq_len": 40}]
        entries.append(entry)
    header = section_rows(write_report(make_sweep(tmp_path, entries)).table, "State tracking by test length")[0]
    assert header[3:] == ["20 (train) scaled", "20 seq %", "20 above 99%", "40 (train) scaled", "40 seq %",
                          "40 above 99%", "80 scaled", "80 seq %", "80 above 99%"]


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


def test_the_report_counts_the_runs_of_each_machine_and_notes_only_several(tmp_path):
    one = {"processor": "Weird | CPU", "cpu_capability": "AVX2", "gpu": None, "torch": "2.13.0+cpu", "threads": 2}
    entries = [run_entry("mamba2", 16, 1e-3, s, finished(0.5, machine=one)) for s in range(2)]
    entries += [run_entry("mamba2", 16, 1e-3, 2, finished(0.5))]  # a result from before the record existed
    table = write_report(make_sweep(tmp_path, entries)).table
    assert "machines (see" not in table  # one recorded machine: no note under the first table
    section = table.split("## Machines")[1].split("## Missing or failed runs")[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and "runs |" not in line]
    assert rows == ["| Weird \\| CPU (AVX2), torch 2.13.0+cpu, 2 threads | 2 |", "| not recorded | 1 |"]
