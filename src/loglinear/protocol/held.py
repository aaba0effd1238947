"""What a sweep folder holds, kept across an edited spec: every run of its manifest whose folder holds a result or
a checkpoint (a finished or started run) must be one that the spec run into it still plans, or the command is
refused before anything is written, naming the runs (`sweep run --set-aside` moves them aside instead).

Which runs a two-stage spec plans follows from results: its first stage, then the grid extensions and the
confirmation runs that the selection runs' results lead to (`planned`). Where every run that decides a later stage
has a result, the whole plan is known at once; otherwise a held run of a later stage is kept while it can still be
planned (`possible`: a configuration of the grid on a seed of its stage, at one of the grid's learning rates or
one a grid extension can reach) and checked again once the confirmation runs are decided.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loglinear.protocol.confirmation import confirmation_runs
from loglinear.protocol.extension import EDGES, beyond, extendable, extension_points, extension_targets, grid_step
from loglinear.protocol.results import sweep_at
from loglinear.runs.config import ConfigError
from loglinear.runs.folder import INTERRUPTED, LAST, RESULT
from loglinear.sweeps.manifest import MANIFEST, adopt_legacy, read_manifest, run_dir
from loglinear.sweeps.plan import configuration, stray
from loglinear.sweeps.resolver import PointResolver
from loglinear.sweeps.spec import Run, SpecError, SweepSpec, describe, expand, points, shared_resolver
from loglinear.sweeps.spec_keys import LR_KEY

WORK = (RESULT, LAST, INTERRUPTED)
"""The files that make a run folder's run finished or started."""
SHOWN = 3
"""Runs a refusal names before it counts the rest."""


@dataclass(frozen=True)
class Held:
    """A run of the manifest whose folder holds work: its manifest entry, and what it is under the spec now (None
    when its values no longer resolve)."""

    entry: dict[str, Any]
    run: Run | None

    @property
    def run_id(self) -> str:
        return str(self.entry["id"])


def held_runs(out: Path, spec: SweepSpec, stage_one: list[Run]) -> list[tuple[Held, str | None]]:
    """Each run of the manifest in `out` whose folder holds work, resolved under `spec` (whose first stage is
    `stage_one`), with why `spec` can never plan it (None: it may); none without a readable manifest."""
    if not (out / MANIFEST).is_file():
        return []
    try:
        entries = read_manifest(out)["runs"]
    except ConfigError:  # a corrupt manifest is written anew (sweeps/manifest.py, check_owner)
        return []
    resolver = shared_resolver(spec)
    return [unplanned(spec, stage_one, entry, resolver) for entry in entries
            if any((run_dir(out, entry["id"]) / name).is_file() for name in WORK)]


def unplanned(spec: SweepSpec, stage_one: list[Run], entry: dict[str, Any],
              resolver: PointResolver | None = None) -> tuple[Held, str | None]:
    """The manifest entry `entry` resolved under `spec` (by `resolver`, one of `shared_resolver(spec)`), and why
    `spec` can never plan it (None: it may)."""
    try:
        [run] = expand(spec, [(entry.get("point", {}), entry.get("stage"))], resolver)
    except SpecError as e:
        return Held(entry, None), f"its values do not resolve: {e}"
    if entry["id"] not in run.ids:
        return Held(entry, run), "its values make another run under this spec"
    return Held(entry, run), possible(spec, stage_one, run)


def possible(spec: SweepSpec, stage_one: list[Run], run: Run) -> str | None:
    """Why `run` (resolved under `spec` with the stage it was recorded with) is no run the spec can plan, in words;
    None when it may be one: a run of its first stage, or a configuration of its grid on a seed of its stage at one of
    the grid's learning rates or at one a grid extension reaches (`extension_rates`)."""
    why = stray(spec, stage_one, run)
    if why is not None or spec.protocol is None or any(i in r.ids for r in stage_one for i in run.ids):
        return why
    lr = run.point.get(LR_KEY)
    if lr in {p.get(LR_KEY) for p in points(spec)} or lr in extension_rates(spec):
        return None
    limit = spec.protocol.extensions
    return f"its learning rate {lr} is none of the grid's, nor one that its {limit} grid extension(s) can reach"


def extension_rates(spec: SweepSpec) -> set[float]:
    """Every learning rate a grid extension of `spec` can add: up to `protocol.extensions` steps beyond either edge
    of any configuration's rates (a cell compared with another takes that one's rate)."""
    assert spec.protocol is not None
    if not extendable(spec):
        return set()
    step = grid_step(spec)
    rates: dict[str, set[float]] = {}
    for point in points(spec):
        rates.setdefault(configuration(point), set()).add(point[LR_KEY])
    reached = set()
    for found in rates.values():
        for edge, lr in zip(EDGES, (min(found), max(found)), strict=True):
            for _ in range(spec.protocol.extensions):
                lr = beyond(lr, edge, step)
                reached.add(lr)
    return reached


def planned(spec: SweepSpec, stage_one: list[Run], out: Path) -> tuple[list[Run], bool]:
    """Every run `spec` plans in `out` given the results there: its first stage `stage_one`, then the grid extensions
    and confirmation runs they lead to (as `sweep run` decides them: `extension_runs`, `confirmation_runs`); and
    whether that is all: False when a decision waits on runs without a result."""
    plan = list(stage_one)
    if spec.protocol is None:
        return plan, True
    if not _ended(plan, out):
        return plan, False
    for _ in range(spec.protocol.extensions):
        extra = extension_runs(spec, plan, out)
        if not extra:
            break
        plan += extra
        if not _ended(extra, out):
            return plan, False
    return plan + adopt_legacy(out, confirmation_runs(spec, sweep_at(spec, plan, out))), True


def extension_runs(spec: SweepSpec, runs: list[Run], out: Path) -> list[Run]:
    """The next round of grid extensions after `runs` (protocol/extension.py), none of them among `runs`."""
    known = {i for r in runs for i in r.ids}
    targets = extension_targets(sweep_at(spec, runs, out), grid_step(spec))
    return adopt_legacy(out, [r for r in expand(spec, extension_points(spec, targets)) if r.run_id not in known])


def _ended(runs: list[Run], out: Path) -> bool:
    return all((run_dir(out, r.run_id) / RESULT).is_file() for r in runs)


def dropped(held: list[tuple[Held, str | None]], plan: list[Run], complete: bool) -> list[tuple[Held, str]]:
    """The held runs that `plan` lacks, each with why: one the spec can never plan, or (`complete`: the plan is
    whole) any."""
    ids = {i for r in plan for i in r.ids}
    return [(h, why or "the results under this spec do not select it") for h, why in held
            if h.run_id not in ids and (why is not None or complete)]


def refusal(spec: SweepSpec, out: Path, lost: list[tuple[Held, str]]) -> ConfigError:
    """The one-line refusal of a spec that would drop the held runs `lost` from `out`."""
    named = "; ".join(f"{h.run_id} ({_values(h)}): {why}" for h, why in lost[:SHOWN])
    more = f"; and {len(lost) - SHOWN} more" if len(lost) > SHOWN else ""
    return ConfigError(f"{spec.path or spec.name} no longer plans {len(lost)} finished or started run(s) of {out}: "
                       f"{named}{more}; nothing was written: restore the spec, run it into another --out, or move "
                       f"those runs aside with --set-aside")


def _values(held: Held) -> str:
    stage, values = held.entry.get("stage"), describe(held.entry.get("point") or {})
    return f"{stage} {values}" if stage else values
