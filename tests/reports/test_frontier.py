"""Accuracy against state size and the equal-state comparison, on a hand-made MQAR sweep whose runs carry
state sizes: the frontier's points, the plot file, the pairing with the smallest base model at least as large."""

from __future__ import annotations

import csv
import itertools
import math

import numpy as np
import pytest

from loglinear.protocol.results import load_sweep
from loglinear.reports.frontier import frontier_series
from loglinear.reports.plots import mqar_frontier
from loglinear.reports.report import write_report

from .report_helpers import finished, make_sweep, run_entry

DATA = {"task": "mqar", "task_args": {"vocab_size": 128, "seq_len": 128, "num_kv_pairs": 32},
        "eval_sets": [{"seq_len": 64, "num_kv_pairs": 4}, {}]}
STATES = {  # (mixer, state_dim): total state at test lengths 64 and 128
    ("attention", 16): (4096, 8192),
    ("mamba2", 16): (1408, 1408),
    ("mamba2", 112): (8704, 8704),
    ("mamba2", 64): (4480, 4480),
    ("log_linear_mamba2", 16): (7552, 8576),
}
LL_TEST = [0.60, 0.70, 0.80]
BIG_TEST = [0.55, 0.72, 0.70]  # Mamba-2 with state_dim 112: the smallest base at least as large as 8,576


def state(per_64: int, per_128: int) -> dict:
    return {"train_seq_len": 128, "test_seq_lens": [64, 128], "per_layer": {"64": per_64 // 2, "128": per_128 // 2},
            "total": {"64": per_64, "128": per_128}}


def entry(mixer: str, state_dim: int, seed: int, test_acc: float, lr: float = 1e-3, val: float = 0.5):
    slices = {"test/acc/num_kv_pairs=4": min(1.0, test_acc + 0.2), "test/acc/num_kv_pairs=32": test_acc - 0.1}
    result = finished(val, test_acc=test_acc, test=slices, state_size=state(*STATES[(mixer, state_dim)]))
    made = run_entry(mixer, 16, lr, seed, result, **{"model.state_dim": state_dim, "data.seed": seed})
    made["config"]["data"] = DATA
    made["config"]["model"]["state_dim"] = state_dim
    return made


def state_sweep(folder, with_big_base: bool = True):
    entries = []
    for seed in range(3):
        entries.append(entry("attention", 16, seed, 0.99))
        entries.append(entry("mamba2", 16, seed, 0.40 + 0.05 * seed))
        entries.append(entry("mamba2", 64, seed, 0.5))
        entries.append(entry("log_linear_mamba2", 16, seed, LL_TEST[seed]))
        entries.append(entry("log_linear_mamba2", 16, seed, 0.99, lr=1e-2, val=0.1))  # not selected (validation)
        if with_big_base:
            entries.append(entry("mamba2", 112, seed, BIG_TEST[seed]))
    return make_sweep(folder, entries, name="state")


def test_frontier_points_are_cells_at_their_state_size(tmp_path):
    sweep = load_sweep(state_sweep(tmp_path))
    series = frontier_series(sweep, sweep.cells())
    assert list(series) == ["all", "4 pairs", "32 pairs"]
    assert set(series["all"]) == {"Transformer", "Mamba-2", "Log-Linear Mamba-2"}  # state_dim: points, not lines
    row, mamba = series["all"]["Mamba-2"]
    assert row[0] == "Mamba-2"
    assert [x for x, *_ in mamba] == [1408, 4480, 8704]
    assert mamba[2][1] == pytest.approx([100 * a for a in BIG_TEST])
    assert [r.seed[0] for r in mamba[2][2]] == [0, 1, 2]  # the runs behind the values, in their order
    ((x, values, runs, cell),) = series["all"]["Log-Linear Mamba-2"][1]
    assert (x, values) == (8576, pytest.approx([100 * a for a in LL_TEST]))
    assert cell.runs == runs
    # 4 pairs are tested at 64 tokens, where the log-linear state holds 7 levels, not 8
    assert [x for x, *_ in series["4 pairs"]["Log-Linear Mamba-2"][1]] == [7552]
    assert [x for x, *_ in series["4 pairs"]["Transformer"][1]] == [4096]
    assert series["32 pairs"]["Log-Linear Mamba-2"][1][0][1] == pytest.approx([100 * (a - 0.1) for a in LL_TEST])


def test_report_has_the_frontier_plot_and_the_equal_state_comparison(tmp_path):
    report = write_report(state_sweep(tmp_path))
    assert (tmp_path / "mqar_frontier.png").read_bytes()[:4] == b"\x89PNG"
    assert "mqar_frontier.png" not in report.skipped
    section = report.table.split("## Equal-state comparison")[1]
    diffs = [100 * (a - b) for a, b in zip(LL_TEST, BIG_TEST, strict=True)]  # +5, -2, +10
    mean = sum(diffs) / 3
    assert ("- state_dim=16, d_model=16: Log-Linear Mamba-2 (state_dim=16; state 8,576) \u2212 "
            "Mamba-2 (state_dim=112; state 8,704)") in section
    assert f"accuracy +{mean:.1f} points [" in section
    sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / 2)
    low = mean - 4.302653 * sd / math.sqrt(3)
    assert f"[\u2212{-low:.1f}, " in section and "better on 2 of 3 seeds" in section
    with open(tmp_path / "results.csv") as f:
        rows = list(csv.DictReader(f))
    big = next(r for r in rows if r["model.state_dim"] == "112")
    assert (big["state_size_total"], big["state_size_per_layer"]) == ("8704", "4352")
    ll = next(r for r in rows if r["mixer"] == "log_linear_mamba2")
    assert (ll["state_size_total/seq_len=64"], ll["state_size_total/seq_len=128"]) == ("7552", "8576")


