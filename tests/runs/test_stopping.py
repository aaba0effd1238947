"""When a run is solved (the threshold held on consecutive validations) and how it ended (threshold, plateau,
improving, too short, diverged, failed, unknown), on synthetic validation histories; and the tracker that stops a
run on it."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from loglinear.runs.config import ConfigError, load_run_config
from loglinear.runs.stopping import budget_end, budget_label, budget_validations, convergence, crossing_step
from loglinear.runs.tracking import RunTracker

NOISY = [(100, 0.5), (200, 0.992), (300, 0.989), (400, 0.995), (500, 0.996), (600, 0.997)]
"""A run that crossed 99% once at step 200, fell back, then held it from step 400."""


def test_the_crossing_is_the_last_of_the_consecutive_validations_above_the_threshold():
    assert crossing_step(NOISY, 0.99) == 200
    assert crossing_step(NOISY, 0.99, evals=2) == 500
    assert crossing_step(NOISY, 0.99, evals=3) == 600
    assert crossing_step(NOISY, 0.99, evals=4) is None
    assert crossing_step([(100, 0.99)], 0.99) is None  # strictly above
    assert crossing_step([], 0.99) is None


def rising(n: int, start: float, step: float) -> list[tuple[int, float]]:
    return [(50 * (i + 1), start + step * i) for i in range(n)]


def test_a_budget_end_is_a_plateau_when_the_best_rose_less_than_the_minimum_over_the_window():
    flat = rising(30, 0.25, 0.0) + [(1550, 0.259)]  # a noisy plateau: the best rose 0.9 points in the last 10
    assert budget_end(flat, window=10, min_delta=0.01) == "plateau"
    climbing = rising(30, 0.25, 0.002)  # +2 points over the last 10 validations
    assert budget_end(climbing, window=10, min_delta=0.01) == "improving"
    assert budget_end(climbing, window=10, min_delta=0.03) == "plateau"
    # a peak before the window counts: the best of the window must beat the best before it
    fell = [(50, 0.6), *rising(20, 0.3, 0.01)]
    assert budget_end(fell, window=10, min_delta=0.01) == "plateau"
    # exactly the window: measured from the first
    assert budget_end(rising(10, 0.2, 0.05), window=10, min_delta=0.01) == "improving"
    assert budget_end(rising(10, 0.2, 0.0), window=10, min_delta=0.01) == "plateau"


@pytest.mark.parametrize("step", [0.05, 0.0])
def test_fewer_validations_than_the_window_are_too_short_to_tell(step):
    """4 validations and a window of 10 (a 400-step budget validated every 100): neither plateau nor improving."""
    assert budget_end(rising(4, 0.2, step), window=10, min_delta=0.01) == "too short"
    assert budget_end([], window=10, min_delta=0.01) == "too short"
    assert convergence("max_steps", False, rising(9, 0.2, step), window=10, min_delta=0.01) == "too short"


def test_a_recorded_budget_end_is_read_again_under_the_window():
    """A run labelled before the rule keeps its label only where its budget had the window's validations."""
    assert budget_label("improving", validations=4, window=10) == "too short"
    assert budget_label("plateau", validations=10, window=10) == "plateau"
    assert budget_label("threshold", validations=4, window=10) == "threshold"
    assert budget_label("unknown", validations=4, window=10) == "unknown"
    assert budget_validations(400, 100) == 4 and budget_validations(2000, 300) == 7


@pytest.mark.parametrize(("status", "solved", "history", "expected"), [
    ("early_stopped", True, NOISY, "threshold"),
    ("max_steps", True, NOISY, "threshold"),  # solved without early stopping
    ("diverged", False, NOISY[:1], "diverged"),
    ("failed", False, None, "failed"),
    ("max_steps", False, rising(30, 0.25, 0.0), "plateau"),
    ("max_steps", False, rising(30, 0.25, 0.002), "improving"),
    ("early_stopped", False, rising(30, 0.25, 0.0), "plateau"),  # stopped by patience
    ("max_steps", False, None, "unknown"),
])
def test_convergence(status, solved, history, expected):
    assert convergence(status, solved, history, window=10, min_delta=0.01) == expected


class Trainer(SimpleNamespace):
    """What the tracker reads of Lightning's trainer."""


def validate(tracker: RunTracker, history) -> list[int]:
    """Feed `history` to the tracker; the steps at which it asked the trainer to stop."""
    stops = []
    for steps, acc in history:
        trainer = Trainer(callback_metrics={"val/acc": acc}, sanity_checking=False, global_step=steps,
                          should_stop=False)
        tracker.on_validation_end(trainer, None)
        if trainer.should_stop:
            stops.append(steps)
    return stops


def test_the_tracker_stops_once_the_threshold_held_and_records_it_without_stopping_otherwise():
    assert validate(once := RunTracker(0.99), NOISY)[0] == 200 and once.steps_to_threshold == 200
    assert validate(held := RunTracker(0.99, evals=2), NOISY)[0] == 500 and held.steps_to_threshold == 500
    assert held.history == NOISY
    assert validate(free := RunTracker(0.99, stop_above_threshold=False, evals=2), NOISY) == []
    assert free.steps_to_threshold == 500 and not free.stopped
    resumed = RunTracker(0.99, evals=2)
    resumed.load_state_dict(held.state_dict())
    assert resumed.history == NOISY and resumed.steps_to_threshold == 500


def test_the_stop_options_are_checked(tmp_path):
    for bad in ("train.threshold_evals=0", "train.plateau_window=0", "train.plateau_min_delta=-0.1"):
        with pytest.raises(ConfigError, match=bad.split("=")[0]):
            load_run_config("configs/mqar_cpu.yaml", [bad, f"out_dir={tmp_path}"])
