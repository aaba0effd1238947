"""What `sweep run` keeps of the folder it runs into when its spec was edited: the finished and started runs of the
folder that the spec no longer plans are refused before anything is written, or moved aside (`--set-aside`), and
those it may still plan once its later stages are decided stay listed in the manifest until then
(protocol/held.py)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from loglinear.protocol.held import Held, dropped, held_runs, planned, refusal
from loglinear.reports.files import CSV, TABLE
from loglinear.sweeps.manifest import ASIDE, adopt_legacy
from loglinear.sweeps.manifest import set_aside as move_aside
from loglinear.sweeps.spec import Run, SweepSpec


@dataclass
class Kept:
    """The held runs of a sweep folder that its spec may still plan (protocol/held.py) once the stages that decide
    them have run: the manifest lists them until then, and the confirmation stage refuses (or, `set_aside`, moves
    aside) those it does not plan before it writes anything."""

    out: Path
    spec: SweepSpec
    set_aside: bool
    held: list[Held]
    aside: Path | None = None
    """Where this command set runs aside, if it did."""

    def beside(self, runs: list[Run]) -> list[Run]:
        """`runs`, then the held runs not among them: what the manifest lists."""
        ids = {i for r in runs for i in r.ids}
        return [*runs, *adopt_legacy(self.out, [h.run for h in self.held if h.run_id not in ids and h.run])]

    def settle(self, plan: list[Run]) -> None:
        """`plan` is the whole sweep: refuse, or set aside, the held runs it lacks."""
        lost = dropped([(h, None) for h in self.held], plan, complete=True)
        if lost:
            self.aside = _drop(self.out, self.spec, lost, self.set_aside, self.aside)
        self.held = []


def keep_held(out: Path, spec: SweepSpec, runs: list[Run], set_aside: bool, dry_run: bool = False) -> Kept:
    """Before anything is written: the held runs of `out` (its runs with a result or a checkpoint) that `spec`, whose
    first stage is `runs`, no longer plans are refused, or (`set_aside`) moved aside; those it may still plan once
    its later stages are decided are kept."""
    kept = Kept(out, spec, set_aside, [])
    held = held_runs(out, spec, runs)
    if not held:
        return kept
    plan, complete = planned(spec, runs, out)
    lost = dropped(held, plan, complete)
    if lost:
        if dry_run and set_aside:
            print(f"with --set-aside: {len(lost)} finished or started runs the spec no longer plans would be moved to "
                  f"{out / ASIDE}/", file=sys.stderr)
        else:
            kept.aside = _drop(out, spec, lost, set_aside)
    ids = {i for r in plan for i in r.ids} | {h.run_id for h, _ in lost}
    kept.held = [h for h, _ in held if h.run_id not in ids]
    return kept


def _drop(out: Path, spec: SweepSpec, lost: list[tuple[Held, str]], set_aside: bool, into: Path | None = None) -> Path:
    """Refuse the spec that drops the held runs `lost`, or (`set_aside`) move them and the report aside (`into` a
    folder of this command's); where they went."""
    if not set_aside:
        raise refusal(spec, out, lost)
    moved = move_aside(out, [h.run_id for h, _ in lost], (CSV, TABLE), into)
    print(f"loglinear sweep: moved {len(lost)} finished or started runs that {spec.path or spec.name} no longer plans, "
          f"and the report that held them, to {moved}", file=sys.stderr)
    return moved
