"""One meaning of solved: the run's validation accuracy met the threshold under the stopping rule (result.json's
`steps_to_threshold`), the same in the solve-rate table, the steps table, accuracy given solved, the paired
McNemar outcomes, the survival events and results.csv; test accuracy is reported beside it, never used to decide
it. Escaped: solved, or the final validation accuracy above the plateau threshold. How each run ended is counted
per cell."""

from __future__ import annotations

import csv
import json

from loglinear.protocol.results import load_sweep
from loglinear.reports.paired import paired_comparisons
from loglinear.reports.report import write_report

from .report_helpers import finished, make_sweep, row, run_entry, section_rows


def crossed(val: float, test: float, steps: int) -> dict:
    return finished(val, "early_stopped", test_acc=test, steps_to_threshold=steps)


def solved_sweep(folder, threshold=0.99):
    """Seed 0: log-linear Mamba-2 crossed 99% on validation at step 300 with test accuracy 98.5% (solved), Mamba-2
    never crossed it on validation (98% at best) with test accuracy 99.5% (not solved). Seed 1: log-linear Mamba-2
    ended at 60% validation, 55% test (escaped the 50% plateau, not solved), Mamba-2 at 30% validation, 60% test
    (not escaped). Seed 2: both crossed."""
    curve = [(100, 0.5), (200, 0.9), (300, 0.992)]
    entries = [
        run_entry("log_linear_mamba2", 16, 1e-3, 0, crossed(0.992, 0.985, 300), curve=curve),
        run_entry("mamba2", 16, 1e-3, 0, finished(0.98, test_acc=0.995, convergence="improving", step=500),
                  curve=[(100, 0.5), (200, 0.9), (300, 0.98)]),
        run_entry("log_linear_mamba2", 16, 1e-3, 1, finished(0.6, test_acc=0.55, convergence="plateau", step=500)),
        run_entry("mamba2", 16, 1e-3, 1, finished(0.3, test_acc=0.6, convergence="plateau", step=500)),
        run_entry("log_linear_mamba2", 16, 1e-3, 2, crossed(0.995, 0.996, 200)),
        run_entry("mamba2", 16, 1e-3, 2, crossed(0.994, 0.993, 400)),
    ]
    return make_sweep(folder, entries, report={"threshold": threshold, "plateau": 0.5})


def test_a_crossing_on_validation_is_solved_everywhere_and_test_accuracy_above_is_not(tmp_path):
    report = write_report(solved_sweep(tmp_path))
    rates = section_rows(report.table, "Solve rate")
    assert row(rates, "Log-Linear Mamba-2") == ["2/3 [21, 94]"]
    assert row(rates, "Mamba-2") == ["1/3 [6, 79]"]
    steps = section_rows(report.table, "Steps to 99%")
    assert row(steps, "Log-Linear Mamba-2") == ["300 (2/3 reached)"]  # seed 1 censored at its end, step 500
    assert row(steps, "Mamba-2") == ["never (1/3 reached)"]
    given = section_rows(report.table, "Test accuracy of the solved runs")
    assert row(given, "Log-Linear Mamba-2") == ["99.0 [92.1, 100.0] (n=2)"]  # 98.5 counts, being solved
    assert row(given, "Mamba-2") == ["99.3 (n=1)"]  # 99.5 does not count, not being solved
    escaped = section_rows(report.table, "Escaped the plateau")
    assert row(escaped, "Log-Linear Mamba-2") == ["3/3 [44, 100]"]
    assert row(escaped, "Mamba-2") == ["2/3 [21, 94]"]  # 60% on test but 30% on validation: not escaped
    endings = section_rows(report.table, "How the runs ended")
    assert row(endings, "Log-Linear Mamba-2") == ["2 threshold, 1 plateau"]
    assert row(endings, "Mamba-2") == ["1 threshold, 1 plateau, 1 improving"]
    with open(tmp_path / "paired.csv") as f:
        paired = next(csv.DictReader(f))
    assert (paired["solved_mixer"], paired["solved_baseline"]) == ("2", "1")
    assert (paired["only_mixer_solved"], paired["only_baseline_solved"]) == ("1", "0")
    assert (paired["escaped_mixer"], paired["escaped_baseline"]) == ("3", "2")
    with open(tmp_path / "results.csv") as f:
        runs = {(r["mixer"], r["seed"]): r for r in csv.DictReader(f)}
    assert [runs[("log_linear_mamba2", s)]["solved"] for s in "012"] == ["True", "False", "True"]
    assert [runs[("mamba2", s)]["solved"] for s in "012"] == ["False", "False", "True"]
    assert [runs[("mamba2", s)]["escaped"] for s in "012"] == ["True", "False", "True"]
    assert [runs[("mamba2", s)]["convergence"] for s in "012"] == ["improving", "plateau", "threshold"]


