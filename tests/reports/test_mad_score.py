"""The MAD score and MAD's per-task table, on a hand-made sweep over task settings: each number restated by hand."""

from __future__ import annotations

from loglinear.protocol.results import display_name
from loglinear.reports.report import write_report
from loglinear.reports.statistics import wilson

from .report_helpers import finished, make_sweep, row, run_entry, section_rows

SETTINGS = [("in_context_recall", {"vocab_size": 16}), ("in_context_recall", {"vocab_size": 32}),
            ("compression", {"seq_len": 32})]
ATTENTION = {0: (0.4, 0.5, 0.6), 1: (0.5, 0.6, 0.7), 2: (0.6, 0.7, 0.8)}
"""Attention's test accuracy per seed and setting: per-seed means over the settings 0.5, 0.6, 0.7."""


def setting_point(task, arguments):
    """The varied values of a setting: the task, its arguments and a step budget that follows them (a training key
    of the setting, not of the arm)."""
    return {"data.task": task, "data.task_args": arguments, "train.max_steps": 100 * len(str(arguments))}


def mad_sweep(folder, **report):
    entries = []
    for seed, accuracies in ATTENTION.items():
        for (task, arguments), acc in zip(SETTINGS, accuracies, strict=True):
            solved = {"status": "early_stopped", "steps_to_threshold": 50} if acc >= 0.7 else {}
            entries.append(run_entry("attention", 16, 1e-3, seed, finished(acc, **solved), task=task,
                                     **setting_point(task, arguments)))
    for seed in range(3):  # Mamba-2: 0.3 everywhere; its compression run on seed 2 never finished
        for task, arguments in SETTINGS:
            result = None if (seed, task) == (2, "compression") else finished(0.3)
            entries.append(run_entry("mamba2", 16, 1e-3, seed, result, task=task, **setting_point(task, arguments)))
    return make_sweep(folder, entries, report=report)


def test_the_mad_score_is_the_mean_over_settings_then_over_seeds_with_a_t_interval(tmp_path):
    table = write_report(mad_sweep(tmp_path, mad_score=True)).table
    scores = section_rows(table, "MAD score")
    assert scores[0] == ["Architecture", "d_model", "settings", "MAD score"]
    # seeds' means 0.5, 0.6, 0.7: sd 0.1, t(0.975, 2) = 4.303, half-width 4.303 * 0.1 / sqrt(3) = 0.248
    assert row(scores, display_name("attention"), "16") == ["3", "60.0 [35.2, 84.8] (3 seeds)"]
    # seed 2 lacks a setting, so only seeds 0 and 1 count; every value 0.3: a zero-width interval
    assert row(scores, display_name("mamba2"), "16") == ["3", "30.0 [30.0, 30.0] (2 seeds)"]


def test_per_task_accuracy_pools_the_tasks_settings_and_the_solve_rate_has_a_wilson_interval(tmp_path):
    table = write_report(mad_sweep(tmp_path, mad_score=True)).table
    tasks = section_rows(table, "MAD's tasks")
    assert tasks[0] == ["Architecture", "d_model", "task", "settings", "test accuracy", "solved"]
    recall = row(tasks, display_name("attention"), "16", "`in_context_recall`")
    # per seed, the mean of the two recall settings: 0.45, 0.55, 0.65; solved: only 0.7 (seed 2, vocab 32), 1 of 6
    low, high = wilson(1, 6).low, wilson(1, 6).high
    assert recall == ["2", "55.0 [30.2, 79.8] (3 seeds)", f"1/6 [{100 * low:.0f}, {100 * high:.0f}]"]
    compression = row(tasks, display_name("attention"), "16", "`compression`")
    low, high = wilson(2, 3).low, wilson(2, 3).high
    assert compression == ["1", "70.0 [45.2, 94.8] (3 seeds)", f"2/3 [{100 * low:.0f}, {100 * high:.0f}]"]
    assert row(tasks, display_name("mamba2"), "16", "`compression`")[1:] == ["30.0 [30.0, 30.0] (2 seeds)",
                                                                             "0/2 [0, 66]"]


def test_a_spec_that_does_not_ask_gets_no_mad_score(tmp_path):
    table = write_report(mad_sweep(tmp_path)).table
    assert "## MAD score" not in table and "## MAD's tasks" not in table


def test_a_mad_score_asked_of_runs_on_another_task_is_not_computed_and_says_why(tmp_path):
    """MQAR runs (with MAD runs, or alone) under `report.mad_score`: no score averaging MQAR in, one line why."""
    mixed = [run_entry("attention", 16, 1e-3, s, finished(0.6), task=task, **setting_point(task, {}))
             for s in range(2) for task in ("in_context_recall", "mqar")]
    for entries, folder in ((mixed, tmp_path / "mixed"), (mixed[1::2], tmp_path / "mqar")):
        table = write_report(make_sweep(folder, entries, report={"mad_score": True})).table
        assert "## MAD's tasks" not in table and "| MAD score |" not in table
        section = table.split("## MAD score\n")[1].split("\n## ")[0].strip()
        assert section.startswith("Not computed (`report.mad_score`): the score averages MAD's tasks (")
        assert section.endswith("and runs of this sweep train on mqar.")


def test_an_accuracy_interval_over_few_seeds_is_cut_at_0_and_100_percent():
    from types import SimpleNamespace

    from loglinear.reports.mad_score import accuracy_text

    def cell(*scores):
        return SimpleNamespace(runs=[SimpleNamespace(seed=s, test_score=v) for s, v in enumerate(scores)])

    # two seeds at 2% and 60%: t(0.975, 1) = 12.7 makes the interval about [-3.65, 3.99] before the cut
    assert accuracy_text([cell(0.02, 0.6)]) == "31.0 [0.0, 100.0] (2 seeds)"
    assert accuracy_text([cell(0.5, 0.6, 0.7)]) == "60.0 [35.2, 84.8] (3 seeds)"


def test_tasks_of_different_lengths_each_tested_at_its_own_are_not_read_by_test_length(tmp_path):
    """MAD's settings differ in length (compression at 16, recall at 32), but each run is tested at its one
    length: no table, plot or test by length, and the Holm family holds only the run-level tests."""
    accuracies = {"mamba2": (0.30, 0.40, 0.50), "log_linear_mamba2": (0.35, 0.45, 0.60)}
    settings = [("in_context_recall", 32), ("compression", 16)]
    entries = [run_entry(mixer, 16, 1e-3, seed, finished(acc, test={f"test/acc/seq_len={n}": acc}), task=task,
                         **setting_point(task, {"seq_len": n}))
               for mixer, seeds in accuracies.items() for seed, acc in enumerate(seeds) for task, n in settings]
    report = write_report(make_sweep(tmp_path, entries, report={"threshold": 0.99}))
    assert "by test length" not in report.table
    assert "acc_vs_seq_len.png" in report.skipped and not (tmp_path / "paired_by_length.csv").exists()
    # two cells, each with McNemar on solved and the Wilcoxon test on accuracy (no run passed: no log-rank)
    assert "over the 4 secondary tests" in report.table
