"""State-tracking measures of a run: the training range read from the scored positions, scaled accuracy, and
the per-length score used by the paired comparisons."""

from __future__ import annotations

import pytest

from loglinear.protocol.results import Record, load_sweep
from loglinear.reports.plots import acc_vs_seq_len
from loglinear.reports.state_tracking import accuracy_at, scaled, training_lengths

from .report_helpers import finished, make_sweep, run_entry


def record(task: str, task_args: dict, mixture: list | None = None, result: dict | None = None) -> Record:
    data = {"task": task, "task_args": task_args, **({"mixture": mixture} if mixture else {})}
    return Record("r", {"data": data}, {}, result or {})


@pytest.mark.parametrize(("task", "task_args", "mixture", "expected"), [
    ("parity", {"seq_len": 40}, None, (1, 40)),  # every prefix scored: lengths 1..40 are trained
    ("parity", {"seq_len": 40, "scored": "last"}, None, (40, 40)),
    ("parity", {"seq_len": 64, "scored": "last"}, [{"seq_len": 10}, {"seq_len": 40}], (10, 40)),
    ("s3", {"seq_len": 16}, None, (1, 16)),
    ("mod_arith", {"seq_len": 64}, [{"seq_len": 16}, {"seq_len": 64}], (16, 64)),  # only `=` is scored
])
def test_training_lengths_run_from_the_first_scored_position(task, task_args, mixture, expected):
    assert training_lengths(record(task, task_args, mixture)) == expected


def test_scaled_accuracy_maps_chance_to_zero():
    assert scaled(0.5, 2) == 0.0 and scaled(1.0, 6) == 1.0 and scaled(1 / 6, 6) == pytest.approx(0.0)


def test_accuracy_at_a_length_scores_like_the_test_score():
    tested = {"status": "max_steps", "test": {"test/acc/seq_len=80": 0.75}}
    assert accuracy_at(80)(record("parity", {}, result=tested)) == 0.75
    assert accuracy_at(160)(record("parity", {}, result=tested)) is None
    assert accuracy_at(80)(record("parity", {}, result={"status": "diverged"})) == 0.0
    assert accuracy_at(80)(record("parity", {}, result={"status": "failed"})) is None


def test_length_plot_shades_the_training_range_within_the_tested_lengths(tmp_path):
    entries = []
    for seed in range(2):
        tested = {f"test/acc/seq_len={n}": 1.0 for n in (40, 80, 160)}
        entry = run_entry("mamba2", 32, 1e-3, seed, finished(1.0, test=tested), task="parity")
        entry["config"]["data"]["task_args"] = {"seq_len": 40}  # every prefix scored: trains lengths 1..40
        entries.append(entry)
    (ax,) = acc_vs_seq_len(load_sweep(make_sweep(tmp_path, entries))).axes
    left, right = ax.get_xlim()
    assert 20 < left < 40 and 160 < right < 320  # the tested lengths with a margin, not down to length 1
    assert "training lengths 1-40" in ax.get_legend_handles_labels()[1]


def test_length_plot_keeps_every_seed_inside_its_axes(tmp_path):
    """Nine rows dodged around each length (the widest dodge) and a seed below chance: none falls off an edge, and
    the shading of the training range covers the seeds of length 40 whole."""
    entries = []
    mixers = ("attention", "mamba2", "log_linear_mamba2", "gated_deltanet", "log_linear_gated_deltanet")
    for mixer in mixers:
        for negative in ((False,) if mixer == "attention" else (False, True)):
            for seed in range(3):
                tested = {f"test/acc/seq_len={n}": 0.4 if seed == 0 else 1.0 for n in (40, 80, 160, 320)}
                entry = run_entry(mixer, 32, 1e-3, seed, finished(1.0, test=tested), task="parity",
                                  **{"model.negative_eigenvalues": negative})
                entry["config"]["data"]["task_args"] = {"seq_len": 40}
                entries.append(entry)
    (ax,) = acc_vs_seq_len(load_sweep(make_sweep(tmp_path, entries))).axes
    points = [tuple(p) for c in ax.collections if hasattr(c, "get_offsets") for p in c.get_offsets()]
    (left, right), (bottom, top) = ax.get_xlim(), ax.get_ylim()
    assert len(points) == 9 * 3 * 4
    assert all(left < x < right and bottom < y < top for x, y in points)
    assert min(y for _, y in points) == pytest.approx(-0.2)  # 40% on two classes: below chance
    shade = next(p for p in ax.patches if p.get_label().startswith("training lengths"))
    shaded_to = shade.get_x() + shade.get_width()
    assert all(x < shaded_to for x, y in points if x < 56) and all(x > shaded_to for x, y in points if x > 57)
