"""The grid extension's step: the spec's own ratio when its learning rates are evenly spaced on a log scale, else
half a decade; the next rate beyond an edge, rounded to 3 significant digits; one per selection seed. The cells it
adds a rate to: an edge pick and every cell compared with it, directly or through other comparisons (the same-size
base, the equal-state base), never a cell compared with nothing."""

from __future__ import annotations

import math

import pytest

from loglinear.cli import main
from loglinear.protocol.extension import (
    beyond,
    comparison_groups,
    extendable,
    extension_points,
    extension_targets,
    grid_step,
)
from loglinear.protocol.results import load_sweep
from loglinear.sweeps.spec import parse_spec
from loglinear.sweeps.spec_keys import MAX_EXTENSIONS

from ..reports.report_helpers import make_sweep
from ..reports.test_frontier import entry
from ..sweeps.sweep_helpers import write_spec


def spec(rates, extensions=2):
    return parse_spec({"name": "edge", "base": {"model.mixer": "mamba2"}, "grid": {"train.lr": rates},
                       "protocol": {"selection_seeds": [0, 9], "confirmation_seeds": [1, 2],
                                    "extensions": extensions}})


@pytest.mark.parametrize(("rates", "step"), [
    ([1.0e-3, 1.0e-2, 1.0e-1], 10.0),
    ([1.0e-4, 4.64e-4, 2.15e-3, 1.0e-2], 4.64),  # a third of a decade, to 3 digits
    ([3.0e-3, 1.0e-2, 3.0e-2], math.sqrt(10)),  # ratios 3.33 and 3: irregular
    ([1.0e-2], math.sqrt(10)),
])
def test_the_step_is_the_grids_own_ratio_or_half_a_decade(rates, step):
    assert grid_step(spec(rates)) == pytest.approx(step, rel=0.01)


def test_the_next_rate_beyond_each_edge():
    assert beyond(3.0e-2, "highest", math.sqrt(10)) == 0.0949
    assert beyond(3.0e-3, "lowest", math.sqrt(10)) == 0.000949
    assert beyond(1.0e-2, "highest", 10.0) == 0.1
    with pytest.raises(ValueError, match="lowest, highest"):
        beyond(1.0e-2, "top", 10.0)


def test_an_extension_target_gets_its_configuration_on_every_selection_seed():
    target = {"model.mixer": "mamba2", "train.lr": 0.0949, "train.seed": 0, "data.seed": 0}
    staged = extension_points(spec([3.0e-3, 1.0e-2, 3.0e-2]), [target])
    assert staged == [({"model.mixer": "mamba2", "train.lr": 0.0949, "train.seed": s, "data.seed": s}, "selection")
                      for s in (0, 9)]


@pytest.mark.parametrize("extensions", [-1, MAX_EXTENSIONS + 1, 1_000_000])
def test_a_number_of_extensions_outside_its_range_is_an_error(extensions):
    with pytest.raises(ValueError, match=f"extensions must be from 0 to {MAX_EXTENSIONS}, got {extensions}"):
        spec([1.0e-2], extensions=extensions)


@pytest.mark.parametrize(("grid", "extensions", "said"), [
    ({"model.d_model": [16, 32]}, 2, "no grid extension (each cell has a single learning rate"),
    ({"train.lr": [1.0e-3, 1.0e-2]}, 0, "no grid extension (protocol.extensions: 0"),
    ({"train.lr": [1.0e-3, 1.0e-2]}, 2, "up to 2 more beyond it on the selection seeds"),
])
def test_the_plan_says_whether_the_grid_may_be_extended(tmp_path, capsys, grid, extensions, said):
    assert not extendable(spec([1.0e-2])) and extendable(spec([1.0e-3, 1.0e-2]))
    path = write_spec(tmp_path, grid)
    path.write_text(path.read_text() + "protocol: {selection_seeds: [0], confirmation_seeds: [1], "
                    f"allow_few_selection_seeds: true, extensions: {extensions}}}\n")
    assert main(["sweep", "run", str(path), "--out", str(tmp_path / "out"), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert said in out and out.count("grid extension") + out.count("more beyond it") == 1


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
