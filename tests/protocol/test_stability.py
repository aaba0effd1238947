"""Selection stability: each cell's margin over the next best learning rate and its leave-one-seed-out picks,
computed by hand on planted selection runs (confirmation runs take no part)."""

from __future__ import annotations

import pytest

from loglinear.protocol.results import load_sweep
from loglinear.protocol.stability import selection_stability
from loglinear.reports.report import write_report
from loglinear.reports.stability import format_stability

from ..reports.report_helpers import finished, make_sweep, row, run_entry, section_rows

PROTOCOL = {"selection_seeds": [0, 1, 2], "confirmation_seeds": [5, 6]}


def planted(folder):
    """Mamba-2: at 1e-3 one selection seed of three learned (0.98, 0.09, 0.10: mean 0.39), at 1e-2 none (0.36 each):
    1e-3 wins by 3 points, and leaving out seed 0 flips the pick. Log-linear Mamba-2: 1e-2 wins on every seed.
    Confirmation runs that would reverse both picks are planted too."""
    val = {("mamba2", 1e-3): (0.98, 0.09, 0.10), ("mamba2", 1e-2): (0.36, 0.36, 0.36),
           ("log_linear_mamba2", 1e-3): (0.2, 0.3, 0.25), ("log_linear_mamba2", 1e-2): (0.8, 0.9, 0.85)}
    entries = [run_entry(mixer, 16, lr, s, finished(v[s]), stage="selection")
               for (mixer, lr), v in val.items() for s in range(3)]
    entries += [run_entry(mixer, 16, lr, s, finished(1.0 if (mixer == "mamba2") == (lr == 1e-2) else 0.0),
                          stage="confirmation") for mixer, lr in val for s in (5, 6)]
    return make_sweep(folder, entries, protocol=PROTOCOL)


def test_the_margin_and_the_leave_one_seed_out_picks(tmp_path):
    found = {key[0][0]: s for key, s in selection_stability(load_sweep(planted(tmp_path))).items()}
    mamba, ours = found["Mamba-2"], found["Log-Linear Mamba-2"]
    assert (mamba.pick, mamba.runner_up, mamba.left_out) == ((1e-3,), (1e-2,), 3)
    assert mamba.margin == pytest.approx((0.98 + 0.09 + 0.10) / 3 - 0.36)
    assert mamba.kept == 2 and not mamba.agrees  # without seed 0: 0.095 against 0.36
    assert (ours.pick, ours.kept, ours.left_out) == ((1e-2,), 3, 3) and ours.agrees
    assert format_stability(mamba) == "0.001 by +3.0 over 0.01, kept 2/3"


def test_every_report_has_a_selection_stability_line_per_cell(tmp_path):
    table = write_report(planted(tmp_path)).table
    rows = section_rows(table, "Selection stability")
    assert row(rows, "Mamba-2") == ["0.001 by +3.0 over 0.01, kept 2/3"]
    assert row(rows, "Log-Linear Mamba-2") == ["0.01 by +60.0 over 0.001, kept 3/3"]
    assert ("1 of 2 cells that chose among several rates on several seeds keep their pick with any one selection "
            "seed left out; 0 of 2 picks lead the next rate by less than 1 point") in table


def test_a_single_rate_or_a_single_seed_has_nothing_to_leave_out(tmp_path):
    entries = [run_entry("mamba2", 16, 1e-3, 0, finished(0.5)), run_entry("mamba2", 16, 1e-2, 0, finished(0.4)),
               run_entry("mamba2", 32, 1e-3, 0, finished(0.5)), run_entry("mamba2", 32, 1e-3, 1, finished(0.6))]
    found = selection_stability(load_sweep(make_sweep(tmp_path, entries)))
    one_seed, one_rate = (found[k] for k in sorted(found, key=lambda k: k[1]))
    assert format_stability(one_seed) == "0.001 by +10.0 over 0.01, one seed"
    assert format_stability(one_rate) == "0.001 (the only rate scored)"