def test_no_equal_state_comparison_without_a_base_model_as_large(tmp_path):
    report = write_report(state_sweep(tmp_path, with_big_base=False))
    assert "Equal-state comparison" not in report.table
    assert "## Paired comparisons" in report.table


def test_a_two_stage_sweep_compares_equal_states_on_its_confirmation_seeds(tmp_path):
    """Selection runs choose each cell's lr and take no part in the comparison; the equal-state primary is the
    pairing of the confirmation runs, marked and in the verdict."""
    entries = []
    for mixer, state_dim, tests in (("mamba2", 16, None), ("mamba2", 112, BIG_TEST),
                                    ("log_linear_mamba2", 16, LL_TEST)):
        for seed in (0, 1):  # selection: 1e-2 wins on validation and scores 0 on test, which no comparison may use
            for lr, val in ((1e-3, 0.2), (1e-2, 0.6)):
                selection = entry(mixer, state_dim, seed, 0.0, lr=lr, val=val)
                selection["stage"] = "selection"
                entries.append(selection)
        for seed in (5, 6, 7):
            confirmation = entry(mixer, state_dim, seed, 0.3 if tests is None else tests[seed - 5], lr=1e-2)
            confirmation["stage"] = "confirmation"
            entries.append(confirmation)
    protocol = {"selection_seeds": [0, 1], "confirmation_seeds": [5, 6, 7]}
    primary = {"mixer": "log_linear_mamba2", "baseline": "mamba2", "test": "accuracy", "equal_state": True}
    report = write_report(make_sweep(tmp_path, entries, name="state", protocol=protocol,
                                     report={"threshold": 0.99, "primary": primary}))
    section = report.table.split("## Equal-state comparison")[1]
    mean = sum(100 * (a - b) for a, b in zip(LL_TEST, BIG_TEST, strict=True)) / 3
    assert "**Primary** " in section and f"accuracy +{mean:.1f} points [" in section
    assert "better on 2 of 3 seeds" in section
    assert "**Primary comparison** (declared before the runs, tested alone at alpha 0.05): Log-Linear Mamba-2 " \
           "(state_dim=16; state 8,576) \u2212 Mamba-2 (state_dim=112; state 8,704) (state_dim=16, d_model=16): " \
           "Wilcoxon signed-rank on test accuracy, W+=5 over 3 nonzero differences of 3 (exact), p=0.500, " \
           "alpha 0.05: not significant." in report.table


def test_the_frontier_dodges_the_series_at_one_state_size_and_marks_the_true_sizes(tmp_path):
    fig = mqar_frontier(load_sweep(state_sweep(tmp_path)))
    everything = fig.axes[0]
    (marks,) = [line for line in everything.get_lines() if line.get_marker() == "|"]
    assert sorted(marks.get_xdata()) == [1408, 4480, 8192, 8576, 8704]
    by_colour: dict[tuple, list[float]] = {}
    for collection in everything.collections:
        colour = tuple(np.round((collection.get_facecolors() if len(collection.get_facecolors())
                                 else collection.get_edgecolors())[0][:3], 3)) if len(collection.get_offsets()) else ()
        by_colour.setdefault(colour, []).extend(x for x in collection.get_offsets()[:, 0] if 6000 < x < 12000)
    near = [sorted(xs) for xs in by_colour.values() if xs]
    assert len(near) == 3  # Transformer, Mamba-2 (state_dim 112), Log-Linear Mamba-2 near 8,200-8,700
    for left, right in itertools.combinations(sorted(near), 2):
        assert left[-1] < right[0]  # each series in a slot of its own
    assert sorted(t.get_text() for t in everything.texts) == ["0/3"] * 5  # the counts, in the panel of all sets


def test_a_series_alone_at_its_state_size_is_drawn_around_it(tmp_path):
    """Mamba-2 (1,408) and attention (8,192) are far apart: each one's seeds centre on its true size, not on a slot
    laid out beside the other series."""
    entries = [entry(mixer, 16, seed, 0.5) for mixer in ("attention", "mamba2") for seed in range(3)]
    fig = mqar_frontier(load_sweep(make_sweep(tmp_path, entries, name="state")))
    xs = [x for collection in fig.axes[0].collections for x in collection.get_offsets()[:, 0]]
    for state, low, high in ((1408, 1000, 2000), (8192, 6000, 12000)):
        alone = [x for x in xs if low < x < high]
        assert len(alone) == 3
        assert float(np.exp(np.mean(np.log(alone)))) == pytest.approx(state)
