"""Left chance, an event declared by rule (best validation accuracy above a multiple of chance, 1 / the task's
classes), beside escaped: its table, the comparisons saying when the two events count the arms in opposite
directions, and the selection runs' rate of leaving chance beside the confirmation runs' at the picked rate; and the
escaped threshold taken from the pilots' empty gap."""

from __future__ import annotations

import pytest
from scipy import stats

from loglinear.protocol.results import load_sweep
from loglinear.reports.chance import chance_level, left_chance
from loglinear.reports.report import write_report
from loglinear.runs.config import ConfigError
from loglinear.sweeps.spec_keys import report_config

from .report_helpers import finished, make_sweep, run_entry

MULTIPLE = 204.8
"""5% on MQAR's 4,096 values (vocabulary 8,192)."""
BEST = {"mamba2": [0.30, 0.28, 0.01, 0.01], "log_linear_mamba2": [0.06, 0.07, 0.08, 0.10]}
"""Best (and final) validation accuracy per confirmation seed: Mamba-2 climbs further on 2 seeds (escaped above
25%), log-linear Mamba-2 leaves 5% on all 4."""


def study(folder):
    entries = []
    for mixer, accs in BEST.items():
        for seed in (10, 11):
            entries.append(run_entry(mixer, 16, 1e-2, seed, finished(0.2), stage="selection"))
        for seed, acc in enumerate(accs):
            entries.append(run_entry(mixer, 16, 1e-2, seed, finished(acc), stage="confirmation"))
    report = {"plateau": 0.25, "left_chance": MULTIPLE}
    protocol = {"selection_seeds": [10, 11], "confirmation_seeds": [0, 1, 2, 3], "allow_few_selection_seeds": True}
    return make_sweep(folder, entries, report=report, protocol=protocol)


def test_a_run_left_chance_when_its_best_validation_rose_above_the_multiple_of_chance(tmp_path):
    sweep = load_sweep(study(tmp_path))
    record = next(r for r in sweep.records if r.mixer == "mamba2" and r.seed[0] == 2)
    assert chance_level(record, MULTIPLE) == pytest.approx(0.05)
    assert left_chance(record, MULTIPLE) is False
    assert left_chance(next(r for r in sweep.records if r.mixer == "log_linear_mamba2" and r.seed[0] == 0),
                       MULTIPLE) is True


def test_the_report_counts_left_chance_and_says_when_it_and_escaped_point_opposite_ways(tmp_path):
    table = write_report(study(tmp_path)).table
    assert "## Left chance: runs whose best validation accuracy rose above 204.8 times chance" in table
    assert "| Mamba-2 | 2/4 [15, 85] |" in table and "| Log-Linear Mamba-2 | 4/4 [51, 100] |" in table
    assert "(above 5% for mqar (1/4096))" in table
    line = next(x for x in table.splitlines() if x.startswith("- d_model=16: Log-Linear Mamba-2"))
    assert "escaped 0/4 vs 2/4" in line and "left chance 4/4 vs 2/4 (described)" in line
    assert "**left chance and escaped point opposite ways** (4 vs 2 left chance, 0 vs 2 escaped)" in line


def test_the_selection_runs_leaving_chance_stand_beside_the_confirmation_runs(tmp_path):
    """Every selection run sits at 20% (left chance), the confirmation runs 6 of 8: the table per cell, the pooled
    rates with Fisher's exact test."""
    table = write_report(study(tmp_path)).table
    assert "| Mamba-2 | 0.01: selection 2/2 vs confirmation 2/4 |" in table
    assert "| Log-Linear Mamba-2 | 0.01: selection 2/2 vs confirmation 4/4 |" in table
    p = stats.fisher_exact([[4, 0], [6, 2]]).pvalue
    assert (f"Over every cell: selection runs 4/4 left chance at the picked rates, confirmation runs 6/8 (Fisher's "
            f"exact test p={p:.2g}, described: no part of the Holm family).") in table


def test_without_left_chance_the_report_has_no_such_section(tmp_path):
    entries = [run_entry("mamba2", 16, 1e-2, seed, finished(0.3)) for seed in range(2)]
    table = write_report(make_sweep(tmp_path, entries)).table
    assert "Left chance" not in table and "left chance" not in table


def test_the_escaped_threshold_lies_in_the_pilots_gap():
    assert report_config({"plateau_gap": [0.014, 0.174]}).plateau == pytest.approx(0.094)
    assert report_config({"plateau_gap": [0.014, 0.174], "plateau": 0.1}).plateau == 0.1
    with pytest.raises(ConfigError, match="outside plateau_gap"):
        report_config({"plateau_gap": [0.014, 0.174], "plateau": 0.25})
    with pytest.raises(ConfigError, match="plateau_gap must be"):
        report_config({"plateau_gap": [0.2, 0.1]})
    with pytest.raises(ConfigError, match="left_chance is a multiple of chance above 1"):
        report_config({"left_chance": 0.5})
