"""The cells the grid extension adds a rate to: an edge pick and every cell compared with it, directly or through
other comparisons (the same-size base, the equal-state base), never a cell compared with nothing."""

from __future__ import annotations

from loglinear.reports.candidates import comparison_groups, extension_targets
from loglinear.reports.results import load_sweep

from .report_helpers import make_sweep
from .test_frontier import entry

VALIDATION = {  # (mixer, state_dim): validation accuracy at 1e-3, 1e-2
    ("attention", 16): (0.9, 0.2),  # compared with nothing; its pick sits at the lowest edge
    ("mamba2", 16): (0.2, 0.6),  # at the highest edge
    ("log_linear_mamba2", 16): (0.5, 0.4),  # compared with both Mamba-2s; at the lowest edge
    ("mamba2", 112): (0.2, 0.6),  # the equal-state base of log-linear Mamba-2
    ("mamba2", 64): (0.2, 0.6),  # too small to be the equal-state base: compared with nothing
}


def selection_sweep(folder):
    entries = []
    for (mixer, state_dim), scores in VALIDATION.items():
        for seed in (0, 1):
            for lr, val in zip((1e-3, 1e-2), scores, strict=True):
                made = entry(mixer, state_dim, seed, 0.5, lr=lr, val=val)
                made["stage"] = "selection"
                entries.append(made)
    protocol = {"selection_seeds": [0, 1], "confirmation_seeds": [5, 6]}
    return load_sweep(make_sweep(folder, entries, name="state", protocol=protocol, report={"threshold": 0.99}))


def arms(keys):
    return sorted((row[0], row[1]) for row, _ in keys)


def test_cells_compared_directly_or_through_others_form_one_group(tmp_path):
    groups = comparison_groups(selection_sweep(tmp_path))
    (group,) = {frozenset(g) for g in groups.values()}
    assert arms(group) == [("Log-Linear Mamba-2", "16"), ("Mamba-2", "112"), ("Mamba-2", "16")]


def test_every_edge_pick_extends_its_whole_group_and_a_lone_cell_only_itself(tmp_path):
    targets = extension_targets(selection_sweep(tmp_path), step=10.0)
    added = sorted((point["model.mixer"], point["model.state_dim"], point["train.lr"]) for point in targets)
    group = [("log_linear_mamba2", 16), ("mamba2", 112), ("mamba2", 16)]
    assert added == sorted([("attention", 16, 1e-4), ("mamba2", 64, 0.1)]
                           + [(m, d, rate) for m, d in group for rate in (1e-4, 0.1)])