def test_solved_and_the_survival_event_never_disagree(tmp_path):
    """At the runs' own threshold from result.json; at another from each run's metrics.csv (a run without one is
    then left out of both)."""
    for threshold in (0.99, 0.95):
        sweep = load_sweep(solved_sweep(tmp_path / str(threshold), threshold))
        for record in sweep.records:
            event = record.passage(threshold)
            assert record.solved(threshold) == (None if event is None else event.reached)
        pairing, = paired_comparisons(sweep)
        solved = pairing.outcomes("solved")[:2]
        assert solved == tuple(sum(e.reached for e in side) for side in pairing.passages)
    lower = load_sweep(tmp_path / "0.95").records
    # at 95% Mamba-2's seed 0 is solved: its metrics.csv passed 95% at step 300; without a metrics.csv, not known
    assert [(r.mixer, r.seed[0], r.solved(0.95)) for r in lower if r.seed[0] in (0, 1)] == [
        ("mamba2", 0, True), ("mamba2", 1, None), ("log_linear_mamba2", 0, True), ("log_linear_mamba2", 1, None)]


def test_a_comparison_whose_runs_were_cut_off_while_improving_says_so(tmp_path):
    entries = [run_entry(mixer, 16, 1e-3, seed, finished(0.4 + 0.01 * seed, convergence=ending))
               for mixer, ending in (("mamba2", "improving"), ("log_linear_mamba2", "plateau")) for seed in range(3)]
    table = write_report(make_sweep(tmp_path, entries)).table
    assert ("most runs of Mamba-2 (3 of 3) were cut off by the budget while still improving: this comparison "
            "measures how far each side got within the budget, not what it can learn") in table
    entries = [run_entry(mixer, 16, 1e-3, seed, finished(0.4 + 0.01 * seed, convergence="plateau"))
               for mixer in ("mamba2", "log_linear_mamba2") for seed in range(3)]
    assert "cut off by the budget" not in write_report(make_sweep(tmp_path / "flat", entries)).table


def test_the_interval_of_the_solved_runs_test_accuracy_stays_within_0_and_100(tmp_path):
    entries = [run_entry("mamba2", 16, 1e-3, 0, crossed(0.992, 0.05, 300)),
               run_entry("mamba2", 16, 1e-3, 1, crossed(0.995, 0.99, 200))]
    report = write_report(make_sweep(tmp_path, entries, report={"threshold": 0.99}))
    given = section_rows(report.table, "Test accuracy of the solved runs")
    assert row(given, "Mamba-2") == ["52.0 [0.0, 100.0] (n=2)"]  # the t interval reaches -545 and +649


def test_a_study_that_labels_its_runs_otherwise_relabels_them_from_their_metrics(tmp_path):
    """The manifest asks for a plateau window of 2 where the runs recorded how they ended with 10: the budget end
    is read again from each run's metrics.csv (the last two validations rose by 0: plateau), where result.json says
    improving; a run without a metrics.csv is `unknown`, never the label made under the other window."""
    curve = [(100, 0.1), (200, 0.5), (300, 0.5), (400, 0.5)]
    entries = [run_entry("mamba2", 16, 1e-3, s, finished(0.5, convergence="improving"), curve=curve if s else None)
               for s in (0, 1)]
    out = make_sweep(tmp_path, entries)
    manifest = json.loads((out / "manifest.json").read_text())
    for entry in manifest["runs"]:
        entry["config"]["train"]["plateau_window"] = 2
    (out / "manifest.json").write_text(json.dumps(manifest))
    write_report(out)
    with open(out / "results.csv", newline="") as f:
        ended = {row["seed"]: row["convergence"] for row in csv.DictReader(f)}
    assert ended == {"0": "unknown", "1": "plateau"}
