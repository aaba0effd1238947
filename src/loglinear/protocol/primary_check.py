"""The declared primary comparison checked against the sweep it belongs to, before anything runs (`sweep run`,
`--dry-run` too): the report's own comparisons of the planned runs (protocol/compared.py), without results, must hold
exactly one that the primary names, in a cell of the sweep, with a plateau for the escaped test and a test length
the sweep reports. Otherwise the report would refuse it only after all the compute."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from loglinear.protocol.compared import Arms, paired_arms
from loglinear.protocol.results import Record, Sweep, base_mixer, is_log_linear, sweep_of
from loglinear.runs.config import ConfigError
from loglinear.sweeps.spec import Run, SpecError, SweepSpec
from loglinear.sweeps.spec_keys import TESTS, Primary, as_mapping
from loglinear.synthetics.config import evaluation_sets

PLATEAU_TEST = "escaped"
"""The test of the plateau threshold (`report.plateau`)."""


def check_primary(spec: SweepSpec, runs: list[Run]) -> None:
    """A SpecError (one line) when `spec.report.primary` names no single comparison of the report on `runs`."""
    primary = spec.report.primary
    if primary is None:
        return
    where = f"{spec.path or spec.name}: report.primary"
    try:
        _check(primary, spec, runs)
    except ConfigError as e:
        raise SpecError(f"{where}: {e}") from None


def planned_sweep(spec: SweepSpec, runs: list[Run]) -> Sweep:
    """The sweep of `runs` as its report will see it, before any of them has a result."""
    manifest = {"name": spec.name, "varied_keys": spec.varied_keys, "zip": [list(g) for g in spec.zip],
                "report": as_mapping(spec.report), "protocol": as_mapping(spec.protocol)}
    records = [Record(r.run_id, dataclasses.asdict(r.config), r.point, stage=r.stage) for r in runs]
    return sweep_of(manifest, records, Path(spec.name))


def _check(primary: Primary, spec: SweepSpec, runs: list[Run]) -> None:
    assert primary.test in TESTS  # Primary checks its test itself
    if primary.test == PLATEAU_TEST and spec.report.plateau is None:
        raise ConfigError(f"the {PLATEAU_TEST} test needs report.plateau (the accuracy that counts as escaped)")
    sweep = planned_sweep(spec, runs)
    if primary.equal_state:  # its cells pair states measured by the runs: only its two arms can be checked now
        _check_equal_state(primary, sweep)
        return
    compared = paired_arms(sweep)
    named = [a for a in compared if (a.mixer, a.baseline) == (primary.mixer, primary.baseline)]
    if not named:
        raise ConfigError(f"{primary.mixer} vs {primary.baseline} is not a comparison of this sweep (mixer: the "
                          f"log-linear mixer or λ tested, baseline: what it is compared with); its comparisons: "
                          f"{_listed(sorted({f'{a.mixer} vs {a.baseline}' for a in compared}))}")
    cells = sorted({a.cell for a in named})
    if primary.cell is not None and primary.cell not in cells:
        raise ConfigError(f"cell {primary.cell!r} is not a cell of {primary.mixer} vs {primary.baseline}; "
                          f"its cells: {_listed(cells)}")
    if primary.cell is None and len(cells) > 1:
        raise ConfigError(f"{primary.mixer} vs {primary.baseline} is compared in {len(cells)} cells: name one "
                          f"with report.primary.cell ({_listed(cells)})")
    if primary.length is not None:
        lengths = _test_lengths(runs, [a for a in named if primary.cell in (None, a.cell)])
        if primary.length not in lengths:
            raise ConfigError(f"length {primary.length} is not a test length the report compares at; "
                              f"valid: {_listed([str(n) for n in lengths])} (only a task other than MQAR tested at "
                              f"several lengths is compared by length)")


def _check_equal_state(primary: Primary, sweep: Sweep) -> None:
    mixers = sorted({r.mixer for r in sweep.records if is_log_linear(r.mixer) and base_mixer(r.mixer) in
                     {s.mixer for s in sweep.records}})
    if primary.mixer not in mixers or primary.baseline != base_mixer(primary.mixer):
        pairs = [f"{m} vs {base_mixer(m)}" for m in mixers]
        raise ConfigError(f"{primary.mixer} vs {primary.baseline} is not an equal-state comparison of this sweep "
                          f"(a log-linear mixer against its base); its comparisons: {_listed(pairs)}")


def _test_lengths(runs: list[Run], compared: list[Arms]) -> list[int]:
    """The test lengths the report compares the comparisons' runs at: those of their runs tested at several lengths
    on a task other than MQAR (reports/state_tracking.tested_at_several_lengths)."""
    mixers = {name.partition("[")[0] for a in compared for name in (a.mixer, a.baseline)}
    per_run = [{task.seq_len for s in evaluation_sets(r.config.data) for task in s.tasks} for r in runs
               if r.config.data.task != "mqar" and r.config.model.mixer in mixers]
    return sorted(set().union(*(lengths for lengths in per_run if len(lengths) > 1)))


def _listed(names: list[str]) -> str:
    return ", ".join(names) if names else "none"
